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
use tracing_subscriber::filter::{FilterExt as _, LevelFilter};
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
    // The span filter passes every level: its hint says so, and the pair's hint is then the
    // filter's own. Without it the pair has none, `log`'s records (Cranelift and regalloc2 log in
    // their inner loops) are all built and dispatched only to be dropped here, and compiling a
    // large component took 4–5x as long in a debug build.
    let spans = tracing_subscriber::filter::filter_fn(move |meta| with_spans || meta.is_event())
        .with_max_level_hint(LevelFilter::TRACE);
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
    ///
    /// A callsite caches its interest across every live subscriber, so tests running side by side
    /// would see each other's: one subscriber at a time, the cache rebuilt under it.
    fn enabled_under(agentrt_log: Option<&str>) -> (bool, bool) {
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let subscriber = tracing_subscriber::registry().with(layer(SERVE_DEFAULT, agentrt_log));
        tracing::subscriber::with_default(subscriber, || {
            tracing::callsite::rebuild_interest_cache();
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

    /// The layer's level hint is its filter's: `init` gives it to `log` as its max level, so a
    /// `log` record below it (Cranelift's and regalloc2's, in their inner loops) is never built.
    #[test]
    fn the_layer_hints_its_filters_most_verbose_level() {
        let hint =
            |agentrt_log| Layer::<tracing_subscriber::Registry>::max_level_hint(&layer(SERVE_DEFAULT, agentrt_log));
        assert_eq!(hint(None), Some(LevelFilter::INFO));
        assert_eq!(hint(Some("warn")), Some(LevelFilter::WARN));
        assert_eq!(hint(Some("debug,agentrt_serve=trace")), Some(LevelFilter::TRACE));
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
