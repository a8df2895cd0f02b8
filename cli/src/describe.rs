//! A policy's forecasts, side effects, failures and contract in words, for people reading a
//! command's output: the demo and the policy commands print these rather than the types' `Debug`
//! form.

use agentrt_runtime::types::{Forecast, ForecastKind, SideEffect};
use agentrt_runtime::{Overrun, PolicyError, CONTRACT};
use std::time::Duration;

/// The contract a component speaks, from the version of its guest export (`None`: it has none):
/// this host's line ([`CONTRACT`]), or an older one it still runs, which hears less.
pub fn contract(guest_version: Option<&str>) -> String {
    match contract_and_note(guest_version) {
        (line, Some(note)) => format!("{line} ({note})"),
        (line, None) => line,
    }
}

/// [`contract`] in two parts: the line, and what it means when it is not this host's.
pub fn contract_and_note(guest_version: Option<&str>) -> (String, Option<String>) {
    match guest_version {
        Some(version) if CONTRACT.ends_with(&format!("@{version}")) => (format!("agentrt:policy@{version}"), None),
        Some(version) => (
            format!("agentrt:policy@{version}"),
            Some(format!(
                "an older contract this host still runs: the policy hears only what that line has words for; \
                 the newest is {CONTRACT}"
            )),
        ),
        None => (
            format!("no agentrt:policy guest export (this host runs {CONTRACT})"),
            None,
        ),
    }
}

/// How an agent handle reads to a person (its name, or `agent N` when unknown).
pub type AgentName<'a> = &'a dyn Fn(u32) -> String;

/// One forecast as a sentence: "tester runs next in session 15 (p = 0.92, within 1 step)".
pub fn forecast(f: &Forecast, agent: AgentName<'_>) -> String {
    let odds = format!(
        "p = {:.2}, within {} step{}",
        f.probability,
        f.steps,
        if f.steps == 1 { "" } else { "s" }
    );
    let session = match f.session {
        0 => "anywhere".to_string(),
        s => format!("in session {s}"),
    };
    match f.kind {
        ForecastKind::NextAgent => format!("{} runs next {session} ({odds})", agent(f.agent)),
        ForecastKind::NextTool => format!(
            "{} calls tool {:#018x} next {session} ({odds})",
            agent(f.agent),
            f.subject
        ),
        ForecastKind::SessionEnd => format!("session {} ends ({odds})", f.session),
    }
}

/// One side effect as a sentence: "warm up tester's anchor (system prompt and tools) — p = 0.92".
pub fn side_effect(effect: &SideEffect, agent: AgentName<'_>) -> String {
    match effect {
        SideEffect::WarmPrefix(w) => format!(
            "warm up {}'s anchor (system prompt and tools, hash {:#018x}) before it is called — p = {:.2}",
            agent(w.agent),
            w.anchor_hash,
            w.probability
        ),
        SideEffect::Pin(p) => format!(
            "keep {}'s cached blocks of session {} for {} ms",
            agent(p.agent),
            p.session,
            p.ttl_ms
        ),
        SideEffect::Unpin(p) => format!("stop keeping {}'s blocks of session {}", agent(p.agent), p.session),
        SideEffect::Preload(p) => format!("load model {:?} ahead of use — p = {:.2}", p.model, p.probability),
        SideEffect::Hedge(h) => format!(
            "send a speculative duplicate of {}'s next call in session {} — p = {:.2}",
            agent(h.agent),
            h.session,
            h.probability
        ),
        SideEffect::SetPriority(p) => format!("set session {}'s priority to {}", p.session, p.priority),
        SideEffect::Deny(d) if d.session == 0 => format!("refuse every session of the tenant: {}", d.reason),
        SideEffect::Deny(d) => format!("refuse session {}'s further requests: {}", d.session, d.reason),
    }
}

/// A policy failure in a few words: what the export did, and the gist of the guest's message (a
/// trap's wasm backtrace is for a debugger, not for this line).
pub fn error(error: &PolicyError) -> String {
    let first_line = |m: &str| {
        let line = m.lines().next().unwrap_or_default().trim();
        match line.char_indices().nth(160) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_string(),
        }
    };
    // A trap reads "error while executing at wasm backtrace:\n  0: …\n  9: …: wasm trap: …".
    let trap_cause = |m: &str| match m.rfind("wasm trap: ") {
        Some(at) => first_line(&m[at..]),
        None => first_line(m),
    };
    match error {
        PolicyError::Trap { primitive, message, .. } => format!("{primitive} trapped: {}", trap_cause(message)),
        PolicyError::DeadlineExceeded {
            primitive,
            deadline,
            overrun: Overrun::Cpu,
            ..
        } => {
            format!("{primitive} ran past its {} deadline", millis(*deadline))
        }
        PolicyError::DeadlineExceeded {
            primitive,
            overrun: Overrun::Waiting { on_clock, .. },
            ..
        } => format!(
            "{primitive} was kept waiting {} by a busy host (not the policy's doing)",
            millis(*on_clock)
        ),
        PolicyError::FuelExhausted { primitive, fuel, .. } => {
            format!("{primitive} used up its fuel ({fuel} units; --policy-fuel raises it)")
        }
        PolicyError::OutOfMemory {
            primitive, cap_bytes, ..
        } => {
            format!("{primitive} hit the memory cap of {} MiB", cap_bytes >> 20)
        }
        PolicyError::Rejected { primitive, message, .. } => {
            format!("{primitive} returned an error: {}", first_line(message))
        }
        PolicyError::BadOutput { primitive, message, .. } => {
            format!("{primitive} broke the contract: {}", first_line(message))
        }
        other => first_line(&other.to_string()),
    }
}

/// A duration in milliseconds, as a person reads it: whole above 100 ms, one decimal below.
pub fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_runtime::types::{Deny, WarmPrefix};

    fn name(agent: u32) -> String {
        ["?", "planner", "tester"]
            .get(agent as usize)
            .unwrap_or(&"?")
            .to_string()
    }

    #[test]
    fn forecasts_and_effects_read_as_sentences_without_debug_forms() {
        let f = Forecast {
            kind: ForecastKind::NextAgent,
            session: 15,
            agent: 2,
            subject: 0,
            probability: 0.923,
            steps: 1,
        };
        assert_eq!(
            forecast(&f, &name),
            "tester runs next in session 15 (p = 0.92, within 1 step)"
        );
        let warm = SideEffect::WarmPrefix(WarmPrefix {
            agent: 2,
            anchor_hash: 0x7e57,
            probability: 0.9230769,
        });
        let text = side_effect(&warm, &name);
        assert!(text.starts_with("warm up tester's anchor"), "{text}");
        assert!(!text.contains("WarmPrefix") && !text.contains('{'), "{text}");
        let deny = SideEffect::Deny(Deny {
            session: 0,
            reason: "budget".into(),
        });
        assert_eq!(side_effect(&deny, &name), "refuse every session of the tenant: budget");
    }
}
