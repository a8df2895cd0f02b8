//! # tool-memo — memoized tool results: how long each may be served, which to drop first
//!
//! The MCP gateway (`host/mcp`) keeps the results of tools that have no side effects (its rule,
//! not this policy's) and asks this policy about them as `tool-result` items: `key` = the call's
//! `args-hash` (server, tool and canonical arguments), `last-access` = when the call that fetched
//! the result started, `tokens` = its size. A score above zero keeps the result and lets the
//! gateway serve it; zero drops it. Over budget, the lowest scores go first.
//!
//! - **Time to live.** A result older than `ttl-ms` scores 0: the server's data may have changed
//!   since. Age counts from the fetching call's *start* — the server may have read its data at
//!   any moment of the call — and "now" is the latest `at-us` of the tool calls observed: the
//!   gateway always tells the policy of the call it asks about first, so a lookup is judged at
//!   the call's own time. No wall clock is read, so a replay is deterministic.
//! - **Worth keeping.** A result of a key with no successful return observed, whose calls took
//!   less than `min-latency-ms` (nothing to save) or that is larger than `max-result-tokens` scores 0.
//! - **Value over budget.** Otherwise the score is the time a hit saves per token kept, weighted
//!   by how often the key was called and by the share of its TTL left:
//!   `(1 + calls) × latency_ms / (tokens + 1) × (ttl − age) / ttl`, never below a tiny positive
//!   floor (a valid result is never dropped for scoring low; only for the budget).
//!
//! Per key the policy remembers the calls seen and the slowest return (a hit's return is fast;
//! the slowest is what the server costs), for at most `max-keys` keys, least recently called out.
//!
//! Config: `ttl-ms` (default 60000), `min-latency-ms` (default 0), `max-result-tokens` (default
//! 262144), `max-keys` (default 8192).

use std::collections::HashMap;

use agentrt_sdk::state::{Reader, Writer};
use agentrt_sdk::{info, recency_scores, Config, Event, Item, ItemKind, Policy, PolicyInfo};

const MAGIC: [u8; 4] = *b"TMM1";
const FORMAT: u16 = 1;
/// The least score of a result that may still be served.
const FLOOR: f32 = 1e-9;

/// What the policy knows of one key (one tool with one set of arguments).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct KeyStats {
    calls: u32,
    /// The slowest return seen (µs): what a hit saves.
    latency_us: u64,
    /// The latest call (µs): the least recently called key is forgotten first.
    last_call_us: u64,
}

#[derive(Debug)]
pub struct ToolMemo {
    ttl_us: u64,
    min_latency_us: u64,
    max_result_tokens: u32,
    max_keys: usize,
    keys: HashMap<u64, KeyStats>,
    /// The latest host time seen in an event.
    now_us: u64,
}

impl Default for ToolMemo {
    fn default() -> Self {
        Self {
            ttl_us: 60_000_000,
            min_latency_us: 0,
            max_result_tokens: 262_144,
            max_keys: 8192,
            keys: HashMap::new(),
            now_us: 0,
        }
    }
}

impl ToolMemo {
    /// The score of one memoized result now.
    pub fn result_score(&self, item: &Item) -> f32 {
        let age = self.now_us.saturating_sub(item.last_access);
        if age >= self.ttl_us || item.tokens > self.max_result_tokens {
            return 0.0;
        }
        let stats = self.keys.get(&item.key).copied().unwrap_or_default();
        // No successful return seen for the key (or one too fast to be worth memory): nothing
        // this policy can vouch for.
        if stats.latency_us == 0 || stats.latency_us < self.min_latency_us {
            return 0.0;
        }
        let left = (self.ttl_us - age) as f64 / self.ttl_us as f64;
        let value =
            (1.0 + f64::from(stats.calls)) * (stats.latency_us as f64 / 1000.0) / (f64::from(item.tokens) + 1.0);
        ((value * left) as f32).max(FLOOR)
    }

    fn key(&mut self, key: u64) -> &mut KeyStats {
        if self.keys.len() >= self.max_keys && !self.keys.contains_key(&key) {
            if let Some((&oldest, _)) = self.keys.iter().min_by_key(|(k, s)| (s.last_call_us, **k)) {
                self.keys.remove(&oldest);
            }
        }
        self.keys.entry(key).or_default()
    }
}

impl Policy for ToolMemo {
    fn info() -> PolicyInfo {
        info(
            "tool-memo",
            "scores tool-result items: 0 past ttl-ms (counted from the fetching call's start) or when not worth keeping; \
             otherwise latency saved per token × calls × TTL left; observes tool-call/tool-return",
        )
    }

    fn init(&mut self, config: &Config) -> Result<(), String> {
        config.expect_only(&["ttl-ms", "min-latency-ms", "max-result-tokens", "max-keys"])?;
        self.ttl_us = config.parse_or("ttl-ms", 60_000u64)?.saturating_mul(1000);
        if self.ttl_us == 0 {
            return Err("ttl-ms must be at least 1".into());
        }
        self.min_latency_us = config.parse_or("min-latency-ms", 0u64)?.saturating_mul(1000);
        self.max_result_tokens = config.parse_or("max-result-tokens", 262_144u32)?;
        self.max_keys = config.parse_or("max-keys", 8192usize)?.max(1);
        Ok(())
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::ToolCall(call) => {
                self.now_us = self.now_us.max(call.at_us);
                let now = self.now_us;
                let stats = self.key(call.args_hash);
                stats.calls = stats.calls.saturating_add(1);
                stats.last_call_us = now;
            }
            Event::ToolReturn(ret) if ret.ok => {
                let stats = self.key(ret.args_hash);
                stats.latency_us = stats.latency_us.max(ret.latency_us);
            }
            Event::RequestArrival(r) => self.now_us = self.now_us.max(r.at_us),
            Event::RequestFinish(r) => self.now_us = self.now_us.max(r.at_us),
            Event::EngineLoad(l) => self.now_us = self.now_us.max(l.at_us),
            _ => {}
        }
    }

    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        // Other kinds are not this policy's: recency, the host's neutral order.
        let mut scores = recency_scores(items);
        for (score, item) in scores.iter_mut().zip(items) {
            if item.kind == ItemKind::ToolResult {
                *score = self.result_score(item);
            }
        }
        scores
    }

    fn snapshot(&self) -> Vec<u8> {
        let mut w = Writer::new(MAGIC, FORMAT);
        w.u64(self.now_us).u32(self.keys.len() as u32);
        let mut keys: Vec<_> = self.keys.iter().collect();
        keys.sort_unstable_by_key(|(k, _)| **k);
        for (&key, s) in keys {
            w.u64(key).u32(s.calls).u64(s.latency_us).u64(s.last_call_us);
        }
        w.finish()
    }

    fn restore(&mut self, state: &[u8]) -> Result<(), String> {
        let mut r = Reader::of_format(state, MAGIC, FORMAT, "tool-memo")?;
        let now_us = r.u64()?;
        let n = r.u32()?;
        let mut keys = HashMap::with_capacity(n as usize);
        for _ in 0..n {
            let key = r.u64()?;
            let stats = KeyStats {
                calls: r.u32()?,
                latency_us: r.u64()?,
                last_call_us: r.u64()?,
            };
            keys.insert(key, stats);
        }
        r.finish()?;
        self.now_us = now_us;
        self.keys = keys;
        Ok(())
    }
}

agentrt_sdk::export_policy!(ToolMemo);

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_sdk::testing::{rank, Harness};
    use agentrt_sdk::{ToolCall, ToolReturn};

    fn call(key: u64, at_us: u64) -> Event {
        Event::ToolCall(ToolCall {
            session: 1,
            agent: 1,
            tool: 7,
            args_hash: key,
            at_us,
        })
    }

    fn ret(key: u64, latency_us: u64, ok: bool) -> Event {
        Event::ToolReturn(ToolReturn {
            session: 1,
            agent: 1,
            tool: 7,
            args_hash: key,
            result_tokens: 10,
            latency_us,
            ok,
        })
    }

    fn result(key: u64, fetched_at_us: u64, tokens: u32) -> Item {
        Item {
            kind: ItemKind::ToolResult,
            key,
            agent: 1,
            session: 0,
            last_access: fetched_at_us,
            tokens,
            position: 0,
            tier: agentrt_sdk::Tier::Gpu,
        }
    }

    #[test]
    fn a_result_is_served_within_its_ttl_and_dropped_after() {
        let mut memo = Harness::<ToolMemo>::new([("ttl-ms", "1000")]).unwrap();
        memo.observe(&[call(1, 0), ret(1, 300_000, true)]);
        assert!(memo.score(&[result(1, 0, 10)])[0] > 0.0);
        // Asked at a later call's time: 999 ms old is still good, 1000 ms is not.
        memo.observe(&[call(1, 999_999)]);
        assert!(memo.score(&[result(1, 0, 10)])[0] > 0.0);
        memo.observe(&[call(1, 1_000_000)]);
        assert_eq!(memo.score(&[result(1, 0, 10)])[0], 0.0);
        // A newer fetch of the same key is good again.
        assert!(memo.score(&[result(1, 900_000, 10)])[0] > 0.0);
    }

    #[test]
    fn results_not_worth_keeping_score_zero() {
        let mut memo = Harness::<ToolMemo>::new([("min-latency-ms", "50"), ("max-result-tokens", "100")]).unwrap();
        memo.observe(&[call(1, 0), ret(1, 10_000, true), call(2, 0), ret(2, 80_000, true)]);
        let items = [result(1, 0, 10), result(2, 0, 10), result(2, 0, 101), result(3, 0, 10)];
        let scores = memo.score(&items);
        assert_eq!(scores[0], 0.0, "10 ms calls save nothing worth keeping");
        assert!(scores[1] > 0.0);
        assert_eq!(scores[2], 0.0, "too large");
        assert_eq!(scores[3], 0.0, "a key never seen returning has no latency to save");
    }

    #[test]
    fn over_budget_the_results_saving_most_time_per_token_are_kept_first() {
        let mut memo = Harness::<ToolMemo>::new([("ttl-ms", "10000")]).unwrap();
        memo.observe(&[
            call(1, 0),
            ret(1, 2_000_000, true),
            call(2, 0),
            ret(2, 100_000, true),
            call(3, 0),
            ret(3, 2_000_000, true),
            call(3, 10),
            call(3, 20),
        ]);
        // A hit's fast return does not make the key look cheap.
        memo.observe(&[ret(3, 50, true)]);
        let items = [result(1, 0, 10), result(2, 0, 10), result(3, 0, 10), result(1, 0, 1000)];
        let order = rank(&items, &memo.score(&items));
        // Time saved per token kept: popular 2 s / 10 tokens, then 2 s / 10, then 0.1 s / 10, and
        // last 2 s / 1000 tokens (a large result costs more memory than it saves per token).
        assert_eq!(order, vec![2, 0, 1, 3]);
        // Failed returns teach nothing.
        memo.observe(&[call(4, 30), ret(4, 9_000_000, false)]);
        assert_eq!(memo.score(&[result(4, 30, 10)])[0], 0.0);
    }

    #[test]
    fn other_item_kinds_rank_by_recency_state_round_trips_and_config_is_checked() {
        let mut memo = Harness::<ToolMemo>::new([]).unwrap();
        let blocks = [
            Item {
                kind: ItemKind::KvBlock,
                ..result(1, 5, 1)
            },
            Item {
                kind: ItemKind::KvBlock,
                ..result(2, 9, 1)
            },
        ];
        assert_eq!(rank(&blocks, &memo.score(&blocks)), vec![1, 0]);
        memo.observe(&[call(1, 100), ret(1, 5000, true)]);
        let state = memo.snapshot();
        let mut other = Harness::<ToolMemo>::new([]).unwrap();
        other.restore(&state).unwrap();
        assert_eq!(other.score(&[result(1, 50, 10)]), memo.score(&[result(1, 50, 10)]));
        assert!(other.restore(b"nope").is_err());
        assert!(Harness::<ToolMemo>::new([("ttl", "5")]).unwrap_err().contains("ttl"));
        assert!(Harness::<ToolMemo>::new([("ttl-ms", "0")])
            .unwrap_err()
            .contains("ttl-ms"));
    }

    #[test]
    fn the_key_table_is_bounded_least_recently_called_out() {
        let mut memo = Harness::<ToolMemo>::new([("max-keys", "2")]).unwrap();
        memo.observe(&[call(1, 0), call(2, 10), call(3, 20)]);
        assert_eq!(memo.policy().keys.len(), 2);
        assert!(!memo.policy().keys.contains_key(&1));
    }
}
