//! Reading a request's body, on every route that reads one — the model routes, the hints
//! endpoint, policy uploads and (through the same budget) the MCP gateway: after the caller is
//! authenticated, under the route's size limit, to a deadline (`--body-idle-timeout-ms`,
//! `--body-min-bytes-per-s`) and within one byte budget for every body being read
//! (`--max-reading-mib`) and one per tenant (`--max-reading-mib-per-tenant`)
//! ([`agentrt_guards::body_read`]). A body that misses its deadline is a 408, one over the
//! tenant's budget a 429 and one over the proxy's a 503, each naming its flag; the connection is
//! closed after the answer (the unread rest of the body is still on it).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use agentrt_exposition::{Exposition, Report};
use agentrt_guards::body_read::{self, BodyBudget, BodyError, BodyHold, BodyTiming, Exhausted};
use axum::body::{Body, Bytes};

use crate::front::error::ApiError;

/// The reasons a body read is refused, as `/metrics` labels them.
const REASONS: [&str; 6] = ["too_large", "tenant_budget", "budget", "stalled", "too_slow", "broken"];

/// How every body is read: its timing and the budget the bodies being read share.
pub struct BodyReading {
    /// The bytes of every body being read, in all and per tenant.
    pub budget: Arc<BodyBudget>,
    /// How fast a body must arrive.
    pub timing: BodyTiming,
    refused: [AtomicU64; REASONS.len()],
}

impl BodyReading {
    /// Bodies read under `timing` within `budget`.
    pub fn new(budget: Arc<BodyBudget>, timing: BodyTiming) -> Arc<Self> {
        Arc::new(Self {
            budget,
            timing,
            refused: Default::default(),
        })
    }

    /// Read `body` whole — at most `limit` bytes (`flag` sets it), every byte counted in `hold`
    /// — or the error to answer with (the caller closes the connection after it).
    pub async fn read(&self, body: Body, limit: usize, flag: &str, hold: &mut BodyHold) -> Result<Bytes, ApiError> {
        body_read::read(body, limit, hold, &self.timing).await.map_err(|e| {
            self.count(&e);
            self.refusal(&e, flag)
        })
    }

    /// Count a refusal another edge (the MCP gateway) answered itself.
    pub fn count(&self, e: &BodyError) {
        if let Some(i) = REASONS.iter().position(|r| *r == e.reason()) {
            self.refused[i].fetch_add(1, Relaxed);
        }
    }

    /// `e` as the proxy answers it, naming the flag that set the bound it passed (`flag`: the
    /// size limit's).
    pub fn refusal(&self, e: &BodyError, flag: &str) -> ApiError {
        let (to_fix, retry) = (
            "send it again after Retry-After, or send it in smaller requests",
            "send it again after Retry-After",
        );
        match e {
            BodyError::TooLarge { limit } => ApiError::payload_too_large(format!(
                "request body is larger than {limit} bytes (the proxy's {flag})"
            )),
            BodyError::OverBudget(Exhausted::Tenant { .. }) => ApiError::too_many_requests(format!(
                "{e} (--max-reading-mib-per-tenant {}); {to_fix}",
                self.budget.per_tenant() >> 20
            )),
            BodyError::OverBudget(Exhausted::All { .. }) => ApiError::unavailable(format!(
                "{e} (--max-reading-mib {}); {retry}",
                self.budget.total() >> 20
            )),
            BodyError::Stalled { .. } => ApiError::request_timeout(format!(
                "{e} (the proxy's --body-idle-timeout-ms); send the body without pauses"
            )),
            BodyError::TooSlow { .. } => ApiError::request_timeout(format!(
                "{e} (the proxy's --body-min-bytes-per-s, after --body-idle-timeout-ms of grace)"
            )),
            BodyError::Broken(_) => ApiError::bad_request(e.to_string()),
        }
    }
}

/// The bodies being read and the reads refused.
impl Report for BodyReading {
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
        out.gauge(
            "agentrt_proxy_body_reading_bytes",
            "Bytes of request bodies being read now (bounded by --max-reading-mib).",
            self.budget.held() as u64,
        )?;
        out.counters(
            "agentrt_proxy_body_reads_refused_total",
            "Request bodies not read whole: too_large (the route's size limit), tenant_budget \
             (--max-reading-mib-per-tenant), budget (--max-reading-mib), stalled (--body-idle-timeout-ms), \
             too_slow (--body-min-bytes-per-s), broken (the connection failed).",
            REASONS
                .iter()
                .zip(&self.refused)
                .map(|(reason, n)| ([("reason", *reason)], n.load(Relaxed))),
        )
    }
}
