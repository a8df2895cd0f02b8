//! Shedding before the kernel runs out of memory for sockets.
//!
//! What a client that reads slowly costs is held in three places: the relay's queue (16 KiB,
//! [`crate::request`]), the HTTP server's write buffer, and the kernel's send buffer for the
//! connection. The first two are the proxy's; the third, capped per connection by
//! `--client-send-buffer-kib`, is the kernel's, counted against `net.ipv4.tcp_mem` for every
//! socket of the machine. Past that sysctl's *pressure* threshold the kernel shrinks buffers;
//! past its *max* it drops data and logs "TCP: out of memory" — which 5,000 slow-reading streams
//! made it do 29 times. So the proxy reads the kernel's figures every second (Linux:
//! `/proc/net/sockstat` and `/proc/sys/net/ipv4/tcp_mem`), and while the TCP memory in use is at
//! or above the pressure threshold a new model request gets 503 with `Retry-After` at once:
//! streams already open go on, new ones wait until the kernel has room. Elsewhere (no such
//! files) nothing is shed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use agentrt_exposition::{Exposition, Report};

use crate::front::error::ApiError;
use crate::front::overload::ShedRule;

/// How often the kernel's figures are read.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The kernel's TCP memory, in pages, as last read.
#[derive(Debug, Default)]
pub struct TcpMemory {
    in_use: AtomicU64,
    pressure: AtomicU64,
    max: AtomicU64,
    shed: AtomicU64,
}

impl TcpMemory {
    /// Read the kernel's figures now and every [`SAMPLE_EVERY`] on the current runtime, for as long
    /// as the returned value lives.
    pub fn start() -> Arc<Self> {
        let memory = Arc::new(Self::default());
        memory.sample();
        let weak: Weak<Self> = Arc::downgrade(&memory);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SAMPLE_EVERY).await;
                match weak.upgrade() {
                    Some(memory) => memory.sample(),
                    None => return,
                }
            }
        });
        memory
    }

    fn sample(&self) {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let in_use = read("/proc/net/sockstat").as_deref().and_then(tcp_pages_in_use);
        let limits = read("/proc/sys/net/ipv4/tcp_mem").as_deref().and_then(tcp_mem_limits);
        if let (Some(in_use), Some((pressure, max))) = (in_use, limits) {
            self.in_use.store(in_use, Relaxed);
            self.pressure.store(pressure, Relaxed);
            self.max.store(max, Relaxed);
        }
    }

    /// `Ok` to serve a new model request; the 503 to answer while the kernel's TCP memory is at
    /// or above its pressure threshold.
    pub fn admit(&self) -> Result<(), ApiError> {
        let (in_use, pressure) = (self.in_use.load(Relaxed), self.pressure.load(Relaxed));
        if pressure == 0 || in_use < pressure {
            return Ok(());
        }
        self.shed.fetch_add(1, Relaxed);
        Err(ApiError::unavailable(format!(
            "the machine's TCP memory is under pressure ({in_use} pages in use, pressure at {pressure}: \
             net.ipv4.tcp_mem), mostly replies waiting for clients that read slowly; send the request again \
             after Retry-After"
        )))
    }
}

/// Pages of TCP memory in use: the `mem` figure of `/proc/net/sockstat`'s `TCP:` line.
fn tcp_pages_in_use(sockstat: &str) -> Option<u64> {
    let line = sockstat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "mem" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// `tcp_mem`'s pressure and max thresholds, in pages (its three numbers: min, pressure, max).
fn tcp_mem_limits(tcp_mem: &str) -> Option<(u64, u64)> {
    let numbers: Vec<u64> = tcp_mem.split_whitespace().filter_map(|n| n.parse().ok()).collect();
    match numbers[..] {
        [_, pressure, max] => Some((pressure, max)),
        _ => None,
    }
}

impl Report for TcpMemory {
    fn report(&self, out: &mut Exposition<'_>) -> std::fmt::Result {
        out.gauge(
            "agentrt_proxy_tcp_memory_pages",
            "The machine's TCP memory in use, in pages (/proc/net/sockstat), read every second.",
            self.in_use.load(Relaxed),
        )?;
        out.gauge(
            "agentrt_proxy_tcp_memory_pressure_pages",
            "net.ipv4.tcp_mem's pressure threshold, in pages: new model requests are shed at or above it.",
            self.pressure.load(Relaxed),
        )?;
        out.counter(
            "agentrt_proxy_tcp_memory_shed_total",
            "Model requests answered 503 at once because the machine's TCP memory was under pressure.",
            self.shed.load(Relaxed),
        )
    }
}

/// New model requests are shed under pressure by the model routes' shedding layer
/// ([`crate::front::overload::shed`]).
impl ShedRule for TcpMemory {
    fn admit(&self) -> Result<(), ApiError> {
        TcpMemory::admit(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_figures_are_read_from_its_files() {
        let sockstat = "sockets: used 1021\nTCP: inuse 42 orphan 0 tw 11 alloc 58 mem 3071\nUDP: inuse 4 mem 2\n";
        assert_eq!(tcp_pages_in_use(sockstat), Some(3071));
        assert_eq!(tcp_mem_limits("283902\t378538\t567804\n"), Some((378538, 567804)));
        assert_eq!(tcp_pages_in_use("TCP: inuse 1\n"), None);
        assert_eq!(tcp_mem_limits("1 2"), None);
    }

    #[test]
    fn new_requests_are_shed_at_the_pressure_threshold_and_served_below_it() {
        let memory = TcpMemory::default();
        assert!(memory.admit().is_ok(), "no figures read: nothing shed");
        memory.pressure.store(1000, Relaxed);
        memory.in_use.store(999, Relaxed);
        assert!(memory.admit().is_ok());
        memory.in_use.store(1000, Relaxed);
        let e = memory.admit().unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(e.message.contains("net.ipv4.tcp_mem"), "{}", e.message);
        assert_eq!(memory.shed.load(Relaxed), 1);
    }

    #[test]
    fn on_linux_the_figures_are_there() {
        if !std::path::Path::new("/proc/net/sockstat").exists() {
            return;
        }
        let memory = TcpMemory::default();
        memory.sample();
        assert!(memory.pressure.load(Relaxed) > 0, "tcp_mem read");
    }
}
