//! The JavaScript policies (`policy.js`; a checkout's `policies/*/policy.js`): build each into a component with
//! componentize-js, and run their native tests and the SDK's (`*.test.js`) with Node's test
//! runner.
//!
//! componentize-js comes from the npm registry into `~/.cache/agentrt/componentize-js-<version>`
//! ([`toolchains::npm_prefix`]); it needs Node.js ≥ 20.6 (the native tests' import hook). Every
//! WASI feature of its engine (StarlingMonkey) is disabled, so the component imports only
//! `agentrt:policy/host`. Without Node.js or npm the JavaScript policies are skipped, saying why.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::sources::{build_each, discover, is_current, OptionalLanguage, PolicyToBuild};
use crate::{note, run, toolchains, Tree};

const COMPONENTIZE_JS_VERSION: &str = "0.23.0";
/// The JavaScript SDK under [`Tree::sdk`], which policies import by relative path.
const SDK_DIR: &str = "js";
/// The module of a JavaScript policy folder; it exports `guest`.
pub const POLICY: &str = "policy.js";
/// Every WASI-backed feature of the engine: none may be imported.
const DISABLED_FEATURES: [&str; 5] = ["stdio", "random", "clocks", "http", "fetch-event"];

/// Build every `policies/*/policy.js` of a checkout whose component is older than its sources.
pub fn build_all(tree: &Tree, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let language = OptionalLanguage {
        name: "JavaScript",
        marker: POLICY,
        sdk_dir: SDK_DIR,
    };
    let up_to_date = |p: &PolicyToBuild| is_current(p.out, p.inputs);
    build_each(tree, out_dir, &language, up_to_date, componentize_js, |cli, p| {
        build(cli, tree, p.dir, p.name, p.out)
    })
}

/// Build the policy in `dir` into the component `out` with componentize-js (`cli`).
pub fn build(cli: &Path, tree: &Tree, dir: &Path, name: &str, out: &Path) -> Result<()> {
    note(&format!("componentize-js {name} (SpiderMonkey inside; ~30 s)"));
    let tmp = out.with_extension("wasm.tmp");
    run(Command::new("node")
        .current_dir(&tree.root)
        .arg(cli)
        .arg(dir.join(POLICY))
        .arg("--wit")
        .arg(tree.contract())
        .args(["--world-name", "policy", "--disable"])
        .args(DISABLED_FEATURES)
        .arg("--out")
        .arg(&tmp))?;
    Ok(std::fs::rename(&tmp, out)?)
}

/// The SDK's tests and every JavaScript policy's, natively in Node.js: the import hook in
/// `sdk/js/testing/register.js` stands in for the host interface.
pub fn test_all(tree: &Tree) -> Result<()> {
    let root = &tree.root;
    if let Err(reason) = toolchains::optional("JavaScript", node_version())? {
        note(&format!("SKIPPED the JavaScript SDK's native tests: {reason}"));
        return Ok(());
    }
    let suites: Vec<PathBuf> = std::iter::once(tree.sdk.join(SDK_DIR).join("test"))
        .chain(discover(root, POLICY)?)
        .collect();
    note("node --test sdk/js/test policies/*/*.test.js");
    node_test(tree, &suites)
}

/// The tests of the one policy in `dir` (its `*.test.js`, not the SDK vendored beside them).
pub fn test_one(tree: &Tree, dir: &Path) -> Result<()> {
    let mut tests: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(".test.js")))
        .collect();
    tests.sort();
    if tests.is_empty() {
        bail!("no *.test.js in {}: nothing to test", dir.display());
    }
    note(&format!("node --test {}/*.test.js", dir.display()));
    node_test(tree, &tests)
}

/// Node's test runner on `suites` (folders or files), with the import hook in
/// `<sdk>/js/testing/register.js` standing in for the host interface.
fn node_test(tree: &Tree, suites: &[PathBuf]) -> Result<()> {
    // `--import` takes a URL or a specifier: a relative path must start with `./`.
    let register = tree.sdk.join(SDK_DIR).join("testing/register.js");
    let register = match register.strip_prefix(&tree.root) {
        Ok(relative) => format!("./{}", relative.display()),
        Err(_) => format!("file://{}", register.display()),
    };
    run(Command::new("node")
        .current_dir(&tree.root)
        .args(["--import", &register, "--test"])
        .args(suites))
}

/// componentize-js's command-line entry point, installed on first use.
pub fn componentize_js() -> Result<PathBuf> {
    node_version()?;
    let prefix = toolchains::npm_prefix(
        &format!("componentize-js-{COMPONENTIZE_JS_VERSION}"),
        &[&format!("@bytecodealliance/componentize-js@{COMPONENTIZE_JS_VERSION}")],
    )?;
    Ok(prefix.join("node_modules/@bytecodealliance/componentize-js/src/cli.js"))
}

/// Node.js's version, refused below 20.6 (`module.register`, which the native tests use).
pub(crate) fn node_version() -> Result<(u32, u32)> {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .context("`node` (Node.js 20.6 or later) is not on PATH")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .trim()
        .trim_start_matches('v')
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version < (20, 6) {
        bail!(
            "Node.js {} is too old: the JavaScript policies need 20.6 or later",
            text.trim()
        );
    }
    Ok(version)
}
