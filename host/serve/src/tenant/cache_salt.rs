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
//! **Public content.** Where sharing is wanted — an anchor (system prompt + tools) that many
//! tenants use — the operator marks the anchor public (`--public-anchor HASH`, or `[public]
//! anchors` in the config file; the hash is the one the admin API's tenant stats list). Every
//! tenant's requests with that anchor then carry one public salt, and share its blocks. vLLM salts
//! a request as a whole (the salt enters the first block's hash, and every later block's hash
//! chains from it), so what follows the anchor in such a request — the conversation — is shared
//! with the other tenants that use the same anchor too: mark public only anchors whose
//! conversations need no secrecy from those tenants.
//!
//! The key is `--cache-salt-secret` (the same on every proxy in front of one engine, so that their
//! salts agree) or, without one, random per process: salts then change on restart, and with them
//! every cached block's identity.

use std::hash::{BuildHasher, Hasher};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::names::DEFAULT_TENANT;

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

    /// The `cache_salt` a request of `tenant` goes upstream with, given the one its client sent
    /// and whether its anchor is public; `None` leaves the field as the client sent it (the
    /// `default` tenant).
    pub fn salt(&self, tenant: &str, client: Option<&str>, public: bool) -> Option<String> {
        if tenant == DEFAULT_TENANT {
            return None;
        }
        let mut h = Sha256::new();
        h.update((self.secret.len() as u64).to_le_bytes());
        h.update(&self.secret);
        if public {
            // A length no tenant name has: the public salt is no tenant's.
            h.update(u64::MAX.to_le_bytes());
        } else {
            h.update((tenant.len() as u64).to_le_bytes());
            h.update(tenant.as_bytes());
        }
        if let Some(client) = client {
            h.update([1]);
            h.update(client.as_bytes());
        }
        Some(hex::encode(&h.finalize()[..16]))
    }

    /// Set `body`'s `cache_salt` for `tenant` (the public salt when `public`); returns the salt
    /// it now carries, if any.
    pub fn apply(&self, body: &mut Value, tenant: &str, public: bool) -> Option<String> {
        let object = body.as_object_mut()?;
        let client = object.get(FIELD).and_then(Value::as_str).map(str::to_owned);
        match self.salt(tenant, client.as_deref(), public) {
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
        let (a, b) = (
            salts.salt("alpha", None, false).unwrap(),
            salts.salt("beta", None, false).unwrap(),
        );
        assert_ne!(a, b);
        assert_eq!(salts.salt("alpha", None, false).unwrap(), a, "stable");
        // Beta's client sending alpha's salt gets a salt of beta's, not alpha's.
        assert_ne!(salts.salt("beta", Some(&a), false).unwrap(), a);
        assert_ne!(
            salts.salt("alpha", Some("x"), false).unwrap(),
            a,
            "a client may split its tenant's cache"
        );
        // Another secret, other salts; no secret, a random one.
        assert_ne!(CacheSalts::new(Some("other")).salt("alpha", None, false).unwrap(), a);
        assert_ne!(
            CacheSalts::new(None).salt("alpha", None, false),
            CacheSalts::new(None).salt("alpha", None, false)
        );
    }

    #[test]
    fn the_body_carries_the_tenant_salt_and_the_default_tenant_is_left_alone() {
        let salts = CacheSalts::new(Some("k"));
        let mut body = json!({"model": "m", "cache_salt": "mine"});
        let salt = salts.apply(&mut body, "alpha", false).unwrap();
        assert_eq!(body[FIELD], salt);
        assert_eq!(salt, salts.salt("alpha", Some("mine"), false).unwrap());
        let mut plain = json!({"model": "m", "cache_salt": "mine"});
        assert_eq!(salts.apply(&mut plain, DEFAULT_TENANT, true).as_deref(), Some("mine"));
        assert_eq!(plain[FIELD], "mine");
        let mut bare = json!({"model": "m"});
        assert_eq!(salts.apply(&mut bare, DEFAULT_TENANT, false), None);
        assert!(bare.get(FIELD).is_none());
    }

    #[test]
    fn a_public_anchor_carries_one_salt_for_every_tenant_and_no_tenants_own() {
        let salts = CacheSalts::new(Some("k"));
        let public = salts.salt("alpha", None, true).unwrap();
        assert_eq!(salts.salt("beta", None, true).unwrap(), public, "shared across tenants");
        assert_ne!(public, salts.salt("alpha", None, false).unwrap());
        assert_ne!(public, salts.salt("beta", None, false).unwrap());
        // A client's own salt still splits the public cache, for every tenant alike.
        assert_eq!(
            salts.salt("alpha", Some("x"), true),
            salts.salt("beta", Some("x"), true)
        );
        assert_ne!(
            CacheSalts::new(Some("other")).salt("alpha", None, true).unwrap(),
            public
        );
    }
}
