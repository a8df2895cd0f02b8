//! A request let in, from its headers alone, before a byte of its body is read: who it is
//! ([`crate::auth`]: the key's tenant and the key's revocation), that tenant (started on first
//! use), and a place in its in-flight quota. Authentication decides who; the tenant decides how
//! much. A stranger gets 401 and a tenant at its quota 429, and neither has its body read.

use std::sync::Arc;

use axum::http::HeaderMap;

use crate::front::error::ApiError;
use crate::tenant::{Tenant, TenantPermit, Tenants};

/// A request let in: its tenant, and its place in the tenant's in-flight quota (held until the
/// request ends; it also carries the revocation of the key the request was made with).
pub struct Admitted {
    /// The tenant the request's key names, started if it was new.
    pub tenant: Arc<Tenant>,
    /// The request's place in the tenant's in-flight quota; dropping it gives the place back.
    pub permit: TenantPermit,
}

/// The caller's tenant, from the headers alone. A new tenant's policy starts on a blocking
/// thread: instantiating it must not hold an async worker other tenants' requests need.
pub async fn tenant_of(tenants: &Arc<Tenants>, headers: &HeaderMap) -> Result<Arc<Tenant>, ApiError> {
    Ok(caller(tenants, headers).await?.0)
}

/// The caller's tenant and a place in its in-flight quota.
pub async fn admit(tenants: &Arc<Tenants>, headers: &HeaderMap) -> Result<Admitted, ApiError> {
    let (tenant, revoked) = caller(tenants, headers).await?;
    let permit = tenant.admit_as(revoked)?;
    Ok(Admitted { tenant, permit })
}

async fn caller(
    tenants: &Arc<Tenants>,
    headers: &HeaderMap,
) -> Result<(Arc<Tenant>, tokio_util::sync::CancellationToken), ApiError> {
    let caller = tenants.authenticate(headers)?;
    if let Some(tenant) = tenants.get(&caller.tenant) {
        return Ok((tenant, caller.revoked));
    }
    let starting = tenants.clone();
    let name = caller.tenant;
    let tenant = tokio::task::spawn_blocking(move || starting.get_or_start(&name))
        .await
        .map_err(|e| ApiError::internal(format!("starting the tenant's policy did not finish: {e}")))??;
    Ok((tenant, caller.revoked))
}
