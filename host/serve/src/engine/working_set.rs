//! Working-set admission (`--session-admission working-set`): past the engine's knee the live
//! agent sessions' contexts no longer fit its KV cache together, and every session's next call
//! recomputes what was evicted while it waited for a tool. Counting requests
//! (`--upstream-max-in-flight`) cannot see it — the sessions being thrashed are idle. This
//! module holds whole *sessions* back instead: a held session's next call waits here until a
//! rebalance lets it go.
//!
//! The decision is the `agentrt-admission` crate's, the same the simulator runs (`agentrt sim
//! knee`); this module is its I/O:
//!
//! - **Calls**: every call of every tenant arrives ([`SessionAdmission::arrive`]) before the
//!   admission queue; a held one waits ([`HeldCall::wait`]) — bounded by `--session-max-hold-ms`
//!   (a session's first call by 30 s), so no session starves. Its end ([`LedgerCall`], carried
//!   by the request's finish guard) tells the decision the context size the usage says and, for
//!   a stream, the engine's prefill and decode time, from which it prices a recompute.
//! - **Session ends**: a closing (a framework's hint, ThunderAgent's `POST /programs/release`)
//!   takes the session out at once; an inferred end (idle, table full) unless a call is in
//!   flight ([`SessionAdmission::sessions_ended`], from the policy feed).
//! - **Rebalances**: a task runs them when due; the tenants' `admission` slots score the
//!   candidate sessions as `session` items (contract 0.5.0: higher = sooner back), then hear the
//!   `engine-capacity` event. Without a slot every score is 0: only the excess is held.
//! - **Sizes**: a call counts at its prompt as the proxy guesses it (bytes ÷ 4), scaled by what
//!   the engine's usage counted for the tenant's earlier prompts ([`PromptScale`], one a tenant:
//!   its prompts' mix is its own, and no tenant's prompts move another's sizes); answered, at the
//!   count.
//! - **Capacity**: `--kv-capacity-tokens`, else the upstream's `/metrics` (vLLM's
//!   `vllm:cache_config_info`: `num_gpu_blocks` × `block_size`; SGLang's
//!   `sglang:max_total_num_tokens`), read every 2 s until known, then every minute.
//!
//! Safe by construction: nothing is held until 32 answers have priced the engine's prefill, nor
//! while prefilling the whole cache takes less time than a session's typical pause (the tiny
//! model on CPU: ~0.3 s for its cache against pauses of seconds), nor while the working set fits.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use agentrt_admission::{Answered, Arrival, Candidate, CapacityReport, EngineNow, EvictionClass, Verdict, WorkingSet};
use agentrt_exposition::{Exposition, Report};
use agentrt_runtime::types::{EndReason, Event, Item};
use tokio::sync::{oneshot, Notify};

use crate::clock::Clock;
use crate::engine::admission::WorkingSetOptions;
use crate::engine::prompt_scale::PromptScale;
use crate::engine::upstream::Upstream;
use crate::identity::agent_api::Usage;
use crate::identity::Identity;
use crate::metrics::ProxyMetrics;
use crate::names::ADMISSION_SLOT;
use crate::tenant::{Tenant, Tenants};

/// How often the upstream's `/metrics` is read for the capacity: until it is known, and after.
const CAPACITY_RETRY: Duration = Duration::from_secs(2);
const CAPACITY_REFRESH: Duration = Duration::from_secs(60);

/// Working-set admission in front of one engine. Shared by the request path, the policy feed
/// and its two tasks (rebalances, capacity).
pub struct SessionAdmission {
    inner: Mutex<Inner>,
    clock: Clock,
    /// Something happened that may make a rebalance due.
    due: Notify,
    /// `--kv-capacity-tokens`: the upstream's `/metrics` is not read.
    fixed_capacity: Option<u64>,
    /// `--session-hold-keepalive-ms`, and the held streams kept alive.
    keepalive: Option<Duration>,
    kept_alive: AtomicU64,
}

struct Inner {
    decision: WorkingSet,
    /// Held calls, by session: woken when a rebalance lets their session go.
    held: HashMap<u64, Vec<oneshot::Sender<()>>>,
    /// Tenants as the decision numbers them (by name: a reloaded tenant keeps its number).
    tenant_ids: HashMap<String, u32>,
    /// The last `engine-capacity` the slots heard (told again only when it changes).
    told: Option<CapacityReport>,
    /// Arriving prompts' guessed sizes, as the engine counts them: a scale a tenant.
    prompt_scales: HashMap<u32, PromptScale>,
}

/// A held call: wait on it before going on.
pub struct HeldCall {
    admission: Arc<SessionAdmission>,
    session: u64,
    released: oneshot::Receiver<()>,
    bound: Duration,
    /// Let go (or past its bound): no longer withdrawn when dropped.
    settled: bool,
}

impl HeldCall {
    /// Until a rebalance lets the session go (at the latest its bound and a second: the
    /// rebalance that forces it is due then). Dropped before — its client left — the session
    /// stays held with no call waiting.
    pub async fn wait(mut self) {
        let bound = self.bound + Duration::from_secs(1);
        if tokio::time::timeout(bound, &mut self.released).await.is_err() {
            tracing::warn!(
                session = self.session,
                "a held call waited past its bound ({} ms) without a rebalance letting it go; it goes now",
                bound.as_millis()
            );
        }
        self.settled = true;
    }
}

impl Drop for HeldCall {
    fn drop(&mut self) {
        if !self.settled {
            self.admission.lock().decision.withdraw(self.session);
            self.admission.due.notify_one();
        }
    }
}

/// A call the decision counts as in the engine: carried by the request's finish guard, told
/// to the decision when the call ends.
pub struct LedgerCall {
    admission: Arc<SessionAdmission>,
    session: u64,
    tenant: u32,
    /// Its prompt as the proxy guessed it (bytes ÷ 4): the usage's count scales the tenant's later
    /// guesses.
    guessed_prompt: u32,
    /// When it went upstream, and when its first streamed piece came back.
    sent: Option<Instant>,
    first_piece: Option<Instant>,
}

impl LedgerCall {
    /// It goes upstream now.
    pub fn sent(&mut self) {
        self.sent = Some(Instant::now());
    }

    /// Its first streamed piece came back now (its prefill is over).
    pub fn first_piece(&mut self) {
        self.first_piece.get_or_insert_with(Instant::now);
    }

    /// It ended: answered (`ok`) with `usage`, or not.
    pub fn ended(self, ok: bool, usage: Option<&Usage>) {
        let LedgerCall {
            admission,
            session,
            tenant,
            guessed_prompt,
            sent,
            first_piece,
        } = self;
        let now = Instant::now();
        let now_us = admission.clock.now_us();
        let mut inner = admission.lock();
        let answer = usage.filter(|_| ok).and_then(|u| Some((u.prompt_tokens?, u)));
        if let Some((prompt, _)) = answer {
            inner
                .prompt_scales
                .entry(tenant)
                .or_default()
                .answered(guessed_prompt, prompt);
        }
        match (answer, sent, first_piece) {
            (Some((prompt, usage)), Some(sent), Some(first)) => {
                let output = usage.output_tokens.unwrap_or(0);
                inner.decision.answer(
                    &Answered {
                        session,
                        prompt_tokens: prompt,
                        cached_tokens: usage.cached_tokens.unwrap_or(0),
                        output_tokens: output,
                        prefill_us: first.saturating_duration_since(sent).as_micros() as u64,
                        decode_us: now.saturating_duration_since(first).as_micros() as u64,
                    },
                    now_us,
                );
            }
            // A reply read whole: its size, not its timing (the first token is not seen).
            (Some((prompt, usage)), _, _) => {
                let context = prompt.saturating_add(usage.output_tokens.unwrap_or(0));
                inner.decision.ended(session, Some(context), now_us);
            }
            (None, _, _) => inner.decision.ended(session, None, now_us),
        }
        drop(inner);
        admission.due.notify_one();
    }
}

impl SessionAdmission {
    /// Working-set admission as `options` say, its events stamped by `clock`; the capacity is
    /// `--kv-capacity-tokens`, else read from the upstream once [`Self::start`] runs.
    pub fn new(options: WorkingSetOptions, clock: Clock) -> Arc<Self> {
        let WorkingSetOptions {
            settings,
            capacity_tokens: fixed_capacity,
            keepalive,
        } = options;
        let mut decision = WorkingSet::new(settings);
        if let Some(tokens) = fixed_capacity {
            decision.set_capacity(tokens);
        }
        Arc::new(Self {
            inner: Mutex::new(Inner {
                decision,
                held: HashMap::new(),
                tenant_ids: HashMap::new(),
                told: None,
                prompt_scales: HashMap::new(),
            }),
            clock,
            due: Notify::new(),
            fixed_capacity,
            keepalive,
            kept_alive: AtomicU64::new(0),
        })
    }

    /// How often a held stream hears from the proxy while it waits (`None`: it does not).
    pub fn keepalive(&self) -> Option<Duration> {
        self.keepalive
    }

    /// A held stream was answered at once, to be kept alive while it waits.
    pub fn count_kept_alive(&self) {
        self.kept_alive.fetch_add(1, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call of `identity`'s session (agent handle `agent`) of `tenant` arrives: `None` if it
    /// goes now, else the hold it waits on. Either way the call is in the ledger until its
    /// [`LedgerCall`] ends.
    pub fn arrive(
        self: &Arc<Self>,
        tenant: &Tenant,
        identity: &Identity,
        agent: u32,
    ) -> (LedgerCall, Option<HeldCall>) {
        let now_us = self.clock.now_us();
        let mut inner = self.lock();
        let next_id = inner.tenant_ids.len() as u32;
        let tenant_id = *inner.tenant_ids.entry(tenant.name.clone()).or_insert(next_id);
        let weight = f64::from(tenant.quotas.get().admission_weight);
        inner.decision.set_tenant_weight(tenant_id, weight);
        let scale = inner.prompt_scales.entry(tenant_id).or_default();
        let (anchor_tokens, prompt_tokens) = (scale.scale(identity.anchor_tokens), scale.scale(identity.prompt_tokens));
        let verdict = inner.decision.arrive(
            &Arrival {
                session: identity.session,
                tenant: tenant_id,
                agent,
                anchor_hash: identity.anchor_hash,
                anchor_tokens,
                prompt_tokens,
            },
            now_us,
        );
        let held = (verdict == Verdict::Hold).then(|| {
            let (wake, released) = oneshot::channel();
            inner.held.entry(identity.session).or_default().push(wake);
            let first = inner
                .decision
                .ledger()
                .get(identity.session)
                .is_some_and(|s| s.first_call);
            let settings = inner.decision.settings();
            let bound_us = if first {
                settings.max_first_wait_us
            } else {
                settings.max_hold_us
            };
            HeldCall {
                admission: self.clone(),
                session: identity.session,
                released,
                bound: Duration::from_micros(bound_us),
                settled: false,
            }
        });
        drop(inner);
        self.due.notify_one();
        let call = LedgerCall {
            admission: self.clone(),
            session: identity.session,
            tenant: tenant_id,
            guessed_prompt: identity.prompt_tokens,
            sent: None,
            first_piece: None,
        };
        (call, held)
    }

    /// What the engine's ranker does with each of `sessions`' blocks (held sessions' first).
    pub fn eviction_classes(&self, sessions: impl Iterator<Item = u64>) -> Vec<EvictionClass> {
        let inner = self.lock();
        sessions.map(|s| inner.decision.eviction_class(s)).collect()
    }

    /// Sessions `events` report ended: a closing takes its session out at once; an inferred end
    /// (idle, the table full) unless one of its calls is in flight or waiting.
    pub fn sessions_ended(&self, events: &[Event]) {
        let now_us = self.clock.now_us();
        let mut ended = false;
        let mut inner = self.lock();
        for event in events {
            if let Event::SessionEnd(end) = event {
                ended = true;
                if end.reason == EndReason::Closed {
                    inner.decision.close(end.session, now_us);
                } else {
                    inner.decision.idle_end(end.session, now_us);
                }
            }
        }
        drop(inner);
        if ended {
            self.due.notify_one();
        }
    }

    /// Start the rebalances (scored by `tenants`' admission slots, told through their policies)
    /// and, without `--kv-capacity-tokens`, the capacity's reads from `upstream`. `metrics` gives
    /// the calls in flight: the engine's load as the proxy sees it.
    pub fn start(self: &Arc<Self>, tenants: Arc<Tenants>, upstream: Upstream, metrics: Arc<ProxyMetrics>) {
        tokio::spawn(self.clone().rebalances(tenants, metrics));
        if self.fixed_capacity.is_none() {
            tokio::spawn(self.clone().read_capacity(upstream));
        }
    }

    async fn rebalances(self: Arc<Self>, tenants: Arc<Tenants>, metrics: Arc<ProxyMetrics>) {
        loop {
            let next = self.lock().decision.next_due_us();
            let wait = next.map_or(Duration::from_secs(1), |at| {
                Duration::from_micros(at.saturating_sub(self.clock.now_us()))
            });
            tokio::select! {
                () = self.due.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
            let now_us = self.clock.now_us();
            let (candidates, tenant_ids) = {
                let inner = self.lock();
                if !inner.decision.due(now_us) {
                    continue;
                }
                (inner.decision.candidates(), inner.tenant_ids.clone())
            };
            let scores = scores(&tenants, &tenant_ids, candidates).await;
            let engine = EngineNow {
                running: metrics.in_flight.load(std::sync::atomic::Ordering::Relaxed) as u32,
                waiting: 0,
            };
            let (woken, report) = {
                let mut inner = self.lock();
                let released = inner.decision.rebalance(self.clock.now_us(), engine, &scores);
                let woken: Vec<_> = released.iter().filter_map(|s| inner.held.remove(s)).flatten().collect();
                let report = inner.decision.capacity_report();
                let changed = inner.told.replace(report) != Some(report);
                (woken, changed.then_some(report))
            };
            for wake in woken {
                let _ = wake.send(());
            }
            if let Some(report) = report {
                tell_capacity(&tenants, &tenant_ids, report, self.clock.now_us());
            }
        }
    }

    async fn read_capacity(self: Arc<Self>, upstream: Upstream) {
        let mut warned = false;
        loop {
            let known = match engine_capacity(&upstream).await {
                Ok(tokens) => {
                    let mut inner = self.lock();
                    if inner.decision.capacity_tokens() != tokens {
                        tracing::info!(
                            "working-set admission: the engine's KV cache holds {tokens} tokens (its /metrics)"
                        );
                        inner.decision.set_capacity(tokens);
                    }
                    true
                }
                Err(why) => {
                    if !warned {
                        warned = true;
                        tracing::warn!(
                            "working-set admission holds nothing until it knows the engine's KV capacity: {why}; \
                             asking again every {} s, or give it with --kv-capacity-tokens",
                            CAPACITY_RETRY.as_secs()
                        );
                    }
                    self.lock().decision.capacity_tokens() > 0
                }
            };
            tokio::time::sleep(if known { CAPACITY_REFRESH } else { CAPACITY_RETRY }).await;
        }
    }
}

/// The engine's KV capacity in tokens, from its `/metrics`.
async fn engine_capacity(upstream: &Upstream) -> Result<u64, String> {
    let bytes = upstream.get_body("/metrics").await?;
    capacity_in_metrics(&String::from_utf8_lossy(&bytes)).ok_or_else(|| {
        "its /metrics has neither vllm:cache_config_info (num_gpu_blocks, block_size) nor sglang:max_total_num_tokens"
            .to_string()
    })
}

/// The KV capacity in tokens a Prometheus page states: vLLM's `vllm:cache_config_info` labels
/// `num_gpu_blocks` × `block_size`, or SGLang's `sglang:max_total_num_tokens` gauge.
pub fn capacity_in_metrics(page: &str) -> Option<u64> {
    for line in page.lines() {
        if let Some(labels) = line.strip_prefix("vllm:cache_config_info{") {
            let blocks: Option<u64> = label(labels, "num_gpu_blocks").and_then(|v| v.parse().ok());
            let size: Option<u64> = label(labels, "block_size").and_then(|v| v.parse().ok());
            if let (Some(blocks), Some(size)) = (blocks, size) {
                return Some(blocks * size).filter(|&t| t > 0);
            }
        }
        if line.starts_with("sglang:max_total_num_tokens") {
            let value: Option<f64> = line.rsplit(' ').next().and_then(|v| v.parse().ok());
            if let Some(tokens) = value.filter(|v| v.is_finite() && *v >= 1.0) {
                return Some(tokens as u64);
            }
        }
    }
    None
}

/// The value of label `name` in a series' label text (`a="1",b="2"}…`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let rest = &labels[start..];
    Some(&rest[..rest.find('"')?])
}

/// The candidates' scores by their tenants' `admission` slots (as `session` items); 0 for a
/// tenant without the slot or whose call fails.
async fn scores(tenants: &Tenants, tenant_ids: &HashMap<String, u32>, candidates: Vec<Candidate>) -> HashMap<u64, f32> {
    let mut by_tenant: HashMap<u32, Vec<Candidate>> = HashMap::new();
    for c in candidates {
        by_tenant.entry(c.tenant).or_default().push(c);
    }
    let mut scores = HashMap::new();
    for (name, id) in tenant_ids {
        let Some(candidates) = by_tenant.remove(id) else {
            continue;
        };
        let Some(slot) = tenants.get(name).and_then(|t| t.slot(ADMISSION_SLOT).cloned()) else {
            continue;
        };
        let items: Vec<Item> = candidates.iter().map(Candidate::item).collect();
        let span = tracing::info_span!("policy.score", tenant = %name, slot = ADMISSION_SLOT, items = items.len());
        // A policy call, off the async workers.
        let scored = tokio::task::spawn_blocking(move || span.in_scope(|| slot.score_typed(&items))).await;
        if let Ok(Ok(values)) = scored {
            scores.extend(candidates.iter().map(|c| c.session).zip(values));
        }
    }
    scores
}

/// Tell every tenant the decision numbers the engine's capacity and load (`engine-capacity`).
fn tell_capacity(tenants: &Tenants, tenant_ids: &HashMap<String, u32>, r: CapacityReport, at_us: u64) {
    let event = r.event(at_us);
    for name in tenant_ids.keys() {
        if let Some(tenant) = tenants.get(name) {
            tenant.observe(vec![event.clone()]);
        }
    }
}

impl Report for SessionAdmission {
    /// Working-set admission's series for `/metrics`.
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        let inner = self.lock();
        let d = &inner.decision;
        let r = d.capacity_report();
        let f = d.figures();
        out.gauge(
            "agentrt_admission_capacity_tokens",
            "The engine's KV cache in tokens, as working-set admission knows it (0: not known yet; nothing is held).",
            r.capacity_tokens,
        )?;
        out.gauge(
            "agentrt_admission_working_set_tokens",
            "Tokens the resident sessions need cached: their contexts, each agent's anchor once, room for running calls' answers.",
            r.resident_tokens,
        )?;
        out.gauges(
            "agentrt_admission_sessions",
            "Live sessions: resident (their calls go to the engine) and held (their calls wait in the proxy).",
            [
                ([("state", "resident")], u64::from(r.resident_sessions)),
                ([("state", "held")], u64::from(r.held_sessions)),
            ],
        )?;
        out.gauge(
            "agentrt_admission_holding_pays",
            "1 when holding sessions pays on this engine now: prefilling its whole cache takes longer than a session's median pause.",
            u64::from(d.holding_pays()),
        )?;
        out.gauge(
            "agentrt_admission_prefill_us_per_ktoken",
            "The engine's measured prefill time per 1,000 uncached prompt tokens, in µs (0 until measured from streamed answers).",
            u64::from(r.prefill_us_per_ktoken),
        )?;
        out.counter(
            "agentrt_admission_holds_total",
            "Sessions put on hold (a session held twice counts twice).",
            f.holds,
        )?;
        out.counter(
            "agentrt_admission_resumes_total",
            "Held calls let go by a rebalance.",
            f.resumes,
        )?;
        out.counter(
            "agentrt_admission_forced_resumes_total",
            "Held calls let go because they reached their bound (--session-max-hold-ms; a session's first call: 30 s).",
            f.forced_resumes,
        )?;
        out.counter(
            "agentrt_admission_held_wait_seconds_total",
            "Time calls spent held.",
            f.wait_us_sum as f64 / 1e6,
        )?;
        out.gauge(
            "agentrt_admission_held_wait_max_seconds",
            "The longest any call waited held.",
            f.max_wait_us as f64 / 1e6,
        )?;
        out.counter(
            "agentrt_admission_held_streams_kept_alive_total",
            "Streamed calls still held after --session-hold-keepalive-ms: answered at once and sent SSE comments while they waited.",
            self.kept_alive.load(Relaxed),
        )?;
        out.counter("agentrt_admission_rebalances_total", "Rebalances run.", f.rebalances)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_is_read_from_either_engines_metrics() {
        // vLLM 0.32's line (labels from its CacheConfig, in its order).
        let vllm = "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
            # TYPE vllm:cache_config_info gauge\n\
            vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",\
            gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"300\"} 1.0\n";
        assert_eq!(capacity_in_metrics(vllm), Some(4_800));
        let sglang = "sglang:max_total_num_tokens{model_name=\"m\"} 120000.0\n";
        assert_eq!(capacity_in_metrics(sglang), Some(120_000));
        // Not yet known (a vLLM whose cache is not profiled says None) or absent: nothing.
        let unknown = "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"None\"} 1.0\n";
        assert_eq!(capacity_in_metrics(unknown), None);
        assert_eq!(capacity_in_metrics("vllm:num_requests_running 0\n"), None);
    }
}
