//! # callrate — the reference policy of the language SDKs
//!
//! Keeps the KV blocks of agents called often recently: per-agent decayed call counts, recency
//! within an agent, one warm-up in `act` for the hottest agent that was not just called. The same
//! specification ([SPEC.md](../SPEC.md)) is implemented in Python, JavaScript and C beside
//! this one; `tests/languages.rs` requires all five to rank, act and snapshot identically, so
//! every quantity here is an integer until the one conversion to `f32`.

use std::collections::BTreeMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, BlockEvent, BlockOp, Config, Event, Item, Policy, PolicyInfo, SideEffect, WarmPrefix};

/// One call, in the fixed-point unit of `count` (1/65536 of a call).
const CALL: u64 = 1 << 16;
/// A cache hit on one of the agent's blocks: 1/64 of a call.
const HIT: u64 = 1 << 10;
/// Counts saturate here, which keeps `b * (d % h)` in `decay` below 2^53.
const COUNT_CAP: u64 = 1 << 36;
const MAGIC: [u8; 4] = *b"CALR";
const FORMAT: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Agent {
    /// Decayed calls in 1/65536ths, as of request number `at`.
    count: u64,
    at: u64,
    anchor: u64,
}

#[derive(Debug)]
pub struct CallRate {
    half_life: u64,
    recency: u64,
    max_agents: usize,
    requests: u64,
    last: u32,
    pending: bool,
    /// Ordered by handle: the snapshot's order, and the tie rule's.
    agents: BTreeMap<u32, Agent>,
}

impl Default for CallRate {
    fn default() -> Self {
        Self {
            half_life: 64,
            recency: 256,
            max_agents: 256,
            requests: 0,
            last: 0,
            pending: false,
            agents: BTreeMap::new(),
        }
    }
}

/// `c` decayed over `d` requests: whole half-lives shift, the rest follows the chord to 1/2.
fn decay(c: u64, d: u64, h: u64) -> u64 {
    let q = d / h;
    if q >= 64 {
        return 0;
    }
    let b = c >> q;
    b - b * (d % h) / (2 * h)
}

/// A config value: decimal digits within `low..=high`, else a message naming the key.
fn integer(config: &Config, key: &str, default: u64, low: u64, high: u64) -> Result<u64, String> {
    let Some(raw) = config.get(key) else {
        return Ok(default);
    };
    let value = (!raw.is_empty() && raw.len() <= 19 && raw.bytes().all(|b| b.is_ascii_digit()))
        .then(|| raw.parse::<u64>().ok())
        .flatten()
        .ok_or_else(|| format!("config key `{key}`: {raw:?} is not a whole number"))?;
    if !(low..=high).contains(&value) {
        return Err(format!("config key `{key}`: {value} is outside {low}..={high}"));
    }
    Ok(value)
}

impl CallRate {
    fn rate(&self, agent: u32) -> u64 {
        self.agents
            .get(&agent)
            .map_or(0, |a| decay(a.count, self.requests - a.at, self.half_life))
    }

    fn credit(&mut self, agent: u32, amount: u64) {
        let rate = self.rate(agent);
        if let Some(a) = self.agents.get_mut(&agent) {
            a.count = (rate + amount).min(COUNT_CAP);
            a.at = self.requests;
        }
    }

    fn call(&mut self, agent: u32, anchor: u64) {
        self.requests += 1;
        let at = self.requests;
        let entry = self.agents.entry(agent).or_insert(Agent { count: 0, at, anchor });
        entry.anchor = anchor;
        self.credit(agent, CALL);
        self.last = agent;
        self.pending = true;
        while self.agents.len() > self.max_agents {
            let coldest = self
                .agents
                .keys()
                .map(|&a| (self.rate(a), a))
                .min()
                .map(|(_, a)| a)
                .expect("the table is not empty");
            self.agents.remove(&coldest);
        }
    }
}

impl Policy for CallRate {
    fn info() -> PolicyInfo {
        info(
            "callrate",
            "keeps blocks of agents called often recently (decayed call counts + recency), warms the hottest other agent; Rust",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["half-life", "recency", "max-agents"])?;
        self.half_life = integer(config, "half-life", 64, 1, 65536)?;
        self.recency = integer(config, "recency", 256, 0, 1 << 20)?;
        self.max_agents = integer(config, "max-agents", 256, 1, 4096)? as usize;
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        if let Event::RequestArrival(a) = event {
            if !a.warmup && a.agent != 0 {
                self.call(a.agent, a.anchor_hash);
            }
        }
    }

    fn observe_block(&mut self, block: &BlockEvent) {
        if block.op == BlockOp::Touched {
            self.credit(block.agent, HIT);
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        let newest = items.iter().map(|i| i.last_access).max().unwrap_or(0);
        items
            .iter()
            .map(|i| {
                let age = newest - i.last_access;
                let fresh = self.recency.saturating_sub(age);
                ((self.rate(i.agent) >> 8) * (self.recency + 1) + fresh) as f32
            })
            .collect()
    }

    fn act(&mut self) -> Vec<SideEffect> {
        if !std::mem::take(&mut self.pending) {
            return Vec::new();
        }
        let total: u64 = self.agents.keys().map(|&a| self.rate(a)).sum();
        // Largest rate; among equals the smallest handle (iteration is ascending, `max_by_key`
        // keeps the last maximum, so compare on the handle reversed).
        let best = self
            .agents
            .iter()
            .filter(|(&a, e)| a != self.last && e.anchor != 0)
            .map(|(&a, e)| (self.rate(a), std::cmp::Reverse(a), e.anchor))
            .max();
        match best {
            Some((rate, std::cmp::Reverse(agent), anchor)) if rate > 0 => {
                vec![SideEffect::WarmPrefix(WarmPrefix {
                    agent,
                    anchor_hash: anchor,
                    probability: (rate * 65536 / total) as f32 / 65536.0,
                })]
            }
            _ => Vec::new(),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.requests)
            .u32(self.last)
            .u8(u8::from(self.pending))
            .u32(self.agents.len() as u32);
        for (&agent, a) in &self.agents {
            w.u32(agent).u64(a.count).u64(a.at).u64(a.anchor);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        if state.is_empty() {
            return Ok(());
        }
        let (mut r, version) = Reader::new(state, MAGIC)?;
        if version != FORMAT {
            return Err(format!("snapshot format {version}; this policy reads {FORMAT}"));
        }
        let requests = r.u64()?;
        let last = r.u32()?;
        let pending = r.u8()? != 0;
        let n = r.u32()? as usize;
        if n > self.max_agents {
            return Err(format!("snapshot holds {n} agents; max-agents is {}", self.max_agents));
        }
        let mut agents = BTreeMap::new();
        let mut previous = None;
        for _ in 0..n {
            let agent = r.u32()?;
            if previous.is_some_and(|p| p >= agent) {
                return Err(format!("snapshot agents are not in ascending order at {agent}"));
            }
            previous = Some(agent);
            let (count, at, anchor) = (r.u64()?, r.u64()?, r.u64()?);
            agents.insert(agent, Agent { count, at, anchor });
        }
        r.finish()?;
        (self.requests, self.last, self.pending, self.agents) = (requests, last, pending, agents);
        Ok(())
    }
}

agentrt_sdk::export_policy!(CallRate);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{rank, Harness};
    use agentrt_sdk::{ItemKind, RequestArrival};

    fn arrival(agent: u32, warmup: bool) -> Event {
        Event::RequestArrival(RequestArrival {
            request_id: 0,
            agent,
            session: 1,
            anchor_hash: u64::from(agent) * 100,
            prompt_tokens: 64,
            continues: None,
            warmup,
            at_us: 0,
        })
    }

    fn calls(agents: &[u32]) -> Vec<Event> {
        agents.iter().map(|&a| arrival(a, false)).collect()
    }

    fn block(agent: u32, last_access: u64) -> Item {
        Item {
            kind: ItemKind::KvBlock,
            key: u64::from(agent) << 32 | last_access,
            agent,
            session: 1,
            last_access,
            tokens: 16,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }
    }

    #[test]
    fn decay_halves_per_half_life_and_follows_the_chord_between() {
        assert_eq!(decay(1 << 20, 0, 64), 1 << 20);
        assert_eq!(decay(1 << 20, 64, 64), 1 << 19);
        assert_eq!(decay(1 << 20, 32, 64), 3 << 18);
        assert_eq!(decay(1 << 20, 64 * 64, 64), 0);
    }

    #[test]
    fn a_busy_agents_older_block_outranks_a_rare_agents_newer_one() {
        let mut p = Harness::<CallRate>::new([]).unwrap();
        p.observe(&calls(&[1, 1, 1, 2]));
        let items = [block(1, 10), block(2, 20), block(1, 12)];
        assert_eq!(rank(&items, &p.score(&items)), vec![2, 0, 1]);
    }

    #[test]
    fn act_warms_the_hottest_other_agent_once_per_arrival() {
        let mut p = Harness::<CallRate>::new([]).unwrap();
        p.observe(&calls(&[1, 1, 2]));
        let SideEffect::WarmPrefix(w) = &p.act()[0] else {
            panic!("a warm-up")
        };
        assert_eq!((w.agent, w.anchor_hash), (1, 100));
        assert!(w.probability > 0.6 && w.probability < 0.7, "{}", w.probability);
        assert!(p.act().is_empty(), "nothing new since");
        p.observe(&[arrival(1, true)]);
        assert!(p.act().is_empty(), "a warm-up is not a call");
    }

    #[test]
    fn hits_credit_known_agents_through_the_packed_path() {
        let mut p = Harness::<CallRate>::new([]).unwrap();
        p.observe(&calls(&[1, 2]));
        let touched = |agent| BlockEvent {
            op: BlockOp::Touched,
            agent,
            block_hash: 7,
            parent_hash: 0,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        };
        p.observe_blocks(&[touched(1), touched(9)]);
        let items = [block(1, 1), block(2, 1)];
        let scores = p.score(&items);
        assert!(scores[0] > scores[1]);
        assert_eq!(p.policy().agents.len(), 2, "an unknown agent's hit adds nothing");
    }

    #[test]
    fn the_coldest_agent_leaves_a_full_table() {
        let mut p = Harness::<CallRate>::new([("max-agents", "2")]).unwrap();
        p.observe(&calls(&[1, 1, 2, 3]));
        assert_eq!(p.policy().agents.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
    }

    #[test]
    fn snapshots_round_trip_and_damage_is_refused_by_name() {
        let mut learned = Harness::<CallRate>::new([]).unwrap();
        learned.observe(&calls(&[1, 2, 1, 3]));
        let state = learned.snapshot();
        let mut fresh = Harness::<CallRate>::new([]).unwrap();
        fresh.restore(&state).unwrap();
        assert_eq!(fresh.snapshot(), state);
        for (bad, words) in [
            (b"XXXX\x01\x00".to_vec(), "not from this policy"),
            (state[..state.len() - 1].to_vec(), "truncated"),
            ([state.as_slice(), &[0]].concat(), "trailing"),
        ] {
            let err = fresh.restore(&bad).unwrap_err();
            assert!(err.contains(words), "{err}");
        }
        let mut small = Harness::<CallRate>::new([("max-agents", "2")]).unwrap();
        assert!(small.restore(&state).unwrap_err().contains("max-agents"));
    }

    #[test]
    fn configuration_is_checked_by_key() {
        for (config, words) in [
            (("half-life", "0"), "half-life"),
            (("recency", "-1"), "recency"),
            (("max-agent", "3"), "max-agent"),
        ] {
            let err = Harness::<CallRate>::new([config]).unwrap_err();
            assert!(err.contains(words), "{err}");
        }
    }
}
