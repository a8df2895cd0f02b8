//! Build the policy components of the workspace (policies/*, tests/guests/*) into
//! [`Workspace::components`]: the Rust crates always, then the Python, JavaScript, C and Go
//! policies of the [`Languages`] asked for — each language's build and toolchain install live in
//! `agentrt-policy-build`, which `agentrt policy build` uses too.
//!
//! Which languages each command builds: `test`, `bench` and `build-policies` every one (the tests
//! load them all); `demo` Rust only (the policies it runs are Rust's, and an evaluator needs no
//! Node.js, zig or Go for them); `dist` Rust and Python (what an operator deploys: the built-in
//! policies and `frequency`), the JavaScript, C and Go examples with `--langs all`.

use std::path::PathBuf;

use agentrt_policy_build::{c, go, js, python, rust};
use anyhow::{bail, Result};

use crate::cargo;
use crate::workspace::Workspace;

/// The languages whose policies a command builds besides Rust's, which it always builds (the
/// built-in policies are Rust).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Languages {
    pub python: bool,
    pub js: bool,
    pub c: bool,
    pub go: bool,
}

impl Languages {
    pub const ALL: Self = Self {
        python: true,
        js: true,
        c: true,
        go: true,
    };
    pub const RUST: Self = Self {
        python: false,
        js: false,
        c: false,
        go: false,
    };
    pub const RUST_AND_PYTHON: Self = Self {
        python: true,
        ..Self::RUST
    };

    /// `--langs`' value: `all`, or a comma-separated list of `rust`, `python`, `js`, `c`, `go`.
    pub fn parse(list: &str) -> Result<Self> {
        if list == "all" {
            return Ok(Self::ALL);
        }
        let mut chosen = Self::RUST;
        for name in list.split(',').map(str::trim) {
            match name {
                "rust" => {}
                "python" => chosen.python = true,
                "js" => chosen.js = true,
                "c" => chosen.c = true,
                "go" => chosen.go = true,
                other => bail!(
                    "--langs {list:?}: unknown language {other:?}; give `all` or a comma-separated \
                     list of rust, python, js, c, go"
                ),
            }
        }
        Ok(chosen)
    }

    /// The languages in words, for the progress lines.
    pub fn names(&self) -> String {
        let mut names = vec!["Rust"];
        for (on, name) in [
            (self.python, "Python"),
            (self.js, "JavaScript"),
            (self.c, "C"),
            (self.go, "Go"),
        ] {
            if on {
                names.push(name);
            }
        }
        names.join(", ")
    }
}

/// Build the components of `languages` into [`Workspace::components`] (the runtime's component
/// lookup finds them there; the `agentrt` binary embeds the built-in ones when it is built after
/// them).
pub fn build(workspace: &Workspace, languages: Languages) -> Result<Vec<PathBuf>> {
    let out_dir = workspace.components();
    std::fs::create_dir_all(&out_dir)?;
    let tree = workspace.tree();
    let mut built = rust::build_all(&workspace.root, &workspace.target, &out_dir, || {
        workspace.command(cargo())
    })?;
    if languages.python {
        built.extend(python::build_all(&tree, &out_dir)?);
    }
    if languages.js {
        built.extend(js::build_all(&tree, &out_dir)?);
    }
    if languages.c {
        built.extend(c::build_all(&tree, &out_dir)?);
    }
    if languages.go {
        built.extend(go::build_all(&tree, &out_dir)?);
    }
    let names: Vec<String> = built
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    eprintln!(
        "xtask: {} components in {}/: {}",
        built.len(),
        out_dir.display(),
        names.join(", ")
    );
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn langs_name_the_languages_besides_rust_and_reject_an_unknown_one() {
        assert_eq!(Languages::parse("all").unwrap(), Languages::ALL);
        assert_eq!(Languages::parse("rust").unwrap(), Languages::RUST);
        assert_eq!(Languages::parse("rust,python").unwrap(), Languages::RUST_AND_PYTHON);
        assert_eq!(Languages::parse("python").unwrap().names(), "Rust, Python");
        let e = Languages::parse("rust,cobol").unwrap_err().to_string();
        assert!(e.contains("cobol") && e.contains("rust, python, js, c, go"), "{e}");
    }
}
