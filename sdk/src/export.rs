//! [`crate::export_policy!`]: turns a [`crate::Policy`] type into the component's exports.

use core::cell::RefCell;

use crate::dispatch::Dispatcher;
use crate::Policy;

/// The one policy value of a component instance.
///
/// A component instance is single-threaded (the host never calls one instance concurrently and
/// core Wasm has no threads here), so a `RefCell` in a `static` is sound; `Sync` is asserted for
/// that reason only.
pub struct PolicyCell<P: Policy> {
    inner: RefCell<Option<Dispatcher<P>>>,
}

// SAFETY: see the type's documentation — an instance is never entered from two threads.
unsafe impl<P: Policy> Sync for PolicyCell<P> {}

impl<P: Policy> PolicyCell<P> {
    pub const fn new() -> Self {
        Self {
            inner: RefCell::new(None),
        }
    }

    /// Run `f` on the policy, creating it with `Default` on first use.
    pub fn with<R>(&self, f: impl FnOnce(&mut Dispatcher<P>) -> R) -> R {
        let mut slot = self.inner.borrow_mut();
        f(slot.get_or_insert_with(Dispatcher::default))
    }
}

impl<P: Policy> Default for PolicyCell<P> {
    fn default() -> Self {
        Self::new()
    }
}

/// Export a [`crate::Policy`] implementation as the component's `agentrt:policy/guest` interface.
///
/// Use it once per policy crate, at the crate root: `agentrt_sdk::export_policy!(MyPolicy);`
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        const _: () = {
            use $crate::bindings::exports::agentrt::policy::guest::Guest;
            use $crate::{Event, Forecast, Item, PolicyInfo, SideEffect};

            static POLICY: $crate::__private::PolicyCell<$policy> = $crate::__private::PolicyCell::new();

            struct Export;

            impl Guest for Export {
                fn info() -> PolicyInfo {
                    <$policy as $crate::Policy>::info()
                }
                fn init(config: Vec<(String, String)>) -> Result<(), String> {
                    POLICY.with(|d| d.init(config))
                }
                fn observe(events: Vec<Event>) {
                    POLICY.with(|d| d.observe(&events))
                }
                fn observe_packed(packed: Vec<u64>) {
                    POLICY.with(|d| d.observe_packed(&packed))
                }
                fn observe_blocks(packed: Vec<u64>) {
                    POLICY.with(|d| d.observe_blocks(&packed))
                }
                fn score(items: Vec<Item>) -> Vec<f32> {
                    POLICY.with(|d| d.score(&items))
                }
                fn score_packed(packed: Vec<u64>) -> Vec<f32> {
                    POLICY.with(|d| d.score_packed(&packed))
                }
                fn predict(horizon: u32) -> Vec<Forecast> {
                    POLICY.with(|d| d.predict(horizon))
                }
                fn act() -> Vec<SideEffect> {
                    POLICY.with(|d| d.act())
                }
                fn snapshot() -> Vec<u8> {
                    POLICY.with(|d| d.snapshot())
                }
                fn restore(state: Vec<u8>) -> Result<(), String> {
                    POLICY.with(|d| d.restore(&state))
                }
            }

            // Natively (tests, the harness) there is no component to export from.
            #[cfg(target_arch = "wasm32")]
    $crate::bindings::__export_guest!(Export with_types_in $crate::bindings);
        };
    };
}
