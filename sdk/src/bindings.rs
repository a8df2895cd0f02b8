//! Types and glue generated from `wit/policy.wit`. Policy authors use the re-exports at the crate
//! root; this module is public so that [`crate::export_policy!`] can name it from other crates.
#![allow(missing_docs, clippy::all)]

wit_bindgen::generate!({
    path: "../wit",
    world: "policy",
    pub_export_macro: true,
    export_macro_name: "__export_guest",
    default_bindings_module: "::agentrt_sdk::bindings",
    runtime_path: "::agentrt_sdk::__private::wit_bindgen::rt",
    // Policies and their tests compare values (items, forecasts, side effects) directly.
    additional_derives: [PartialEq],
});
