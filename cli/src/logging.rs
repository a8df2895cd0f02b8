//! The process's log: `tracing`'s fmt layer on stderr, filtered by `AGENTRT_LOG` or the command's
//! default.
//!
//! Under the default filter the log records events, not spans. `serve`'s request spans are at
//! `info` for the trace exporter; a log that recorded them too formatted every span's fields for a
//! context prefix its lines do not need (they carry their tenant themselves) — ~6 % of the proxy's
//! CPU at its ceiling (docs/performance.md). With no exporter no layer then wants a span, and the
//! span macros do nothing. An operator's own `AGENTRT_LOG` records what it names, spans included.
//!
//! The exporter's layer is added only when there is one: an absent layer in the stack
//! (`.with(None::<L>)`) says "interested" in every callsite, and every span and event of every
//! level would then be built, only for the log's filter to drop it.

use tracing::Subscriber;
use tracing_subscriber::filter::FilterExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

/// The log layer: `agentrt_log` (the value of `AGENTRT_LOG`) as the filter when it parses, else
/// `default_filter` with spans left out.
pub fn layer<S>(default_filter: &str, agentrt_log: Option<&str>) -> impl Layer<S>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let (filter, with_spans) = match agentrt_log.map(EnvFilter::try_new) {
        Some(Ok(filter)) => (filter, true),
        _ => (EnvFilter::new(default_filter), false),
    };
    let spans = tracing_subscriber::filter::filter_fn(move |meta| with_spans || meta.is_event());
    // Colours only for a person at a terminal: a log file or a collector gets plain text.
    tracing_subscriber::fmt::layer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_filter(filter.and(spans))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt as _;

    const SERVE_DEFAULT: &str = "warn,agentrt_serve=info";

    /// Whether a request-like span and an event of `agentrt_serve` are enabled under the log
    /// layer alone (as `main` builds the stack without an exporter).
    fn enabled_under(agentrt_log: Option<&str>) -> (bool, bool) {
        let subscriber = tracing_subscriber::registry().with(layer(SERVE_DEFAULT, agentrt_log));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "agentrt_serve::request", "request");
            let mut event = false;
            tracing::info!(target: "agentrt_serve::request", marker = { event = true; true }, "x");
            (!span.is_disabled(), event)
        })
    }

    #[test]
    fn the_default_log_creates_no_spans_but_keeps_its_events() {
        assert_eq!(
            enabled_under(None),
            (false, true),
            "(span, event) under the default filter"
        );
    }

    #[test]
    fn an_operators_filter_records_the_spans_it_names() {
        assert_eq!(enabled_under(Some("agentrt_serve=info")), (true, true));
        assert!(
            !enabled_under(Some("warn")).0,
            "a span below the operator's filter was created"
        );
    }
}
