//! docs/admin-api.md documents every route of `agentrt serve`'s router, each under a heading
//! `` ### `METHOD /path` `` with a curl example, and no route the router no longer has. The routes
//! are read from the source where the routers are built (`.route("PATH", METHOD(handler))`), so a
//! route added without its documentation fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `METHOD /path` of every `.route("/path", method(…))` in `text`.
fn routes_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for piece in text.split(".route(\"").skip(1) {
        let Some((path, rest)) = piece.split_once('"') else {
            continue;
        };
        let method = rest.trim_start_matches([',', ' ', '\n']);
        let method: String = method.chars().take_while(char::is_ascii_alphabetic).collect();
        if path.starts_with('/') && !method.is_empty() {
            found.push(format!("{} {path}", method.to_ascii_uppercase()));
        }
    }
    found
}

/// The routes the router is built from, and the MCP gateway's (one per `--mcp-server`).
fn router_routes() -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(&repo().join("host/serve/src"), &mut files);
    let mut routes: BTreeSet<String> = files
        .iter()
        .flat_map(|f| routes_in(&std::fs::read_to_string(f).unwrap()))
        .collect();
    let gateway = std::fs::read_to_string(repo().join("host/mcp/src/routes.rs")).unwrap();
    assert!(
        gateway.contains("format!(\"/mcp/{}\""),
        "the gateway's route moved: update this test"
    );
    routes.insert("POST /mcp/{server}".to_string());
    routes
}

/// The routes docs/admin-api.md has a heading for.
fn documented_routes() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(repo().join("docs/admin-api.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .filter_map(|l| l.strip_suffix('`'))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_route_of_the_router_is_documented_with_an_example_and_no_other() {
    let routes = router_routes();
    assert!(
        routes.contains("PUT /admin/tenants/{tenant}/policy") && routes.contains("GET /metrics"),
        "the routes were not found in the source: {routes:?}"
    );
    let documented = documented_routes();
    let missing: Vec<_> = routes.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&routes).collect();
    assert!(
        missing.is_empty(),
        "routes without a section in docs/admin-api.md: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "docs/admin-api.md documents routes the router lacks: {stale:?}"
    );

    // Each section shows the route called with curl.
    let doc = std::fs::read_to_string(repo().join("docs/admin-api.md")).unwrap();
    for route in &routes {
        let section = doc.split(&format!("### `{route}`")).nth(1).unwrap();
        let section = section.split("\n### ").next().unwrap();
        let path = route.split_once(' ').unwrap().1;
        let stem = path.split('{').next().unwrap();
        assert!(
            section.contains("curl ") && section.contains(stem),
            "the section of {route} has no curl example calling {stem}"
        );
    }
}

#[test]
fn the_route_reader_reads_a_router_as_rustfmt_lays_it_out() {
    let text = "Router::new()\n    .route(\"/a/{x}\", put(f))\n    .route(\"/b\", get(g))\n    .with_state(s)";
    assert_eq!(routes_in(text), ["PUT /a/{x}", "GET /b"]);
    assert!(routes_in("self.router.route(&request)").is_empty());
}
