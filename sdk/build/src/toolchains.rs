//! Toolchains installed on first use from the package registries, one folder per tool and version
//! under `~/.cache/agentrt/` (`$XDG_CACHE_HOME/agentrt/`), outside the clone so every checkout on
//! the machine shares them and a fresh one needs only `python3`, `node` and `cargo`.
//!
//! Every install goes through [`install_once`]: a marker written last, naming exactly what was
//! installed, tells a finished install from an interrupted or older one, which is started over.
//! The two ways a tool arrives — a Python venv ([`pip_venv`]) and an npm prefix ([`npm_prefix`]) —
//! are the only ones used (the C and Go bindings generators are libraries built into this crate).
//!
//! The languages beside Rust and Python are optional on a developer's machine: when one's
//! toolchain cannot be installed, [`optional`] says so and its components are skipped (a
//! `<name>.skipped` file beside where the component would be tells the tests why). CI sets
//! `AGENTRT_REQUIRE_LANGS=1`, which makes that an error instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{note, run};

/// Set (to anything but `0`) to make a language toolchain that cannot be installed an error.
pub const REQUIRE_LANGS_ENV: &str = "AGENTRT_REQUIRE_LANGS";

/// `~/.cache/agentrt/<name>`.
pub fn cache_dir(name: &str) -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => {
            PathBuf::from(std::env::var_os("HOME").context("neither XDG_CACHE_HOME nor HOME is set")?).join(".cache")
        }
    };
    Ok(base.join("agentrt").join(name))
}

/// Make `dir` hold `what` (a description that changes whenever the install would: package names
/// and versions). `install` fills the emptied folder; `ready` checks the result.
pub fn install_once(
    dir: &Path,
    what: &str,
    registry: &str,
    ready: impl Fn() -> bool,
    install: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    let marker = dir.join(".agentrt-complete");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == what) && ready() {
        return Ok(());
    }
    note(&format!(
        "installing {what} into {} (from {registry}, once)",
        dir.display()
    ));
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    install(dir).with_context(|| format!("installing {what} from {registry}"))?;
    if !ready() {
        bail!("{what} installed into {}, but is not usable there", dir.display());
    }
    std::fs::write(&marker, what)?;
    note(&format!("installed {what} in {:.0} s", started.elapsed().as_secs_f64()));
    Ok(())
}

/// A venv at `~/.cache/agentrt/<name>` with `packages` (pinned `name==version`) from PyPI;
/// returns the venv. `$AGENTRT_PYTHON` names the interpreter that makes it (`python3`).
pub fn pip_venv(name: &str, packages: &[&str]) -> Result<PathBuf> {
    let venv = cache_dir(name)?;
    let python = venv.join("bin/python");
    let what = packages.join(" ");
    install_once(
        &venv,
        &what,
        "PyPI",
        || python.is_file(),
        |dir| {
            let base = std::env::var("AGENTRT_PYTHON").unwrap_or_else(|_| "python3".to_string());
            run(Command::new(&base).arg("-m").arg("venv").arg(dir))
                .with_context(|| format!("`{base} -m venv` is needed (AGENTRT_PYTHON names another interpreter)"))?;
            run(Command::new(&python)
                .args(["-m", "pip", "install", "--quiet"])
                .args(packages))
        },
    )?;
    Ok(venv)
}

/// An npm prefix at `~/.cache/agentrt/<name>` with `packages` (pinned `name@version`) from the
/// npm registry; returns the prefix (its tools are in `node_modules/.bin`).
pub fn npm_prefix(name: &str, packages: &[&str]) -> Result<PathBuf> {
    let prefix = cache_dir(name)?;
    let bin = prefix.join("node_modules/.bin");
    let what = packages.join(" ");
    install_once(
        &prefix,
        &what,
        "the npm registry",
        || bin.is_dir(),
        |dir| {
            run(Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix"])
                .arg(dir)
                .args(packages))
            .context("`npm` (with Node.js 18 or later) is needed")
        },
    )?;
    Ok(prefix)
}

/// A language's toolchain, or (`Ok(Err(reason))`) the reason it is missing, after saying so —
/// unless CI requires every language ([`REQUIRE_LANGS_ENV`]), when the error stands.
pub fn optional<T>(language: &str, toolchain: Result<T>) -> Result<std::result::Result<T, String>> {
    match toolchain {
        Ok(tools) => Ok(Ok(tools)),
        Err(e) if required() => Err(e.context(format!(
            "the {language} policies need their toolchain ({REQUIRE_LANGS_ENV} is set)"
        ))),
        Err(e) => {
            let reason = format!("no {language} toolchain: {e:#}");
            note(&format!("SKIPPED the {language} policies: {reason}"));
            Ok(Err(reason))
        }
    }
}

pub fn required() -> bool {
    std::env::var(REQUIRE_LANGS_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}
