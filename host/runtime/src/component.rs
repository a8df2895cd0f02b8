//! A loaded, validated policy component: compiled once, instantiated many times.

use std::time::Duration;

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};
use wasmtime::Engine;

use crate::compat::ContractLine;
use crate::error::LoadError;
use crate::loaded_components::LoadedComponents;
use crate::sandbox::GuestState;

/// The contract this host implements. It loads components of the previous lines, 0.4.x, 0.3.x
/// and 0.2.x, too ([`crate::compat`]).
pub const CONTRACT: &str = "agentrt:policy@0.5.0";
/// Every contract line this host loads, newest first.
const LINES: [ContractLine; 4] = [
    ContractLine::V0_5,
    ContractLine::V0_4,
    ContractLine::V0_3,
    ContractLine::V0_2,
];
const GUEST_EXPORT: &str = "agentrt:policy/guest";
/// Interfaces a policy may import. Everything else (WASI included) is refused at load.
const GRANTED_IMPORTS: &[&str] = &["agentrt:policy/host", "agentrt:policy/types"];

/// A component that implements the `agentrt:policy/policy` world, ready to instantiate.
pub struct PolicyComponent {
    name: String,
    digest: String,
    size_bytes: usize,
    pre: InstancePre<GuestState>,
    line: ContractLine,
    exports: GuestExports,
    load: LoadStats,
}

/// Where the guest exports called outside the generated bindings are (see `crate::results`).
pub(crate) struct GuestExports {
    pub score_packed: ComponentExportIndex,
    pub act: ComponentExportIndex,
    pub predict: ComponentExportIndex,
    pub snapshot: ComponentExportIndex,
}

/// How a component was loaded.
#[derive(Debug, Clone, Copy)]
pub struct LoadStats {
    /// Where its compiled code came from.
    pub source: LoadSource,
    /// Compile, deserialize or lookup time.
    pub elapsed: Duration,
}

/// Where a load found a component's compiled code, cheapest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Already in this process: loaded before, by this tenant or another (a table lookup).
    InMemory,
    /// Read from the on-disk artifact cache (a deserialize, under a millisecond).
    ArtifactCache,
    /// Compiled from the component's bytes (milliseconds for Rust, seconds for Python or JS).
    Compiled,
}

impl std::fmt::Display for LoadSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LoadSource::InMemory => "already loaded in this process",
            LoadSource::ArtifactCache => "from the artifact cache",
            LoadSource::Compiled => "compiled",
        })
    }
}

impl LoadStats {
    /// True unless the load had to compile.
    pub fn from_cache(&self) -> bool {
        self.source != LoadSource::Compiled
    }
}

/// Where compiled code is found: this process's table, then the artifact cache, then the compiler.
pub(crate) struct CodeSources<'a> {
    pub engine: &'a Engine,
    pub linker: &'a Linker<GuestState>,
    pub in_memory: &'a LoadedComponents,
    pub artifacts: Option<&'a crate::ArtifactCache>,
    pub slow_compile: Option<&'a crate::SlowCompileNotice>,
}

impl CodeSources<'_> {
    /// The compiled code of the component whose bytes have BLAKE3 `digest`, without compiling.
    fn find(&self, digest: &str) -> Option<(Component, LoadSource)> {
        if let Some(component) = self.in_memory.get(digest) {
            return Some((component, LoadSource::InMemory));
        }
        let component = self.artifacts?.get(self.engine, digest)?;
        self.in_memory.put(digest, &component);
        Some((component, LoadSource::ArtifactCache))
    }
}

impl PolicyComponent {
    pub(crate) fn load(sources: &CodeSources<'_>, name: &str, bytes: &[u8]) -> Result<Self, LoadError> {
        check_header(name, bytes)?;
        // BLAKE3 rather than SHA-256: both are collision-resistant (the digest keys compiled native
        // code in the artifact cache, so a tenant must not be able to collide with another's
        // policy), and BLAKE3 hashes a 250 KB component several times faster, which was the
        // largest part of a load from the artifact cache (docs/performance.md).
        let digest = blake3::hash(bytes).to_hex().to_string();
        let started = std::time::Instant::now();
        let (component, source) = match sources.find(&digest) {
            Some(found) => found,
            None => {
                let _watch = sources.slow_compile.map(|notice| notice.watch(name, bytes.len()));
                let component = Component::new(sources.engine, bytes)
                    .map_err(|e| LoadError::new(name, format!("not a valid component: {}", root_cause(&e))))?;
                if let Some(cache) = sources.artifacts {
                    cache.put(&digest, &component);
                }
                sources.in_memory.put(&digest, &component);
                (component, LoadSource::Compiled)
            }
        };
        let load = LoadStats {
            source,
            elapsed: started.elapsed(),
        };
        Self::validated(sources, name, digest, bytes.len(), component, load)
    }

    /// The component whose bytes have BLAKE3 `digest`, from this process or the artifact cache;
    /// `None` when neither has it (the caller then reads and compiles the bytes). For a file whose
    /// digest is remembered ([`crate::file_digest`]): its bytes need not be read again.
    pub(crate) fn load_known(
        sources: &CodeSources<'_>,
        name: &str,
        digest: &str,
        size_bytes: usize,
    ) -> Option<Result<Self, LoadError>> {
        let started = std::time::Instant::now();
        let (component, source) = sources.find(digest)?;
        let load = LoadStats {
            source,
            elapsed: started.elapsed(),
        };
        Some(Self::validated(
            sources,
            name,
            digest.to_string(),
            size_bytes,
            component,
            load,
        ))
    }

    /// Check a compiled component against the contract lines and prepare its instantiation.
    fn validated(
        sources: &CodeSources<'_>,
        name: &str,
        digest: String,
        size_bytes: usize,
        component: Component,
        load: LoadStats,
    ) -> Result<Self, LoadError> {
        let line = check_world(sources.engine, name, &component)?;
        let contract = format!("agentrt:policy@{}", line.version());
        let pre = sources
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::new(name, format!("does not fit the {contract} world: {}", root_cause(&e))))?;
        let exports_match = match line {
            ContractLine::V0_5 => crate::bindings::PolicyPre::new(pre.clone()).map(drop),
            ContractLine::V0_4 => crate::bindings::v0_4::PolicyPre::new(pre.clone()).map(drop),
            ContractLine::V0_3 => crate::bindings::v0_3::PolicyPre::new(pre.clone()).map(drop),
            ContractLine::V0_2 => crate::bindings::v0_2::PolicyPre::new(pre.clone()).map(drop),
        };
        exports_match.map_err(|e| LoadError::new(name, format!("exports do not match the {contract} world: {e:#}")))?;
        let exports = guest_exports(&component, line)
            .ok_or_else(|| LoadError::new(name, format!("does not export {GUEST_EXPORT} of {contract}")))?;
        Ok(Self {
            name: name.to_string(),
            digest,
            size_bytes,
            pre,
            line,
            exports,
            load,
        })
    }

    /// The file name or the name it was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// BLAKE3 of the component's bytes, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// The component's size in bytes, as loaded (before compiling).
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }
    /// Whether this load compiled or read the artifact cache, and how long it took.
    pub fn load_stats(&self) -> LoadStats {
        self.load
    }
    pub(crate) fn pre(&self) -> &InstancePre<GuestState> {
        &self.pre
    }

    /// The contract line the component was built against: what it hears ([`crate::compat`]).
    pub fn contract_line(&self) -> ContractLine {
        self.line
    }

    pub(crate) fn guest_exports(&self) -> &GuestExports {
        &self.exports
    }

    /// The component's imports and exports with their functions, for `agentrt policy check`.
    pub fn world(&self, engine: &Engine) -> WorldShape {
        shape(engine, self.pre.component())
    }
}

/// Imports and exports of a component, by interface, with each interface's function names.
#[derive(Debug, Clone, Default)]
pub struct WorldShape {
    /// What the component imports: each interface (`agentrt:policy/host`) with its functions.
    pub imports: Vec<(String, Vec<String>)>,
    /// What it exports, likewise (`agentrt:policy/guest` and its primitives).
    pub exports: Vec<(String, Vec<String>)>,
}

fn shape(engine: &Engine, component: &Component) -> WorldShape {
    let ty = component.component_type();
    let describe = |name: &str, item: &ComponentItem| -> (String, Vec<String>) {
        let funcs = match item {
            ComponentItem::ComponentInstance(instance) => instance
                .exports(engine)
                .filter(|(_, e)| matches!(e.ty, ComponentItem::ComponentFunc(_)))
                .map(|(n, _)| n.to_string())
                .collect(),
            _ => Vec::new(),
        };
        (name.to_string(), funcs)
    };
    WorldShape {
        imports: ty.imports(engine).map(|(n, e)| describe(n, &e.ty)).collect(),
        exports: ty.exports(engine).map(|(n, e)| describe(n, &e.ty)).collect(),
    }
}

/// Reject what is not a component before handing bytes to the compiler, with a message that says
/// what the bytes are instead.
fn check_header(name: &str, bytes: &[u8]) -> Result<(), LoadError> {
    const MAGIC: &[u8; 4] = b"\0asm";
    const CORE_MODULE: [u8; 4] = [1, 0, 0, 0];
    if bytes.len() < 8 {
        return Err(LoadError::new(
            name,
            format!("truncated: {} bytes is shorter than a Wasm header", bytes.len()),
        ));
    }
    if &bytes[..4] != MAGIC {
        return Err(LoadError::new(name, "not a WebAssembly binary (no \\0asm header)"));
    }
    if bytes[4..8] == CORE_MODULE {
        return Err(LoadError::new(
            name,
            "is a core WebAssembly module, not a component: encode it as a component \
             (`cargo xtask build-policies` does this for Rust policies; or `wasm-tools component new`)",
        ));
    }
    Ok(())
}

/// Check the component's imports and exports against the contract lines this host loads, say
/// exactly what differs, and return the line it was built against.
fn check_world(engine: &Engine, name: &str, component: &Component) -> Result<ContractLine, LoadError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let expected = format!("{GUEST_EXPORT}@{}", CONTRACT.rsplit('@').next().unwrap_or_default());
    let line = match exports.iter().find(|e| e.split('@').next() == Some(GUEST_EXPORT)) {
        None => {
            return Err(LoadError::new(
                name,
                format!(
                    "does not implement the {CONTRACT} world: missing export `{expected}` (it exports {})",
                    list_or_nothing(&exports)
                ),
            ))
        }
        Some(found) => LINES
            .into_iter()
            .find(|line| same_contract_line(found, &format!("{GUEST_EXPORT}@{}", line.version())))
            .ok_or_else(|| {
                LoadError::new(
                    name,
                    format!(
                        "was built against `{found}`, but this host implements `{expected}` (and loads `{GUEST_EXPORT}@0.4.x`, `@0.3.x` and `@0.2.x`)"
                    ),
                )
            })?,
    };
    let refused: Vec<String> = ty
        .imports(engine)
        .map(|(n, _)| n.to_string())
        .filter(|n| !GRANTED_IMPORTS.contains(&n.split('@').next().unwrap_or_default()))
        .collect();
    if !refused.is_empty() {
        return Err(LoadError::new(
            name,
            format!(
                "imports {} which agentrt does not grant: a policy may import only {GRANTED_IMPORTS:?}",
                list_or_nothing(&refused)
            ),
        ));
    }
    Ok(line)
}

/// Semver compatibility for the contract: same major, or same minor while major is 0.
fn same_contract_line(found: &str, expected: &str) -> bool {
    let line = |s: &str| {
        let version = s.rsplit('@').next().unwrap_or_default();
        let mut parts = version.split('.');
        let major = parts.next().unwrap_or_default().to_string();
        let minor = parts.next().unwrap_or_default().to_string();
        if major == "0" {
            format!("0.{minor}")
        } else {
            major
        }
    };
    line(found) == line(expected)
}

fn list_or_nothing(names: &[String]) -> String {
    if names.is_empty() {
        "nothing".to_string()
    } else {
        names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    }
}

/// wasmtime errors carry context chains; the innermost message is the one that names the problem.
pub(crate) fn root_cause(e: &wasmtime::Error) -> String {
    format!("{e:#}")
}

fn guest_exports(component: &Component, line: ContractLine) -> Option<GuestExports> {
    let guest = component.get_export_index(None, format!("{GUEST_EXPORT}@{}", line.version()).as_str())?;
    let func = |name: &str| component.get_export_index(Some(&guest), name);
    Some(GuestExports {
        score_packed: func("score-packed")?,
        act: func("act")?,
        predict: func("predict")?,
        snapshot: func("snapshot")?,
    })
}
