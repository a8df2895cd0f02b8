//! The events the crate's tests feed CacheSage, spelled once: an agent registered with its
//! anchor, and a request's finish (a successful answer of 100 tokens, nothing cached).

use agentrt_sdk::{AgentRegistered, Event, RequestFinish};

/// The anchor hash every test gives `agent`.
pub fn anchor_hash(agent: u32) -> u64 {
    0xa000 + u64::from(agent)
}

pub fn register(agent: u32, anchor_tokens: u32) -> Event {
    Event::AgentRegistered(AgentRegistered {
        agent,
        name: format!("agent-{agent}"),
        anchor_hash: anchor_hash(agent),
        anchor_tokens,
    })
}

pub fn finish(request_id: u64, session: u64, agent: u32, prompt_tokens: u32, at_us: u64) -> Event {
    Event::RequestFinish(RequestFinish {
        request_id,
        agent,
        session,
        prompt_tokens,
        cached_tokens: 0,
        output_tokens: 100,
        warmup: false,
        ok: true,
        at_us,
    })
}
