//! `/metrics`: what a part of agentrt with figures to show implements ([`Report`]), and the one
//! place their text is written — by the Prometheus project's Rust client (`prometheus-client`),
//! in the classic text format (0.0.4) every scraper reads.
//!
//! agentrt keeps its figures where they are counted (atomics in each room); a [`Report`] reads
//! them at scrape time and hands them to an [`Exposition`], which only names families and
//! series. The library writes every line: `# HELP` (escaped), `# TYPE`, label values (escaped),
//! numbers, a histogram's buckets. So a tenant or server name with a quote or a newline cannot
//! break the text, and no room formats Prometheus by hand.
//!
//! Names are the series' names as scraped: a counter's ends in `_total` (the library writes
//! a counter family's name with `_total`, so it is given without).
//!
//! ## Modules in detail
//!
//! What `/metrics` is made of: `Report` (a room's families, read at scrape time from its own
//! counters), `Exposition` (one family at a time: `counter`, `gauge`, labelled `counters`/`gauges`,
//! `histogram`, and `table` — each of a list of families read from every tenant, slot or replica),
//! `Reports` (the route's list, in order). Every line is written by the Prometheus project's Rust
//! client (`prometheus-client`, its classic text encoder): HELP escaped, label values escaped,
//! numbers formatted, histogram buckets made cumulative; no room formats the text by hand. A
//! counter is named as scraped, ending in `_total`. Golden files in `host/serve/tests/fixtures/`
//! hold every family's type and help and every series' label names (`AGENTRT_BLESS=1` rewrites them
//! when a series is added on purpose).

use std::fmt;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    CounterValueEncoder, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, GaugeValueEncoder,
    MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`Reports::render`] writes.
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A part of agentrt with series for `/metrics`: it names them, with their help and values, to
/// the [`Exposition`] it is given. Each family once per scrape, all its series together.
pub trait Report: Send + Sync {
    /// This part's families and series, read now.
    fn report(&self, out: &mut Exposition<'_>) -> fmt::Result;
}

/// Where a [`Report`] puts its families: each call writes one family — its `# HELP` and
/// `# TYPE` lines, then its series.
pub struct Exposition<'a> {
    encoder: DescriptorEncoder<'a>,
}

/// No labels: `[]` as a series' label set.
pub const NO_LABELS: [(&str, &str); 0] = [];

/// A histogram read at scrape time: per-bucket counts (not cumulative) by upper bound, ascending,
/// and the sum and count of every observation (those past the last bound included).
pub struct HistogramFigures<'a> {
    pub buckets: &'a [(f64, u64)],
    pub sum: f64,
    pub count: u64,
}

/// A figure as read: a count, or a measure (seconds, bytes as a float).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Figure {
    Count(u64),
    Measure(f64),
}

impl From<u64> for Figure {
    fn from(n: u64) -> Self {
        Figure::Count(n)
    }
}

impl From<f64> for Figure {
    fn from(x: f64) -> Self {
        Figure::Measure(x)
    }
}

impl EncodeCounterValue for Figure {
    fn encode(&self, encoder: &mut CounterValueEncoder) -> fmt::Result {
        match self {
            Figure::Count(n) => EncodeCounterValue::encode(n, encoder),
            Figure::Measure(x) => EncodeCounterValue::encode(x, encoder),
        }
    }
}

impl EncodeGaugeValue for Figure {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> fmt::Result {
        match self {
            Figure::Count(n) => EncodeGaugeValue::encode(n, encoder),
            Figure::Measure(x) => EncodeGaugeValue::encode(x, encoder),
        }
    }
}

/// Whether a family only grows (a counter: its name ends in `_total`) or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One family of a table read from many things of one kind — tenants, policy slots, replicas:
/// its name, kind, help, and how to read its figure from one of them.
pub struct Family<T: ?Sized> {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub read: fn(&T) -> Figure,
}

impl Exposition<'_> {
    /// Each of `families` in turn, with one series per row: the row's labels and its figure.
    /// Written family by family, as the text format wants every family's series together.
    pub fn table<T: ?Sized, L: EncodeLabelSet + Clone>(
        &mut self,
        families: &[Family<T>],
        rows: &[(L, &T)],
    ) -> fmt::Result {
        for family in families {
            let series = rows.iter().map(|(labels, row)| (labels.clone(), (family.read)(row)));
            self.family(family.kind, family.name, family.help, series)?;
        }
        Ok(())
    }

    /// A family of either kind: [`Self::counters`] or [`Self::gauges`].
    pub fn family<L, V>(
        &mut self,
        kind: Kind,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result
    where
        L: EncodeLabelSet,
        V: EncodeCounterValue + EncodeGaugeValue,
    {
        match kind {
            Kind::Counter => self.counters(name, help, series),
            Kind::Gauge => self.gauges(name, help, series),
        }
    }

    /// One unlabelled counter; `name` ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &str, value: impl EncodeCounterValue) -> fmt::Result {
        self.counters(name, help, [(NO_LABELS, value)])
    }

    /// One unlabelled gauge.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> fmt::Result {
        self.gauges(name, help, [(NO_LABELS, value)])
    }

    /// A counter family, `name` ending in `_total`: one series per `(labels, value)`. An empty
    /// `series` still writes the family's HELP and TYPE, so scrapers learn of it before its
    /// first series.
    pub fn counters<L, V>(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (L, V)>) -> fmt::Result
    where
        L: EncodeLabelSet,
        V: EncodeCounterValue,
    {
        let mut family = self.descriptor(counter_family(name), help, MetricType::Counter)?;
        for (labels, value) in series {
            family
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, V, u64>(&value, None)?;
        }
        Ok(())
    }

    /// A gauge family: one series per `(labels, value)`.
    pub fn gauges<L, V>(&mut self, name: &str, help: &str, series: impl IntoIterator<Item = (L, V)>) -> fmt::Result
    where
        L: EncodeLabelSet,
        V: EncodeGaugeValue,
    {
        let mut family = self.descriptor(name, help, MetricType::Gauge)?;
        for (labels, value) in series {
            family.encode_family(&labels)?.encode_gauge(&value)?;
        }
        Ok(())
    }

    /// An unlabelled histogram: `name_bucket{le}`, `name_sum`, `name_count`.
    pub fn histogram(&mut self, name: &str, help: &str, figures: &HistogramFigures<'_>) -> fmt::Result {
        self.descriptor(name, help, MetricType::Histogram)?
            .encode_histogram::<NoLabelSet>(figures.sum, figures.count, figures.buckets, None)
    }

    fn descriptor<'s>(
        &'s mut self,
        name: &'s str,
        help: &str,
        kind: MetricType,
    ) -> Result<MetricEncoder<'s>, fmt::Error> {
        self.encoder.encode_descriptor(name, help, None, kind)
    }
}

/// A counter's family name: the series' name without the `_total` the library adds back.
fn counter_family(name: &str) -> &str {
    debug_assert!(name.ends_with("_total"), "counter {name} must end in _total");
    name.strip_suffix("_total").unwrap_or(name)
}

/// The reports `/metrics` shows, in order.
#[derive(Clone)]
pub struct Reports(Arc<[Arc<dyn Report>]>);

impl Reports {
    pub fn new(reports: Vec<Arc<dyn Report>>) -> Self {
        Self(reports.into())
    }

    /// Every report's families, in order, as Prometheus text ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self.clone()));
        let mut text = String::new();
        // Writing to a String cannot fail, and reports only pass on the encoder's errors; were
        // one to fail anyway, the scrape gets an empty text and the log says why.
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, &registry) {
            tracing::warn!(error = %e, "/metrics: a report failed; the scrape is empty");
        }
        text
    }
}

impl fmt::Debug for Reports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} reports", self.0.len())
    }
}

impl Collector for Reports {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let mut out = Exposition { encoder };
        for report in self.0.iter() {
            report.report(&mut out)?;
        }
        Ok(())
    }
}

/// One report's text on its own (tests, and callers that show one part).
pub fn render_one(report: Arc<dyn Report>) -> String {
    Reports::new(vec![report]).render()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sample;

    impl Report for Sample {
        fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
            out.counter("demo_requests_total", "Requests received.", 3u64)?;
            out.gauges(
                "demo_in_flight",
                "Requests being served, by tenant.",
                [([("tenant", "a\"b")], 2u64), ([("tenant", "c")], 0)],
            )?;
            out.counters(
                "demo_empty_total",
                "A family with no series yet.",
                Vec::<([(&str, &str); 1], u64)>::new(),
            )?;
            out.counter("demo_seconds_total", "Time spent.", 0.25f64)?;
            out.histogram(
                "demo_overhead_seconds",
                "Time added.",
                &HistogramFigures {
                    buckets: &[(0.0001, 1), (0.001, 2)],
                    sum: 0.0021,
                    count: 4,
                },
            )
        }
    }

    #[test]
    fn families_are_written_by_the_library_under_the_names_given() {
        let text = render_one(Arc::new(Sample));
        let expected = "\
# HELP demo_requests_total Requests received.
# TYPE demo_requests_total counter
demo_requests_total 3
# HELP demo_in_flight Requests being served, by tenant.
# TYPE demo_in_flight gauge
demo_in_flight{tenant=\"a\\\"b\"} 2
demo_in_flight{tenant=\"c\"} 0
# HELP demo_empty_total A family with no series yet.
# TYPE demo_empty_total counter
# HELP demo_seconds_total Time spent.
# TYPE demo_seconds_total counter
demo_seconds_total 0.25
# HELP demo_overhead_seconds Time added.
# TYPE demo_overhead_seconds histogram
demo_overhead_seconds_bucket{le=\"0.0001\"} 1
demo_overhead_seconds_bucket{le=\"0.001\"} 3
demo_overhead_seconds_bucket{le=\"+Inf\"} 4
demo_overhead_seconds_sum 0.0021
demo_overhead_seconds_count 4
";
        assert_eq!(text, expected);
    }

    #[test]
    fn reports_are_written_in_order() {
        struct One(&'static str);
        impl Report for One {
            fn report(&self, out: &mut Exposition<'_>) -> fmt::Result {
                out.gauge(self.0, "A figure.", 1u64)
            }
        }
        let text = Reports::new(vec![Arc::new(One("b_figure")), Arc::new(One("a_figure"))]).render();
        let b = text.find("b_figure 1").expect("b");
        let a = text.find("a_figure 1").expect("a");
        assert!(b < a, "{text}");
    }
}
