//! The front door: connections, limits, the proxy's own errors and what one request may cost to
//! read. It knows no tenant and no policy (nor any credential: [`crate::auth`]).

pub mod body;
pub mod connections;
pub mod error;
pub mod head;
pub mod in_flight;
pub mod limits;
pub mod overload;
pub mod request_budget;
pub mod tcp_memory;
