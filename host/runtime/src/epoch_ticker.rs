//! The thread that advances the engine's epoch, so that a guest call running past its deadline
//! is interrupted ([`crate::call_clock`] then decides whether it used its CPU allowance).
//!
//! The epoch only matters while guest code runs. A ticker that woke every millisecond forever
//! cost a serving host 6 % of its CPU samples at 3,000 req/s (docs/performance.md) and kept an
//! idle host awake, so the ticker parks while no call is in flight: every entry into guest code
//! holds a [`GuestEntry`], the first of which wakes it. It parks only after a tick in which no
//! call started and none was in flight, so a busy host (calls every few microseconds) keeps it
//! ticking and its calls never pay for waking it. The deadline guarantee is unchanged: a
//! call's deadline is counted from the epoch when it was armed, and while that call runs the
//! ticker ticks, so a guest that loops forever is stopped as before.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use wasmtime::Engine;

/// The shared state of one engine's ticker. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub(crate) struct EpochTicker {
    /// Guest entries in progress (low 32 bits) and entries ever begun (high 32 bits, wrapping),
    /// across every store of the engine: one atomic add per entry keeps both.
    entries: AtomicU64,
    /// The ticker is waiting (or about to wait) on `wake`; read by a call only to decide
    /// whether it must notify. Written under `lock`.
    parked: AtomicBool,
    stop: AtomicBool,
    /// Times the epoch was advanced, for tests and for seeing that an idle host stays asleep.
    ticks: AtomicU64,
    lock: Mutex<()>,
    wake: Condvar,
}

/// One guest entry in progress, in [`EpochTicker::entries`].
const IN_FLIGHT: u64 = 1;
/// One guest entry begun, in [`EpochTicker::entries`].
const BEGUN: u64 = 1 << 32;

/// Held while guest code may run (a call, or an instantiation that runs start functions).
#[must_use = "the ticker parks again once this is dropped"]
pub(crate) struct GuestEntry(Arc<EpochTicker>);

impl Drop for GuestEntry {
    fn drop(&mut self) {
        self.0.entries.fetch_sub(IN_FLIGHT, Ordering::SeqCst);
    }
}

impl EpochTicker {
    /// Start a ticker that advances `engine`'s epoch every `tick` while a call is in flight,
    /// until [`Self::stop`].
    pub(crate) fn spawn(engine: Engine, tick: Duration) -> Arc<Self> {
        let ticker = Arc::new(Self::default());
        let state = ticker.clone();
        std::thread::Builder::new()
            .name("agentrt-epoch".into())
            .spawn(move || state.run(&engine, tick))
            .expect("spawning the epoch ticker thread");
        ticker
    }

    /// Guest code is about to run: make sure the epoch advances until the entry is dropped.
    pub(crate) fn enter(self: &Arc<Self>) -> GuestEntry {
        // SeqCst with the ticker's `parked` store then `in_flight` load: either the ticker sees
        // this call and does not wait, or this call sees it parked and wakes it.
        self.entries.fetch_add(IN_FLIGHT | BEGUN, Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.wake.notify_one();
        }
        GuestEntry(self.clone())
    }

    /// Times the epoch has been advanced since the ticker started.
    pub(crate) fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// End the thread (within a tick, or at once if it is parked).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.wake.notify_one();
    }

    fn in_flight(&self) -> u64 {
        self.entries.load(Ordering::SeqCst) & (BEGUN - 1)
    }

    fn begun(&self) -> u64 {
        self.entries.load(Ordering::SeqCst) >> 32
    }

    fn run(&self, engine: &Engine, tick: Duration) {
        let mut begun = self.begun();
        while !self.stop.load(Ordering::SeqCst) {
            let now = self.begun();
            if now == begun {
                self.park_while_idle();
            }
            begun = self.begun();
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(tick);
            engine.increment_epoch();
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn park_while_idle(&self) {
        if self.in_flight() > 0 {
            return;
        }
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.parked.store(true, Ordering::SeqCst);
        while self.in_flight() == 0 && !self.stop.load(Ordering::SeqCst) {
            guard = self.wake.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        self.parked.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_epoch_stays_still_while_idle_and_advances_while_a_call_runs() {
        let ticker = EpochTicker::spawn(Engine::default(), Duration::from_millis(1));
        // Let it park, then watch it stay parked.
        std::thread::sleep(Duration::from_millis(20));
        let idle_from = ticker.ticks();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(ticker.ticks(), idle_from, "the epoch advanced with no call in flight");

        let entry = ticker.enter();
        wait_for("ticks during a call", || ticker.ticks() >= idle_from + 10);
        drop(entry);
        std::thread::sleep(Duration::from_millis(20));
        let after = ticker.ticks();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(ticker.ticks(), after, "the ticker did not park again after the call");
        ticker.stop();
    }

    #[test]
    fn many_short_calls_from_many_threads_never_leave_a_call_without_ticks() {
        let ticker = EpochTicker::spawn(Engine::default(), Duration::from_millis(1));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let ticker = ticker.clone();
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let _entry = ticker.enter();
                        if i % 50 == 0 {
                            // A long call: it must see the epoch move.
                            let from = ticker.ticks();
                            wait_for("ticks during a long call", || ticker.ticks() > from + 2);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        ticker.stop();
    }
}
