//! A request's place on a replica, held from placement until the response ends.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use agentrt_router::{ReplicaId, Route};

use super::ReplicaRouting;

/// A request's place on a replica: completes its booking when the replica starts answering,
/// releases it (and the replica's in-flight count) when dropped.
pub struct Lease {
    pub(super) routing: Arc<ReplicaRouting>,
    pub(super) route: Route,
    pub(super) url: String,
    pub(super) prefilled: bool,
}

impl Lease {
    /// The replica's base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The replica the request was placed on.
    pub fn replica(&self) -> ReplicaId {
        self.route.replica
    }

    /// The replica did not answer the request.
    pub fn failed(&self) {
        self.routing.replica_failed(self.route.replica);
    }

    /// The replica started answering: its prompt is processed.
    pub fn prefill_complete(&mut self) {
        if !self.prefilled {
            self.prefilled = true;
            self.routing.router.prefill_complete(&self.route);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.routing.in_flight[&self.route.replica].fetch_sub(1, Relaxed);
        self.routing.router.release(&self.route);
    }
}
