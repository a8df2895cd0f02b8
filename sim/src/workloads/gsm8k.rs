//! GSM8K (Cobbe et al. 2021) with a solver → verifier pipeline and reflection loops (in the style of
//! Self-Refine, Madaan et al. 2023, and verifier-guided multi-agent math pipelines).
//!
//! Graph: `solver` (8-shot chain-of-thought prompt, Wei et al. 2022) → `verifier` (with a calculator
//! tool) → while rejected (up to 3 times): `solver` (extends its previous exchange with the
//! verifier's feedback) → `verifier`.

use crate::rng::Rng;
use crate::trace::Segment;
use crate::workloads::SessionBuilder;

pub(super) fn session(b: &mut SessionBuilder, rng: &mut Rng) {
    // Problems: median ~95 tokens.
    let question = b.seg("question", rng.lognormal_len(95.0, 0.35, 40, 300));
    let mut solver = vec![
        Segment::new("sys/gsm8k-solver", 320),
        // The 8 chain-of-thought exemplars of Wei et al. (~800 tokens) ride in the system prompt.
        Segment::new("sys/gsm8k-8shot", 800),
        question.clone(),
    ];
    let verifier_anchor = vec![
        Segment::new("sys/gsm8k-verifier", 560),
        Segment::new("tools/calculator", 240),
    ];
    let mut solution = b.call("solver", solver.clone(), rng.lognormal_len(170.0, 0.35, 50, 500));
    let mut p_reject = 0.4;
    for _ in 0..=3 {
        let mut v = verifier_anchor.clone();
        v.extend([question.clone(), solution.clone()]);
        let verdict = b.call("verifier", v, rng.lognormal_len(90.0, 0.4, 20, 300));
        if !rng.chance(p_reject) {
            break;
        }
        p_reject *= 0.6;
        solver.extend([solution, verdict]);
        solution = b.call("solver", solver.clone(), rng.lognormal_len(190.0, 0.35, 50, 500));
    }
}
