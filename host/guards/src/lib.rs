//! Guards on what crosses the proxy's edges: what untrusted input costs before anything walks it,
//! what may be shown of the operator's secrets when something is logged, exported or answered,
//! and the memory a flood held given back when it is gone.
//! Each module is one guard; the proxy, the MCP gateway and the engine adapters share them so a
//! bound means the same everywhere.

pub mod freed_memory;
pub mod json_shape;
pub mod shown_url;
