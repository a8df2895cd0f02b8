//! Turn run results into the figures the evaluation reports: per policy, token hit rate, Δ pp vs
//! LRU, the fraction of the LRU → Bélády gap closed, TTFT (mean, p99), per-turn latency,
//! throughput, warm-up tokens, policy state size, policy time per event and how often the policy
//! failed — as JSON and as a terminal table, with a loud note under it for a policy that failed;
//! and, for audited runs, which evictions a later request regretted.
//!
//! [`summary`] computes the figures, [`tables`] writes them for people (terminal, Markdown, the
//! legend and the notes that say when a replay proves nothing), [`regret`] writes the audit's.

mod regret;
mod summary;
mod tables;

pub use regret::regret_table;
pub use summary::{run_json, summarize, HostTierSummary, PolicySummary, TenantSummary};
pub use tables::{
    failed_replays, failure_notes, host_table, legend_markdown, legend_text, markdown_rows, proves_nothing_notes,
    table, tenant_table, LEGEND, MARKDOWN_HEADER,
};

#[cfg(test)]
mod tests;
