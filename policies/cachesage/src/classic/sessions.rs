//! Live sessions and where each one is (its Markov state), bounded: beyond `max_sessions` the
//! session most likely to have ended already is dropped (and from then on treated like an ended
//! one) — the least recently active among equals. Dropping the least recently active outright
//! would drop exactly the sessions waiting longest on a user or a tool, whose histories are about
//! to be reused.
//!
//! A sorted `Vec` rather than a hash map: 16 bytes per session and no per-entry overhead, so the
//! table stays inside the state budget; a lookup is a binary search (~10 probes for 1024).

use crate::classic::agents::Slot;
use crate::classic::nodes::{self, Node};

/// Marks a session whose agent was aged out.
pub const NO_NODE: u8 = u8::MAX;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Session {
    pub id: u64,
    /// The state the session's last request put it in.
    pub node: u8,
    /// Requests the session made so far (saturating): the depth of its next call.
    pub calls: u8,
    /// Requests of the session that arrived and have not finished (saturating). While one is in
    /// flight — queued or running — the history of its agent is about to be (or being) reused
    /// even though the chain says that agent does not run *again*.
    pub in_flight: u8,
    /// Step of the session's last request.
    pub stamp: u32,
}

impl Session {
    pub fn node(&self) -> Option<Node> {
        (self.node != NO_NODE).then_some(self.node as Node)
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

    /// Record that session `id` made a request that put it at `node`, at `stamp`. When the table
    /// is full, a new session displaces the one with the highest `p_end` (its chance of having
    /// ended, by its state), the least recent among equals.
    pub fn set(&mut self, id: u64, node: Node, stamp: u32, p_end: impl Fn(Option<Node>) -> f32) {
        match self.sorted.binary_search_by_key(&id, |s| s.id) {
            Ok(i) => {
                let s = &mut self.sorted[i];
                s.node = node as u8;
                s.calls = s.calls.saturating_add(1);
                s.in_flight = s.in_flight.saturating_add(1);
                s.stamp = stamp;
            }
            Err(_) => {
                if self.sorted.len() >= self.cap {
                    let victim = (0..self.sorted.len())
                        .max_by(|&a, &b| {
                            let (sa, sb) = (&self.sorted[a], &self.sorted[b]);
                            p_end(sa.node())
                                .total_cmp(&p_end(sb.node()))
                                .then_with(|| sb.stamp.cmp(&sa.stamp))
                        })
                        .expect("a full table is not empty");
                    self.sorted.remove(victim);
                }
                let i = self.sorted.partition_point(|s| s.id < id);
                self.sorted.insert(
                    i,
                    Session {
                        id,
                        node: node as u8,
                        calls: 1,
                        in_flight: 1,
                        stamp,
                    },
                );
            }
        }
    }

    /// A request of session `id` finished.
    pub fn finished(&mut self, id: u64) {
        if let Ok(i) = self.sorted.binary_search_by_key(&id, |s| s.id) {
            let s = &mut self.sorted[i];
            s.in_flight = s.in_flight.saturating_sub(1);
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<Session> {
        let i = self.sorted.binary_search_by_key(&id, |s| s.id).ok()?;
        Some(self.sorted.remove(i))
    }

    /// Sessions at an aged-out agent keep living but no longer point at it.
    pub fn forget_agent(&mut self, slot: Slot) {
        for s in &mut self.sorted {
            if s.node().is_some_and(|n| nodes::nodes_of(slot).contains(&n)) {
                s.node = NO_NODE;
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

    /// Put back sessions read from a snapshot (the most recent ones if there are too many).
    pub fn restore(&mut self, mut sessions: Vec<Session>) {
        sessions.sort_by_key(|s| std::cmp::Reverse(s.stamp));
        sessions.truncate(self.cap);
        sessions.sort_by_key(|s| s.id);
        sessions.dedup_by_key(|s| s.id);
        self.sorted = sessions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_drops_the_session_most_likely_ended_then_the_least_recent() {
        let mut s = Sessions::new(3);
        let ends_at_9 = |n: Option<Node>| if n == Some(9) { 0.9 } else { 0.0 };
        s.set(30, 1, 1, ends_at_9);
        s.set(10, 9, 2, ends_at_9);
        s.set(20, 2, 3, ends_at_9);
        s.set(30, 3, 4, ends_at_9); // update: 30 is now the most recent, one call deeper
        assert_eq!(s.get(30).unwrap().calls, 2);
        assert_eq!(s.get(30).unwrap().in_flight, 2);
        s.finished(30);
        assert_eq!(s.get(30).unwrap().in_flight, 1);
        s.set(40, 0, 5, ends_at_9); // over the cap: 10 is likely over, though not the oldest
        assert!(s.get(10).is_none());
        s.set(50, 0, 6, ends_at_9); // no likely-ended one left: 20, the least recent, goes
        assert!(s.get(20).is_none());
        assert_eq!(s.get(30).unwrap().node, 3);
        assert_eq!(s.len(), 3);
        s.forget_agent(0); // nodes 0..DEPTHS are agent 0's
        assert_eq!(s.get(30).unwrap().node(), None);
        assert_eq!(s.get(40).unwrap().node(), None);
    }
}
