//! Reading a request body to a deadline and within a byte budget.
//!
//! Once a request is authenticated its body used to be read with no time limit and no overall
//! byte bound: one tenant's 4,200 hint calls with a chunked body and no end held every
//! connection for 150 s, and 48 chat bodies of 16 MiB − 1 byte with the last byte withheld took
//! the proxy from 23 to 858 MB. So every body the proxy reads goes through [`read`]:
//!
//! - **time** ([`BodyTiming`]): no more than `idle` between two pieces of it, and after a grace
//!   of that same `idle`, an average of at least `min_bytes_per_s` — the body's deadline moves
//!   back by one second for every `min_bytes_per_s` bytes received. A body that misses either is
//!   [`BodyError::Stalled`] or [`BodyError::TooSlow`]; the caller answers 408 and closes.
//! - **bytes** ([`BodyBudget`]): the bytes of every body being read count against one budget for
//!   the process and one per tenant, whether or not anything else would let the request in. A
//!   body that announces its length is counted — or refused — whole before a byte is read; one
//!   that does not is counted piece by piece as it arrives, and refused at the piece that would
//!   pass a bound. What a [`BodyHold`] counts is given back when it is dropped, and when the
//!   bytes held fall to half of a large peak the allocator is asked to return the memory.
//!
//! A body of known length is read into one buffer of exactly that length; one of unknown length
//! is kept as the pieces it arrived in and joined once at the end, so a body never holds the
//! doubled capacity a growing buffer would.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;
use tokio::time::Instant;

/// How fast a body must arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTiming {
    /// The longest silence between two pieces of a body (and the grace before the rate counts).
    pub idle: Duration,
    /// The slowest average rate, in bytes per second, a body may arrive at once the grace is
    /// over; 0: no rate, only the idle bound.
    pub min_bytes_per_s: u64,
}

impl Default for BodyTiming {
    fn default() -> Self {
        Self {
            // As long as a connection has to send its headers: a client that is sending does so
            // in milliseconds, and one that stopped is found out within the same time.
            idle: Duration::from_secs(10),
            // 128 kbit/s: a 16 MiB body may take 17 minutes, a 16 KiB one 11 s.
            min_bytes_per_s: 16 << 10,
        }
    }
}

impl BodyTiming {
    /// When a body started at `started` must have delivered more than `received` bytes: the
    /// grace, plus a second for every `min_bytes_per_s` already received.
    fn rate_deadline(&self, started: Instant, received: usize) -> Option<Instant> {
        if self.min_bytes_per_s == 0 {
            return None;
        }
        let earned = Duration::from_secs_f64(received as f64 / self.min_bytes_per_s as f64);
        Some(started + self.idle + earned)
    }
}

/// Which bound of a [`BodyBudget`] a body would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exhausted {
    /// The tenant's own: its bodies being read already hold `limit` bytes between them.
    Tenant {
        /// The per-tenant bound, in bytes.
        limit: usize,
    },
    /// The process's: all bodies being read hold `limit` bytes between them.
    All {
        /// The process-wide bound, in bytes.
        limit: usize,
    },
}

/// The bytes of the bodies being read now, bounded in all and per tenant.
pub struct BodyBudget {
    total: usize,
    per_tenant: usize,
    held: Mutex<Held>,
    /// The most bytes held since memory was last given back.
    peak: AtomicUsize,
    refused_tenant: AtomicUsize,
    refused_all: AtomicUsize,
}

#[derive(Default)]
struct Held {
    all: usize,
    by_tenant: HashMap<Arc<str>, usize>,
}

/// Below this many bytes held at their peak, what the bodies held is not worth a heap walk.
const FLOOD_BYTES: usize = 64 << 20;

impl BodyBudget {
    /// A budget of `total` bytes for every body being read and `per_tenant` for one tenant's.
    pub fn new(total: usize, per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            total,
            per_tenant,
            held: Mutex::new(Held::default()),
            peak: AtomicUsize::new(0),
            refused_tenant: AtomicUsize::new(0),
            refused_all: AtomicUsize::new(0),
        })
    }

    /// A hold for one body of `tenant`, counted against the tenant's bound and the process's.
    pub fn hold(self: &Arc<Self>, tenant: &str) -> BodyHold {
        BodyHold {
            budget: self.clone(),
            tenant: Some(tenant.into()),
            bytes: 0,
        }
    }

    /// A hold counted against the process's bound only (an admin upload, bounded per tenant by
    /// its own rule).
    pub fn hold_untenanted(self: &Arc<Self>) -> BodyHold {
        BodyHold {
            budget: self.clone(),
            tenant: None,
            bytes: 0,
        }
    }

    /// The process-wide bound, in bytes.
    pub fn total(&self) -> usize {
        self.total
    }

    /// The per-tenant bound, in bytes.
    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    /// Bytes of bodies held now, in all.
    pub fn held(&self) -> usize {
        self.lock().all
    }

    /// Bytes of `tenant`'s bodies held now.
    pub fn held_by(&self, tenant: &str) -> usize {
        self.lock().by_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Bodies refused so far: (over a tenant's bound, over the process's).
    pub fn refused(&self) -> (usize, usize) {
        (self.refused_tenant.load(Relaxed), self.refused_all.load(Relaxed))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn grow(&self, tenant: Option<&Arc<str>>, bytes: usize) -> Result<(), Exhausted> {
        let mut held = self.lock();
        if let Some(tenant) = tenant {
            let own = held.by_tenant.get(tenant).copied().unwrap_or(0);
            if own + bytes > self.per_tenant {
                self.refused_tenant.fetch_add(1, Relaxed);
                return Err(Exhausted::Tenant { limit: self.per_tenant });
            }
        }
        if held.all + bytes > self.total {
            self.refused_all.fetch_add(1, Relaxed);
            return Err(Exhausted::All { limit: self.total });
        }
        held.all += bytes;
        if let Some(tenant) = tenant {
            *held.by_tenant.entry(tenant.clone()).or_insert(0) += bytes;
        }
        self.peak.fetch_max(held.all, Relaxed);
        Ok(())
    }

    fn give_back(&self, tenant: Option<&Arc<str>>, bytes: usize) {
        let all = {
            let mut held = self.lock();
            held.all -= bytes;
            if let Some(tenant) = tenant {
                if let Some(own) = held.by_tenant.get_mut(tenant) {
                    *own -= bytes;
                    if *own == 0 {
                        held.by_tenant.remove(tenant);
                    }
                }
            }
            held.all
        };
        // A flood of bodies went: one trim for the wave, as the accept loop does for connections.
        let peak = self.peak.load(Relaxed);
        if peak >= FLOOD_BYTES && all <= peak / 2 && self.peak.compare_exchange(peak, all, Relaxed, Relaxed).is_ok() {
            crate::freed_memory::trim_soon();
        }
    }
}

/// One body's bytes counted against a [`BodyBudget`]; dropping it gives them back.
pub struct BodyHold {
    budget: Arc<BodyBudget>,
    tenant: Option<Arc<str>>,
    bytes: usize,
}

impl BodyHold {
    /// Count `bytes` more, or refuse them (counting nothing) when a bound would be passed.
    pub fn grow(&mut self, bytes: usize) -> Result<(), Exhausted> {
        self.budget.grow(self.tenant.as_ref(), bytes)?;
        self.bytes += bytes;
        Ok(())
    }

    /// Bytes this hold counts now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for BodyHold {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give_back(self.tenant.as_ref(), self.bytes);
        }
    }
}

/// Why a body was not read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// It is (or says it is) longer than `limit` bytes.
    TooLarge {
        /// The caller's bound on this body, in bytes.
        limit: usize,
    },
    /// Counting it would pass a bound of the budget.
    OverBudget(Exhausted),
    /// Nothing of it arrived for `idle`.
    Stalled {
        /// The idle bound that passed.
        idle: Duration,
    },
    /// It arrived slower than the minimum rate: `received` bytes in `elapsed`.
    TooSlow {
        /// Bytes received by the deadline.
        received: usize,
        /// Time since its first byte was asked for.
        elapsed: Duration,
        /// The minimum rate, in bytes per second.
        min_bytes_per_s: u64,
    },
    /// The connection failed while it was read.
    Broken(String),
}

impl BodyError {
    /// The label `/metrics` counts this refusal under.
    pub fn reason(&self) -> &'static str {
        match self {
            BodyError::TooLarge { .. } => "too_large",
            BodyError::OverBudget(Exhausted::Tenant { .. }) => "tenant_budget",
            BodyError::OverBudget(Exhausted::All { .. }) => "budget",
            BodyError::Stalled { .. } => "stalled",
            BodyError::TooSlow { .. } => "too_slow",
            BodyError::Broken(_) => "broken",
        }
    }

    /// Whether the body missed its deadline (a 408 and a closed connection).
    pub fn timed_out(&self) -> bool {
        matches!(self, BodyError::Stalled { .. } | BodyError::TooSlow { .. })
    }
}

impl fmt::Display for BodyError {
    /// What went wrong, without the flags (each edge names its own).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge { limit } => write!(f, "the request body is larger than {limit} bytes"),
            BodyError::OverBudget(Exhausted::Tenant { limit }) => write!(
                f,
                "the tenant's request bodies being read already hold {} MiB, its limit",
                limit >> 20
            ),
            BodyError::OverBudget(Exhausted::All { limit }) => write!(
                f,
                "the request bodies being read already hold {} MiB, the proxy's limit",
                limit >> 20
            ),
            BodyError::Stalled { idle } => write!(
                f,
                "the request body stalled: nothing of it arrived for {} ms",
                idle.as_millis()
            ),
            BodyError::TooSlow {
                received,
                elapsed,
                min_bytes_per_s,
            } => write!(
                f,
                "the request body arrived too slowly: {received} bytes in {:.1} s, under {min_bytes_per_s} bytes/s",
                elapsed.as_secs_f64()
            ),
            BodyError::Broken(e) => write!(f, "reading the request body failed: {e}"),
        }
    }
}

/// Read `body` whole: at most `limit` bytes, every byte counted in `hold`, in time by `timing`.
/// The hold keeps counting the bytes after the read: drop it when they are let go.
pub async fn read<B>(body: B, limit: usize, hold: &mut BodyHold, timing: &BodyTiming) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: fmt::Display,
{
    let announced = body.size_hint().exact();
    if let Some(length) = announced {
        if length > limit as u64 {
            return Err(BodyError::TooLarge { limit });
        }
        hold.grow(length as usize).map_err(BodyError::OverBudget)?;
    }
    let mut pieces = Pieces::new(announced.map(|n| n as usize));
    let mut body = std::pin::pin!(body);
    let started = Instant::now();
    let mut last = started;
    loop {
        let idle_deadline = last + timing.idle;
        let deadline = timing
            .rate_deadline(started, pieces.len())
            .map_or(idle_deadline, |rate| rate.min(idle_deadline));
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(frame)) => frame.map_err(|e| BodyError::Broken(e.to_string()))?,
            Ok(None) => break,
            Err(_) if deadline == idle_deadline => return Err(BodyError::Stalled { idle: timing.idle }),
            Err(_) => {
                return Err(BodyError::TooSlow {
                    received: pieces.len(),
                    elapsed: started.elapsed(),
                    min_bytes_per_s: timing.min_bytes_per_s,
                })
            }
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers: nothing the proxy reads
        };
        if data.is_empty() {
            continue;
        }
        last = Instant::now();
        if pieces.len() + data.len() > limit {
            return Err(BodyError::TooLarge { limit });
        }
        if announced.is_none() {
            hold.grow(data.len()).map_err(BodyError::OverBudget)?;
        }
        pieces.push(data);
    }
    Ok(pieces.into_bytes())
}

/// A body's bytes as they arrive: one buffer of the announced length, or the pieces as they came.
enum Pieces {
    Sized(BytesMut),
    Unsized { pieces: Vec<Bytes>, len: usize },
}

impl Pieces {
    fn new(announced: Option<usize>) -> Self {
        match announced {
            Some(length) => Pieces::Sized(BytesMut::with_capacity(length)),
            None => Pieces::Unsized {
                pieces: Vec::new(),
                len: 0,
            },
        }
    }

    fn len(&self) -> usize {
        match self {
            Pieces::Sized(buffer) => buffer.len(),
            Pieces::Unsized { len, .. } => *len,
        }
    }

    fn push(&mut self, data: Bytes) {
        match self {
            Pieces::Sized(buffer) => buffer.extend_from_slice(&data),
            Pieces::Unsized { pieces, len } => {
                *len += data.len();
                pieces.push(data);
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Pieces::Sized(buffer) => buffer.freeze(),
            Pieces::Unsized { mut pieces, len } => match pieces.len() {
                0 => Bytes::new(),
                1 => pieces.pop().expect("one piece"),
                _ => {
                    let mut joined = BytesMut::with_capacity(len);
                    for piece in pieces {
                        joined.extend_from_slice(&piece);
                    }
                    joined.freeze()
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Frame;
    use http_body_util::Full;

    type Piece = Result<Frame<Bytes>, std::io::Error>;

    /// A body of unknown length whose pieces come from a channel, as a client sends them.
    struct Streamed(tokio::sync::mpsc::Receiver<Piece>);

    impl Body for Streamed {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Piece>> {
            self.0.poll_recv(cx)
        }
    }

    fn streamed() -> (tokio::sync::mpsc::Sender<Piece>, Streamed) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Piece>(16);
        (tx, Streamed(rx))
    }

    fn piece(n: usize) -> Piece {
        Ok(Frame::data(Bytes::from(vec![b'x'; n])))
    }

    fn timing(idle_ms: u64, rate: u64) -> BodyTiming {
        BodyTiming {
            idle: Duration::from_millis(idle_ms),
            min_bytes_per_s: rate,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_is_cut_at_the_idle_bound_and_its_bytes_given_back() {
        let budget = BodyBudget::new(1 << 20, 1 << 20);
        let mut hold = budget.hold("alice");
        let (tx, body) = streamed();
        tx.send(piece(100)).await.unwrap();
        let started = Instant::now();
        let e = read(body, 1 << 20, &mut hold, &timing(10_000, 0)).await.unwrap_err();
        assert_eq!(
            e,
            BodyError::Stalled {
                idle: Duration::from_secs(10)
            }
        );
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        assert_eq!((budget.held(), budget.held_by("alice")), (100, 100));
        drop(hold);
        assert_eq!((budget.held(), budget.held_by("alice")), (0, 0));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_drips_is_cut_at_the_rate_deadline() {
        let budget = BodyBudget::new(1 << 20, 1 << 20);
        let mut hold = budget.hold("alice");
        let (tx, body) = streamed();
        // 10 bytes every 5 s: never idle for 10 s, but far under 100 bytes/s.
        tokio::spawn(async move {
            loop {
                if tx.send(piece(10)).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        });
        let started = Instant::now();
        let e = read(body, 1 << 20, &mut hold, &timing(10_000, 100)).await.unwrap_err();
        let BodyError::TooSlow { received, elapsed, .. } = e else {
            panic!("{e:?}")
        };
        // The deadline is 10 s of grace plus 0.1 s per 10 bytes received.
        assert_eq!(received, 30);
        assert_eq!(started.elapsed(), Duration::from_millis(10_300));
        assert_eq!(elapsed, Duration::from_millis(10_300));
        assert!(e_message_names_the_rate(received));
    }

    fn e_message_names_the_rate(received: usize) -> bool {
        let e = BodyError::TooSlow {
            received,
            elapsed: Duration::from_millis(10_300),
            min_bytes_per_s: 100,
        };
        e.to_string().contains("30 bytes in 10.3 s, under 100 bytes/s")
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_is_read_whole() {
        let budget = BodyBudget::new(1 << 20, 1 << 20);
        let mut hold = budget.hold("alice");
        let (tx, body) = streamed();
        tokio::spawn(async move {
            for _ in 0..20 {
                tx.send(piece(200)).await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let bytes = read(body, 1 << 20, &mut hold, &timing(10_000, 100)).await.unwrap();
        assert_eq!(bytes.len(), 4000);
        assert_eq!(hold.bytes(), 4000);
    }

    #[tokio::test]
    async fn an_announced_length_is_counted_whole_before_a_byte_is_read() {
        let budget = BodyBudget::new(1000, 600);
        let mut first = budget.hold("alice");
        let body = read(
            Full::new(Bytes::from(vec![1u8; 500])),
            10_000,
            &mut first,
            &timing(1000, 0),
        )
        .await
        .unwrap();
        assert_eq!((body.len(), budget.held_by("alice")), (500, 500));
        let mut second = budget.hold("alice");
        let e = read(
            Full::new(Bytes::from(vec![1u8; 200])),
            10_000,
            &mut second,
            &timing(1000, 0),
        )
        .await
        .unwrap_err();
        assert_eq!(e, BodyError::OverBudget(Exhausted::Tenant { limit: 600 }));
        assert_eq!(e.reason(), "tenant_budget");
        let mut bobs = budget.hold("bob");
        read(
            Full::new(Bytes::from(vec![1u8; 450])),
            10_000,
            &mut bobs,
            &timing(1000, 0),
        )
        .await
        .unwrap();
        let mut carols = budget.hold("carol");
        let e = read(
            Full::new(Bytes::from(vec![1u8; 100])),
            10_000,
            &mut carols,
            &timing(1000, 0),
        )
        .await
        .unwrap_err();
        assert_eq!(e, BodyError::OverBudget(Exhausted::All { limit: 1000 }));
        assert_eq!(budget.refused(), (1, 1));
        let e = read(
            Full::new(Bytes::from(vec![1u8; 100])),
            99,
            &mut budget.hold("dan"),
            &timing(1000, 0),
        )
        .await
        .unwrap_err();
        assert_eq!(e, BodyError::TooLarge { limit: 99 });
        drop((first, bobs));
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_of_unknown_length_is_refused_at_the_piece_that_passes_a_bound() {
        let budget = BodyBudget::new(1 << 20, 250);
        let mut hold = budget.hold("alice");
        let (tx, body) = streamed();
        for _ in 0..3 {
            tx.send(piece(100)).await.unwrap();
        }
        let e = read(body, 1 << 20, &mut hold, &timing(1000, 0)).await.unwrap_err();
        assert_eq!(e, BodyError::OverBudget(Exhausted::Tenant { limit: 250 }));
        assert_eq!(
            hold.bytes(),
            200,
            "the pieces before it stay counted until the hold goes"
        );
        let mut upload = budget.hold_untenanted();
        upload.grow(1000).unwrap();
        assert_eq!((budget.held(), budget.held_by("alice")), (1200, 200));
    }
}
