//! Authentication: who a request is, from its headers alone, before a byte of its body is read.
//! Every credential the proxy takes is checked here, and nowhere else:
//!
//! | credential | flag | checked by | refused |
//! |---|---|---|---|
//! | a tenant's API key | `--tenant KEY=TENANT`, `[tenants.*] api-keys` | [`ApiKeys::caller`] → [`Caller`] (tenant + the key's revocation) | 401 |
//! | the operator's admin token | `--admin-token` | [`AdminTokens::authorize`] → [`AdminRole::Operator`] | 401 wrong, 403 disabled |
//! | a tenant admin's token | `--tenant-admin TOKEN=TENANT` | [`AdminTokens::authorize`] → [`AdminRole::TenantAdmin`] | 401 wrong, 403 another tenant |
//! | the metrics token | `--metrics-token` | [`MetricsToken::check`] | 401 |
//!
//! Authentication decides *who*; what the caller may then spend (a place in its tenant's
//! in-flight quota) is the tenant layer's ([`crate::tenant::admit`]). The key table and the admin
//! tokens live in the tenant layer's settings, replaced whole by a reload, which calls
//! [`ApiKeys::revoke_changed`] to cut off the requests of keys it took away. Tokens are compared
//! in constant time; an error never repeats a token.

mod admin;
mod api_keys;
mod bearer;
mod metrics_token;

pub use admin::{AdminRole, AdminTarget, AdminTokens};
pub use api_keys::{ApiKeys, Caller, KeyTable, REVOKED};
pub use metrics_token::MetricsToken;
