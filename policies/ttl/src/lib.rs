//! TTL pinning (Continuum-style) — work in progress.
use agentrt_sdk::{info, recency_scores, Item, Policy, PolicyInfo};

#[derive(Default)]
pub struct Ttl;

impl Policy for Ttl {
    fn info() -> PolicyInfo {
        info("ttl", "work in progress: recency only for now")
    }
    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        recency_scores(items)
    }
}

agentrt_sdk::export_policy!(Ttl);
