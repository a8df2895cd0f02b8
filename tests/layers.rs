//! The layering the code promises, read from the source: no top-level folder both above and below
//! another, no circle of modules in any crate of the workspace, and in `host/serve` no module that
//! uses a layer above its own.
//!
//! A module's edges are the other modules of its crate it names — in `use` items and in paths
//! (`crate::a::b::X`, `super::X`, `self::a::X`), the `#[cfg(test)]` part of a file and comments left out. A path
//! names the longest module prefix that exists (`crate::tenant::quotas::Quotas` → `tenant::quotas`);
//! the crate root, a facade of re-exports, is left out.
//! A folder's `mod.rs` may use its parts; a part that used `mod.rs` back would be a circle, so
//! what the parts share lives in a part of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's root (this crate is `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Each workspace member's `src` folder, from the root `Cargo.toml`.
fn crates() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest.split("members = [").nth(1).unwrap().split(']').next().unwrap();
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m).join("src"))
        .filter(|src| src.is_dir())
        .collect()
}

/// Module path (`""` for the crate root) → the file's code without comments and tests.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                parts.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            found.insert(parts.join("::"), code_of(&text));
        }
    }
    found
}

/// `text` without its `#[cfg(test)]` part and without comment lines.
fn code_of(text: &str) -> String {
    let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths `code` names below `prefix` (`crate::` or `super::`), groups (`prefix{a, b::{c}}`)
/// expanded.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        // A preceding identifier character means another path (`my_crate::`), not ours.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        expand("", rest, &mut paths);
    }
    paths
}

/// The module path at the start of `text` (lower-case segments: modules, not types) after
/// `base`, each item of a `{…}` group followed.
fn expand(base: &str, text: &str, out: &mut Vec<String>) {
    let mut path = base.to_string();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let end = matching_brace(group);
            for item in split_top_level(&group[..end]) {
                expand(&path, item.trim(), out);
            }
            return;
        }
        let ident: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if ident.is_empty() || ident.chars().next().is_some_and(|c| c.is_uppercase()) || ident == "self" {
            out.push(path);
            return;
        }
        path = if path.is_empty() {
            ident.clone()
        } else {
            format!("{path}::{ident}")
        };
        match rest[ident.len()..].strip_prefix("::") {
            Some(next) => rest = next,
            None => {
                out.push(path);
                return;
            }
        }
    }
}

/// The index of the `}` closing a group whose `{` came just before `text`.
fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// A group's items, split at the commas outside nested groups.
fn split_top_level(group: &str) -> Vec<&str> {
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
}

/// The longest module of `known` that `path` starts with.
fn resolve(path: &str, known: &BTreeMap<String, String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| known.contains_key(candidate))
}

/// Module → the modules of its crate it uses.
fn edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(src);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &known {
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        let mut used: Vec<String> = paths_after(code, "crate::");
        used.extend(
            paths_after(code, "super::")
                .into_iter()
                .map(|p| match (parent, p.as_str()) {
                    // `super::X`, X an item of the parent: the parent itself.
                    (parent, "") => parent.to_string(),
                    ("", p) => p.to_string(),
                    (parent, p) => format!("{parent}::{p}"),
                }),
        );
        used.extend(
            paths_after(code, "self::")
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(|p| if module.is_empty() { p } else { format!("{module}::{p}") }),
        );
        let targets = graph.entry(module.clone()).or_default();
        for path in used {
            // The crate root is a facade of re-exports: a path through it names the item's own
            // module, which the re-export already points at.
            if path.is_empty() {
                continue;
            }
            if let Some(target) = resolve(&path, &known).filter(|t| t != module && !t.is_empty()) {
                targets.insert(target);
            }
        }
    }
    graph
}

/// Every circle (a strongly connected set of more than one module), as sorted lists.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Tarjan's algorithm, iterative enough for a few hundred modules.
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    let mut all = Vec::new();
    for src in crates() {
        for circle in circles(&edges(&src)) {
            all.push(format!(
                "{}: {}",
                src.strip_prefix(root()).unwrap().display(),
                circle.join(" ↔ ")
            ));
        }
    }
    assert!(all.is_empty(), "circles of modules:\n{}", all.join("\n"));
}

/// Top-level folder of each workspace crate → the top-level folders of the workspace crates its
/// library, binaries and build script use (`[dependencies]`, `[build-dependencies]`). A crate's
/// own tests are left out: test code sits above everything it tests, and uses the shared test
/// support in `tests/` from any folder.
fn folder_uses() -> BTreeMap<String, BTreeSet<String>> {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(root())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let top = |manifest: &str| -> String {
        let relative = Path::new(manifest).strip_prefix(root()).unwrap_or(Path::new(manifest));
        relative.iter().next().unwrap().to_string_lossy().into_owned()
    };
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for package in metadata["packages"].as_array().unwrap() {
        let from = top(package["manifest_path"].as_str().unwrap());
        let used = uses.entry(from.clone()).or_default();
        for dependency in package["dependencies"].as_array().unwrap() {
            let normal_or_build = dependency["kind"].is_null() || dependency["kind"] == "build";
            if let (true, Some(path)) = (normal_or_build, dependency["path"].as_str()) {
                let to = top(&format!("{path}/Cargo.toml"));
                if to != from {
                    used.insert(to);
                }
            }
        }
    }
    uses
}

/// The folders show who uses whom: no top-level folder is both above and below another
/// (`cli/` uses `sim/` and `host/`; `sim/` uses `host/`; nothing in `host/` uses either).
#[test]
fn no_top_level_folder_is_both_above_and_below_another() {
    let uses = folder_uses();
    let circles = circles(&uses);
    assert!(
        circles.is_empty(),
        "top-level folders that use each other: {circles:?}\n(every use: {uses:?})"
    );
    // The case this test was written for: the CLI sits above the simulator it runs.
    assert!(uses["cli"].contains("sim") && uses["sim"].contains("host"), "{uses:?}");
}

/// sim/'s top: the experiments and `cli` (their dispatch) use the instrument; nothing of the
/// instrument — trace, scheduler, policies, harness, report — uses them back.
#[test]
fn nothing_in_sim_uses_its_experiments() {
    let graph = edges(&root().join("sim/src"));
    let top = |m: &str| matches!(m.split("::").next(), Some("experiments" | "cli" | ""));
    let upward: Vec<String> = graph
        .iter()
        .filter(|(module, _)| !top(module))
        .flat_map(|(module, targets)| {
            targets
                .iter()
                .filter(|t| top(t))
                .map(move |t| format!("{module} uses {t}"))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "sim modules using the experiments:\n{}",
        upward.join("\n")
    );
}

/// host/serve's layers, lowest first: a module may use its own layer's modules and those below.
const SERVE_LAYERS: &[&[&str]] = &[
    &["names", "clock", "table", "telemetry"],
    &["front"],
    // Every credential: API keys, admin and tenant-admin tokens, the metrics token.
    &["auth"],
    &["metrics"],
    &["identity"],
    &["tenant"],
    &["engine"],
    &["policy"],
    &["hints"],
    &["request"],
    &["admin", "mcp"],
    &["app"],
    &["cli"],
    // The config file's `[serve]` table, read into the flags `cli` defines.
    &["config_flags"],
    &[""],
];

/// The layers as host/serve's guide (its lib.rs's numbered list) and ARCHITECTURE.md tell them:
/// one story, in the order `SERVE_LAYERS` enforces.
#[test]
fn the_guide_and_the_map_tell_the_layers_in_the_enforced_order() {
    let order: Vec<&str> = SERVE_LAYERS
        .iter()
        .flat_map(|l| l.iter().copied())
        .filter(|m| !m.is_empty())
        .collect();
    let links = |text: &str| -> Vec<String> {
        text.split("[`")
            .skip(1)
            .filter_map(|rest| rest.split_once("`]"))
            .map(|(name, _)| name.to_string())
            .collect()
    };
    // lib.rs: each numbered item names its modules first, as links, before its dash.
    let guide = std::fs::read_to_string(root().join("host/serve/src/lib.rs")).unwrap();
    let told: Vec<String> = guide
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter(|l| l.split_once(". ").is_some_and(|(n, _)| n.parse::<u32>().is_ok()))
        .flat_map(|l| links(l.split(" — ").next().unwrap_or_default()))
        .collect();
    let front = order.iter().position(|&m| m == "front").unwrap();
    let last = order.iter().position(|&m| m == "mcp").unwrap();
    assert_eq!(told, order[front..=last], "host/serve/src/lib.rs's numbered layers");
    // ARCHITECTURE.md: the paragraph after "In the order `tests/layers.rs` enforces", modules in
    // backquotes (a folder with its slash), separated by arrows.
    let map = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let (_, rest) = map
        .split_once("In the order `tests/layers.rs` enforces")
        .expect("the layers' paragraph");
    let paragraph = rest.split("\n\n").next().unwrap();
    let told: Vec<String> = paragraph
        .split(" → ")
        .flat_map(|step| {
            let names: Vec<String> = step
                .split('`')
                .skip(1)
                .step_by(2)
                .map(|n| n.trim_end_matches('/').to_string())
                .collect();
            names
        })
        .filter(|n| order.contains(&n.as_str()))
        .collect();
    assert_eq!(told, order, "ARCHITECTURE.md's layers");
}

fn layer_of(module: &str) -> usize {
    let top = module.split("::").next().unwrap_or_default();
    SERVE_LAYERS
        .iter()
        .position(|layer| layer.contains(&top))
        .unwrap_or_else(|| panic!("host/serve module `{module}` is in no layer of SERVE_LAYERS"))
}

#[test]
fn host_serve_uses_no_layer_above_a_modules_own() {
    let graph = edges(&root().join("host/serve/src"));
    let mut upward = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            let (from, to) = (layer_of(module), layer_of(target));
            // Within a layer only parts of different top-level modules may not meet (admin ↔ mcp).
            let across = from == to && module.split("::").next() != target.split("::").next();
            if to > from || across {
                upward.push(format!("{module} uses {target}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "uses of a layer above (or beside) a module's own:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_resolves_paths_groups_and_super() {
    let code = "use crate::{tenant::{Tenant, agents::X}, names::KV_SLOT};\nfn f() { crate::engine::upstream::send(); super::sibling::g(); }";
    let mut found = paths_after(code, "crate::");
    found.sort();
    assert_eq!(found, ["engine::upstream::send", "names", "tenant", "tenant::agents"]);
    assert_eq!(
        paths_after("use super::{ProxyState, sibling::f};", "super::"),
        ["", "sibling::f"]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_string(), ["b".to_string()].into()),
        ("b".to_string(), ["a".to_string()].into()),
        ("c".to_string(), ["a".to_string()].into()),
    ]
    .into();
    assert_eq!(circles(&graph), vec![vec!["a".to_string(), "b".to_string()]]);
}

/// Engine crates host/serve's lower layers must not name: the tenant layer and those below it
/// speak to the engine through traits of their own, which `engine/` implements — so a tenant
/// reload or an identity rule never depends on which engine (or adapter crate) is in use.
const ENGINE_CRATES: &[&str] = &["agentrt_eviction", "agentrt_router"];

/// The engine crates host/serve depends on, from its `Cargo.toml`: every name in
/// [`ENGINE_CRATES`] must be one of them, so renaming a crate cannot leave the check above
/// looking for a name no code can use any more (it would pass whatever the layers did).
#[test]
fn the_engine_crates_checked_are_host_serves_dependencies() {
    let manifest = std::fs::read_to_string(root().join("host/serve/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    let declared: BTreeSet<String> = dependencies
        .lines()
        .filter_map(|line| line.split(['.', '=', ' ']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(|name| name.replace('-', "_"))
        .collect();
    let stale: Vec<&&str> = ENGINE_CRATES.iter().filter(|c| !declared.contains(**c)).collect();
    assert!(
        stale.is_empty(),
        "ENGINE_CRATES names crates host/serve does not depend on: {stale:?} — put the crates' current \
         names there (host/serve/Cargo.toml [dependencies])"
    );
}

#[test]
fn host_serve_layers_below_the_engine_name_no_engine_crate() {
    let engine_layer = layer_of("engine");
    let mut found = Vec::new();
    for (module, code) in modules(&root().join("host/serve/src")) {
        if layer_of(&module) >= engine_layer {
            continue;
        }
        for engine_crate in ENGINE_CRATES {
            if code.contains(&format!("{engine_crate}::")) {
                found.push(format!("{module} names {engine_crate}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "engine crates named below the engine layer:\n{}",
        found.join("\n")
    );
}

/// What only host/serve's `auth` room may do: read a credential from the headers, or compare
/// one. Any other module asks `auth` (the tenant layer for the caller, `admin/` for a role,
/// `/metrics` for its token), so no second, drifting check of a token can appear.
const CREDENTIAL_READS: &[&str] = &["\"authorization\"", "header::AUTHORIZATION", "constant_time_eq"];

#[test]
fn host_serve_reads_and_compares_credentials_only_in_auth() {
    let modules = modules(&root().join("host/serve/src"));
    assert!(
        modules.contains_key("auth"),
        "host/serve has no `auth` room (src/auth/mod.rs): credentials are checked there"
    );
    let mut found = Vec::new();
    for (module, code) in &modules {
        if module == "auth" || module.starts_with("auth::") {
            continue;
        }
        // Header names are case-insensitive: `"Authorization"` reads the same header.
        let code = code.to_lowercase();
        for read in CREDENTIAL_READS {
            if code.contains(&read.to_lowercase()) {
                found.push(format!("{module} uses {read}"));
            }
        }
    }
    assert!(
        found.is_empty(),
        "credentials read or compared outside host/serve's auth room (ask crate::auth instead):\n{}",
        found.join("\n")
    );
}
