//! OpenTelemetry: a request's spans exported over OTLP (http/protobuf) to the operator's
//! collector, and the W3C trace context carried through, so that one trace runs from the agent
//! framework through agentrt into vLLM.
//!
//! Export is on only when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; the exporter then reads the other standard
//! variables itself (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `OTEL_TRACES_SAMPLER`, the batch
//! processor's `OTEL_BSP_*`), and the resource reads `OTEL_SERVICE_NAME` and
//! `OTEL_RESOURCE_ATTRIBUTES` (the service is `agentrt` when neither names one). Spans are batched
//! on the processor's own thread and sent with a blocking HTTP client there: the request path
//! only records them. [`Telemetry`] flushes what is left when dropped, at shutdown.
//!
//! When export is off nothing here costs more than a relaxed load: [`enabled`] is false, no
//! trace context is read from clients or written upstream, and the spans (which the log does not
//! record under its default filter) are not even created.
//!
//! [`propagation`] reads `traceparent` from a client's headers and writes it on upstream requests;
//! the span names and their attributes are listed in docs/deploy.md ("Observability").

pub mod propagation;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use anyhow::{bail, Context as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The variables that turn export on: the generic endpoint and the traces-only one.
pub const ENDPOINT_VARIABLES: [&str; 2] = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"];

/// The service name when `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name none.
pub const DEFAULT_SERVICE_NAME: &str = "agentrt";

/// The crates whose spans are exported, and from which level. Info keeps the per-request spans
/// and leaves out the runtime's debug spans around every policy call (serve's own spans already
/// time them, with the tenant and slot).
const EXPORTED_TARGETS: &str = "agentrt_serve=info,agentrt_mcp=info,agentrt_runtime=info,agentrt_router=info";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: the request path reads and writes trace context only then.
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// The exporter's tracer provider, shut down — its last batch flushed — when dropped.
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        ENABLED.store(false, Relaxed);
        if let Err(e) = self.provider.shutdown() {
            eprintln!("warning: OpenTelemetry spans not all exported at shutdown: {e}");
        }
    }
}

/// The OTLP layer for the process's subscriber when the environment asks for export (see the
/// module's doc), else `None`. A protocol agentrt cannot speak (`grpc`, `http/json`) is an error
/// naming the fix, not a silent loss of every span.
pub fn from_environment<S>() -> anyhow::Result<Option<(impl Layer<S>, Telemetry)>>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    if !ENDPOINT_VARIABLES.iter().any(|name| set(name)) {
        return Ok(None);
    }
    for name in ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"] {
        if let Ok(protocol) = std::env::var(name) {
            if protocol.trim() != "http/protobuf" {
                bail!(
                    "{name}={protocol}: agentrt exports OTLP over http/protobuf only; unset it and point \
                     OTEL_EXPORTER_OTLP_ENDPOINT at the collector's OTLP/HTTP port (4318 by default)"
                );
            }
            break; // the traces-specific variable wins over the generic one
        }
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .context("building the OTLP span exporter from OTEL_EXPORTER_OTLP_*")?;
    let mut resource = Resource::builder();
    let names_service = set("OTEL_SERVICE_NAME")
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    if !names_service {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("agentrt");
    let targets: Targets = EXPORTED_TARGETS.parse().expect("the exported targets parse");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Thread names and source lines would be on every span, and say nothing to an operator.
        .with_threads(false)
        .with_location(false)
        .with_filter(targets);
    ENABLED.store(true, Relaxed);
    Ok(Some((layer, Telemetry { provider })))
}
