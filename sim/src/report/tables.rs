//! The figures for people: the terminal table, Markdown rows, the host-tier and tenant tables,
//! the legend, and the notes under a table (a policy that failed; a replay that proves nothing).

use super::summary::PolicySummary;

fn opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) => format!("{v:+.digits$}"),
        None => "–".to_string(),
    }
}

/// The share of the LRU→Bélády gap, as a percentage ("–" when there is no gap).
fn gap(s: &PolicySummary) -> String {
    s.gap_closed.map_or("–".to_string(), |g| format!("{:.0}%", g * 100.0))
}

/// Header of the Markdown table [`markdown_rows`] fills (docs/results.md, `table.md`).
pub const MARKDOWN_HEADER: &str = "| workload | policy | hit % | Δ pp vs LRU | gap closed | TTFT mean ms | TTFT p99 ms | util % | turn ms | out tok/s | warm-up tok | state B | observe µs/ev | score µs/item | evictions | rankings |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

/// One Markdown row per policy of one workload's results.
pub fn markdown_rows(workload: &str, summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    for (name, s) in summaries {
        if s.failed {
            out.push_str(&format!(
                "| {workload} | {} | failed (no figures) |\n",
                shown_name(name)
            ));
            continue;
        }
        out.push_str(&format!(
            "| {workload} | {} | {:.1} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {:.3} | {:.3} | {} | {} |\n",
            shown_name(name),
            s.hit_rate * 100.0,
            opt(s.delta_pp_vs_lru, 1),
            gap(s),
            s.ttft_ms_mean,
            s.ttft_ms_p99,
            s.utilisation * 100.0,
            s.turn_ms_mean,
            s.throughput_tok_s,
            s.warmup_tokens,
            s.state_bytes_max,
            s.observe_us_per_event,
            s.score_us_per_item,
            s.evictions,
            rankings(name, s)
        ));
    }
    out
}

/// Hit rate per tenant and policy, for traces with more than one tenant (empty otherwise).
pub fn tenant_table(summaries: &[(String, PolicySummary)]) -> String {
    let Some((_, first)) = summaries.first() else {
        return String::new();
    };
    if first.tenants.len() < 2 {
        return String::new();
    }
    let mut out = format!("{:<16}", "hit % by tenant");
    for tenant in first.tenants.keys() {
        out.push_str(&format!(" {tenant:>12}"));
    }
    out.push('\n');
    for (name, s) in summaries {
        out.push_str(&format!("{name:<16}"));
        for t in s.tenants.values() {
            out.push_str(&format!(" {:>12.1}", t.hit_rate * 100.0));
        }
        out.push('\n');
    }
    out
}

/// A fixed-width table of one trace's results, and [`failure_notes`] under it.
pub fn table(summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:>7} {:>8} {:>6} {:>10} {:>10} {:>6} {:>10} {:>10} {:>10} {:>9} {:>9} {:>13} {:>10} {:>8} {:>8} {:>6} {:>8}\n",
        "policy",
        "hit %",
        "Δ pp",
        "gap",
        "TTFT ms",
        "TTFT p99",
        "util",
        "turn ms",
        "out tok/s",
        "warm tok",
        "state B",
        "obs µs/ev",
        "score µs/item",
        "evictions",
        "rankings",
        "fallback",
        "failed",
        "restarts"
    ));
    for (name, s) in summaries {
        if s.failed {
            out.push_str(&format!("{:<16} FAILED: no figures (below)\n", shown_name(name)));
            continue;
        }
        out.push_str(&format!(
            "{:<16} {:>7.1} {:>8} {:>6} {:>10.1} {:>10.1} {:>5.0}% {:>10.1} {:>10.0} {:>10} {:>9} {:>9.3} {:>13.3} {:>10} {:>8} {:>8} {:>6} {:>8}\n",
            shown_name(name),
            s.hit_rate * 100.0,
            opt(s.delta_pp_vs_lru, 1),
            gap(s),
            s.ttft_ms_mean,
            s.ttft_ms_p99,
            s.utilisation * 100.0,
            s.turn_ms_mean,
            s.throughput_tok_s,
            s.warmup_tokens,
            s.state_bytes_max,
            s.observe_us_per_event,
            s.score_us_per_item,
            s.evictions,
            rankings(name, s),
            s.fallbacks,
            s.failed_calls,
            s.restarts,
        ));
    }
    out.push_str(&failure_notes(summaries));
    out.push_str(&proves_nothing_notes(summaries));
    out
}

/// What each column of [`table`] and [`MARKDOWN_HEADER`]'s table means: a reader of a table
/// must not need the source to know what "gap" or "state B" is.
pub const LEGEND: &[(&str, &str)] = &[
    ("hit %", "prompt tokens served from the prefix cache, of all prompt tokens (each request at its first admission)"),
    ("Δ pp", "hit % minus LRU's, in percentage points"),
    ("gap", "the share of the distance from LRU to the offline bound this policy closed (100 % = as good as the bound; – when LRU is within 0.1 pp of it)"),
    ("belady (offline)", "Bélády's offline bound: evicts the block asked for furthest in the future, knowing the whole trace — the ceiling no online policy can pass, not a contender"),
    ("TTFT", "time to first token, mean and p99, ms of simulated time"),
    ("util", "share of the run the engine was busy"),
    ("turn ms", "a request from arrival to last token, ms of simulated time"),
    ("out tok/s", "generated tokens per simulated second"),
    ("warm tok", "prompt tokens warm-ups computed (prefetching anchors costs prefill)"),
    ("state B", "the policy's largest snapshot, bytes"),
    ("obs µs/ev, score µs/item", "wall time inside the policy per event delivered and per item ranked"),
    ("evictions", "blocks the engine evicted (0: the cache never filled, so every policy ties)"),
    ("rankings", "the policy's score calls (– for a native one; 0: it never ranked, so its figures are LRU's)"),
    ("fallback, failed, restarts", "rankings that fell back to LRU, failed policy calls, fresh instances after a failure"),
];

/// [`LEGEND`] as lines of text, for under a fixed-width table.
pub fn legend_text() -> String {
    LEGEND
        .iter()
        .map(|(term, meaning)| format!("  {term}: {meaning}\n"))
        .collect()
}

/// [`LEGEND`] as a Markdown list, for under a Markdown table.
pub fn legend_markdown() -> String {
    LEGEND
        .iter()
        .map(|(term, meaning)| format!("- **{term}**: {meaning}\n"))
        .collect()
}

/// The fixed-width table's name for a policy: Bélády is the offline bound, and says so.
fn shown_name(name: &str) -> String {
    if name == "belady" {
        "belady (offline)".to_string()
    } else {
        name.to_string()
    }
}

/// Score calls, or "–" for a policy the replay does not call (native LRU, Bélády: no events, no
/// rankings).
fn rankings(name: &str, s: &PolicySummary) -> String {
    if is_native(name, s) {
        "–".to_string()
    } else {
        s.score_calls.to_string()
    }
}

fn is_native(name: &str, s: &PolicySummary) -> bool {
    name == "belady" || name == "lru-native" || (s.events == 0 && s.score_calls == 0)
}

/// Warnings for a replay that proves nothing: a cache that never filled (no evictions under any
/// policy, so every policy ties on hit rate), and each policy that never ranked (its figures are
/// LRU's, whatever it would have done). Empty when the replay compared what it meant to.
pub fn proves_nothing_notes(summaries: &[(String, PolicySummary)]) -> String {
    if summaries.is_empty() {
        return String::new();
    }
    if summaries.iter().all(|(_, s)| s.evictions == 0) {
        return "! the cache never filled: no policy evicted a block, so every policy ties and this replay \
compares nothing — give a smaller --capacity-blocks (or leave it out to size the cache from the trace)\n"
            .to_string();
    }
    let mut out = String::new();
    let bound = summaries.iter().find(|(n, _)| n == "belady").map(|(_, s)| s);
    if let Some(bound) = bound {
        if bound.delta_pp_vs_lru.is_some_and(|d| d < 0.1) {
            out.push_str(
                "! LRU is within 0.1 pp of the offline bound at this cache: no policy can gain here, so this replay \
ranks nothing but noise — try a smaller cache or another trace\n",
            );
        }
    }
    for (name, s) in summaries {
        if is_native(name, s) || s.score_calls > 0 {
            continue;
        }
        out.push_str(&format!(
            "! {name} ranked nothing: 0 score calls in {} evictions, so its figures are LRU's, not its own\n",
            s.evictions
        ));
    }
    out
}

/// Where prompt tokens came from when a host tier was on (empty otherwise): GPU hits, host-tier
/// loads, recomputed, and the bytes moved.
pub fn host_table(summaries: &[(String, PolicySummary)]) -> String {
    if summaries.iter().all(|(_, s)| s.host.is_none()) {
        return String::new();
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let mut out = format!(
        "{:<16} {:>6} {:>9} {:>10} {:>10} {:>14} {:>10} {:>10} {:>8} {:>9} {:>14} {:>8} {:>9} {:>10} {:>10}\n",
        "host tier",
        "policy",
        "GPU hit %",
        "host hit %",
        "all hit %",
        "recomputed tok",
        "loaded GiB",
        "stored GiB",
        "loads",
        "warm load",
        "warm tok loaded",
        "refused",
        "declined",
        "evicted",
        "wait ms"
    );
    for (name, s) in summaries {
        let Some(h) = &s.host else { continue };
        out.push_str(&format!(
            "{:<16} {:>6} {:>9.1} {:>10.1} {:>10.1} {:>14} {:>10.2} {:>10.2} {:>8} {:>9} {:>14} {:>8} {:>9} {:>10} {:>10.2}\n",
            name,
            h.host_policy,
            h.gpu_hit_rate * 100.0,
            h.host_hit_rate * 100.0,
            (h.gpu_hit_rate + h.host_hit_rate) * 100.0,
            h.recomputed_tokens,
            gib(h.loaded_bytes),
            gib(h.stored_bytes),
            h.loads,
            h.warmup_loads,
            h.warmup_loaded_tokens,
            h.refused_offers,
            h.declined_blocks,
            h.host_evictions,
            h.load_wait_ms_mean
        ));
    }
    out
}

/// One line per policy that failed during the replay, saying how: a broken policy must not pass
/// for a weak one, and a run in which the policy failed has no figures.
pub fn failure_notes(summaries: &[(String, PolicySummary)]) -> String {
    let mut out = String::new();
    for (name, s) in summaries {
        if !s.failed && s.fallbacks == 0 {
            continue;
        }
        let how: Vec<String> = s.failures.iter().map(|(what, n)| format!("{what} ×{n}")).collect();
        out.push_str(&format!(
            "! {name}: FAILED — {} failed calls ({}), {} restarts; {} of {} rankings fell back to LRU",
            s.failed_calls,
            if how.is_empty() {
                "none".to_string()
            } else {
                how.join(", ")
            },
            s.restarts,
            s.fallbacks,
            s.score_calls,
        ));
        if s.gave_up {
            out.push_str(&format!(
                "; gave up on it after repeated failures ({} calls skipped)",
                s.calls_skipped
            ));
        }
        out.push('\n');
    }
    out
}

/// `Err` naming every policy whose replay failed, and what to do: a restart (any failed call)
/// loses what the policy learned, so such a run's figures are not the policy's and are not
/// reported as if they were. Commands call it after writing what they wrote.
pub fn failed_replays<'a>(summaries: impl IntoIterator<Item = &'a (String, PolicySummary)>) -> anyhow::Result<()> {
    let failed: Vec<String> = summaries
        .into_iter()
        .filter(|(_, s)| s.failed)
        .map(|(name, s)| {
            let how: Vec<String> = s.failures.iter().map(|(what, n)| format!("{what} ×{n}")).collect();
            format!("{name} ({})", how.join(", "))
        })
        .collect();
    anyhow::ensure!(
        failed.is_empty(),
        "{} replay(s) failed, their figures left out: {} — a call out of fuel or memory needs a larger \
         --policy-fuel or --policy-memory-mib; a trap or a wrong answer is the policy's to fix",
        failed.len(),
        failed.join("; ")
    );
    Ok(())
}
