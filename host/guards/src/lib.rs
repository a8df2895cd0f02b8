//! Guards on what crosses the proxy's edges: what untrusted input costs before anything walks it,
//! how long and how many bytes reading a request body may take,
//! what may be shown of the operator's secrets when something is logged, exported or answered,
//! and the memory a flood held given back when it is gone.
//! Each module is one guard; the proxy, the MCP gateway and the engine adapters share them so a
//! bound means the same everywhere.
//!
//! ## Modules in detail
//!
//! Guards on what crosses the proxy's edges, shared so a bound means the same everywhere:
//! `body_read` (a request body read to a deadline — an idle bound and a minimum rate — within a
//! byte budget for the process and one per tenant; the proxy's routes and the MCP gateway share one
//! budget), `json_shape` (what client JSON costs, read off its bytes by one pass that neither
//! allocates nor recurses: elements and nesting depth; checked before any walk of client JSON —
//! `--max-json-elements`, `--max-json-depth`), `shown_url` (URLs in logs, errors and exported spans
//! without credentials, query or fragment), `freed_memory` (a flood's freed memory returned to the
//! system: one `malloc_trim` once MCP sessions, client connections or bodies being read shrink).

pub mod body_read;
pub mod freed_memory;
pub mod json_shape;
pub mod shown_url;
