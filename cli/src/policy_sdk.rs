//! The SDK a policy project outside any checkout builds with: the contract (wit/) and each
//! language's SDK, embedded in this binary (build.rs) and written into the project's own
//! `agentrt-sdk/` folder by `agentrt policy new` (or by `agentrt policy build` when it is missing).
//!
//! Why in the project rather than a shared cache folder (`~/.cache/agentrt/sdk-<version>`): a
//! project is then whole by itself — it can be committed, built on CI or by a colleague with
//! another agentrt installed, and still builds against the SDK it was written for; every language
//! reaches the SDK by a relative path (Cargo's `path`, Go's `replace`, a JavaScript import, the
//! compilers' include and module paths), never by a machine's absolute one; and componentize-js
//! reads only files under the folder it builds in. The cost is a few hundred KB per project. The
//! toolchains, which are large and shared, stay in `~/.cache/agentrt/`.

use std::path::Path;

use anyhow::{Context, Result};

include!(concat!(env!("OUT_DIR"), "/sdk_files.rs"));

/// The vendored SDK's folder in a project.
pub const VENDORED: &str = "agentrt-sdk";
/// The file in it naming the agentrt version it came from.
const VERSION_FILE: &str = "VERSION";
/// The Rust SDK's manifest without the workspace's inherited fields.
const RUST_MANIFEST: &str = include_str!("../../sdk/templates/standalone/sdk-rust-Cargo.toml");

/// This binary's version: the SDK it carries.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Write this binary's SDK into `project/agentrt-sdk`; returns how many files.
pub fn vendor(project: &Path) -> Result<usize> {
    let sdk = project.join(VENDORED);
    let readme = format!(
        "# agentrt policy SDK {version}\n\n\
         The contract (`wit/`) and the policy SDKs of agentrt {version} (Rust, Python, JavaScript, C, Go),\n\
         written by `agentrt policy new` so that this project builds without an agentrt checkout.\n\
         `agentrt policy build` reads it. Keep it with the project; do not edit it.\n\n\
         To move to another agentrt's SDK: remove this folder, then run that agentrt's\n\
         `agentrt policy build`, which writes its own.\n",
        version = version()
    );
    let manifest = RUST_MANIFEST.replace("__VERSION__", version());
    let generated: [(&str, &[u8]); 3] = [
        ("README.md", readme.as_bytes()),
        ("rust/Cargo.toml", manifest.as_bytes()),
        (VERSION_FILE, version().as_bytes()),
    ];
    for (path, bytes) in SDK_FILES.iter().copied().chain(generated) {
        let path = sdk.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a folder"))
            .with_context(|| format!("creating {}", sdk.display()))?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(SDK_FILES.len() + generated.len())
}

/// The agentrt version of `project`'s vendored SDK, `None` without one.
#[cfg_attr(not(feature = "policy-build"), allow(dead_code))] // `policy build` reads it
pub fn vendored_version(project: &Path) -> Option<String> {
    let sdk = project.join(VENDORED);
    if !sdk.is_dir() {
        return None;
    }
    Some(
        std::fs::read_to_string(sdk.join(VERSION_FILE))
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vendored Rust SDK asks for the wit-bindgen the workspace builds the SDK with: the two
    /// manifests must not drift apart.
    #[test]
    fn the_vendored_rust_manifest_pins_the_workspace_wit_bindgen() {
        let workspace = include_str!("../../Cargo.toml");
        let line = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("wit-bindgen = "))
                .map(|l| l.to_string())
                .expect("a wit-bindgen line")
        };
        assert_eq!(line(workspace), line(RUST_MANIFEST));
    }

    #[test]
    fn the_embedded_sdk_has_every_language_and_the_contract_but_no_tests() {
        let paths: Vec<&str> = SDK_FILES.iter().map(|(p, _)| *p).collect();
        for needed in [
            "wit/policy.wit",
            "wit/compat/0.4.0/policy.wit",
            "rust/src/lib.rs",
            "python/agentrt_policy/__init__.py",
            "js/agentrt_policy.js",
            "js/testing/register.js",
            "c/agentrt_policy.h",
            "go/go.mod",
            "go/_component/export.go",
        ] {
            assert!(paths.contains(&needed), "{needed} missing from {paths:?}");
        }
        assert!(!paths.iter().any(|p| p.ends_with("_test.go") || p.contains("/tests/")));
    }
}
