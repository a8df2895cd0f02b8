//! The Grafana dashboard (`deploy/grafana/agentrt.json`) queries only series `agentrt serve`
//! exposes: two proxies on loopback — tenants on a policy behind the admission queue and working-set admission, with an
//! eviction socket for the engine plugin, and tenants behind two replicas (the queue does not combine with replicas yet) — serve a request per
//! tenant, and every `agentrt_*` name in a panel's or variable's query must be a series one of
//! their `/metrics` shows. The same two expositions are held to a golden file of every family's
//! type and HELP text and every series' label names (`tests/fixtures/metrics_names.txt`): what
//! `/metrics` promises its scrapers stays as it was, whoever writes the text.

mod exposition;
mod stub_upstream;
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use agentrt_serve::engine::replicas::ReplicaArgs;
use serde_json::Value;
use support::{call_as, chat, metrics_text, settle, two_tenants, Proxy, Setup};

const DASHBOARD: &str = include_str!("../../../deploy/grafana/agentrt.json");

/// Every query of the dashboard: (where it is, PromQL) for each panel target and each variable.
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a target's expr");
            found.push((format!("panel {}", panel["title"]), expr.to_string()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("variables") {
        if let Some(query) = variable["query"]["query"].as_str() {
            found.push((format!("variable {}", variable["name"]), query.to_string()));
        }
    }
    found
}

/// The `agentrt_*` metric names a PromQL expression names. Label names never start with
/// `agentrt_`, and label values are skipped with the quotes around them.
fn series_named(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            rest = rest[1..].split_once('"').map_or("", |(_, after)| after);
            continue;
        }
        let ident = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        if ident == 0 {
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if rest[..ident].starts_with("agentrt_") {
            names.insert(rest[..ident].to_string());
        }
        rest = &rest[ident..];
    }
    names
}

/// The names of the series a `/metrics` text has samples of (`name{labels} value` or `name value`;
/// a histogram's as its `_bucket`, `_sum` and `_count` series, which is how PromQL names them).
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// (where, name) of every series the dashboard queries that `exposed` lacks.
fn missing(dashboard: &str, exposed: &BTreeSet<String>) -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(dashboard).expect("the dashboard is JSON");
    queries(&dashboard)
        .into_iter()
        .flat_map(|(place, expr)| {
            series_named(&expr)
                .into_iter()
                .filter(|name| !exposed.contains(name))
                .map(move |name| (place.clone(), name))
        })
        .collect()
}

/// One chat request as each of the two tenants, then `/metrics` once they are done.
async fn scrape_after_a_request_per_tenant(p: &Proxy) -> String {
    for key in ["key-a", "key-b"] {
        let body = chat("You are the planner.", "Plan the trip.", "tiny", false).to_string();
        let (status, answer) = call_as(&p.url, "/v1/chat/completions", key, body).await;
        assert_eq!(status, 200, "{answer}");
    }
    settle(p).await;
    metrics_text(p).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_the_dashboard_queries_is_on_metrics() {
    let sockets = tempfile::tempdir().unwrap();
    let queued = Setup {
        admission: Some((4, Duration::from_secs(5))),
        // Working-set admission's series (a fixed capacity: the stub has no /metrics).
        working_set: Some(agentrt_serve::engine::admission::WorkingSetOptions {
            settings: Default::default(),
            capacity_tokens: Some(16_000),
            keepalive: None,
        }),
        eviction_socket: Some(sockets.path().join("evict.sock")),
        // A share of the engine's cache, so its per-tenant series are exposed too.
        shares: [(
            "alpha".to_string(),
            agentrt_runtime::Share {
                min_blocks: 10,
                max_blocks: 20,
            },
        )]
        .into(),
        ..two_tenants("lru")
    }
    .start()
    .await;
    let queued_text = scrape_after_a_request_per_tenant(&queued).await;
    let mut series = exposed(&queued_text);

    let (url_a, _a) = stub_upstream::start().await;
    let (url_b, _b) = stub_upstream::start().await;
    let replicated = Setup {
        replicas: ReplicaArgs {
            replicas: vec![format!("a={url_a}"), format!("b={url_b}")],
            ..ReplicaArgs::default()
        },
        ..two_tenants("lru")
    }
    .start()
    .await;
    let replicated_text = scrape_after_a_request_per_tenant(&replicated).await;
    series.extend(exposed(&replicated_text));

    let mut names = exposition::names(&queued_text, |_| true);
    names.extend(exposition::names(&replicated_text, |_| true));
    exposition::assert_golden(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/metrics_names.txt"),
        &names,
    );

    let queried: BTreeSet<String> = queries(&serde_json::from_str(DASHBOARD).unwrap())
        .iter()
        .flat_map(|(_, expr)| series_named(expr))
        .collect();
    assert!(queried.len() > 40, "the dashboard queries only {queried:?}");
    let absent = missing(DASHBOARD, &series);
    assert!(
        absent.is_empty(),
        "the dashboard queries series /metrics does not expose: {absent:?}"
    );

    // The check itself: one name misspelt in the file is reported, with its panel.
    let misspelt = DASHBOARD.replace(
        "agentrt_tenant_cached_tokens_total",
        "agentrt_tenant_cache_tokens_total",
    );
    let reported = missing(&misspelt, &series);
    assert_eq!(
        reported,
        [(
            "panel \"Prefix-cache hit rate per tenant\"".to_string(),
            "agentrt_tenant_cache_tokens_total".to_string()
        )]
    );
}

#[test]
fn panels_query_the_datasource_variable_and_have_distinct_ids() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).unwrap();
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let datasource = variables
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(
        (datasource["type"].as_str(), datasource["query"].as_str()),
        (Some("datasource"), Some("prometheus"))
    );
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(
            ids.insert(panel["id"].as_u64().expect("a panel id")),
            "id repeated: {panel}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{} queries nothing", panel["title"]);
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
        }
    }
}

#[test]
fn names_are_read_from_promql_without_labels_or_values() {
    let expr = r#"sum by (tenant) (rate(agentrt_a_total{tenant=~"agentrt_not_a_name"}[5m])) / agentrt_b"#;
    assert_eq!(
        series_named(expr),
        BTreeSet::from(["agentrt_a_total".to_string(), "agentrt_b".to_string()])
    );
    let text = "# TYPE agentrt_h histogram\nagentrt_h_bucket{le=\"1\"} 0\nagentrt_c 3\n";
    assert_eq!(
        exposed(text),
        BTreeSet::from(["agentrt_h_bucket".to_string(), "agentrt_c".to_string()])
    );
}
