//! A model request's head, read once before a byte of its body: whose request it is (its tenant
//! and a place in the tenant's in-flight quota, [`crate::tenant::admit`]), who calls (the identity
//! headers, [`IdentityHeaders`]) and the lifecycle hints its headers say
//! ([`crate::hints::parse::request_hints`]). A stranger, a tenant at its in-flight limit and a
//! malformed hint header are refused here, so nothing of their body is read. The head is then
//! carried through the request: nothing after it walks the headers again.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use axum::http::HeaderMap;

use super::state::ProxyState;
use crate::front::error::ApiError;
use crate::hints::parse::{request_hints, RequestHints};
use crate::hints::route::invalid_hint;
use crate::identity::IdentityHeaders;
use crate::tenant::admit::{admit, Admitted};
use crate::tenant::{Tenant, TenantPermit};

/// What a request's headers say, read once.
pub(super) struct RequestHead {
    /// Whose request it is.
    pub tenant: Arc<Tenant>,
    /// Its place in the tenant's in-flight quota, held until its end.
    pub permit: TenantPermit,
    /// `x-agent-id` and `x-session-id`.
    pub identity: IdentityHeaders,
    /// `x-agentrt-session-end` and `x-agentrt-next-agent` (taken from the tenant's hint rate
    /// with the body's, once the body is read).
    pub hints: RequestHints,
}

impl RequestHead {
    /// Read `headers`: the caller's tenant and a place in its quota, then the hint headers (a
    /// value they do not accept is a 400 of type `invalid_hint`, counted for the tenant).
    pub async fn read(state: &ProxyState, headers: &HeaderMap) -> Result<Self, ApiError> {
        let Admitted { tenant, permit } = admit(&state.tenants, headers).await?;
        let hints = request_hints(headers).map_err(|message| {
            state.hints.refused(&tenant, "malformed");
            state.metrics.bad_requests.fetch_add(1, Relaxed);
            invalid_hint(message)
        })?;
        Ok(Self {
            tenant,
            permit,
            identity: IdentityHeaders::read(headers),
            hints,
        })
    }
}
