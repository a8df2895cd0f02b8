//! Who may use which admin route. There are two kinds of admin token:
//!
//! - the operator's (`--admin-token`): every route, every tenant;
//! - a tenant's (`--tenant-admin TOKEN=TENANT`): only that tenant's own routes,
//!   `/admin/tenants/{its name}/…` (its policy, stats and forecasts). It cannot list the tenants,
//!   nor touch another tenant: 403.
//!
//! This module is the only place that rule is written down; the admin handlers ask
//! [`AdminTokens::authorize`] from the headers alone, before a byte of the body is read.

use std::collections::HashMap;

use axum::http::HeaderMap;

use super::bearer::{constant_time_eq, given_bearer};
use crate::front::error::ApiError;
use crate::names::DEFAULT_TENANT;

/// What an admin request acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminTarget<'a> {
    /// Every tenant at once: `GET /admin/tenants`.
    AllTenants,
    /// One tenant's routes: `/admin/tenants/{tenant}/…`.
    Tenant(&'a str),
}

/// Whose token a request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminRole {
    /// The operator (`--admin-token`): may act on every tenant.
    Operator,
    /// The admin of this one tenant.
    TenantAdmin(String),
}

impl AdminRole {
    /// The rule: the operator may act on anything; a tenant's admin only on its own tenant.
    pub fn may(&self, target: AdminTarget<'_>) -> bool {
        match (self, target) {
            (AdminRole::Operator, _) => true,
            (AdminRole::TenantAdmin(own), AdminTarget::Tenant(tenant)) => own == tenant,
            (AdminRole::TenantAdmin(_), AdminTarget::AllTenants) => false,
        }
    }

    /// Why this role may not act on `target`: what it may act on instead.
    fn refusal(&self, target: AdminTarget<'_>) -> String {
        let AdminRole::TenantAdmin(own) = self else {
            return "the operator's token was refused".into();
        };
        let instead = match target {
            AdminTarget::AllTenants => "; listing every tenant needs the operator's --admin-token",
            AdminTarget::Tenant(_) => ", not on another tenant",
        };
        format!("this admin token acts only on tenant `{own}` (/admin/tenants/{own}/…){instead}")
    }
}

/// The admin API's tokens. Without any, the API is disabled.
#[derive(Debug, Clone, Default)]
pub struct AdminTokens {
    operator: Option<String>,
    /// (token, tenant) pairs: few, and each compared in full on every request.
    tenants: Vec<(String, String)>,
}

impl AdminTokens {
    /// The operator's token alone (`None`: the admin API is disabled).
    pub fn operator(token: Option<String>) -> Self {
        Self {
            operator: token,
            tenants: Vec::new(),
        }
    }

    /// The operator's token and the tenants' (token → tenant), checked against the tenants' API
    /// keys (`--tenant`, key → tenant): a tenant token must name a tenant that requests can reach
    /// (one `--tenant` names; `default` without any), and no secret may serve two roles — an
    /// admin token that is also an API key would make every client holding the key an admin. The
    /// errors never repeat a token.
    pub fn new(
        operator: Option<String>,
        tenant_tokens: HashMap<String, String>,
        api_keys: &HashMap<String, String>,
    ) -> Result<Self, String> {
        if operator.as_ref().is_some_and(|token| api_keys.contains_key(token)) {
            return Err(
                "--admin-token is also an API key given with --tenant; give the operator a token of its own".into(),
            );
        }
        let mut tenants: Vec<(String, String)> = tenant_tokens.into_iter().collect();
        // A stable order: which tenant an error names must not depend on hashing.
        tenants.sort_by(|a, b| a.1.cmp(&b.1));
        for (token, tenant) in &tenants {
            if operator.as_ref() == Some(token) {
                return Err(format!(
                    "--tenant-admin: the token for tenant `{tenant}` is also --admin-token; give each role a token of its own"
                ));
            }
            if api_keys.contains_key(token) {
                return Err(format!(
                    "--tenant-admin: the token for tenant `{tenant}` is also an API key given with --tenant; give admins tokens of their own"
                ));
            }
            let reachable = if api_keys.is_empty() {
                tenant == DEFAULT_TENANT
            } else {
                api_keys.values().any(|name| name == tenant)
            };
            if !reachable {
                let why = if api_keys.is_empty() {
                    format!("without --tenant every request belongs to `{DEFAULT_TENANT}`")
                } else {
                    "no --tenant names it".to_string()
                };
                return Err(format!(
                    "--tenant-admin: tenant `{tenant}` receives no requests ({why}); check the name"
                ));
            }
        }
        Ok(Self { operator, tenants })
    }

    /// Each tenant admin's (token, tenant), for comparing two settings (never for showing).
    pub fn tenant_tokens(&self) -> impl Iterator<Item = (&str, &str)> {
        self.tenants
            .iter()
            .map(|(token, tenant)| (token.as_str(), tenant.as_str()))
    }

    /// Whether any token is configured (otherwise the admin API answers 403 to everyone).
    pub fn enabled(&self) -> bool {
        self.operator.is_some() || !self.tenants.is_empty()
    }

    /// Accept the request only if its bearer token's role may act on `target`: 401 without a
    /// known token, 403 when the API is disabled or the token belongs to another tenant.
    pub fn authorize(&self, headers: &HeaderMap, target: AdminTarget<'_>) -> Result<AdminRole, ApiError> {
        if !self.enabled() {
            return Err(ApiError::forbidden(
                "the admin API is disabled: start `agentrt serve` with --admin-token (or --tenant-admin TOKEN=TENANT)",
            ));
        }
        let given = given_bearer(headers, "admin token")?;
        let role = self
            .role_of(given)
            .ok_or_else(|| ApiError::unauthorized("wrong admin token"))?;
        if role.may(target) {
            Ok(role)
        } else {
            Err(ApiError::forbidden(role.refusal(target)))
        }
    }

    /// The role whose token is `given`. Every token is compared in full, so response time says
    /// nothing about which token, or how much of one, a guess matched.
    fn role_of(&self, given: &str) -> Option<AdminRole> {
        let mut role = None;
        if let Some(operator) = &self.operator {
            if constant_time_eq(given.as_bytes(), operator.as_bytes()) {
                role = Some(AdminRole::Operator);
            }
        }
        for (token, tenant) in &self.tenants {
            if constant_time_eq(given.as_bytes(), token.as_bytes()) {
                role = Some(AdminRole::TenantAdmin(tenant.clone()));
            }
        }
        role
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
        headers
    }

    /// Operator `op`, alpha's admin `ta`, beta's admin `tb`.
    fn tokens() -> AdminTokens {
        AdminTokens::new(
            Some("op".into()),
            map(&[("ta", "alpha"), ("tb", "beta")]),
            &map(&[("key-a", "alpha"), ("key-b", "beta")]),
        )
        .unwrap()
    }

    fn status(tokens: &AdminTokens, token: &str, target: AdminTarget<'_>) -> StatusCode {
        match tokens.authorize(&bearer(token), target) {
            Ok(_) => StatusCode::OK,
            Err(e) => e.status,
        }
    }

    #[test]
    fn the_operator_may_do_everything_a_tenant_admin_only_its_own_tenant() {
        let t = tokens();
        use AdminTarget::*;
        assert_eq!(status(&t, "op", AllTenants), StatusCode::OK);
        assert_eq!(status(&t, "op", Tenant("alpha")), StatusCode::OK);
        assert_eq!(status(&t, "op", Tenant("anyone")), StatusCode::OK);
        assert_eq!(status(&t, "ta", Tenant("alpha")), StatusCode::OK);
        assert_eq!(status(&t, "tb", Tenant("beta")), StatusCode::OK);
        assert_eq!(status(&t, "ta", Tenant("beta")), StatusCode::FORBIDDEN);
        assert_eq!(status(&t, "tb", Tenant("alpha")), StatusCode::FORBIDDEN);
        assert_eq!(status(&t, "ta", AllTenants), StatusCode::FORBIDDEN);
        // A name that merely starts like the tenant's is another tenant.
        assert_eq!(status(&t, "ta", Tenant("alpha2")), StatusCode::FORBIDDEN);
        assert_eq!(
            t.authorize(&bearer("ta"), Tenant("alpha")).unwrap(),
            AdminRole::TenantAdmin("alpha".into())
        );
    }

    #[test]
    fn unknown_or_missing_tokens_are_401_and_no_token_at_all_disables_the_api() {
        let t = tokens();
        assert_eq!(
            status(&t, "guess", AdminTarget::Tenant("alpha")),
            StatusCode::UNAUTHORIZED
        );
        // An API key is not an admin token.
        assert_eq!(
            status(&t, "key-a", AdminTarget::Tenant("alpha")),
            StatusCode::UNAUTHORIZED
        );
        let missing = t.authorize(&HeaderMap::new(), AdminTarget::AllTenants).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        let disabled = AdminTokens::operator(None)
            .authorize(&bearer("op"), AdminTarget::AllTenants)
            .unwrap_err();
        assert_eq!(disabled.status, StatusCode::FORBIDDEN);
        assert!(
            disabled.message.contains("admin API is disabled"),
            "{}",
            disabled.message
        );
        // Tenant tokens alone enable the API, for their tenants only.
        let only_tenants = AdminTokens::new(None, map(&[("ta", "alpha")]), &map(&[("key-a", "alpha")])).unwrap();
        assert_eq!(
            status(&only_tenants, "ta", AdminTarget::Tenant("alpha")),
            StatusCode::OK
        );
        assert_eq!(
            status(&only_tenants, "ta", AdminTarget::AllTenants),
            StatusCode::FORBIDDEN
        );
    }

    #[test]
    fn a_refusal_names_the_tokens_own_tenant_and_what_it_may_not_do() {
        let t = tokens();
        let listing = t.authorize(&bearer("ta"), AdminTarget::AllTenants).unwrap_err();
        assert!(
            listing.message.contains("`alpha`") && listing.message.contains("--admin-token"),
            "{}",
            listing.message
        );
        assert_eq!(listing.kind, "permission_error");
        let other = t.authorize(&bearer("ta"), AdminTarget::Tenant("beta")).unwrap_err();
        assert!(other.message.contains("only on tenant `alpha`"), "{}", other.message);
    }

    #[test]
    fn tokens_that_serve_two_roles_or_name_an_unreachable_tenant_are_refused_without_the_token() {
        let keys = map(&[("key-a", "alpha")]);
        let error = |operator: Option<&str>, tenant_tokens: &[(&str, &str)], keys: &HashMap<String, String>| {
            AdminTokens::new(operator.map(str::to_string), map(tenant_tokens), keys).unwrap_err()
        };
        let same_as_operator = error(Some("tok-secret"), &[("tok-secret", "alpha")], &keys);
        assert!(same_as_operator.contains("also --admin-token"), "{same_as_operator}");
        let an_api_key = error(None, &[("key-a", "alpha")], &keys);
        assert!(an_api_key.contains("also an API key"), "{an_api_key}");
        let operator_api_key = error(Some("key-a"), &[], &keys);
        assert!(
            operator_api_key.contains("--admin-token is also an API key"),
            "{operator_api_key}"
        );
        let typo = error(None, &[("tok-secret", "alpah")], &keys);
        assert!(
            typo.contains("`alpah`") && typo.contains("no --tenant names it"),
            "{typo}"
        );
        let single_tenant = error(None, &[("tok-secret", "alpha")], &HashMap::new());
        assert!(single_tenant.contains("`default`"), "{single_tenant}");
        for message in [same_as_operator, an_api_key, operator_api_key, typo, single_tenant] {
            assert!(
                !message.contains("tok-secret") && !message.contains("key-a"),
                "{message}"
            );
        }
        assert!(AdminTokens::new(None, map(&[("t", "default")]), &HashMap::new()).is_ok());
    }
}
