//! Host-side types and glue generated from `wit/policy.wit`.
//!
//! These are the types the rest of agentrt (the simulator, the proxy) speaks: `Event`, `Item`,
//! `Forecast`, `SideEffect`, … re-exported from [`crate::types`].

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "policy",
    // Tests and the simulator compare values (forecasts, side effects) directly.
    additional_derives: [PartialEq],
});
