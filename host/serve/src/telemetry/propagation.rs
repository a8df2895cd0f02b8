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

/// `span` made the child of the trace context in `headers`, when the client sent one and export
/// is on. A malformed `traceparent` is ignored (the W3C rule): the span starts a trace of its own.
pub fn adopt_client_parent(span: &Span, headers: &HeaderMap) {
    if !super::enabled() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
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

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
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
