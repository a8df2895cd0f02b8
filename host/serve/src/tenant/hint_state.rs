//! A tenant's lifecycle-hint state, owned by the tenant and gone with it (a tenant a reload
//! removes leaves none behind): its hint rate ([`Bucket`], `--hint-rate`), the sessions it closed,
//! its open tool waits and their return times ([`ReturnTimes`]), and its counters. What a hint
//! means and which policies hear it is [`crate::hints`]'s; this only keeps the tenant's part.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::hint_rate::Bucket;
use super::return_times::ReturnTimes;
use crate::table::LruTable;

/// Closed sessions one tenant remembers, so that closing one again is a duplicate.
pub const MAX_CLOSED_SESSIONS: usize = 65_536;

/// A counter's labels: the hint's kind, where it came from, what became of it.
pub type HintLabels = (&'static str, &'static str, &'static str);

/// One tenant's hint state.
pub struct HintState {
    /// Made at the first hint, at the proxy's `--hint-rate`.
    bucket: Mutex<Option<Bucket>>,
    sessions: Mutex<HintSessions>,
    counts: Mutex<BTreeMap<HintLabels, u64>>,
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

/// The sessions a tenant's hints are about.
pub struct HintSessions {
    /// Sessions closed and not reopened by a request since.
    pub closed: LruTable<u64, ()>,
    /// Open tool waits and the tools' learned return times.
    pub times: ReturnTimes,
}

impl Default for HintState {
    fn default() -> Self {
        Self {
            bucket: Mutex::new(None),
            sessions: Mutex::new(HintSessions {
                closed: LruTable::new(MAX_CLOSED_SESSIONS, usize::MAX),
                times: ReturnTimes::default(),
            }),
            counts: Mutex::default(),
            refused: Mutex::default(),
        }
    }
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl HintState {
    /// Take `n` hints from the tenant's rate (`rate` per second): `Err(Some(wait))` when they fit
    /// after `wait`, `Err(None)` when `n` is over the burst.
    pub fn take(&self, rate: f64, n: usize, now: Instant) -> Result<(), Option<Duration>> {
        let mut bucket = locked(&self.bucket);
        bucket.get_or_insert_with(|| Bucket::new(rate, now)).take(n, now)
    }

    /// The sessions its hints are about, locked.
    pub fn sessions(&self) -> MutexGuard<'_, HintSessions> {
        locked(&self.sessions)
    }

    /// Count a hint by its labels.
    pub fn count(&self, labels: HintLabels) {
        *locked(&self.counts).entry(labels).or_default() += 1;
    }

    /// Count a refused call or header by its reason.
    pub fn refuse(&self, reason: &'static str) {
        *locked(&self.refused).entry(reason).or_default() += 1;
    }

    /// Its hints counted, by labels.
    pub fn counts(&self) -> Vec<(HintLabels, u64)> {
        locked(&self.counts).iter().map(|(k, n)| (*k, *n)).collect()
    }

    /// Its refusals counted, by reason.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        locked(&self.refused).iter().map(|(k, n)| (*k, *n)).collect()
    }
}
