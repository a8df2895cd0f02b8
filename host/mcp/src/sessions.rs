//! Who opened each MCP session, and how many sessions each tenant has open.
//!
//! A session id (`Mcp-Session-Id`) is usable only by the tenant *and* the credential (the exact
//! `Authorization` header, kept as its SHA-256) that opened it: for anyone else the id does not
//! exist, and [`crate::routes`] answers exactly as rmcp answers an unknown id. Each tenant may have
//! `max_per_tenant` sessions open at once (all servers together); an `initialize` past that is
//! refused before a session is made. A place is reserved before the session exists (so concurrent
//! `initialize` requests cannot overshoot the cap) and bound to the id when rmcp creates it
//! ([`crate::session_manager`]); a reservation that never becomes a session gives its place back.
//!
//! Memory follows the sessions: when they go, the table shrinks back, and the allocator is asked to
//! return what the flood freed ([`crate::memory`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use sha2::{Digest, Sha256};

/// Who a request is: its tenant, and the credential it authenticated with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The tenant's name.
    pub tenant: Arc<str>,
    /// SHA-256 of the `Authorization` header's value (of nothing when it has none): two keys of one
    /// tenant are two owners, and the key itself is never kept.
    credential: [u8; 32],
}

impl Owner {
    /// The owner of a request of `tenant` carrying `headers`.
    pub fn of(tenant: &str, headers: &HeaderMap) -> Self {
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .map_or(&[][..], |v| v.as_bytes());
        Self {
            tenant: tenant.into(),
            credential: Sha256::digest(header).into(),
        }
    }
}

/// A tenant at its session cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCapReached {
    /// The tenant's sessions open, with the places reserved for sessions being opened.
    pub open: usize,
    /// The cap (`--mcp-max-sessions`).
    pub limit: usize,
}

#[derive(Default)]
struct Inner {
    owners: HashMap<Arc<str>, Owner>,
    /// Sessions open plus places reserved, per tenant; a tenant with neither has no entry.
    per_tenant: HashMap<Arc<str>, usize>,
    /// Every tenant that opened a session (the operator's tenants: bounded), for the gauge.
    seen: BTreeSet<Arc<str>>,
}

/// Every live session's owner; each tenant's count.
pub struct SessionTable {
    inner: Mutex<Inner>,
    max_per_tenant: usize,
    /// Sessions that ended (closed, failed, or idle past the limit).
    closed: AtomicU64,
}

/// Below this many entries a map is not worth shrinking.
const SHRINK_FLOOR: usize = 256;

impl SessionTable {
    /// An empty table, each tenant allowed `max_per_tenant` sessions at once.
    pub fn new(max_per_tenant: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            max_per_tenant,
            closed: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserve a place for a session `owner` is about to open, unless its tenant is at the cap.
    pub fn reserve(self: &Arc<Self>, owner: Owner) -> Result<Reservation, SessionCapReached> {
        let mut inner = self.lock();
        let count = inner.per_tenant.entry(owner.tenant.clone()).or_insert(0);
        if *count >= self.max_per_tenant {
            let open = *count;
            if open == 0 {
                inner.per_tenant.remove(&owner.tenant);
            }
            return Err(SessionCapReached {
                open,
                limit: self.max_per_tenant,
            });
        }
        *count += 1;
        Ok(Reservation {
            table: self.clone(),
            owner: Some(owner),
        })
    }

    /// Whether session `id` exists and belongs to `owner`.
    pub fn owned_by(&self, id: &str, owner: &Owner) -> bool {
        self.lock().owners.get(id).is_some_and(|o| o == owner)
    }

    /// Session `id` ended (closed by its owner, expired, or failed): its place is free.
    pub fn release(&self, id: &str) {
        let mut inner = self.lock();
        if let Some(owner) = inner.owners.remove(id) {
            inner.give_back(&owner.tenant);
            if shrink(&mut inner.owners) {
                agentrt_guards::freed_memory::trim_soon();
            }
            self.closed.fetch_add(1, Relaxed);
        }
    }

    /// Sessions open per tenant (reserved places not counted), for every tenant that opened one,
    /// sorted by tenant.
    pub fn open_per_tenant(&self) -> Vec<(String, usize)> {
        let inner = self.lock();
        let mut open: std::collections::BTreeMap<&str, usize> = inner.seen.iter().map(|t| (&**t, 0)).collect();
        for owner in inner.owners.values() {
            *open.entry(&owner.tenant).or_default() += 1;
        }
        open.into_iter().map(|(t, n)| (t.to_string(), n)).collect()
    }

    /// Sessions that ended so far.
    pub fn closed(&self) -> u64 {
        self.closed.load(Relaxed)
    }

    /// Sessions open, all tenants together.
    pub fn len(&self) -> usize {
        self.lock().owners.len()
    }

    /// True when no session is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map's capacity (tests: memory is given back when sessions go).
    pub fn capacity(&self) -> usize {
        self.lock().owners.capacity()
    }
}

impl Inner {
    fn give_back(&mut self, tenant: &str) {
        if let Some(count) = self.per_tenant.get_mut(tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_tenant.remove(tenant);
                shrink(&mut self.per_tenant);
            }
        }
    }
}

/// Give a map's memory back once it is mostly empty (a flood of sessions that went); whether it did.
pub fn shrink<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) -> bool {
    let mostly_empty = map.capacity() > SHRINK_FLOOR && map.len() < map.capacity() / 4;
    if mostly_empty {
        map.shrink_to(map.len() * 2);
    }
    mostly_empty
}

/// A place held for a session about to be created; given back when dropped unbound.
pub struct Reservation {
    table: Arc<SessionTable>,
    owner: Option<Owner>,
}

impl Reservation {
    /// The session was created with `id`: the place is its own from now on.
    pub fn bind(mut self, id: Arc<str>) {
        if let Some(owner) = self.owner.take() {
            let mut inner = self.table.lock();
            if !inner.seen.contains(&owner.tenant) {
                inner.seen.insert(owner.tenant.clone());
            }
            inner.owners.insert(id, owner);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.table.lock().give_back(&owner.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn owner(tenant: &str, key: &str) -> Owner {
        let mut headers = HeaderMap::new();
        headers.insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {key}")).unwrap(),
        );
        Owner::of(tenant, &headers)
    }

    #[test]
    fn a_session_belongs_to_its_tenant_and_key_only() {
        let table = SessionTable::new(4);
        table.reserve(owner("alpha", "k1")).unwrap().bind("s1".into());
        assert!(table.owned_by("s1", &owner("alpha", "k1")));
        assert!(!table.owned_by("s1", &owner("beta", "k1")), "another tenant");
        assert!(
            !table.owned_by("s1", &owner("alpha", "k2")),
            "another key of the same tenant"
        );
        assert!(!table.owned_by("s2", &owner("alpha", "k1")), "an unknown id");
        table.release("s1");
        assert!(!table.owned_by("s1", &owner("alpha", "k1")), "a closed session");
    }

    #[test]
    fn the_cap_counts_reservations_and_sessions_and_frees_places_when_they_go() {
        let table = SessionTable::new(2);
        let a = table.reserve(owner("alpha", "k")).unwrap();
        let b = table.reserve(owner("alpha", "k")).unwrap();
        assert_eq!(
            table.reserve(owner("alpha", "k")).err(),
            Some(SessionCapReached { open: 2, limit: 2 })
        );
        // Another tenant has its own places.
        table.reserve(owner("beta", "k")).unwrap().bind("b1".into());
        a.bind("a1".into());
        drop(b); // never became a session
        table.reserve(owner("alpha", "k")).unwrap().bind("a2".into());
        assert!(table.reserve(owner("alpha", "k")).is_err());
        table.release("a1");
        table.reserve(owner("alpha", "k")).unwrap().bind("a3".into());
        assert_eq!(table.open_per_tenant(), vec![("alpha".into(), 2), ("beta".into(), 1)]);
    }

    #[test]
    fn the_table_shrinks_when_a_flood_of_sessions_goes() {
        let table = SessionTable::new(100_000);
        for i in 0..20_000 {
            table.reserve(owner("alpha", "k")).unwrap().bind(format!("s{i}").into());
        }
        let full = table.capacity();
        for i in 0..20_000 {
            table.release(&format!("s{i}"));
        }
        assert!(table.is_empty());
        assert!(
            table.capacity() <= SHRINK_FLOOR.max(full / 8),
            "{} of {full}",
            table.capacity()
        );
    }
}
