//! The front door: connections, limits, bearer tokens, the proxy's own errors and what one
//! request may cost to read. It knows no tenant and no policy.

pub mod auth;
pub mod connections;
pub mod error;
pub mod limits;
pub mod request_budget;
