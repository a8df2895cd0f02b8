//! A trace's lifecycle hints reach the policy as the contract's events at the simulated time a
//! framework sends them (`sim run --hints`): `closes` as `session-end` (reason `closed`) right
//! after the closing request's answer, `wait` as `session-wait` at the answer — and `--hints
//! none` (the default) tells none of them.

use agentrt_runtime::types::{EndReason, Event, WaitKind};
use agentrt_sim::block_pool::PoolObserver;
use agentrt_sim::hints::{HintKinds, HintsTold};
use agentrt_sim::offload::ranked::HostRanker;
use agentrt_sim::policies::SimPolicy;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::{Sim, SimConfig};
use agentrt_sim::trace::Trace;

/// vLLM's LRU, recording what the policy hears of sessions' lives.
#[derive(Default)]
struct Listener {
    /// (what, session, at µs), in order heard; the answers' finish times too, to compare.
    heard: Vec<(&'static str, u64, u64)>,
    waits: Vec<(WaitKind, u64, u64, bool)>,
}

impl PoolObserver for Listener {}
impl HostRanker for Listener {}

impl SimPolicy for Listener {
    fn name(&self) -> &str {
        "listener"
    }
    fn event(&mut self, event: Event) {
        match event {
            Event::RequestFinish(r) if !r.warmup => self.heard.push(("finish", r.session, r.at_us)),
            Event::SessionEnd(e) => {
                let what = match e.reason {
                    EndReason::Closed => "closed",
                    EndReason::Idle => "idle",
                    EndReason::Evicted => "evicted",
                };
                self.heard.push((what, e.session, e.at_us));
            }
            Event::SessionWait(w) => {
                self.heard.push(("wait", w.session, w.at_us));
                self.waits.push((w.kind, w.tool, w.expected_us, w.hinted));
            }
            _ => {}
        }
    }
}

/// Two sessions: `a` calls a tool, then closes; `b` waits 90 s for its user — past the idle
/// rule's 60 s — then calls once more, without a closing hint. (A replay stops at the last
/// answer: silence after it is never reported.)
const TRACE: &str = r#"{"session": "a", "agent": "coder", "after_ms": 0, "prompt": [{"seg": "sys/coder", "tokens": 64}, {"seg": "a/1", "tokens": 40}], "output_tokens": 8, "hints": {"wait": {"kind": "tool", "tool": "bash", "expected_ms": 2000}}}
{"session": "b", "agent": "coder", "after_ms": 5, "prompt": [{"seg": "sys/coder", "tokens": 64}, {"seg": "b/1", "tokens": 40}], "output_tokens": 8, "hints": {"wait": {"kind": "user"}}}
{"session": "a", "agent": "coder", "after_ms": 2000, "prompt": [{"seg": "sys/coder", "tokens": 64}, {"seg": "a/1", "tokens": 40}, {"seg": "a/2", "tokens": 30}], "output_tokens": 8, "hints": {"closes": true}}
{"session": "b", "agent": "coder", "after_ms": 90000, "prompt": [{"seg": "sys/coder", "tokens": 64}, {"seg": "b/1", "tokens": 40}, {"seg": "b/2", "tokens": 30}], "output_tokens": 8}
"#;

fn replay(kinds: HintKinds) -> Listener {
    let trace = PreparedTrace::new(&Trace::parse(TRACE).unwrap(), 16, false);
    let mut cfg = SimConfig::new(64);
    cfg.hints = HintsTold { kinds, coverage: 1.0 };
    let mut listener = Listener::default();
    Sim::new(cfg, &trace, &mut listener).run().unwrap();
    listener
}

fn session_id(name: &str) -> u64 {
    let trace = PreparedTrace::new(&Trace::parse(TRACE).unwrap(), 16, false);
    trace.sessions.iter().find(|s| s.name == name).unwrap().id
}

#[test]
fn every_hint_is_heard_at_the_answer_it_follows() {
    let (a, b) = (session_id("a"), session_id("b"));
    let heard = replay(HintKinds::All);
    let of = |session: u64| -> Vec<(&str, u64)> {
        heard
            .heard
            .iter()
            .filter(|h| h.1 == session)
            .map(|h| (h.0, h.2))
            .collect()
    };
    let a_heard = of(a);
    let what: Vec<&str> = a_heard.iter().map(|h| h.0).collect();
    assert_eq!(what, ["finish", "wait", "finish", "closed"], "{a_heard:?}");
    assert_eq!(a_heard[1].1, a_heard[0].1, "the wait is told at the answer");
    assert_eq!(a_heard[3].1, a_heard[2].1, "the close right after the last answer");
    let b_what: Vec<&str> = of(b).iter().map(|h| h.0).collect();
    assert_eq!(
        b_what,
        ["finish", "wait", "idle", "finish"],
        "no hint closes b: serve's idle rule ends it while it waits"
    );
    let tool_wait = heard.waits.iter().find(|w| w.0 == WaitKind::Tool).unwrap();
    assert_eq!(
        tool_wait.1,
        agentrt_sim::tokens::hash_str("bash"),
        "the tool's name hash"
    );
    assert_eq!((tool_wait.2, tool_wait.3), (2_000_000, true), "expected µs, hinted");
    let user_wait = heard.waits.iter().find(|w| w.0 == WaitKind::User).unwrap();
    assert_eq!((user_wait.1, user_wait.2), (0, 0), "no tool, no expectation");
}

#[test]
fn closed_tells_closings_only_and_none_tells_nothing() {
    let closed = replay(HintKinds::Closed);
    assert!(closed.waits.is_empty());
    assert_eq!(closed.heard.iter().filter(|h| h.0 == "closed").count(), 1);
    assert_eq!(
        closed.heard.iter().filter(|h| h.0 == "idle").count(),
        1,
        "the closed session is not also ended by the idle rule; b still is"
    );
    let none = replay(HintKinds::None);
    assert!(none.waits.is_empty());
    assert!(
        none.heard.iter().all(|h| h.0 == "finish" || h.0 == "idle"),
        "{:?}",
        none.heard
    );
    assert_eq!(
        none.heard.iter().filter(|h| h.0 == "idle").count(),
        2,
        "both end by the idle rule, as without hints: a after its last answer, b in its long wait"
    );
}
