//! Per-tenant quotas: what one tenant may use of the proxy, its policy's thread and the engine's
//! warm-up capacity. A tenant past a quota gets a clear error (429) or a throttled side effect,
//! never another tenant's capacity. The values change on a reload ([`crate::tenant::settings`]):
//! each live tenant holds them in [`LiveQuotas`], which every check reads.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::Instant;

/// Requests one tenant may have in flight by default: a quarter of the default connection cap, so
/// that one tenant cannot hold every connection's worth of upstream work.
pub const DEFAULT_MAX_IN_FLIGHT: u64 = 1024;
/// Policy time one tenant may spend per second on the request path: half a core. Past it, its
/// events are dropped and its `act` answers nothing until the budget refills.
pub const DEFAULT_CPU_MS_PER_S: u32 = 500;
/// Prompt tokens of warm-ups one tenant may send per second: a few anchors of a few thousand
/// tokens each — what prefetching the next agents of a busy workflow needs, and a small part of
/// what one CPU-or-GPU engine prefills per second, so one tenant's warm-ups cannot crowd out
/// everyone's requests.
pub const DEFAULT_WARMUP_TOKENS_PER_S: u64 = 20_000;

/// Where a tenant's in-flight limit was set: the 429 it causes names that place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LimitSource {
    /// `--tenant-max-in-flight` (on the command line or in `[serve]`), or its default.
    #[default]
    Flag,
    /// `max-in-flight` in the config file's `[defaults]`.
    FileDefaults,
    /// `max-in-flight` in the tenant's own `[tenants.NAME]`.
    FileTenant,
}

impl LimitSource {
    /// The setting as an operator would look for it, for `tenant`.
    pub fn describe(self, tenant: &str) -> String {
        match self {
            LimitSource::Flag => "--tenant-max-in-flight".to_string(),
            LimitSource::FileDefaults => "`max-in-flight` in [defaults] of the --config file".to_string(),
            LimitSource::FileTenant => format!("`max-in-flight` in [tenants.{tenant}] of the --config file"),
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn of_code(code: u8) -> Self {
        match code {
            1 => LimitSource::FileDefaults,
            2 => LimitSource::FileTenant,
            _ => LimitSource::Flag,
        }
    }
}

/// One tenant's quotas; 0 means no limit for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Requests in flight; more get 429 before their body is read.
    pub max_in_flight: u64,
    /// Where `max_in_flight` was set.
    pub max_in_flight_from: LimitSource,
    /// Milliseconds of policy calls per second of wall time.
    pub policy_cpu_ms_per_s: u32,
    /// Prompt tokens of warm-ups per second.
    pub warmup_tokens_per_s: u64,
    /// The tenant's weight in the admission queue (`--upstream-max-in-flight`): freed places go
    /// round the waiting tenants in proportion to their weights. At least 1.
    pub admission_weight: u32,
}

/// The largest admission weight a tenant may have.
pub const MAX_ADMISSION_WEIGHT: u32 = 1000;

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_in_flight_from: LimitSource::Flag,
            policy_cpu_ms_per_s: DEFAULT_CPU_MS_PER_S,
            warmup_tokens_per_s: DEFAULT_WARMUP_TOKENS_PER_S,
            admission_weight: 1,
        }
    }
}

/// A live tenant's quotas, changed in place by a reload and read by every check.
#[derive(Debug)]
pub struct LiveQuotas {
    max_in_flight: AtomicU64,
    max_in_flight_from: AtomicU8,
    policy_cpu_ms_per_s: AtomicU32,
    warmup_tokens_per_s: AtomicU64,
    admission_weight: AtomicU32,
}

impl LiveQuotas {
    /// Live quotas starting at `quotas`.
    pub fn new(quotas: Quotas) -> Self {
        Self {
            max_in_flight: AtomicU64::new(quotas.max_in_flight),
            max_in_flight_from: AtomicU8::new(quotas.max_in_flight_from.code()),
            policy_cpu_ms_per_s: AtomicU32::new(quotas.policy_cpu_ms_per_s),
            warmup_tokens_per_s: AtomicU64::new(quotas.warmup_tokens_per_s),
            admission_weight: AtomicU32::new(quotas.admission_weight),
        }
    }

    /// Replace every quota (a reload); each check from now on reads the new values. Each quota
    /// is stored on its own, so a check racing the reload may see old and new ones mixed.
    pub fn set(&self, quotas: Quotas) {
        self.max_in_flight.store(quotas.max_in_flight, Relaxed);
        self.max_in_flight_from.store(quotas.max_in_flight_from.code(), Relaxed);
        self.policy_cpu_ms_per_s.store(quotas.policy_cpu_ms_per_s, Relaxed);
        self.warmup_tokens_per_s.store(quotas.warmup_tokens_per_s, Relaxed);
        self.admission_weight.store(quotas.admission_weight, Relaxed);
    }

    /// The quotas now.
    pub fn get(&self) -> Quotas {
        Quotas {
            max_in_flight: self.max_in_flight.load(Relaxed),
            max_in_flight_from: LimitSource::of_code(self.max_in_flight_from.load(Relaxed)),
            policy_cpu_ms_per_s: self.policy_cpu_ms_per_s.load(Relaxed),
            warmup_tokens_per_s: self.warmup_tokens_per_s.load(Relaxed),
            admission_weight: self.admission_weight.load(Relaxed),
        }
    }
}

/// A rate quota as a token bucket one second deep that may go into debt: an action is allowed
/// while the balance is positive and pays its actual cost afterwards (a policy call's time is
/// known only once it returns; a warm-up's tokens only once the engine counted them). Over any
/// stretch of time the spending stays within the rate plus one action's cost.
#[derive(Debug)]
pub struct RateBudget {
    balance: f64,
    refilled: Instant,
}

impl RateBudget {
    /// A full bucket for `per_second`.
    pub fn new(per_second: f64) -> Self {
        Self {
            balance: per_second,
            refilled: Instant::now(),
        }
    }

    /// Whether an action may start now at `per_second` (0: no limit, always).
    pub fn available(&mut self, per_second: f64) -> bool {
        self.available_at(per_second, Instant::now())
    }

    fn available_at(&mut self, per_second: f64, now: Instant) -> bool {
        if per_second <= 0.0 {
            return true;
        }
        let refill = now.saturating_duration_since(self.refilled).as_secs_f64() * per_second;
        // One second deep: a rate lowered by a reload caps the balance at once.
        self.balance = (self.balance + refill).min(per_second);
        self.refilled = now;
        self.balance > 0.0
    }

    /// Pay `cost` (a negative cost gives back what an estimate took too much).
    pub fn spend(&mut self, cost: f64) {
        self.balance -= cost;
    }
}

/// A tenant's warm-up quota at work: the prompt tokens it may still send this second
/// (`warmup_tokens_per_s`), what its warm-ups cost as the engine counted them, and how many were
/// skipped for the quota.
#[derive(Debug)]
pub struct WarmupBudget {
    budget: std::sync::Mutex<RateBudget>,
    tokens: AtomicU64,
    throttled: AtomicU64,
}

impl WarmupBudget {
    /// A full budget at `tokens_per_s`.
    pub fn new(tokens_per_s: u64) -> Self {
        Self {
            budget: std::sync::Mutex::new(RateBudget::new(tokens_per_s as f64)),
            tokens: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
        }
    }

    /// Whether a warm-up may go upstream now at `tokens_per_s`; counted when not. The warm-up
    /// pays with [`Self::pay`].
    pub fn may_warm_up(&self, tokens_per_s: u64) -> bool {
        let allowed = self
            .budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .available(tokens_per_s as f64);
        if !allowed {
            self.throttled.fetch_add(1, Relaxed);
        }
        allowed
    }

    /// Pay for a warm-up's prompt tokens (an estimate before it is sent, then the difference to
    /// what the engine counted: negative gives back).
    pub fn pay(&self, tokens: i64) {
        self.budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spend(tokens as f64);
        if tokens > 0 {
            self.tokens.fetch_add(tokens as u64, Relaxed);
        } else {
            self.tokens.fetch_sub(tokens.unsigned_abs(), Relaxed);
        }
    }

    /// Prompt tokens the tenant's warm-ups cost so far.
    pub fn tokens(&self) -> u64 {
        self.tokens.load(Relaxed)
    }

    /// Warm-ups skipped for the quota so far.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_budget_allows_its_rate_and_refills_with_time() {
        let start = Instant::now();
        let mut budget = RateBudget {
            balance: 100.0,
            refilled: start,
        };
        assert!(budget.available_at(100.0, start));
        budget.spend(150.0);
        assert!(
            !budget.available_at(100.0, start),
            "overspent: 100 per second, 150 used"
        );
        assert!(
            budget.available_at(100.0, start + Duration::from_millis(600)),
            "600 ms later, 60 came back: the balance is positive"
        );
        assert!(
            budget.available_at(0.0, start),
            "no limit: always available, whatever was spent"
        );
    }

    #[test]
    fn the_bucket_is_one_second_deep_at_the_current_rate() {
        let start = Instant::now();
        let mut budget = RateBudget::new(1000.0);
        budget.refilled = start;
        // Idle for a minute: the balance is one second's worth, not sixty.
        assert!(budget.available_at(1000.0, start + Duration::from_secs(60)));
        budget.spend(1000.0);
        assert!(!budget.available_at(1000.0, start + Duration::from_secs(60)));
        // A reload lowers the rate to 10: a full bucket holds 10.
        let mut lowered = RateBudget::new(1000.0);
        lowered.refilled = start;
        assert!(lowered.available_at(10.0, start));
        lowered.spend(11.0);
        assert!(!lowered.available_at(10.0, start));
    }

    #[test]
    fn live_quotas_change_in_place() {
        let live = LiveQuotas::new(Quotas::default());
        let lower = Quotas {
            max_in_flight: 2,
            max_in_flight_from: LimitSource::FileTenant,
            policy_cpu_ms_per_s: 10,
            warmup_tokens_per_s: 0,
            admission_weight: 3,
        };
        live.set(lower);
        assert_eq!(live.get(), lower);
    }
}
