//! Agent handles: unique across tenants, and whose each one is.
//!
//! The engine tags every KV block with the handle of the agent whose request stored it, so no two
//! tenants may share a handle — and under cache shares the eviction service must tell from a
//! block's handle which tenant owns it. Handles are 32-bit in the policy contract and the
//! eviction wire, whose top bit marks the names a plugin defines itself
//! (`agentrt_eviction::wire::DEFINED_AGENT_BIT`): the proxy's handles are 1 to 2³¹ − 1, handed out
//! in turn. The owner of a handle is remembered while some tenant's agent table holds it (bounded
//! with that table).
//!
//! **Never a live handle twice.** One tenant minting ~3,000 new agent names a second wraps 2³¹
//! handles in about eight days. When the counter comes round, a handle some tenant's table still
//! holds is skipped: a new agent never takes a live handle, its own tenant's or another's. (The
//! live handles are bounded by the tables, far below 2³¹, so the next free one is always near.)
//! A handle given out again after its agent was forgotten names the new agent from then on; the
//! engine's blocks still tagged with the old one are, by then, a full turn of the counter old.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// The largest handle the proxy gives: the wire's top bit is the plugin's own names'.
pub const MAX_HANDLE: u32 = (1 << 31) - 1;

/// The handle source every tenant's agent directory shares.
#[derive(Clone, Debug)]
pub struct Handles(Arc<RwLock<Inner>>);

#[derive(Debug)]
struct Inner {
    /// The next handle to try.
    next: u32,
    owners: HashMap<u32, Arc<str>>,
    /// Times the counter came round from [`MAX_HANDLE`] to 1.
    wraps: u64,
}

impl Default for Handles {
    fn default() -> Self {
        Self::starting_at(1)
    }
}

impl Handles {
    /// A source whose first handle is `first` (1 ≤ `first` ≤ [`MAX_HANDLE`]): a test starts it
    /// near the end of the range to make it wrap.
    pub fn starting_at(first: u32) -> Self {
        Self(Arc::new(RwLock::new(Inner {
            next: first.clamp(1, MAX_HANDLE),
            owners: HashMap::new(),
            wraps: 0,
        })))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.0.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A new handle for an agent of `tenant`: the next one no table holds.
    pub fn next_for(&self, tenant: &Arc<str>) -> u32 {
        let mut inner = self.write();
        loop {
            let handle = inner.next;
            inner.next = if handle == MAX_HANDLE {
                inner.wraps += 1;
                1
            } else {
                handle + 1
            };
            if let std::collections::hash_map::Entry::Vacant(free) = inner.owners.entry(handle) {
                free.insert(tenant.clone());
                return handle;
            }
        }
    }

    /// The tenant whose agent `handle` is, while its table remembers the agent.
    pub fn owner(&self, handle: u32) -> Option<Arc<str>> {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .owners
            .get(&handle)
            .cloned()
    }

    /// Forget `handle`'s owner: its tenant's table forgot the agent.
    pub fn forget(&self, handle: u32) {
        self.write().owners.remove(&handle);
    }

    /// Hold `handle` for `tenant` (its saved agents, restored when it starts): no other tenant
    /// gets it meanwhile.
    pub fn reserve(&self, handle: u32, tenant: &Arc<str>) {
        if (1..=MAX_HANDLE).contains(&handle) {
            self.write().owners.insert(handle, tenant.clone());
        }
    }

    /// Go on from `next` (a saved counter), as the process that saved it would have.
    pub fn resume_at(&self, next: u32) {
        self.write().next = next.clamp(1, MAX_HANDLE);
    }

    /// The handle the counter tries next.
    pub fn next(&self) -> u32 {
        self.0.read().unwrap_or_else(|p| p.into_inner()).next
    }

    /// Times the counter came round.
    pub fn wraps(&self) -> u64 {
        self.0.read().unwrap_or_else(|p| p.into_inner()).wraps
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

    /// The counter forced to wrap: alpha's live handles from the start of the range survive a
    /// turn of beta minting new agents, never handed to beta; a forgotten one is used again; no
    /// handle is 0 or carries the wire's defined-agent bit.
    #[test]
    fn a_wrapped_counter_never_hands_out_a_live_handle() {
        let handles = Handles::starting_at(MAX_HANDLE - 2);
        let (alpha, beta): (Arc<str>, Arc<str>) = ("alpha".into(), "beta".into());
        let before_wrap: Vec<u32> = (0..3).map(|_| handles.next_for(&alpha)).collect();
        assert_eq!(before_wrap, [MAX_HANDLE - 2, MAX_HANDLE - 1, MAX_HANDLE]);
        let after_wrap: Vec<u32> = (0..3).map(|_| handles.next_for(&alpha)).collect();
        assert_eq!(after_wrap, [1, 2, 3], "0 is the unknown agent: skipped");
        assert_eq!(handles.wraps(), 1);
        handles.forget(2);
        // A whole turn of beta's new agents, each forgotten at once (a tenant cycling through
        // names past its table's cap): alpha's five live handles are never beta's.
        let mut minted = 0u64;
        let mut reused_2 = false;
        loop {
            let h = handles.next_for(&beta);
            assert!(h != 0 && h <= MAX_HANDLE, "{h}");
            assert!(
                !before_wrap.contains(&h) && h != 1 && h != 3,
                "beta was handed alpha's live handle {h}"
            );
            reused_2 |= h == 2;
            handles.forget(h);
            minted += 1;
            if handles.wraps() == 2 && h > 3 {
                break;
            }
            // Time the turn by its cost: jump the counter most of the way round once.
            if minted == 3 {
                handles.write().next = MAX_HANDLE - 5;
            }
        }
        assert!(reused_2, "a forgotten handle is given again");
        for h in before_wrap.iter().chain(&[1, 3]) {
            assert_eq!(handles.owner(*h).as_deref(), Some("alpha"));
        }
        assert_eq!(handles.next_for(&alpha) & (1 << 31), 0);
    }
}
