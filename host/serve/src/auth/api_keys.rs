//! Tenants' API keys: `Authorization: Bearer KEY` selects the tenant the key table gives, and
//! every request made with a key can be cut off when a reload takes the key away.
//!
//! The key table itself (key → tenant) is the tenant layer's settings, replaced whole by a
//! reload; this module reads it through [`KeyTable`] and keeps what authentication adds to it:
//! one revocation per key in use. A revocation is cancelled when a reload removes the key or
//! gives it to another tenant; with no key at all (unauthenticated serving, every request is
//! `default`), the requests share the revocation of the empty key, cancelled when keys come in.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use tokio_util::sync::CancellationToken;

use super::bearer::bearer;
use crate::front::error::ApiError;
use crate::names::DEFAULT_TENANT;

/// The message a request cut by its key's revocation ends with, and the 401 of one whose key was
/// revoked between being read and being checked.
pub const REVOKED: &str =
    "the API key this request was made with was revoked (the operator's --config no longer gives it)";

/// The key table at one moment: which tenant each API key selects.
pub trait KeyTable {
    /// The tenant `key` selects, if the table gives it.
    fn tenant_of(&self, key: &str) -> Option<&str>;
    /// Whether the table gives no key at all: every request is then tenant `default`, unasked.
    fn is_keyless(&self) -> bool;
}

impl KeyTable for HashMap<String, String> {
    fn tenant_of(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }

    fn is_keyless(&self) -> bool {
        self.is_empty()
    }
}

impl<T: KeyTable + ?Sized> KeyTable for Arc<T> {
    fn tenant_of(&self, key: &str) -> Option<&str> {
        (**self).tenant_of(key)
    }

    fn is_keyless(&self) -> bool {
        (**self).is_keyless()
    }
}

/// Who a request's headers authenticate: its tenant, and the revocation of the key it used.
pub struct Caller {
    /// The tenant's name (`default` when serving without keys).
    pub tenant: String,
    /// Cancelled when a reload takes the key away from this tenant; the tenant layer hands it to
    /// the request's place in its quota, which ends the request then.
    pub revoked: CancellationToken,
}

/// The revocations of the API keys in use.
#[derive(Default)]
pub struct ApiKeys {
    /// API key → the revocation of the requests made with it (`""`: unauthenticated requests).
    /// Only keys a table gave get an entry, so it is as small as the key table.
    revocations: Mutex<HashMap<String, CancellationToken>>,
}

impl ApiKeys {
    /// Who `headers` authenticate under the key table `now` returns: read once to look the key
    /// up, and once more under the revocations' lock, so a reload between the two (whose
    /// [`Self::revoke_changed`] would miss a revocation handed out after it ran) is a 401 saying
    /// the key was revoked. 401 without a bearer token or with one the table does not give.
    pub fn caller<G, T>(&self, headers: &HeaderMap, now: impl Fn() -> G) -> Result<Caller, ApiError>
    where
        G: Deref<Target = T>,
        T: KeyTable + ?Sized,
    {
        let (key, tenant) = {
            let table = now();
            if table.is_keyless() {
                ("", DEFAULT_TENANT.to_string())
            } else {
                let key =
                    bearer(headers).ok_or_else(|| ApiError::unauthorized("missing `Authorization: Bearer <key>`"))?;
                let tenant = table
                    .tenant_of(key)
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
                (key, tenant)
            }
        };
        let mut revocations = self.revocations.lock().unwrap_or_else(|p| p.into_inner());
        // A reload between reading the table and here may have revoked the key already.
        let current = now();
        let still = if key.is_empty() {
            current.is_keyless()
        } else {
            current.tenant_of(key) == Some(tenant.as_str())
        };
        if !still {
            return Err(ApiError::unauthorized(REVOKED));
        }
        let revoked = revocations.entry(key.to_string()).or_default().clone();
        Ok(Caller { tenant, revoked })
    }

    /// A reload has put `new` in place of `old` (call it after the swap, so a request that
    /// authenticates meanwhile either sees `new` or has its revocation cancelled here): cancel
    /// the requests made with a key `new` no longer gives to the same tenant — and the
    /// unauthenticated ones if `new` gives keys.
    pub fn revoke_changed(&self, old: &impl KeyTable, new: &impl KeyTable) {
        self.revocations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|key, revoked| {
                let kept = if key.is_empty() {
                    new.is_keyless()
                } else {
                    new.tenant_of(key) == old.tenant_of(key)
                };
                if !kept {
                    revoked.cancel();
                }
                kept
            });
    }
}

#[cfg(test)]
mod tests {
    use arc_swap::ArcSwap;
    use axum::http::StatusCode;

    use super::*;

    fn table(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, t)| (k.to_string(), t.to_string())).collect()
    }

    fn with_bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        headers
    }

    /// The table requests read, and its replacement as a reload does it: swap, then revoke.
    struct Live {
        keys: ApiKeys,
        table: ArcSwap<HashMap<String, String>>,
    }

    impl Live {
        fn new(pairs: &[(&str, &str)]) -> Self {
            Self {
                keys: ApiKeys::default(),
                table: ArcSwap::from_pointee(table(pairs)),
            }
        }

        fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
            self.keys.caller(headers, || self.table.load())
        }

        fn reload(&self, pairs: &[(&str, &str)]) {
            let old = self.table.swap(Arc::new(table(pairs)));
            self.keys.revoke_changed(&old, &self.table.load_full());
        }
    }

    #[test]
    fn a_key_selects_its_tenant_and_a_wrong_or_missing_one_is_401() {
        let live = Live::new(&[("key-a", "alpha"), ("key-b", "beta")]);
        assert_eq!(live.caller(&with_bearer("key-b")).unwrap().tenant, "beta");
        let wrong = live.caller(&with_bearer("key-c")).err().unwrap();
        assert_eq!(
            (wrong.status, wrong.message.as_str()),
            (StatusCode::UNAUTHORIZED, "unknown API key")
        );
        let missing = live.caller(&HeaderMap::new()).err().unwrap();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(missing.message.contains("Bearer <key>"), "{}", missing.message);
    }

    #[test]
    fn without_keys_every_request_is_default_whatever_it_carries() {
        let live = Live::new(&[]);
        assert_eq!(live.caller(&HeaderMap::new()).unwrap().tenant, DEFAULT_TENANT);
        assert_eq!(live.caller(&with_bearer("anything")).unwrap().tenant, DEFAULT_TENANT);
    }

    #[test]
    fn a_reload_revokes_a_removed_or_moved_key_and_keeps_the_others() {
        let live = Live::new(&[("key-a", "alpha"), ("key-b", "beta"), ("key-c", "gamma")]);
        let a = live.caller(&with_bearer("key-a")).unwrap();
        let b = live.caller(&with_bearer("key-b")).unwrap();
        let c = live.caller(&with_bearer("key-c")).unwrap();
        // key-a removed, key-b moved to another tenant, key-c unchanged.
        live.reload(&[("key-b", "alpha"), ("key-c", "gamma")]);
        assert!(a.revoked.is_cancelled());
        assert!(b.revoked.is_cancelled());
        assert!(!c.revoked.is_cancelled());
        let again = live.caller(&with_bearer("key-a")).err().unwrap();
        assert_eq!(
            (again.status, again.message.as_str()),
            (StatusCode::UNAUTHORIZED, "unknown API key")
        );
        // The moved key now selects its new tenant, under a revocation of its own.
        let moved = live.caller(&with_bearer("key-b")).unwrap();
        assert_eq!(moved.tenant, "alpha");
        assert!(!moved.revoked.is_cancelled());
    }

    #[test]
    fn keys_coming_in_revoke_the_unauthenticated_requests() {
        let live = Live::new(&[]);
        let open = live.caller(&HeaderMap::new()).unwrap();
        live.reload(&[]);
        assert!(!open.revoked.is_cancelled(), "still keyless: nothing revoked");
        live.reload(&[("key-a", "alpha")]);
        assert!(open.revoked.is_cancelled());
        assert!(live.caller(&HeaderMap::new()).is_err());
    }

    #[test]
    fn a_key_revoked_between_its_lookup_and_its_check_is_401_saying_so() {
        // The first read gives the key; by the second (under the lock) a reload took it away.
        let keys = ApiKeys::default();
        let before = Arc::new(table(&[("key-a", "alpha")]));
        let after = Arc::new(table(&[("key-b", "alpha")]));
        let reads = std::cell::Cell::new(0);
        let now = || {
            reads.set(reads.get() + 1);
            if reads.get() == 1 {
                before.clone()
            } else {
                after.clone()
            }
        };
        let e = keys.caller(&with_bearer("key-a"), now).err().unwrap();
        assert_eq!((e.status, e.message.as_str()), (StatusCode::UNAUTHORIZED, REVOKED));
    }
}
