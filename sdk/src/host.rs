//! What the host grants a policy: a monotonic clock, logging and a random seed.
//!
//! Inside a component these call the host's imports. Natively (unit tests, the harness) they use a
//! process-local monotonic clock, standard error and a fixed seed, so policy code needs no `cfg`.

use crate::LogLevel;

/// Microseconds on the host's monotonic clock.
pub fn now_us() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::agentrt::policy::host::now_us()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_micros() as u64
    }
}

/// Log a line through the host.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::agentrt::policy::host::log(level, message)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        eprintln!("[policy {level:?}] {message}");
    }
}

/// A per-instance random seed chosen by the host.
pub fn random_seed() -> u64 {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::agentrt::policy::host::random_seed()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0x5eed_5eed_5eed_5eed
    }
}
