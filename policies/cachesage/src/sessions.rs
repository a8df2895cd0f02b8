//! Live sessions and the agent each one is at, bounded: beyond `max_sessions` the least recently
//! active session is dropped (and from then on treated like an ended one).
//!
//! A sorted `Vec` rather than a hash map: 16 bytes per session and no per-entry overhead, so the
//! table stays inside the state budget; a lookup is a binary search (~10 probes for 1024).

use crate::agents::Slot;

/// Marks a session whose agent was aged out.
pub const NO_AGENT: u8 = u8::MAX;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    pub id: u64,
    /// The slot of the agent that ran last in this session.
    pub agent: u8,
    /// Step of the session's last request.
    pub stamp: u32,
}

impl Session {
    pub fn agent_slot(&self) -> Option<Slot> {
        (self.agent != NO_AGENT).then_some(self.agent as Slot)
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sessions {
    sorted: Vec<Session>,
    cap: usize,
}

impl Sessions {
    pub fn new(cap: usize) -> Self {
        Self {
            sorted: Vec::new(),
            cap,
        }
    }

    pub fn get(&self, id: u64) -> Option<&Session> {
        self.sorted
            .binary_search_by_key(&id, |s| s.id)
            .ok()
            .map(|i| &self.sorted[i])
    }

    /// Record that `agent` ran in session `id` at `stamp`.
    pub fn set(&mut self, id: u64, agent: Slot, stamp: u32) {
        match self.sorted.binary_search_by_key(&id, |s| s.id) {
            Ok(i) => {
                self.sorted[i].agent = agent as u8;
                self.sorted[i].stamp = stamp;
            }
            Err(i) => {
                self.sorted.insert(
                    i,
                    Session {
                        id,
                        agent: agent as u8,
                        stamp,
                    },
                );
                if self.sorted.len() > self.cap {
                    let oldest = (0..self.sorted.len())
                        .min_by_key(|&j| self.sorted[j].stamp)
                        .expect("not empty");
                    self.sorted.remove(oldest);
                }
            }
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<Session> {
        let i = self.sorted.binary_search_by_key(&id, |s| s.id).ok()?;
        Some(self.sorted.remove(i))
    }

    /// Sessions at an aged-out agent keep living but no longer point at it.
    pub fn forget_agent(&mut self, slot: Slot) {
        for s in &mut self.sorted {
            if s.agent as Slot == slot {
                s.agent = NO_AGENT;
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Session> {
        self.sorted.iter()
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Put back sessions read from a snapshot.
    pub fn restore(&mut self, mut sessions: Vec<Session>) {
        sessions.sort_by_key(|s| s.id);
        sessions.dedup_by_key(|s| s.id);
        let excess = sessions.len().saturating_sub(self.cap);
        if excess > 0 {
            let mut by_age: Vec<u32> = sessions.iter().map(|s| s.stamp).collect();
            by_age.sort_unstable();
            let cutoff = by_age[excess - 1];
            let mut dropped = 0;
            sessions.retain(|s| {
                let drop = s.stamp <= cutoff && dropped < excess;
                dropped += usize::from(drop);
                !drop
            });
        }
        self.sorted = sessions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_table_drops_the_least_recent_session() {
        let mut s = Sessions::new(2);
        s.set(30, 1, 1);
        s.set(10, 2, 2);
        s.set(30, 3, 3); // update: 30 is now the most recent
        s.set(20, 0, 4); // over the cap: 10 goes
        assert!(s.get(10).is_none());
        assert_eq!(s.get(30).unwrap().agent, 3);
        assert_eq!(s.len(), 2);
        s.forget_agent(3);
        assert_eq!(s.get(30).unwrap().agent_slot(), None);
        assert_eq!(s.remove(20).unwrap().agent, 0);
    }
}
