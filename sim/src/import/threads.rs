//! What every importer produces before it becomes a trace: threads of calls, each thread one
//! session, with the source's timing — and the one rule that turns them into trace lines.
//!
//! A thread starts at an absolute time (ms from the trace's start); each later call comes `gap_ms`
//! after the previous call of its thread *finished* — the trace format's `after_ms`
//! (docs/workloads.md says, per format, which recorded gap that is).

use crate::trace::{Hints, Segment, Trace, TraceRequest, WaitHint};

/// One call of a thread.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub agent: String,
    /// ms after the previous call of the thread finished (ignored for the first call).
    pub gap_ms: f64,
    pub prompt: Vec<Segment>,
    pub output_tokens: u32,
    pub tool_call: bool,
    /// What the session waits for after this call's answer, where the source says
    /// (kv-cache-tester: a `tool_use` stop → a tool, `end_turn` → the user).
    pub wait: Option<crate::trace::WaitKind>,
}

/// One session: its calls in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Thread {
    pub session: String,
    /// When its first call arrives (ms from the trace's start).
    pub start_ms: f64,
    pub calls: Vec<Call>,
    /// The source says the thread is a whole conversation (or subagent run): its last call
    /// closes the session (`hints.closes`).
    pub closes: bool,
}

/// The trace: every thread's calls, the lines ordered by when each call would arrive on an idle
/// engine (start + the gaps before it), each session's calls in their order.
pub fn to_trace(threads: &[Thread]) -> Trace {
    let mut lines: Vec<(f64, usize, usize)> = Vec::new();
    for (t, thread) in threads.iter().enumerate() {
        let mut at = thread.start_ms;
        for (c, call) in thread.calls.iter().enumerate() {
            if c > 0 {
                at += call.gap_ms;
            }
            lines.push((at, t, c));
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    let requests = lines
        .into_iter()
        .map(|(_, t, c)| {
            let thread = &threads[t];
            let call = &thread.calls[c];
            TraceRequest {
                tenant: None,
                session: thread.session.clone(),
                agent: call.agent.clone(),
                after_ms: if c == 0 { thread.start_ms } else { call.gap_ms.max(0.0) },
                prompt: call.prompt.clone(),
                output_tokens: call.output_tokens.max(1),
                tool_call: call.tool_call,
                hints: call_hints(thread, c),
            }
        })
        .collect();
    Trace { requests }
}

/// The hints a thread's call carries: its last call closes a thread the source says is whole;
/// every other call's wait is the source's.
fn call_hints(thread: &Thread, c: usize) -> Hints {
    let last = c + 1 == thread.calls.len();
    Hints {
        closes: last && thread.closes,
        wait: match thread.calls[c].wait {
            Some(kind) if !last => Some(WaitHint {
                kind,
                tool: None,
                expected_ms: None,
            }),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(agent: &str, gap_ms: f64) -> Call {
        Call {
            agent: agent.into(),
            gap_ms,
            prompt: vec![Segment::new(format!("{agent}/{gap_ms}"), 16)],
            output_tokens: 0,
            tool_call: false,
            wait: None,
        }
    }

    #[test]
    fn lines_follow_arrival_and_keep_each_sessions_order() {
        let threads = vec![
            Thread {
                session: "a".into(),
                start_ms: 0.0,
                calls: vec![call("x", 0.0), call("x", 500.0)],
                closes: false,
            },
            Thread {
                session: "b".into(),
                start_ms: 100.0,
                calls: vec![call("y", 0.0)],
                closes: false,
            },
        ];
        let trace = to_trace(&threads);
        let order: Vec<(&str, f64)> = trace
            .requests
            .iter()
            .map(|r| (r.session.as_str(), r.after_ms))
            .collect();
        assert_eq!(order, [("a", 0.0), ("b", 100.0), ("a", 500.0)]);
        assert!(
            trace.requests.iter().all(|r| r.output_tokens == 1),
            "0 output tokens become 1"
        );
    }

    #[test]
    fn a_whole_thread_closes_at_its_last_call_and_waits_between() {
        let mut first = call("x", 0.0);
        first.wait = Some(crate::trace::WaitKind::Tool);
        let mut last = call("x", 500.0);
        last.wait = Some(crate::trace::WaitKind::User);
        let whole = Thread {
            session: "a".into(),
            start_ms: 0.0,
            calls: vec![first, last],
            closes: true,
        };
        let trace = to_trace(std::slice::from_ref(&whole));
        let hints: Vec<&Hints> = trace.requests.iter().map(|r| &r.hints).collect();
        assert!(!hints[0].closes);
        assert_eq!(
            hints[0].wait.as_ref().map(|w| w.kind),
            Some(crate::trace::WaitKind::Tool)
        );
        assert!(
            hints[1].closes && hints[1].wait.is_none(),
            "the last call closes, waits for nothing"
        );
        let partial = Thread { closes: false, ..whole };
        assert!(
            !to_trace(&[partial]).requests[1].hints.closes,
            "a thread not known whole never closes"
        );
    }
}
