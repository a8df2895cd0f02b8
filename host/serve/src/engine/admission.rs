//! The proxy's admission queue, for engines without priority scheduling
//! (`--upstream-max-in-flight N`): at most N requests are in flight upstream at once; later ones
//! wait here.
//!
//! **Between tenants, fair shares.** Each tenant waits in a line of its own, and a freed place
//! goes round the tenants with requests waiting, in proportion to their `admission_weight`
//! (1 unless `--config` gives one): the tenant that has had the fewest places per unit of weight
//! goes next (start-time fair queueing; a tenant that comes back after waiting for nothing starts
//! level with the others, not with credit saved up). One tenant keeping hundreds of requests
//! queued therefore takes its share and no more: before, a place went to whichever request came
//! first, and a tenant alone (p50 253 ms) waited out the 5 s limit behind another's backlog.
//!
//! **Within a tenant, its own order.** The tenant's place goes to its waiting request with the
//! smallest demotion (its session's `set-priority` from the tenant's slots when it arrived: a
//! demoted session waits behind the tenant's others), ties in arrival order — the order vLLM's
//! priority scheduling uses — and, at that demotion, to the request its `admission` slot scored
//! highest as a `request` item (ties to the earliest); the passed-over request takes the chosen
//! one's place in line. Scores and demotions never compare across tenants: a tenant's policies
//! reorder its own requests, never another tenant's. A slot that fails leaves arrival order.
//!
//! **Bounded.** A request waits at most `--upstream-max-wait-ms`; past it the client gets a 503
//! naming the flag, never a hang. The bodies waiting are bounded in bytes, in all and per tenant
//! (`--upstream-max-queued-mib`, `--upstream-max-queued-mib-per-tenant`): a request that would
//! pass either is refused at once with a 503 (15 MiB bodies cost 33 MB each in line before).
//! A body that may have to wait counts against the same caps from before its first byte is read
//! ([`AdmissionQueue::hold_reading`]) until it is parsed: 60 large bodies read at once while 8
//! waited took the proxy to 1,088 MB though 52 of them were then refused.
//! A client that leaves while waiting gives up its place in line; one that leaves after being
//! admitted gives its place on.
//!
//! Warm-ups and the proxy's `/tokenize` calls do not take places: they are not user traffic.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentrt_exposition::{Exposition, Report};
use tokio::sync::oneshot;

use crate::front::error::ApiError;

/// The largest demotion the queue tells apart (larger ones wait as this one).
const MAX_DEMOTION: u32 = 1_000_000;

/// What `/metrics` shows of the queue.
#[derive(Debug, Default)]
pub struct AdmissionMetrics {
    /// Requests that had to wait for a place.
    pub waited: AtomicU64,
    /// The sum of those requests' waits, in microseconds.
    pub wait_us_sum: AtomicU64,
    /// Requests refused after waiting `--upstream-max-wait-ms`.
    pub timeouts: AtomicU64,
    /// Requests whose client left while they waited.
    pub abandoned: AtomicU64,
    /// Admissions that went to a waiting request ahead of one of its tenant's that arrived
    /// earlier (a demotion or the admission slot at work).
    pub overtakes: AtomicU64,
    /// Requests refused at once: the queue held its bytes' worth of waiting bodies.
    pub refused_bytes: AtomicU64,
}

struct Inner {
    in_flight: usize,
    /// Tenant → its line; only tenants with requests waiting have one.
    lines: HashMap<Arc<str>, TenantLine>,
    /// Arrival numbers, in order for every tenant.
    next: u64,
    /// The fair-queueing clock: the tag of the tenant that got the last place.
    virtual_time: f64,
    /// Bytes of the bodies waiting, in all.
    queued_bytes: usize,
    /// Bytes of bodies being read (and parsed) while no place was free, in all and per tenant.
    reading_bytes: usize,
    reading_by_tenant: HashMap<Arc<str>, usize>,
}

/// Bytes of a body being read while the queue is full, counted against the queued-bytes caps
/// ([`AdmissionQueue::hold_reading`]); dropping it gives them back.
pub struct ReadingHold {
    queue: Arc<AdmissionQueue>,
    tenant: Arc<str>,
    bytes: usize,
}

impl Drop for ReadingHold {
    fn drop(&mut self) {
        let mut inner = self.queue.lock();
        inner.reading_bytes -= self.bytes;
        if let Some(held) = inner.reading_by_tenant.get_mut(&self.tenant) {
            *held -= self.bytes;
            if *held == 0 {
                inner.reading_by_tenant.remove(&self.tenant);
            }
        }
    }
}

/// One tenant's waiting requests.
struct TenantLine {
    /// Arrival number → the waiting request.
    waiting: BTreeMap<u64, Waiter>,
    /// Places given to the tenant, each worth 1 / its weight, counted from the clock it joined at.
    tag: f64,
    bytes: usize,
}

struct Waiter {
    demotion: u32,
    /// Its place in line among its tenant's requests of its demotion: its arrival number, or the
    /// place of a request of its tenant that was let through in its stead.
    place: u64,
    wake: oneshot::Sender<()>,
    score: f32,
    weight: u32,
    bytes: usize,
}

/// A request asking for a place: its session's demotion (0: not demoted), its tenant, its
/// tenant's `admission` slot's score for it (higher goes first among the tenant's own; 0 without
/// a slot), the tenant's admission weight and the bytes its body holds while it waits.
#[derive(Debug, Clone)]
pub struct Applicant {
    /// How far below 0 its session's `set-priority` put it (0: not demoted); higher waits
    /// behind its tenant's lower ones (any above 1,000,000 waits as 1,000,000).
    pub demotion: u32,
    /// The tenant whose line it waits in.
    pub tenant: Arc<str>,
    /// The tenant's `admission` slot's score for it: higher goes first among the tenant's
    /// requests of the same demotion.
    pub score: f32,
    /// The tenant's `admission_weight`: its share of freed places against other tenants'.
    pub weight: u32,
    /// Bytes of its body, counted against [`QueuedBytes`] while it waits.
    pub bytes: usize,
}

impl Applicant {
    /// An applicant of a tenant without an `admission` slot, of weight 1, holding no body.
    pub fn unscored(demotion: u32, tenant: &str) -> Self {
        Self {
            demotion,
            tenant: tenant.into(),
            score: 0.0,
            weight: 1,
            bytes: 0,
        }
    }
}

/// Bytes of waiting bodies the queue holds, in all and per tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedBytes {
    /// Bytes of every tenant's waiting bodies together (`--upstream-max-queued-mib`).
    pub total: usize,
    /// Bytes of one tenant's waiting bodies (`--upstream-max-queued-mib-per-tenant`).
    pub per_tenant: usize,
}

impl Default for QueuedBytes {
    fn default() -> Self {
        Self {
            total: 512 << 20,
            per_tenant: 128 << 20,
        }
    }
}

/// At most `max_in_flight` requests upstream; the rest wait, tenants taking turns.
pub struct AdmissionQueue {
    max_in_flight: usize,
    max_wait: Duration,
    max_queued: QueuedBytes,
    inner: Mutex<Inner>,
    /// What the queue has done so far, for `/metrics`.
    pub metrics: AdmissionMetrics,
}

/// A place upstream: given on to the next waiting request when dropped.
pub struct AdmissionPermit {
    queue: Arc<AdmissionQueue>,
}

impl Drop for AdmissionPermit {
    fn drop(&mut self) {
        self.queue.release();
    }
}

/// What joining the queue gave: a free place, or a place in line with its grant to wait for.
enum Joined {
    Admitted,
    InLine { key: u64, granted: oneshot::Receiver<()> },
}

/// A request in line; leaving the line (a dropped future) gives up the place, or gives it on if
/// it was granted meanwhile.
struct InLine<'a> {
    queue: &'a Arc<AdmissionQueue>,
    tenant: Arc<str>,
    key: u64,
    settled: bool,
}

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let granted = self.queue.lock().leave(&self.tenant, self.key).is_none();
        if granted {
            // Granted while leaving: the place is ours to give on.
            self.queue.release();
        } else {
            self.queue.metrics.abandoned.fetch_add(1, Relaxed);
        }
    }
}

impl Inner {
    /// Take `key` out of `tenant`'s line (`None`: it was not there — it was granted).
    fn leave(&mut self, tenant: &str, key: u64) -> Option<Waiter> {
        let line = self.lines.get_mut(tenant)?;
        let waiter = line.waiting.remove(&key)?;
        line.bytes -= waiter.bytes;
        self.queued_bytes -= waiter.bytes;
        if line.waiting.is_empty() {
            self.lines.remove(tenant);
        }
        Some(waiter)
    }

    fn waiting(&self) -> usize {
        self.lines.values().map(|l| l.waiting.len()).sum()
    }
}

impl AdmissionQueue {
    /// A queue letting `max_in_flight` requests (at least 1) upstream at once, where a request
    /// waits at most `max_wait`, holding the default [`QueuedBytes`] of waiting bodies.
    /// (The flags and the test harness use [`Self::with_queued_bytes`]; this module's tests use
    /// this one.)
    pub fn new(max_in_flight: usize, max_wait: Duration) -> Arc<Self> {
        Self::with_queued_bytes(max_in_flight, max_wait, QueuedBytes::default())
    }

    /// A queue that holds at most `max_queued` bytes of waiting bodies.
    pub fn with_queued_bytes(max_in_flight: usize, max_wait: Duration, max_queued: QueuedBytes) -> Arc<Self> {
        Arc::new(Self {
            max_in_flight: max_in_flight.max(1),
            max_wait,
            max_queued,
            inner: Mutex::new(Inner {
                in_flight: 0,
                lines: HashMap::new(),
                next: 0,
                virtual_time: 0.0,
                queued_bytes: 0,
                reading_bytes: 0,
                reading_by_tenant: HashMap::new(),
            }),
            metrics: AdmissionMetrics::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (requests in flight, requests waiting) now.
    pub fn depth(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.in_flight, inner.waiting())
    }

    /// Bytes of the bodies waiting now.
    pub fn queued_bytes(&self) -> usize {
        self.lock().queued_bytes
    }

    /// A place at once, if one is free: a caller that gets none scores its request, then waits
    /// in line with [`Self::admit`].
    pub fn try_admit(self: &Arc<Self>) -> Option<AdmissionPermit> {
        let mut inner = self.lock();
        (inner.in_flight < self.max_in_flight).then(|| {
            inner.in_flight += 1;
            AdmissionPermit { queue: self.clone() }
        })
    }

    /// Count `bytes` of `tenant`'s body, about to be read, against the queued-bytes caps while no
    /// place is free (it may have to wait): `None` while a place is free; a 503 at once, before a
    /// byte is read, when the bodies waiting and being read would pass either cap.
    pub fn hold_reading(self: &Arc<Self>, tenant: &str, bytes: usize) -> Result<Option<ReadingHold>, ApiError> {
        let mut inner = self.lock();
        if inner.in_flight < self.max_in_flight {
            return Ok(None);
        }
        let tenant: Arc<str> = Arc::from(tenant);
        let tenant_bytes = inner.lines.get(&tenant).map_or(0, |l| l.bytes)
            + inner.reading_by_tenant.get(&tenant).copied().unwrap_or(0);
        if inner.queued_bytes + inner.reading_bytes + bytes > self.max_queued.total
            || tenant_bytes + bytes > self.max_queued.per_tenant
        {
            drop(inner);
            return Err(self.refuse_for_bytes());
        }
        inner.reading_bytes += bytes;
        *inner.reading_by_tenant.entry(tenant.clone()).or_insert(0) += bytes;
        Ok(Some(ReadingHold {
            queue: self.clone(),
            tenant,
            bytes,
        }))
    }

    /// The 503 for a body the queue has no room for, counted.
    fn refuse_for_bytes(&self) -> ApiError {
        self.metrics.refused_bytes.fetch_add(1, Relaxed);
        ApiError::unavailable(format!(
            "the proxy's admission queue holds as many waiting request bodies as it may \
             (--upstream-max-queued-mib {}, --upstream-max-queued-mib-per-tenant {}); try again later",
            self.max_queued.total >> 20,
            self.max_queued.per_tenant >> 20
        ))
    }

    /// A place upstream for `applicant`: at once when one is free, else when its tenant's turn
    /// comes and it is the tenant's first in line (see the module's doc); a 503 after
    /// `max_wait`, or at once when its body would not fit in the bytes the queue may hold.
    pub async fn admit(self: &Arc<Self>, applicant: Applicant) -> Result<AdmissionPermit, ApiError> {
        let tenant = applicant.tenant.clone();
        match self.join(applicant)? {
            Joined::Admitted => Ok(AdmissionPermit { queue: self.clone() }),
            Joined::InLine { key, granted } => self.wait_in_line(tenant, key, granted).await,
        }
    }

    /// Takes a free place, or puts `applicant` in its tenant's line (refused when its bytes would
    /// not fit in what the queue may hold).
    fn join(&self, applicant: Applicant) -> Result<Joined, ApiError> {
        let mut inner = self.lock();
        if inner.in_flight < self.max_in_flight {
            inner.in_flight += 1;
            return Ok(Joined::Admitted);
        }
        let tenant = applicant.tenant;
        let tenant_bytes = inner.lines.get(&tenant).map_or(0, |l| l.bytes)
            + inner.reading_by_tenant.get(&tenant).copied().unwrap_or(0);
        if inner.queued_bytes + inner.reading_bytes + applicant.bytes > self.max_queued.total
            || tenant_bytes + applicant.bytes > self.max_queued.per_tenant
        {
            drop(inner);
            return Err(self.refuse_for_bytes());
        }
        let key = inner.next;
        inner.next += 1;
        let (wake, granted) = oneshot::channel();
        // A non-finite score is the lowest, as everywhere a policy scores.
        let score = if applicant.score.is_finite() {
            applicant.score
        } else {
            f32::MIN
        };
        let virtual_time = inner.virtual_time;
        inner.queued_bytes += applicant.bytes;
        let line = inner.lines.entry(tenant).or_insert_with(|| TenantLine {
            waiting: BTreeMap::new(),
            // Joining now: level with the clock, no credit for the time it waited for nothing.
            tag: virtual_time,
            bytes: 0,
        });
        line.bytes += applicant.bytes;
        line.waiting.insert(
            key,
            Waiter {
                demotion: applicant.demotion.min(MAX_DEMOTION),
                place: key,
                wake,
                score,
                weight: applicant.weight.max(1),
                bytes: applicant.bytes,
            },
        );
        Ok(Joined::InLine { key, granted })
    }

    /// Waits, at most `max_wait`, for the grant of the place `key` holds in `tenant`'s line.
    async fn wait_in_line(
        self: &Arc<Self>,
        tenant: Arc<str>,
        key: u64,
        mut granted: oneshot::Receiver<()>,
    ) -> Result<AdmissionPermit, ApiError> {
        let started = Instant::now();
        let mut line = InLine {
            queue: self,
            tenant: tenant.clone(),
            key,
            settled: false,
        };
        // `granted` outlives the wait: a grant sent as the wait runs out is received, not lost.
        let outcome = tokio::time::timeout(self.max_wait, &mut granted).await;
        let waited = started.elapsed();
        let admitted = match outcome {
            Ok(Ok(())) => true,
            // Out of time (a sender dropped unsent cannot happen: the queue holds it until it
            // sends). Granted between the timeout and this lock: the place is ours, use it.
            Ok(Err(_)) | Err(_) => self.lock().leave(&tenant, key).is_none(),
        };
        line.settled = true;
        self.metrics.waited.fetch_add(1, Relaxed);
        self.metrics.wait_us_sum.fetch_add(waited.as_micros() as u64, Relaxed);
        if admitted {
            Ok(AdmissionPermit { queue: self.clone() })
        } else {
            self.metrics.timeouts.fetch_add(1, Relaxed);
            Err(ApiError::unavailable(format!(
                "the upstream had {} requests in flight (--upstream-max-in-flight) and this one waited {} ms \
                 for a place (--upstream-max-wait-ms); try again later",
                self.max_in_flight,
                self.max_wait.as_millis()
            )))
        }
    }

    /// A place is free: it goes to the tenant with the smallest tag (ties: whose first request
    /// came first), to that tenant's request chosen as the module's doc says, and the tenant's
    /// tag moves on by 1 / its weight; with nobody waiting it is counted free. (A scan over the
    /// waiting tenants and the chosen one's line: as long as the clients waiting.)
    fn release(&self) {
        let mut inner = self.lock();
        loop {
            let Some(tenant) = inner
                .lines
                .iter()
                .min_by(|(_, a), (_, b)| {
                    let first = |l: &TenantLine| l.waiting.keys().next().copied().unwrap_or(u64::MAX);
                    a.tag.total_cmp(&b.tag).then(first(a).cmp(&first(b)))
                })
                .map(|(t, _)| t.clone())
            else {
                inner.in_flight = inner.in_flight.saturating_sub(1);
                return;
            };
            let line = inner.lines.get_mut(&tenant).expect("chosen from the lines");
            let (first, demotion) = line
                .waiting
                .iter()
                .min_by_key(|(_, w)| (w.demotion, w.place))
                .map(|(&id, w)| (id, w.demotion))
                .expect("a line has a request waiting");
            let chosen = line
                .waiting
                .iter()
                .filter(|(_, w)| w.demotion == demotion)
                .max_by(|(_, a), (_, b)| a.score.total_cmp(&b.score).then(b.place.cmp(&a.place)))
                .map(|(&id, _)| id)
                .expect("the first request in line is among them");
            let place = line.waiting[&chosen].place;
            if let Some(passed_over) = line.waiting.get_mut(&first) {
                passed_over.place = place;
            }
            let overtook = line.waiting.keys().any(|&earlier| earlier < chosen);
            let tag = line.tag;
            let waiter = inner.leave(&tenant, chosen).expect("chosen from the line");
            inner.virtual_time = tag;
            if let Some(line) = inner.lines.get_mut(&tenant) {
                line.tag = tag + 1.0 / f64::from(waiter.weight);
            }
            if waiter.wake.send(()).is_ok() {
                if overtook {
                    self.metrics.overtakes.fetch_add(1, Relaxed);
                }
                return;
            }
            // Its receiver is gone: the next one.
        }
    }
}

impl Report for AdmissionQueue {
    /// The queue's series for `/metrics`.
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        let (in_flight, waiting) = self.depth();
        let m = &self.metrics;
        out.gauge(
            "agentrt_proxy_admission_in_flight",
            "Requests upstream holding a place (--upstream-max-in-flight).",
            in_flight as u64,
        )?;
        out.gauge(
            "agentrt_proxy_admission_queue_depth",
            "Requests waiting in the proxy for a place upstream.",
            waiting as u64,
        )?;
        out.counter(
            "agentrt_proxy_admission_waited_total",
            "Requests that waited for a place.",
            m.waited.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_admission_wait_seconds_total",
            "Time requests spent waiting for a place.",
            m.wait_us_sum.load(Relaxed) as f64 / 1e6,
        )?;
        out.counter(
            "agentrt_proxy_admission_timeouts_total",
            "Requests refused after --upstream-max-wait-ms.",
            m.timeouts.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_admission_abandoned_total",
            "Requests whose client left while they waited.",
            m.abandoned.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_admission_overtakes_total",
            "Places given to a request ahead of an earlier one of its tenant (a demotion or the admission slot at work).",
            m.overtakes.load(Relaxed),
        )?;
        out.gauge(
            "agentrt_proxy_admission_queued_bytes",
            "Bytes of the request bodies waiting for a place.",
            self.queued_bytes() as u64,
        )?;
        out.counter(
            "agentrt_proxy_admission_refused_bytes_total",
            "Requests refused at once: the queue held as many waiting bodies as it may (--upstream-max-queued-mib, --upstream-max-queued-mib-per-tenant).",
            m.refused_bytes.load(Relaxed),
        )
    }
}

/// The admission queue's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct AdmissionArgs {
    /// At most this many requests in flight upstream at once; later ones wait in the proxy and
    /// are let through least-demoted first (the tenants' slots' `set-priority`), then in arrival
    /// order, a tenant's own reordered by its `admission` slot's scores — for engines without
    /// priority scheduling (docs/policy-slots.md). 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub upstream_max_in_flight: usize,
    /// How long a request may wait for a place (--upstream-max-in-flight) before it is answered
    /// 503.
    #[arg(long, default_value_t = 30_000)]
    pub upstream_max_wait_ms: u64,
    /// MiB of request bodies the admission queue holds waiting, in all; a request past it gets
    /// 503 at once.
    #[arg(long, default_value_t = QueuedBytes::default().total >> 20)]
    pub upstream_max_queued_mib: usize,
    /// MiB of request bodies one tenant may have waiting in the admission queue; past it, 503.
    #[arg(long, default_value_t = QueuedBytes::default().per_tenant >> 20)]
    pub upstream_max_queued_mib_per_tenant: usize,
    /// Hold whole agent sessions back in the proxy while the live sessions' contexts (idle ones
    /// included) overflow the engine's KV cache and holding pays — the engine's measured prefill
    /// of its whole cache takes longer than a session's typical pause; a held session's next
    /// call waits until there is room (docs/admission.md). `off` or `working-set`.
    #[arg(long, value_enum, default_value_t = SessionAdmissionMode::Off)]
    pub session_admission: SessionAdmissionMode,
    /// The engine's KV cache in tokens, for --session-admission. Default: read from the
    /// upstream's `/metrics` (vLLM's `vllm:cache_config_info`, SGLang's
    /// `sglang:max_total_num_tokens`); nothing is held until it is known.
    #[arg(long, value_name = "TOKENS")]
    pub kv_capacity_tokens: Option<u64>,
    /// The longest a held call waits (--session-admission), in ms; past it, it goes whatever the
    /// cache. A session's first call waits at most 30 s.
    #[arg(long, default_value_t = 600_000)]
    pub session_max_hold_ms: u64,
    /// A streamed call still held after this many ms (--session-admission) is answered at once
    /// (200, an event stream) and sent an SSE comment at this interval while it waits, so that
    /// no client read timeout ends it; the upstream's stream follows. 0: held calls send nothing
    /// until they go.
    #[arg(long, default_value_t = 15_000)]
    pub session_hold_keepalive_ms: u64,
}

/// `--session-admission`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAdmissionMode {
    /// Requests only: every session's calls go (the admission queue, if any, counts them).
    Off,
    /// Working-set admission: whole sessions held back past the engine's knee.
    WorkingSet,
}

/// What `--session-admission working-set` runs with.
#[derive(Debug, Clone)]
pub struct WorkingSetOptions {
    /// The decision's settings (the crate's defaults but the hold bounds).
    pub settings: agentrt_admission::Settings,
    /// `--kv-capacity-tokens`; `None`: read from the upstream.
    pub capacity_tokens: Option<u64>,
    /// `--session-hold-keepalive-ms`; `None`: off.
    pub keepalive: Option<Duration>,
}

impl AdmissionArgs {
    /// The queue the flags ask for, if any. Several replicas (`--replica`) are not limited yet.
    pub fn queue(&self, replicas: bool) -> anyhow::Result<Option<Arc<AdmissionQueue>>> {
        if self.upstream_max_in_flight == 0 {
            return Ok(None);
        }
        anyhow::ensure!(
            !replicas,
            "--upstream-max-in-flight limits one upstream; with --replica it is not supported yet"
        );
        anyhow::ensure!(self.upstream_max_wait_ms > 0, "--upstream-max-wait-ms must be above 0");
        anyhow::ensure!(
            self.upstream_max_queued_mib_per_tenant <= self.upstream_max_queued_mib,
            "--upstream-max-queued-mib-per-tenant is above --upstream-max-queued-mib"
        );
        Ok(Some(AdmissionQueue::with_queued_bytes(
            self.upstream_max_in_flight,
            Duration::from_millis(self.upstream_max_wait_ms),
            QueuedBytes {
                total: self.upstream_max_queued_mib << 20,
                per_tenant: self.upstream_max_queued_mib_per_tenant << 20,
            },
        )))
    }
}

impl AdmissionArgs {
    /// Working-set admission, when `--session-admission working-set` asks for it. One engine
    /// only: with several replicas each has its own cache.
    pub fn working_set(&self, replicas: bool) -> anyhow::Result<Option<WorkingSetOptions>> {
        if self.session_admission == SessionAdmissionMode::Off {
            return Ok(None);
        }
        anyhow::ensure!(
            !replicas,
            "--session-admission holds sessions against one engine's cache; with --replica it is not supported yet"
        );
        anyhow::ensure!(self.session_max_hold_ms > 0, "--session-max-hold-ms must be above 0");
        anyhow::ensure!(
            self.kv_capacity_tokens != Some(0),
            "--kv-capacity-tokens must be above 0 (leave it out to read the engine's /metrics)"
        );
        let defaults = agentrt_admission::Settings::default();
        let max_hold_us = self.session_max_hold_ms.saturating_mul(1000);
        Ok(Some(WorkingSetOptions {
            settings: agentrt_admission::Settings {
                max_hold_us,
                max_first_wait_us: defaults.max_first_wait_us.min(max_hold_us),
                ..defaults
            },
            capacity_tokens: self.kv_capacity_tokens,
            keepalive: (self.session_hold_keepalive_ms > 0)
                .then(|| Duration::from_millis(self.session_hold_keepalive_ms)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the one place held, `line` queues one after another (each in line before the next);
    /// then the place is freed: the names in the order they were let through.
    async fn order_let_through(queue: &Arc<AdmissionQueue>, line: Vec<(&'static str, Applicant)>) -> Vec<&'static str> {
        let held = queue.admit(Applicant::unscored(0, "holder")).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (name, applicant) in line {
            let (q, order) = (queue.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let permit = q.admit(applicant).await.unwrap();
                order.lock().unwrap().push(name);
                drop(permit);
            }));
            while queue.depth().1 < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        order
    }

    fn scored(demotion: u32, tenant: &str, score: f32) -> Applicant {
        Applicant {
            score,
            ..Applicant::unscored(demotion, tenant)
        }
    }

    #[tokio::test]
    async fn a_freed_place_goes_to_the_least_demoted_then_the_earliest() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        let line = vec![
            ("heavy-1", Applicant::unscored(10, "t")),
            ("heavy-2", Applicant::unscored(10, "t")),
            ("light", Applicant::unscored(0, "t")),
        ];
        assert_eq!(order_let_through(&queue, line).await, ["light", "heavy-1", "heavy-2"]);
        assert_eq!(queue.depth(), (0, 0));
        assert_eq!(queue.metrics.overtakes.load(Relaxed), 1, "light went ahead of two");
    }

    #[tokio::test]
    async fn a_request_waits_no_longer_than_the_limit_and_a_leaver_gives_up_its_place() {
        let queue = AdmissionQueue::new(1, Duration::from_millis(50));
        let held = queue.admit(Applicant::unscored(0, "t")).await.unwrap();
        let e = queue
            .admit(Applicant::unscored(0, "t"))
            .await
            .err()
            .expect("no place within 50 ms");
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("--upstream-max-wait-ms"), "{}", e.message);
        // A waiter dropped while in line leaves no trace.
        let leaving = tokio::time::timeout(Duration::from_millis(5), queue.admit(Applicant::unscored(0, "t"))).await;
        assert!(leaving.is_err());
        assert_eq!(queue.depth(), (1, 0));
        drop(held);
        assert_eq!(queue.depth(), (0, 0));
        let _again = queue.admit(Applicant::unscored(0, "t")).await.unwrap();
        assert_eq!(queue.metrics.timeouts.load(Relaxed), 1);
        assert_eq!(queue.metrics.abandoned.load(Relaxed), 1);
    }

    #[tokio::test]
    async fn a_tenants_slot_orders_its_own_requests_but_never_another_tenants() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        // In line: alpha's heavy call, beta's call, alpha's light call (alpha's slot scores the
        // light session higher), a demoted alpha call with the best score of all.
        let line = vec![
            ("alpha-heavy", scored(0, "alpha", -500.0)),
            ("beta", scored(0, "beta", 0.0)),
            ("alpha-light", scored(0, "alpha", -10.0)),
            ("alpha-demoted", scored(10, "alpha", 1e9)),
        ];
        // Alpha's turn (its heavy call was first in line) goes to its light call, and the heavy
        // call takes the light one's place: behind beta, which keeps its own; the demotion still
        // sends the best score last.
        assert_eq!(
            order_let_through(&queue, line).await,
            ["alpha-light", "beta", "alpha-heavy", "alpha-demoted"]
        );
    }
}

#[cfg(test)]
mod fairness {
    use super::*;

    /// `count` requests of each (tenant, weight) in line, one after another with the place held;
    /// then the place is freed: the tenants in the order they were let through.
    async fn turns(queue: &Arc<AdmissionQueue>, line: &[(&'static str, u32, usize)]) -> Vec<&'static str> {
        let held = queue.admit(Applicant::unscored(0, "holder")).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for &(tenant, weight, count) in line {
            for _ in 0..count {
                let (q, order) = (queue.clone(), order.clone());
                let applicant = Applicant {
                    weight,
                    ..Applicant::unscored(0, tenant)
                };
                tasks.push(tokio::spawn(async move {
                    let permit = q.admit(applicant).await.unwrap();
                    order.lock().unwrap().push(tenant);
                    drop(permit);
                }));
                while queue.depth().1 < tasks.len() {
                    tokio::task::yield_now().await;
                }
            }
        }
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let order = order.lock().unwrap().clone();
        order
    }

    #[tokio::test]
    async fn a_tenant_with_a_backlog_takes_turns_with_one_that_just_arrived() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        // Alpha has 6 waiting before beta's 2 arrive: beta still goes second and fourth.
        let order = turns(&queue, &[("alpha", 1, 6), ("beta", 1, 2)]).await;
        assert_eq!(
            order,
            ["alpha", "beta", "alpha", "beta", "alpha", "alpha", "alpha", "alpha"]
        );
    }

    #[tokio::test]
    async fn places_go_round_in_proportion_to_the_weights() {
        let queue = AdmissionQueue::new(1, Duration::from_secs(5));
        let order = turns(&queue, &[("alpha", 1, 4), ("beta", 3, 9)]).await;
        let first_eight: Vec<_> = order[..8].to_vec();
        let betas = first_eight.iter().filter(|t| **t == "beta").count();
        assert_eq!(betas, 6, "3 of every 4 places are beta's while both wait: {order:?}");
    }

    #[tokio::test]
    async fn waiting_bodies_are_bounded_in_all_and_per_tenant() {
        let queue = AdmissionQueue::with_queued_bytes(
            1,
            Duration::from_secs(5),
            QueuedBytes {
                total: 300,
                per_tenant: 200,
            },
        );
        let _held = queue.admit(Applicant::unscored(0, "holder")).await.unwrap();
        let body = |tenant: &str, bytes: usize| Applicant {
            bytes,
            ..Applicant::unscored(0, tenant)
        };
        let q = queue.clone();
        let waiting = tokio::spawn(async move { q.admit(body("alpha", 150)).await.map(|_| ()) });
        while queue.depth().1 < 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(queue.queued_bytes(), 150);
        let e = queue.admit(body("alpha", 100)).await.err().expect("alpha over its 200");
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            e.message.contains("--upstream-max-queued-mib-per-tenant"),
            "{}",
            e.message
        );
        let e = queue.admit(body("beta", 160)).await.err().expect("over the 300 in all");
        assert!(e.message.contains("--upstream-max-queued-mib"), "{}", e.message);
        assert_eq!(queue.metrics.refused_bytes.load(Relaxed), 2);
        waiting.abort();
        let _ = waiting.await;
        assert_eq!(queue.queued_bytes(), 0, "a request that left took its bytes with it");
    }

    #[tokio::test]
    async fn bodies_being_read_while_the_queue_is_full_count_against_its_caps() {
        let queue = AdmissionQueue::with_queued_bytes(
            1,
            Duration::from_secs(1),
            QueuedBytes {
                total: 300,
                per_tenant: 200,
            },
        );
        assert!(
            queue.hold_reading("a", 500).unwrap().is_none(),
            "a place is free: nothing held"
        );
        let _held = queue.admit(Applicant::unscored(0, "holder")).await.unwrap();
        let first = queue
            .hold_reading("a", 150)
            .unwrap()
            .expect("held while the queue is full");
        assert!(queue.hold_reading("a", 100).is_err(), "past a's 200");
        let other = queue.hold_reading("b", 150).unwrap();
        assert!(queue.hold_reading("c", 10).is_err(), "past the 300 in all");
        drop(first);
        drop(other);
        assert!(
            queue.hold_reading("a", 200).unwrap().is_some(),
            "given back when dropped"
        );
        assert_eq!(queue.metrics.refused_bytes.load(Relaxed), 2);
    }
}
