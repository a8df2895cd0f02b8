//! Agent handles: unique across tenants, and whose each one is.
//!
//! The engine tags every KV block with the handle of the agent whose request stored it, so no two
//! tenants may share a handle — and under cache shares the eviction service must tell from a
//! block's handle which tenant owns it. Handles are 1, 2, 3, … and never reused; the owner of a
//! handle is remembered while some tenant's agent table holds it (bounded with that table).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

/// The handle source every tenant's agent directory shares.
#[derive(Clone, Debug)]
pub struct Handles(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    next: AtomicU32,
    owners: RwLock<HashMap<u32, Arc<str>>>,
}

impl Default for Handles {
    fn default() -> Self {
        Self(Arc::new(Inner {
            next: AtomicU32::new(1),
            owners: RwLock::new(HashMap::new()),
        }))
    }
}

impl Handles {
    /// A new handle for an agent of `tenant`.
    pub fn next_for(&self, tenant: &Arc<str>) -> u32 {
        let handle = self.0.next.fetch_add(1, Relaxed);
        self.0
            .owners
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handle, tenant.clone());
        handle
    }

    /// The tenant whose agent `handle` is, while its table remembers the agent.
    pub fn owner(&self, handle: u32) -> Option<Arc<str>> {
        self.0
            .owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&handle)
            .cloned()
    }

    /// Forget `handle`'s owner: its tenant's table forgot the agent.
    pub fn forget(&self, handle: u32) {
        self.0.owners.write().unwrap_or_else(|p| p.into_inner()).remove(&handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_unique_across_tenants_and_know_their_owner_until_forgotten() {
        let handles = Handles::default();
        let (a, b): (Arc<str>, Arc<str>) = ("alpha".into(), "beta".into());
        let (h1, h2) = (handles.next_for(&a), handles.next_for(&b));
        assert_ne!(h1, h2);
        assert_eq!(handles.owner(h1).as_deref(), Some("alpha"));
        assert_eq!(handles.owner(h2).as_deref(), Some("beta"));
        handles.forget(h1);
        assert_eq!(handles.owner(h1), None);
        assert_eq!(handles.owner(99), None);
    }
}
