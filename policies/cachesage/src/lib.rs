//! CacheSage — work in progress.
use agentrt_sdk::{info, recency_scores, Item, Policy, PolicyInfo};

#[derive(Default)]
pub struct CacheSage;

impl Policy for CacheSage {
    fn info() -> PolicyInfo {
        info("cachesage", "work in progress: recency only for now")
    }
    fn score(&mut self, items: &[Item]) -> Vec<f32> {
        recency_scores(items)
    }
}

agentrt_sdk::export_policy!(CacheSage);
