//! The C policies (`policy.c`; a checkout's `policies/*/policy.c`): bindings from `wit-bindgen c`, compiled with the SDK
//! (`sdk/c`) by `zig cc` for `wasm32-wasi` (clang and wasi-libc inside), encoded as a component by
//! wit-component; their native tests (`test_*.c`, and the SDK's `sdk/c/tests`) compiled by the
//! same `zig cc` for this machine and run.
//!
//! Toolchains: zig from PyPI, installed on first use (`ziglang`, a venv in
//! `~/.cache/agentrt/zig-<version>`); the C bindings come from the `wit-bindgen-c` library built
//! into this crate (a `cargo install` of wit-bindgen-cli took 17–35 minutes here, a cost every clean CI
//! machine would pay; the library builds in about a minute). A component must not import
//! WASI: libc's stdio, `snprintf` and `strtod` would pull in `fd_write`, and encoding then fails
//! naming the import ([docs/zero-wasi.md](../../docs/zero-wasi.md)).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::encoding::encode_component;
use crate::sources::{build_each, discover, is_current, name, OptionalLanguage, PolicyToBuild};
use crate::{bindings as wit_bindings, note, run, toolchains, Tree};

const ZIG_VERSION: &str = "0.17.0";
/// The C SDK under [`Tree::sdk`].
const SDK_DIR: &str = "c";
/// The file that marks a C policy folder.
pub const POLICY: &str = "policy.c";

/// zig (as `python -m ziglang`).
pub struct Toolchain {
    zig_python: PathBuf,
}

impl Toolchain {
    pub fn get() -> Result<Self> {
        let venv = toolchains::pip_venv(&format!("zig-{ZIG_VERSION}"), &[&format!("ziglang=={ZIG_VERSION}")])?;
        Ok(Self {
            zig_python: venv.join("bin/python"),
        })
    }

    /// `zig cc` with `args`.
    fn cc(&self) -> Command {
        let mut cc = Command::new(&self.zig_python);
        cc.args([
            "-m",
            "ziglang",
            "cc",
            "-std=c11",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Wno-unknown-attributes",
        ]);
        cc
    }
}

/// Build every `policies/*/policy.c` of a checkout whose component is older than its sources.
pub fn build_all(tree: &Tree, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let language = OptionalLanguage {
        name: "C",
        marker: POLICY,
        sdk_dir: SDK_DIR,
    };
    let up_to_date = |p: &PolicyToBuild| is_current(p.out, p.inputs);
    build_each(tree, out_dir, &language, up_to_date, Toolchain::get, |tools, p| {
        build(tools, tree, p.dir, p.name, p.out)
    })
}

/// Build the policy in `dir` (its C files but the tests) with the SDK into the component `out`.
pub fn build(tools: &Toolchain, tree: &Tree, dir: &Path, name: &str, out: &Path) -> Result<()> {
    let bindings = bindings(tree)?;
    note(&format!(
        "zig cc {name} (wasm32-wasi, the first build compiles wasi-libc)"
    ));
    let core = tree.scratch.join("c-build").join(format!("{name}.core.wasm"));
    std::fs::create_dir_all(core.parent().expect("a file in a folder"))?;
    let sdk = tree.sdk.join(SDK_DIR);
    run(tools
        .cc()
        .current_dir(&tree.root)
        .args(["-target", "wasm32-wasi", "-mexec-model=reactor", "-s", "-I"])
        .arg(&bindings)
        .arg("-I")
        .arg(&sdk)
        .arg(sdk.join("agentrt_policy.c"))
        .arg(bindings.join("policy.c"))
        .arg(bindings.join("policy_component_type.o"))
        .args(policy_sources(dir)?)
        .arg("-o")
        .arg(&core))?;
    encode_component(&core, out)
        .with_context(|| format!("{name}: a C policy may import only agentrt:policy/host; see docs/zero-wasi.md (C)"))
}

/// The SDK's native tests and every C policy's (`test_*.c`), each compiled for this machine with
/// the SDK, the generated bindings and a native stand-in for the host, then run.
pub fn test_all(tree: &Tree) -> Result<()> {
    let root = &tree.root;
    let tools = match toolchains::optional("C", Toolchain::get())? {
        Ok(tools) => tools,
        Err(reason) => {
            note(&format!("SKIPPED the C SDK's native tests: {reason}"));
            return Ok(());
        }
    };
    let mut suites = vec![("sdk".to_string(), vec![tree.sdk.join(SDK_DIR).join("tests/test_sdk.c")])];
    for dir in discover(root, POLICY)? {
        suites.push((name(&dir), policy_and_tests(&dir)?));
    }
    for (suite, files) in suites {
        compile_and_run(&tools, tree, &suite, &files)?;
    }
    Ok(())
}

/// The tests of the one policy in `dir` (its `test_*.c`), as [`test_all`] runs a checkout's.
pub fn test_one(tools: &Toolchain, tree: &Tree, dir: &Path) -> Result<()> {
    let files = policy_and_tests(dir)?;
    if files
        .iter()
        .all(|f| !f.file_name().is_some_and(|n| n.to_string_lossy().starts_with("test_")))
    {
        bail!("no test_*.c in {}: nothing to test", dir.display());
    }
    compile_and_run(tools, tree, &name(dir), &files)
}

fn policy_and_tests(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = policy_sources(dir)?;
    files.extend(tests_in(dir)?);
    Ok(files)
}

/// Compile `files` for this machine with the SDK, the generated bindings and a native stand-in
/// for the host, and run the program.
fn compile_and_run(tools: &Toolchain, tree: &Tree, suite: &str, files: &[PathBuf]) -> Result<()> {
    let bindings = bindings(tree)?;
    let bin_dir = tree.scratch.join("c-tests");
    std::fs::create_dir_all(&bin_dir)?;
    let sdk = tree.sdk.join(SDK_DIR);
    let exe = bin_dir.join(suite);
    note(&format!("C tests: {suite}"));
    run(tools
        .cc()
        .current_dir(&tree.root)
        .arg("-I")
        .arg(&bindings)
        .arg("-I")
        .arg(&sdk)
        .arg(sdk.join("agentrt_policy.c"))
        .arg(bindings.join("policy.c"))
        .arg(sdk.join("testing/native_host.c"))
        .args(files)
        .arg("-o")
        .arg(&exe))?;
    run(&mut Command::new(&exe))
}

/// The C bindings of the contract's `policy` world (what `wit-bindgen c` writes), into
/// `<scratch>/bindings/c`.
fn bindings(tree: &Tree) -> Result<PathBuf> {
    wit_bindings::generate(tree, "c", "policy.h", || wit_bindgen_c::Opts::default().build())
}

/// A policy's C files that go into its component (not its tests).
fn policy_sources(dir: &Path) -> Result<Vec<PathBuf>> {
    c_files(dir, |name| !name.starts_with("test_"))
}

fn tests_in(dir: &Path) -> Result<Vec<PathBuf>> {
    c_files(dir, |name| name.starts_with("test_"))
}

fn c_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".c") && keep(&name)
        })
        .collect();
    files.sort();
    Ok(files)
}
