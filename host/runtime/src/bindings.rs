//! Host-side types and glue generated from `wit/policy.wit`.
//!
//! These are the types the rest of agentrt (the simulator, the proxy) speaks: `Event`, `Item`,
//! `Forecast`, `SideEffect`, … re-exported from [`crate::types`]. The older lines' bindings live
//! in [`v0_4`], [`v0_3`] and [`v0_2`], for the components still built against them
//! ([`crate::compat`]).

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "policy",
    // Tests and the simulator compare values (forecasts, side effects) directly.
    additional_derives: [PartialEq],
});

/// `agentrt:policy@0.4.0`, generated from the text kept in `wit/compat/0.4.0`.
pub mod v0_4 {
    wasmtime::component::bindgen!({
        path: "../../wit/compat/0.4.0",
        world: "policy",
    });
}

/// `agentrt:policy@0.3.0`, generated from the text kept in `wit/compat/0.3.0`.
pub mod v0_3 {
    wasmtime::component::bindgen!({
        path: "../../wit/compat/0.3.0",
        world: "policy",
    });
}

/// `agentrt:policy@0.2.0`, generated from the text kept in `wit/compat/0.2.0`.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../../wit/compat/0.2.0",
        world: "policy",
    });
}
