//! agentrt's knowledge, turned into the router's hints.
//!
//! The router sees each replica's cached blocks, but not agents or sessions: it cannot know that
//! agent A's anchor was just warmed on replica 2 (the blocks are still being computed, no KV event
//! yet), nor which replica holds the history a session's next call will carry. agentrt does: it
//! placed every call and warm-up, and tags every block with its agent. [`Placement`] records where
//! each session's last call and each agent's anchor went; [`HintRule`] turns that into
//! `affinity_target` — the replica of the session's last call, else the replica that most
//! recently received the agent's anchor — unless that replica is busier than the least busy one
//! by more than `max_imbalance` requests in flight (then the router balances alone).
//! Dynamo ignores an affinity target that is not eligible, so a stale hint costs nothing worse
//! than the router's own choice.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::replica::ReplicaId;
use crate::router::Hints;

/// Agents (and sessions) remembered at most; past it the longest-unseen go first.
const MAX_AGENTS: usize = 65_536;
/// Replicas remembered per agent.
const MAX_HOLDERS: usize = 8;

/// Where each agent's anchor was last sent (a request or a warm-up), per replica, and where each
/// session's last call went.
#[derive(Debug, Default)]
pub struct Placement {
    agents: HashMap<u32, Vec<(ReplicaId, Instant)>>,
    sessions: HashMap<u64, (ReplicaId, Instant)>,
}

impl Placement {
    /// A call of `session` went to `replica` at `at`.
    pub fn session_placed(&mut self, session: u64, replica: ReplicaId, at: Instant) {
        if !self.sessions.contains_key(&session) && self.sessions.len() >= MAX_AGENTS {
            let oldest = self.sessions.iter().min_by_key(|(_, (_, at))| *at).map(|(s, _)| *s);
            if let Some(s) = oldest {
                self.sessions.remove(&s);
            }
        }
        self.sessions.insert(session, (replica, at));
    }

    /// The session ended: forget it.
    pub fn session_ended(&mut self, session: u64) {
        self.sessions.remove(&session);
    }

    /// `agent`'s anchor went to `replica` at `at` (its call or its warm-up was routed there).
    pub fn placed(&mut self, agent: u32, replica: ReplicaId, at: Instant) {
        if !self.agents.contains_key(&agent) && self.agents.len() >= MAX_AGENTS {
            self.forget_oldest();
        }
        let holders = self.agents.entry(agent).or_default();
        holders.retain(|(r, _)| *r != replica);
        holders.insert(0, (replica, at));
        holders.truncate(MAX_HOLDERS);
    }

    /// `agent`'s anchor is cached on `replica` (its engine stored or hit the block that starts
    /// the agent's prompt): a replica not yet among its holders joins them, as received at `at`;
    /// one already there keeps its place (a placement — a warm-up's, say — is newer news than
    /// the engine's report of an earlier call).
    pub fn cached(&mut self, agent: u32, replica: ReplicaId, at: Instant) {
        let known = self
            .agents
            .get(&agent)
            .is_some_and(|holders| holders.iter().any(|(r, _)| *r == replica));
        if !known {
            self.placed(agent, replica, at);
        }
    }

    /// `agent`'s anchor left `replica` (its blocks were evicted there, or the replica died).
    pub fn removed(&mut self, agent: u32, replica: ReplicaId) {
        if let Some(holders) = self.agents.get_mut(&agent) {
            holders.retain(|(r, _)| *r != replica);
        }
    }

    /// A replica is gone: no agent's anchor is there any more.
    pub fn replica_lost(&mut self, replica: ReplicaId) {
        for holders in self.agents.values_mut() {
            holders.retain(|(r, _)| *r != replica);
        }
        self.sessions.retain(|_, (r, _)| *r != replica);
    }

    /// Replicas that received `agent`'s anchor since `since`, most recent first.
    pub fn holders(&self, agent: u32, since: Instant) -> impl Iterator<Item = ReplicaId> + '_ {
        self.agents
            .get(&agent)
            .into_iter()
            .flatten()
            .filter(move |(_, at)| *at >= since)
            .map(|(r, _)| *r)
    }

    fn forget_oldest(&mut self) {
        let oldest = self
            .agents
            .iter()
            .min_by_key(|(_, holders)| holders.first().map(|(_, at)| *at))
            .map(|(agent, _)| *agent);
        if let Some(agent) = oldest {
            self.agents.remove(&agent);
        }
    }
}

/// How placement becomes hints.
#[derive(Debug, Clone, Copy)]
pub struct HintRule {
    /// How long a placed anchor is assumed to stay cached without news of its eviction.
    pub anchor_ttl: Duration,
    /// Requests in flight a holder may have beyond the least busy replica and still be hinted.
    pub max_imbalance: u32,
}

impl Default for HintRule {
    fn default() -> Self {
        Self {
            anchor_ttl: Duration::from_secs(300),
            max_imbalance: 4,
        }
    }
}

impl HintRule {
    /// Hints for a call of `agent` in `session`, given each usable replica's requests in flight
    /// (`loads`: replicas absent from it are not usable — the hint never names one).
    pub fn hints(
        &self,
        placement: &Placement,
        agent: u32,
        session: Option<u64>,
        loads: &HashMap<ReplicaId, u32>,
        now: Instant,
    ) -> Hints {
        let least = loads.values().copied().min().unwrap_or(0);
        let since = now.checked_sub(self.anchor_ttl).unwrap_or(now);
        let usable = |r: &ReplicaId| loads.get(r).is_some_and(|&load| load <= least + self.max_imbalance);
        let session_replica = session
            .and_then(|s| placement.sessions.get(&s))
            .filter(|(_, at)| *at >= since)
            .map(|(r, _)| *r);
        let affinity = session_replica
            .into_iter()
            .chain(placement.holders(agent, since))
            .find(usable);
        Hints {
            affinity,
            allowed: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: ReplicaId = ReplicaId(1);
    const B: ReplicaId = ReplicaId(2);

    fn loads(a: u32, b: u32) -> HashMap<ReplicaId, u32> {
        HashMap::from([(A, a), (B, b)])
    }

    #[test]
    fn the_replica_that_last_got_the_anchor_is_hinted() {
        let rule = HintRule::default();
        let mut placement = Placement::default();
        let now = Instant::now();
        assert_eq!(
            rule.hints(&placement, 7, None, &loads(0, 0), now).affinity,
            None,
            "unknown agent: no hint"
        );
        placement.placed(7, A, now);
        placement.placed(7, B, now);
        assert_eq!(rule.hints(&placement, 7, None, &loads(0, 0), now).affinity, Some(B));
        placement.removed(7, B);
        assert_eq!(rule.hints(&placement, 7, None, &loads(0, 0), now).affinity, Some(A));
        placement.replica_lost(A);
        assert_eq!(rule.hints(&placement, 7, None, &loads(0, 0), now).affinity, None);
    }

    #[test]
    fn a_busy_holder_or_an_old_placement_is_not_hinted() {
        let rule = HintRule {
            anchor_ttl: Duration::from_secs(10),
            max_imbalance: 2,
        };
        let mut placement = Placement::default();
        let now = Instant::now();
        placement.placed(7, A, now);
        assert_eq!(rule.hints(&placement, 7, None, &loads(2, 0), now).affinity, Some(A));
        assert_eq!(
            rule.hints(&placement, 7, None, &loads(3, 0), now).affinity,
            None,
            "3 more in flight than B"
        );
        let later = now + Duration::from_secs(11);
        assert_eq!(
            rule.hints(&placement, 7, None, &loads(0, 0), later).affinity,
            None,
            "past the TTL"
        );
        let only_b = HashMap::from([(B, 0)]);
        assert_eq!(
            rule.hints(&placement, 7, None, &only_b, now).affinity,
            None,
            "A is not usable"
        );
    }

    #[test]
    fn the_sessions_replica_comes_before_the_agents() {
        let rule = HintRule::default();
        let mut placement = Placement::default();
        let now = Instant::now();
        placement.placed(7, A, now);
        placement.session_placed(42, B, now);
        assert_eq!(rule.hints(&placement, 7, Some(42), &loads(0, 0), now).affinity, Some(B));
        assert_eq!(
            rule.hints(&placement, 7, Some(43), &loads(0, 0), now).affinity,
            Some(A),
            "a new session"
        );
        assert_eq!(
            rule.hints(&placement, 7, Some(42), &loads(0, 9), now).affinity,
            Some(A),
            "the session's replica is too busy"
        );
        placement.session_ended(42);
        assert_eq!(rule.hints(&placement, 7, Some(42), &loads(0, 0), now).affinity, Some(A));
    }

    #[test]
    fn an_evicted_anchor_is_no_longer_hinted_and_a_cached_one_is_again() {
        let rule = HintRule::default();
        let mut placement = Placement::default();
        let now = Instant::now();
        placement.placed(7, A, now);
        placement.removed(7, A);
        assert_eq!(
            rule.hints(&placement, 7, None, &loads(0, 0), now).affinity,
            None,
            "well within the TTL, but evicted"
        );
        placement.cached(7, A, now);
        assert_eq!(rule.hints(&placement, 7, None, &loads(0, 0), now).affinity, Some(A));
        // A warm-up placed the anchor on B after the call on A: the engine's later report of the
        // call's blocks on A does not move A ahead of B.
        placement.placed(7, B, now + Duration::from_secs(1));
        placement.cached(7, A, now + Duration::from_secs(2));
        assert_eq!(rule.hints(&placement, 7, None, &loads(0, 0), now).affinity, Some(B));
    }

    #[test]
    fn placement_stays_bounded() {
        let mut placement = Placement::default();
        let now = Instant::now();
        for agent in 0..(MAX_AGENTS as u32 + 10) {
            placement.placed(agent, A, now + Duration::from_micros(agent as u64));
        }
        assert_eq!(placement.agents.len(), MAX_AGENTS);
        assert_eq!(placement.holders(0, now).count(), 0, "the oldest went first");
        for i in 0..20 {
            placement.placed(1, ReplicaId(100 + i), now);
        }
        assert_eq!(placement.holders(1, now).count(), MAX_HOLDERS);
    }
}
