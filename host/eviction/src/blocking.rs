//! Policy calls from async tasks.
//!
//! A policy call is synchronous and may take up to its deadline (and a restart when it fails).
//! Made on an async worker, it holds a thread the runtime's other tasks need: in `agentrt serve`,
//! every tenant's requests. On a multi-threaded runtime the call is made with `block_in_place`,
//! which hands this worker's other tasks to another thread first; on a current-thread runtime (a
//! test, a tool) there is no other thread to hand them to, and the call is made as is.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Run `call` (a policy call) without holding up the runtime's other tasks.
pub(crate) fn policy_call<R>(call: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(call),
        _ => call(),
    }
}
