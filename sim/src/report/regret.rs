//! Which evictions a later request regretted, by content and agent (audited runs).

use crate::audit::{Content, EvictionAudit, Tally};
use crate::prepare::PreparedTrace;

/// Agents listed in the regret table's per-agent part (those with the most regrets).
const REGRET_TABLE_AGENTS: usize = 12;

/// Where each policy's misses come from: evictions a later request undid, by kind of content and
/// by agent, for audited runs (`agentrt sim run --eviction-log`).
pub fn regret_table(trace: &PreparedTrace, audits: &[&EvictionAudit]) -> String {
    let share = |t: Tally| format!("{}/{}", t.regretted, t.evicted);
    let mut out = String::from("evictions a later request undid (regretted / evicted):\n");
    out.push_str(&format!(
        "{:<16} {:>9} {:>10} {:>6} {:>11} {:>15} {:>15} {:>15} {:>10}\n",
        "policy", "evicted", "regretted", "%", "tokens", "anchor", "shared", "session", "gap ms p50"
    ));
    for a in audits {
        let by_content = a.by_content();
        let content = |c: Content| share(by_content.get(&c).copied().unwrap_or_default());
        let evicted = a.evictions.len() as u64;
        out.push_str(&format!(
            "{:<16} {:>9} {:>10} {:>6.1} {:>11} {:>15} {:>15} {:>15} {:>10}\n",
            a.policy,
            evicted,
            a.regretted(),
            100.0 * a.regretted() as f64 / evicted.max(1) as f64,
            a.regretted_tokens(),
            content(Content::Anchor),
            content(Content::Shared),
            content(Content::Session),
            a.median_regret_gap_us()
                .map_or("-".to_string(), |us| format!("{:.0}", us as f64 / 1000.0)),
        ));
    }
    // Agents ranked by their most-regretted policy: where a policy and Bélády differ most.
    let by_agent: Vec<_> = audits.iter().map(|a| a.by_agent()).collect();
    let mut agents: Vec<u32> = by_agent.iter().flat_map(|m| m.keys().copied()).collect();
    agents.sort_unstable();
    agents.dedup();
    let regretted = |m: &std::collections::BTreeMap<u32, Tally>, agent: u32| m.get(&agent).map_or(0, |t| t.regretted);
    agents.sort_by_key(|&agent| std::cmp::Reverse(by_agent.iter().map(|m| regretted(m, agent)).max()));
    if agents.is_empty() {
        return out;
    }
    out.push_str("\nregretted blocks by agent:\n");
    out.push_str(&format!("{:<24}", "agent"));
    for a in audits {
        out.push_str(&format!(" {:>16}", a.policy));
    }
    out.push('\n');
    for &agent in agents.iter().take(REGRET_TABLE_AGENTS) {
        let name = trace
            .agent(agent)
            .map_or_else(|| format!("#{agent}"), |a| a.name.clone());
        out.push_str(&format!("{name:<24}"));
        for m in &by_agent {
            out.push_str(&format!(" {:>16}", regretted(m, agent)));
        }
        out.push('\n');
    }
    if agents.len() > REGRET_TABLE_AGENTS {
        out.push_str(&format!("({} more agents)\n", agents.len() - REGRET_TABLE_AGENTS));
    }
    out
}
