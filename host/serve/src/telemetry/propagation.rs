//! W3C trace context (`traceparent`, `tracestate`) in and out: the span of a client's request
//! becomes the child of the span the client sent, and every request agentrt sends upstream on its
//! behalf carries agentrt's span as the parent, so the engine's spans join the same trace.
//!
//! Both do nothing while export is off ([`super::enabled`]): a client's `traceparent` then passes
//! to no one, as before.

use axum::http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The most of a client's `tracestate` carried (W3C Trace Context §3.3.1.5: a platform may cut the
/// list to 512 characters, dropping members over 128 first, then from the end). The state is
/// copied onto every span of the request's trace: uncut, a client's 32 members made each request
/// export 44.7 KB of spans instead of 1.9 KB.
pub const MAX_TRACESTATE_BYTES: usize = 512;
const MAX_TRACESTATE_MEMBER_BYTES: usize = 128;

/// `span` made the child of the trace context in `headers`, when the client sent one and export
/// is on. A malformed `traceparent` is ignored (the W3C rule): the span starts a trace of its own.
/// The client's `tracestate` is cut to [`MAX_TRACESTATE_BYTES`].
pub fn adopt_client_parent(span: &Span, headers: &HeaderMap) {
    if !super::enabled() {
        return;
    }
    let tracestate = headers
        .get("tracestate")
        .and_then(|v| v.to_str().ok())
        .map(bounded_tracestate);
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor { headers, tracestate });
    // Fails only when the span was not created by the OpenTelemetry layer (filtered out): then
    // there is nothing to parent.
    let _ = span.set_parent(parent);
}

/// `request` with `span`'s trace context in its headers, when export is on.
pub fn inject_into(span: &Span, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    if !super::enabled() {
        return request;
    }
    let mut headers = HeaderInjector(Vec::with_capacity(2));
    TraceContextPropagator::new().inject_context(&span.context(), &mut headers);
    headers
        .0
        .into_iter()
        .fold(request, |request, (name, value)| request.header(name, value))
}

/// `tracestate` cut as the W3C allows: members over 128 bytes dropped, then members from the end
/// until the list fits [`MAX_TRACESTATE_BYTES`].
fn bounded_tracestate(tracestate: &str) -> String {
    let mut kept = String::new();
    let members = tracestate.split(',').map(str::trim).filter(|m| !m.is_empty());
    for member in members.filter(|m| m.len() <= MAX_TRACESTATE_MEMBER_BYTES) {
        let needed = member.len() + usize::from(!kept.is_empty());
        if kept.len() + needed > MAX_TRACESTATE_BYTES {
            break;
        }
        if !kept.is_empty() {
            kept.push(',');
        }
        kept.push_str(member);
    }
    kept
}

struct HeaderExtractor<'a> {
    headers: &'a HeaderMap,
    /// The client's `tracestate`, already cut.
    tracestate: Option<String>,
}

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        if key.eq_ignore_ascii_case("tracestate") {
            return self.tracestate.as_deref();
        }
        self.headers.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.headers.keys().map(|k| k.as_str()).collect()
    }
}

struct HeaderInjector(Vec<(&'static str, String)>);

impl Injector for HeaderInjector {
    fn set(&mut self, key: &str, value: String) {
        // The propagator writes only its own two header names; anything else is not ours to send.
        let name = match key {
            "traceparent" => "traceparent",
            "tracestate" => "tracestate",
            _ => return,
        };
        self.0.push((name, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_tracestate_is_cut_to_512_bytes_dropping_oversized_members_first() {
        let members: Vec<String> = (0..32).map(|i| format!("vendor{i:02}={}", "x".repeat(60))).collect();
        let cut = bounded_tracestate(&members.join(","));
        assert!(cut.len() <= MAX_TRACESTATE_BYTES, "{} bytes", cut.len());
        assert!(cut.starts_with("vendor00="), "the first members are kept: {cut}");
        let huge = format!("big={},small=1", "y".repeat(200));
        assert_eq!(bounded_tracestate(&huge), "small=1");
        assert_eq!(bounded_tracestate("a=1, b=2"), "a=1,b=2");
    }
}
