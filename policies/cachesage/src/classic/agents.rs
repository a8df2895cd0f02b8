//! The agents CacheSage knows: host handles interned into a fixed number of dense slots, each
//! with its anchor (hash, size) and how much of that anchor is resident in the KV cache.

use crate::anchor::Residency;

/// A dense agent index, `0..max_agents`.
pub type Slot = usize;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Agent {
    pub handle: u32,
    pub anchor_hash: u64,
    pub anchor_tokens: u32,
    /// Step of the agent's last request; the least recent agent is aged out first.
    pub last_seen: u32,
    /// The anchor's blocks in the cache.
    pub residency: Residency,
    /// `act` call at which this agent was last warmed (0 = never).
    pub warmed_at: u32,
}

impl Agent {
    /// True when a block of `block_tokens` at `position` lies wholly inside this agent's anchor.
    /// The block that straddles the anchor's end also holds the start of a session's own content,
    /// so it differs per session and is not part of the shared anchor. `block_tokens` 0 (not yet
    /// known) counts any block that starts inside.
    pub fn is_anchor_position(&self, position: u32, block_tokens: u32) -> bool {
        crate::anchor::is_anchor_position(self.anchor_tokens, position, block_tokens)
    }
}

/// Handle → slot, with a direct-mapped index so a lookup is one probe in the common case (hosts
/// hand out small sequential handles).
#[derive(Debug, Clone)]
pub struct AgentTable {
    slots: Vec<Option<Agent>>,
    index: [u8; 256],
}

const NO_SLOT: u8 = u8::MAX;

impl AgentTable {
    pub fn new(max_agents: usize) -> Self {
        Self {
            slots: vec![None; max_agents],
            index: [NO_SLOT; 256],
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn get(&self, slot: Slot) -> Option<&Agent> {
        self.slots.get(slot)?.as_ref()
    }

    pub fn get_mut(&mut self, slot: Slot) -> Option<&mut Agent> {
        self.slots.get_mut(slot)?.as_mut()
    }

    pub fn iter(&self) -> impl Iterator<Item = (Slot, &Agent)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, a)| Some((i, a.as_ref()?)))
    }

    /// The slot of `handle`, if known.
    pub fn find(&self, handle: u32) -> Option<Slot> {
        if handle == 0 {
            return None;
        }
        let hint = self.index[(handle & 0xff) as usize];
        if hint != NO_SLOT {
            if let Some(Some(a)) = self.slots.get(hint as usize) {
                if a.handle == handle {
                    return Some(hint as usize);
                }
            }
        }
        self.slots
            .iter()
            .position(|a| a.as_ref().is_some_and(|a| a.handle == handle))
    }

    /// The slot of `handle`, registering it if new. When the table is full the least recently
    /// seen agent is aged out; its slot is returned in `evicted` so the caller can forget it too.
    pub fn intern(&mut self, handle: u32, anchor_hash: u64, anchor_tokens: u32, now: u32) -> Interned {
        if let Some(slot) = self.find(handle) {
            let agent = self.slots[slot].as_mut().expect("found");
            if anchor_hash != 0 {
                agent.anchor_hash = anchor_hash;
            }
            if anchor_tokens != 0 {
                agent.anchor_tokens = anchor_tokens;
            }
            return Interned { slot, evicted: false };
        }
        let (slot, evicted) = match self.slots.iter().position(Option::is_none) {
            Some(free) => (free, false),
            None => {
                let oldest = (0..self.slots.len())
                    .min_by_key(|&i| self.slots[i].as_ref().map_or(0, |a| a.last_seen))
                    .expect("table is not empty");
                (oldest, true)
            }
        };
        self.slots[slot] = Some(Agent {
            handle,
            anchor_hash,
            anchor_tokens,
            last_seen: now,
            ..Agent::default()
        });
        self.index[(handle & 0xff) as usize] = slot as u8;
        Interned { slot, evicted }
    }

    /// Put back an agent read from a snapshot.
    pub fn restore_slot(&mut self, slot: Slot, agent: Agent) {
        self.index[(agent.handle & 0xff) as usize] = slot as u8;
        self.slots[slot] = Some(agent);
    }
}

/// Result of [`AgentTable::intern`].
pub struct Interned {
    pub slot: Slot,
    /// The slot previously held another agent, which was aged out.
    pub evicted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_finds_updates_and_ages_out_the_least_recent() {
        let mut t = AgentTable::new(2);
        let a = t.intern(1, 11, 100, 1).slot;
        let b = t.intern(257, 22, 0, 2).slot; // same direct-map bucket as 1
        assert_ne!(a, b);
        assert_eq!((t.find(1), t.find(257)), (Some(a), Some(b)));
        assert_eq!(t.intern(1, 0, 0, 3).slot, a, "known handles keep their slot");
        assert_eq!(
            t.get(a).unwrap().anchor_tokens,
            100,
            "zeros do not overwrite what is known"
        );
        t.get_mut(b).unwrap().last_seen = 9;
        let c = t.intern(3, 33, 0, 10);
        assert!(c.evicted);
        assert_eq!(c.slot, a, "agent 1 was seen least recently");
        assert_eq!(t.find(1), None);
    }
}
