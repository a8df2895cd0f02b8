//! A policy's forecasts and side effects in words, for people reading a command's output: the
//! demo prints these rather than the types' `Debug` form.

use agentrt_runtime::types::{Forecast, ForecastKind, SideEffect};

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
