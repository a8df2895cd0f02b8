//! Per-tenant cache salts: tenants never share prefix-cache blocks.
//!
//! A prefix-cache hit is visible in timing (and in `usage.prompt_tokens_details.cached_tokens`),
//! so a tenant that could hit another tenant's blocks could test whether that tenant sent a given
//! prompt. vLLM mixes a request's `cache_salt` into its first block's hash: requests with different
//! salts never share blocks. The proxy sets every named tenant's requests' `cache_salt` (and its
//! warm-ups', which must warm the blocks its requests will use) to a keyed hash of the tenant name.
//! A client's own `cache_salt` is folded in rather than passed on — a client can split its tenant's
//! cache further, never reach into another tenant's. The `default` tenant (single-tenant serving)
//! is left as the client sent it.
//!
//! The key is `--cache-salt-secret` (the same on every proxy in front of one engine, so that their
//! salts agree) or, without one, random per process: salts then change on restart, and with them
//! every cached block's identity.

use std::hash::{BuildHasher, Hasher};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::tenants::DEFAULT_TENANT;

/// The request field vLLM salts block hashes with.
pub const FIELD: &str = "cache_salt";

/// Computes tenants' salts from one secret.
pub struct CacheSalts {
    secret: Vec<u8>,
}

impl CacheSalts {
    /// Salts keyed by `secret`, or by a random key of this process when `None`.
    pub fn new(secret: Option<&str>) -> Self {
        let secret = match secret {
            Some(s) => s.as_bytes().to_vec(),
            None => random_key(),
        };
        Self { secret }
    }

    /// The `cache_salt` a request of `tenant` goes upstream with, given the one its client sent;
    /// `None` leaves the field as the client sent it (the `default` tenant).
    pub fn salt(&self, tenant: &str, client: Option<&str>) -> Option<String> {
        if tenant == DEFAULT_TENANT {
            return None;
        }
        let mut h = Sha256::new();
        h.update((self.secret.len() as u64).to_le_bytes());
        h.update(&self.secret);
        h.update((tenant.len() as u64).to_le_bytes());
        h.update(tenant.as_bytes());
        if let Some(client) = client {
            h.update([1]);
            h.update(client.as_bytes());
        }
        Some(hex::encode(&h.finalize()[..16]))
    }

    /// Set `body`'s `cache_salt` for `tenant`; returns the salt it now carries, if any.
    pub fn apply(&self, body: &mut Value, tenant: &str) -> Option<String> {
        let object = body.as_object_mut()?;
        let client = object.get(FIELD).and_then(Value::as_str).map(str::to_owned);
        match self.salt(tenant, client.as_deref()) {
            Some(salt) => {
                object.insert(FIELD.into(), Value::String(salt.clone()));
                Some(salt)
            }
            None => client,
        }
    }
}

/// 256 bits from the OS's randomness, through std's randomly keyed hasher (no extra dependency).
fn random_key() -> Vec<u8> {
    let mut key = Vec::with_capacity(32);
    for i in 0..4u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        key.extend_from_slice(&h.finish().to_le_bytes());
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_tenant_gets_its_own_salt_and_a_client_cannot_reach_another_tenants() {
        let salts = CacheSalts::new(Some("k"));
        let (a, b) = (salts.salt("alpha", None).unwrap(), salts.salt("beta", None).unwrap());
        assert_ne!(a, b);
        assert_eq!(salts.salt("alpha", None).unwrap(), a, "stable");
        // Beta's client sending alpha's salt gets a salt of beta's, not alpha's.
        assert_ne!(salts.salt("beta", Some(&a)).unwrap(), a);
        assert_ne!(
            salts.salt("alpha", Some("x")).unwrap(),
            a,
            "a client may split its tenant's cache"
        );
        // Another secret, other salts; no secret, a random one.
        assert_ne!(CacheSalts::new(Some("other")).salt("alpha", None).unwrap(), a);
        assert_ne!(
            CacheSalts::new(None).salt("alpha", None),
            CacheSalts::new(None).salt("alpha", None)
        );
    }

    #[test]
    fn the_body_carries_the_tenant_salt_and_the_default_tenant_is_left_alone() {
        let salts = CacheSalts::new(Some("k"));
        let mut body = json!({"model": "m", "cache_salt": "mine"});
        let salt = salts.apply(&mut body, "alpha").unwrap();
        assert_eq!(body[FIELD], salt);
        assert_eq!(salt, salts.salt("alpha", Some("mine")).unwrap());
        let mut plain = json!({"model": "m", "cache_salt": "mine"});
        assert_eq!(salts.apply(&mut plain, DEFAULT_TENANT).as_deref(), Some("mine"));
        assert_eq!(plain[FIELD], "mine");
        let mut bare = json!({"model": "m"});
        assert_eq!(salts.apply(&mut bare, DEFAULT_TENANT), None);
        assert!(bare.get(FIELD).is_none());
    }
}
