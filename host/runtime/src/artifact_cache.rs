//! Compiled components on disk, so a restart does not recompile.
//!
//! Compiling is 13–50 ms for a Rust component and seconds for a Python or JS one; loading a
//! compiled artifact is tens of microseconds (docs/background.md §9). The key is the BLAKE3 hash of the
//! component's bytes plus the engine's compatibility hash (wasmtime version and every setting that
//! changes generated code), so a wasmtime upgrade or a config change never loads a stale artifact.
//!
//! Trust: deserializing an artifact runs native code produced by the compiler. The cache directory
//! must be writable only by the host's user; artifacts are written atomically (temp file + rename).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::Engine;

use crate::component_file::read_component_file;

/// Largest compiled artifact read back: compiled code runs to a few times its component's size.
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// A directory of compiled artifacts for one engine configuration.
#[derive(Debug, Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    engine_key: u64,
}

impl ArtifactCache {
    /// The cache in `dir` (created if missing) for artifacts `engine` compiles; an artifact another
    /// configuration compiled is never read back.
    pub fn new(engine: &Engine, dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir,
            engine_key: hasher.finish(),
        })
    }

    /// The folder the artifacts are written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_for(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{digest}-{:016x}.cwasm", self.engine_key))
    }

    /// The cached artifact for `digest`, if there is a usable one. A damaged or incompatible file
    /// is removed and reported as a miss.
    pub fn get(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path_for(digest);
        // Read into memory rather than `deserialize_file`, which maps the file: a mapped artifact
        // truncated underneath a running host (by another process, or a disk-full rewrite) would
        // kill the host with SIGBUS (`tests/policy_loading.rs` damages a live one). The price,
        // measured for issue 39 (docs/performance.md): reading is ~11 % of a load, and
        // `deserialize` copying the bytes into fresh executable memory ~65 %, where a mapped
        // load takes ~85 µs in all. A sealed memfd copy to map instead measured no cheaper.
        // Bounded like a component file: the directory is the host's, but a stray file there must
        // not take the host's memory. A miss recompiles.
        let bytes = match read_component_file(&path, MAX_ARTIFACT_BYTES) {
            Ok(bytes) => bytes,
            Err(e) if path.exists() => {
                tracing::warn!(error = %e, "skipping compiled artifact");
                return None;
            }
            Err(_) => return None,
        };
        // SAFETY: the file was written by `put` from `Component::serialize` with this engine's
        // configuration (the name carries its compatibility hash), in a directory the host owns;
        // wasmtime still checks the header and version before using it.
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "discarding unusable compiled artifact");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Store a compiled component. Failure to write is logged, not fatal: the cache is an
    /// optimisation.
    pub fn put(&self, digest: &str, component: &Component) {
        let path = self.path_for(digest);
        let result = component.serialize().map_err(|e| e.to_string()).and_then(|bytes| {
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            std::fs::write(&tmp, bytes)
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|e| e.to_string())
        });
        if let Err(e) = result {
            tracing::warn!(path = %path.display(), error = %e, "could not write compiled artifact");
        }
    }
}
