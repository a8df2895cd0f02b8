//! The names everything in the proxy agrees on: the unauthenticated tenant's, the policy slots'
//! with a meaning of their own, and the rules for tenant names and for the `SECRET=TENANT` flags.
//! The rule for tenant names is the registry's ([`agentrt_runtime::validate_tenant_name`]: names
//! become slots and metric labels), re-exported here. A leaf: it uses nothing else of the crate, so tenants, settings, identity and the admin API can
//! all use it without using each other.

pub use agentrt_runtime::validate_tenant_name;

/// The registry slot every tenant's KV-cache policy runs in.
pub const KV_SLOT: &str = "kv";
/// The slot whose `score` ranks a tenant's requests waiting in the proxy's admission queue
/// (`request` items; `--upstream-max-in-flight`).
pub const ADMISSION_SLOT: &str = "admission";
/// The tenant of unauthenticated serving (no API key in force), and the engine-wide policy's.
pub const DEFAULT_TENANT: &str = "default";

/// A secret that a command-line option gives to a tenant (`SECRET=TENANT`), named as that
/// option's errors name it.
#[derive(Debug, Clone, Copy)]
pub struct TenantSecret {
    /// The option, e.g. `--tenant`: errors start with it.
    pub flag: &'static str,
    /// What stands for the secret in the option's syntax, e.g. `API_KEY` in `API_KEY=TENANT`.
    pub placeholder: &'static str,
    /// What the secret is called in a sentence, e.g. `API key`.
    pub noun: &'static str,
}

/// `--tenant API_KEY=TENANT`: requests carrying the key belong to the tenant.
pub const API_KEY: TenantSecret = TenantSecret {
    flag: "--tenant",
    placeholder: "API_KEY",
    noun: "API key",
};

/// `--tenant-admin TOKEN=TENANT`: the token administers that tenant's routes of the admin API.
pub const TENANT_ADMIN_TOKEN: TenantSecret = TenantSecret {
    flag: "--tenant-admin",
    placeholder: "TOKEN",
    noun: "admin token",
};

/// Parse one `SECRET=TENANT` value (`--tenant`, `--tenant-admin`). It splits at the *last* `=`:
/// keys and tokens are often base64 and end in `=` padding, while tenant names cannot contain
/// `=` (they are restricted to letters, digits, `-`, `_` and `.`, which are safe in slot names and
/// Prometheus labels). The error never repeats the value: it holds a secret.
pub fn parse_tenant_secret(raw: &str, secret: TenantSecret) -> Result<(String, String), String> {
    let expected = format!("expected {}=TENANT", secret.placeholder);
    let (key, name) = raw
        .rsplit_once('=')
        .ok_or_else(|| format!("{expected}: there is no `=`"))?;
    if key.is_empty() {
        return Err(format!("{expected}: the {} is empty", secret.noun));
    }
    validate_tenant_name(name).map_err(|e| format!("{expected}: {e}"))?;
    Ok((key.to_string(), name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::{parse_tenant_secret, API_KEY, TENANT_ADMIN_TOKEN};

    fn parse_tenant_key(raw: &str) -> Result<(String, String), String> {
        parse_tenant_secret(raw, API_KEY)
    }

    #[test]
    fn tenant_keys_split_at_the_last_equals_sign() {
        let pair = |k: &str, t: &str| Ok((k.to_string(), t.to_string()));
        // A base64 key with `==` padding: the first `=` is part of the key.
        assert_eq!(
            parse_tenant_key("c2VjcmV0IGtleQ===alpha"),
            pair("c2VjcmV0IGtleQ==", "alpha")
        );
        assert_eq!(parse_tenant_key("plain=team-a.prod_1"), pair("plain", "team-a.prod_1"));
        assert!(parse_tenant_key("no-separator").unwrap_err().contains("no `=`"));
        assert!(parse_tenant_key("=alpha").unwrap_err().contains("API key is empty"));
        assert!(parse_tenant_key("key=").unwrap_err().contains("tenant name is empty"));
        assert!(parse_tenant_key("key=a/b").unwrap_err().contains("'/'"));
        assert!(parse_tenant_key(&format!("key={}", "a".repeat(65)))
            .unwrap_err()
            .contains("longer than 64"));
    }

    #[test]
    fn tenant_admin_tokens_parse_alike_and_their_errors_name_the_token() {
        assert_eq!(
            parse_tenant_secret("dG9rZW4==beta", TENANT_ADMIN_TOKEN),
            Ok(("dG9rZW4=".to_string(), "beta".to_string()))
        );
        let error = parse_tenant_secret("=beta", TENANT_ADMIN_TOKEN).unwrap_err();
        assert_eq!(error, "expected TOKEN=TENANT: the admin token is empty");
        let error = parse_tenant_secret("tok-secret", TENANT_ADMIN_TOKEN).unwrap_err();
        assert!(!error.contains("tok-secret"), "the token is a secret: {error}");
    }
}
