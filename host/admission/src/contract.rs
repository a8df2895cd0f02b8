//! What the decision tells a tenant's `admission` slot, in the policy contract's words
//! (`agentrt:policy@0.5.0`): each candidate session as a `session` item to score, and the
//! engine's capacity and load as the `engine-capacity` event. The simulator's stage and `serve`
//! speak to the slot through these, so the slot hears the same thing from either.

use agentrt_runtime::types::{EngineCapacity, Event, Item, ItemKind, Tier};

use crate::{Candidate, CapacityReport};

impl Candidate {
    /// The session as a `session` item: key and session = the session, tokens = its context,
    /// last access = its last activity (µs).
    pub fn item(&self) -> Item {
        Item {
            kind: ItemKind::Session,
            key: self.session,
            agent: self.agent,
            session: self.session,
            last_access: self.last_activity_us,
            tokens: self.context_tokens,
            position: 0,
            tier: Tier::Gpu,
        }
    }
}

impl CapacityReport {
    /// The `engine-capacity` event stamped `at_us`.
    pub fn event(&self, at_us: u64) -> Event {
        Event::EngineCapacity(EngineCapacity {
            capacity_tokens: self.capacity_tokens,
            resident_tokens: self.resident_tokens,
            resident_sessions: self.resident_sessions,
            held_sessions: self.held_sessions,
            prefill_us_per_ktoken: self.prefill_us_per_ktoken,
            decode_step_us: self.decode_step_us,
            at_us,
        })
    }
}
