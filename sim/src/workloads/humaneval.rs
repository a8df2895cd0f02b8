//! HumanEval (Chen et al. 2021) with a coder → tester → debugger loop (in the style of AgentCoder,
//! Huang et al. 2023, and MapCoder).
//!
//! Graph: `coder` → `tester` (writes tests; they run: tool latency) → while tests fail (up to 4
//! times): `debugger` (extends its previous exchange with the new failure report) → `tester`
//! (re-runs). The debugger is the rare agent: it runs only when tests fail.

use crate::rng::Rng;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

const PROBLEMS: u64 = 164;

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    // HumanEval's 164 problems: signature + docstring, median ~130 tokens; fixed per problem, so
    // sessions that draw the same problem share it.
    let p = rng.range(0, PROBLEMS - 1);
    let problem = Segment::new(format!("humaneval/{p}"), 60 + (crate::tokens::mix64(p) % 260) as u32);
    let coder = vec![Segment::new("sys/coder", 650), problem.clone()];
    let mut code = b.call("coder", coder, rng.lognormal_len(190.0, 0.45, 40, 800));
    let tester_anchor = vec![Segment::new("sys/tester", 520), Segment::new("tools/pytest", 420)];
    let mut tester = tester_anchor.clone();
    tester.extend([problem.clone(), code.clone()]);
    let tests = b.call("tester", tester.clone(), rng.lognormal_len(260.0, 0.4, 60, 800));
    b.wait(rng.lognormal_len(1500.0, 0.6, 300, 20000) as f64);
    let mut debugger: Option<Vec<Segment>> = None;
    let mut p_fail = 0.45;
    for round in 0..4 {
        if !rng.chance(p_fail) {
            break;
        }
        p_fail *= 0.7;
        let report = b.seg(&format!("test-report-{round}"), rng.lognormal_len(320.0, 0.6, 60, 2500));
        let prompt = debugger.get_or_insert_with(|| {
            vec![
                Segment::new("sys/debugger", 720),
                Segment::new("tools/pytest", 420),
                problem.clone(),
                code.clone(),
                tests.clone(),
            ]
        });
        prompt.push(report);
        code = b.call("debugger", prompt.clone(), rng.lognormal_len(240.0, 0.45, 40, 900));
        prompt.push(code.clone());
        let mut rerun = tester_anchor.clone();
        rerun.extend([problem.clone(), code.clone(), tests.clone()]);
        b.call("tester", rerun, rng.lognormal_len(80.0, 0.4, 20, 300));
        b.wait(rng.lognormal_len(1500.0, 0.6, 300, 20000) as f64);
    }
}
