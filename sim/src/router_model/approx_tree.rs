//! vLLM router's `cache_aware` policy (`vllm-router` 0.1.17, `src/policies/cache_aware.rs`; the
//! policy SGLang's router introduced), as the simulator replays it.
//!
//! The router never sees an engine's cache: it keeps an *approximate tree* of the prompts it
//! has sent to each worker and assumes a worker still holds what it was sent. For each request:
//!
//! 1. **Imbalanced** — `max − min > balance_abs_threshold` and `max > min × balance_rel_threshold`
//!    over the workers' in-flight requests: the least-loaded worker, whatever it holds.
//! 2. Otherwise the longest prefix of the request in the tree: if it covers more than
//!    `cache_threshold` of the request, the worker that owns that prefix (the one that used it
//!    last, when several do); else the least-loaded worker (ties to the first).
//! 3. Either way the whole prompt is inserted for the chosen worker.
//!
//! Every `eviction_interval` a background pass evicts each worker's least recently used leaves
//! until it holds at most `max_tree_size`.
//!
//! What differs, and why it is small: the real tree is over the request's characters, this one
//! over its 16-token prompt blocks (a block-chain hash names a prefix exactly, so "the prefix
//! of the prompt the worker was sent" is the same set of nodes); a match rate is then a share of
//! blocks, not of characters; `max_tree_size` is counted in tokens at [`CHARS_PER_TOKEN`].

use std::collections::HashMap;

/// Characters per token when `--max-tree-size` (characters) is turned into blocks (English
/// text under a Llama-3 tokenizer averages about four).
pub const CHARS_PER_TOKEN: u64 = 4;

/// The `cache_aware` policy's settings, with `vllm-router` 0.1.17's defaults (its `vllm-router`
/// command's: the Rust binary's own `--max-tree-size` default is twice as large).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CacheAwareConfig {
    /// `--cache-threshold`: the share of the request a prefix match must exceed.
    pub cache_threshold: f64,
    /// `--balance-abs-threshold`: in-flight requests between the busiest and the idlest worker.
    pub balance_abs_threshold: u32,
    /// `--balance-rel-threshold`: the busiest worker's load over the idlest's.
    pub balance_rel_threshold: f64,
    /// `--eviction-interval-secs`, in ns.
    pub eviction_interval_ns: u64,
    /// `--max-tree-size`, in characters per worker.
    pub max_tree_chars: u64,
}

impl Default for CacheAwareConfig {
    fn default() -> Self {
        Self {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval_ns: 120_000_000_000,
            max_tree_chars: 1 << 25,
        }
    }
}

/// The router's picture of what each worker holds: per worker, each prefix block it was sent
/// and when that prefix was last used.
pub struct ApproxTree {
    config: CacheAwareConfig,
    /// Per worker: block-chain hash → (last use, depth in the prompt). Inserting a prompt
    /// touches every prefix on its path, so an ancestor is never older than its descendants:
    /// the oldest entry, deepest first on a tie, is always a leaf.
    owned: Vec<HashMap<u64, (u64, u32)>>,
    block_size: u64,
    next_eviction_ns: u64,
}

impl ApproxTree {
    pub fn new(config: CacheAwareConfig, workers: usize, block_size: usize) -> Self {
        Self {
            config,
            owned: vec![HashMap::new(); workers],
            block_size: block_size as u64,
            next_eviction_ns: config.eviction_interval_ns,
        }
    }

    /// The worker for a prompt of `hashes` (its block-chain hashes) given each worker's
    /// in-flight requests, at `now_ns`; the prompt is then recorded for it.
    pub fn choose(&mut self, hashes: &[u64], in_flight: &[u32], now_ns: u64) -> usize {
        self.evict_due(now_ns);
        let least_loaded = (0..in_flight.len())
            .min_by_key(|&i| in_flight[i])
            .expect("at least one worker");
        let (min, max) = (in_flight[least_loaded], in_flight.iter().copied().max().unwrap_or(0));
        let imbalanced = max.saturating_sub(min) > self.config.balance_abs_threshold
            && f64::from(max) > f64::from(min) * self.config.balance_rel_threshold;
        let chosen = if imbalanced {
            least_loaded
        } else {
            match self.longest_match(hashes) {
                Some((depth, owner)) if depth as f64 / hashes.len() as f64 > self.config.cache_threshold => owner,
                _ => least_loaded,
            }
        };
        self.insert(chosen, hashes, now_ns);
        chosen
    }

    /// How deep the prompt runs in the tree (any worker's nodes), and the worker that used the
    /// deepest matched node last.
    fn longest_match(&self, hashes: &[u64]) -> Option<(usize, usize)> {
        let depth = hashes
            .iter()
            .take_while(|h| self.owned.iter().any(|w| w.contains_key(h)))
            .count();
        let deepest = hashes.get(depth.checked_sub(1)?)?;
        let owner = (0..self.owned.len())
            .filter_map(|w| self.owned[w].get(deepest).map(|&(used, _)| (used, w)))
            .max_by_key(|&(used, w)| (used, std::cmp::Reverse(w)))
            .map(|(_, w)| w)?;
        Some((depth, owner))
    }

    fn insert(&mut self, worker: usize, hashes: &[u64], now_ns: u64) {
        let tree = &mut self.owned[worker];
        for (depth, &h) in hashes.iter().enumerate() {
            tree.insert(h, (now_ns, depth as u32));
        }
    }

    /// The background pass: each worker's oldest leaves go until it fits `max_tree_size`.
    fn evict_due(&mut self, now_ns: u64) {
        if now_ns < self.next_eviction_ns {
            return;
        }
        let interval = self.config.eviction_interval_ns.max(1);
        self.next_eviction_ns = (now_ns / interval + 1) * interval;
        let max_blocks = (self.config.max_tree_chars / (CHARS_PER_TOKEN * self.block_size.max(1))) as usize;
        for tree in &mut self.owned {
            if tree.len() <= max_blocks {
                continue;
            }
            let mut by_age: Vec<(u64, std::cmp::Reverse<u32>, u64)> = tree
                .iter()
                .map(|(&h, &(used, depth))| (used, std::cmp::Reverse(depth), h))
                .collect();
            by_age.sort_unstable();
            let excess = tree.len() - max_blocks;
            for &(_, _, h) in &by_age[..excess] {
                tree.remove(&h);
            }
        }
    }

    /// Blocks the router believes `worker` holds.
    #[cfg(test)]
    fn size(&self, worker: usize) -> usize {
        self.owned[worker].len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(config: CacheAwareConfig) -> ApproxTree {
        ApproxTree::new(config, 2, 16)
    }

    #[test]
    fn a_prompt_goes_back_where_its_prefix_went_while_the_load_is_balanced() {
        let mut t = tree(CacheAwareConfig::default());
        assert_eq!(
            t.choose(&[1, 2, 3, 4], &[0, 0], 0),
            0,
            "nothing matches: the least loaded"
        );
        assert_eq!(t.choose(&[9, 8], &[1, 0], 1), 1, "nothing matches: the least loaded");
        assert_eq!(t.choose(&[1, 2, 3, 7], &[1, 0], 2), 0, "3 of 4 blocks match worker 0");
        assert_eq!(
            t.choose(&[1, 5, 6, 7], &[1, 0], 3),
            1,
            "1 of 4 is under the 0.3 threshold"
        );
    }

    #[test]
    fn an_imbalanced_fleet_goes_to_the_least_loaded_whatever_it_holds() {
        let mut t = tree(CacheAwareConfig {
            balance_abs_threshold: 2,
            ..CacheAwareConfig::default()
        });
        t.choose(&[1, 2, 3], &[0, 0], 0);
        assert_eq!(t.choose(&[1, 2, 3], &[2, 0], 1), 0, "a difference of 2 is not over 2");
        assert_eq!(t.choose(&[1, 2, 3], &[3, 0], 2), 1, "3 > 2 and 3 > 0 × 1.5");
        assert_eq!(t.choose(&[1, 2, 3], &[1, 0], 3), 1, "worker 1 used the prefix last");
    }

    #[test]
    fn the_eviction_pass_trims_each_worker_to_its_size_oldest_leaves_first() {
        let mut t = tree(CacheAwareConfig {
            // Two blocks of 16 tokens at four characters a token.
            max_tree_chars: 2 * 16 * CHARS_PER_TOKEN,
            eviction_interval_ns: 100,
            ..CacheAwareConfig::default()
        });
        t.choose(&[1, 2, 3], &[0, 0], 0);
        t.choose(&[1, 4], &[0, 1], 10);
        assert_eq!(t.size(0), 4);
        t.choose(&[7], &[0, 1], 100);
        // At 100 the pass ran first: 1 and 4 (used at 10) stayed; 2 and 3 (leaves at 0) went.
        assert_eq!(t.size(0), 3, "trimmed to 2, then the new prompt went in");
        assert_eq!(t.longest_match(&[1, 4]), Some((2, 0)));
        assert_eq!(t.longest_match(&[1, 2, 3]), Some((1, 0)));
    }
}
