//! Finding a policy component by name. Every command that takes a component name (`serve
//! --policy`, `demo`, `sim`) asks here, and every place answers in one order:
//!
//! 1. the folder `$AGENTRT_COMPONENTS_DIR`, when it is set;
//! 2. the folders beside the binary ([`agentrt_layout::INSTALLED_COMPONENTS`]): an installed
//!    `agentrt` carries its components there;
//! 3. the components built into the binary (the `agentrt` binary embeds the built-in policies
//!    when they were built before it);
//! 4. the source tree's build output (`<target>/components`, where `cargo xtask build-policies`
//!    writes), for a binary run from its checkout.
//!
//! A folder earlier in the order overrides what comes after it, so an operator can replace a
//! built-in policy without rebuilding. Whatever the source, the bytes go through
//! [`PolicyEngine::load_file`] or [`PolicyEngine::load_bytes`]: the size limit and the validation
//! apply to a built-in component exactly as to a file.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use agentrt_layout::{
    built_components_dir, component_file_name, installed_components_dirs, target_dir, BASELINE_COMPONENT,
};

use crate::component::PolicyComponent;
use crate::engine::PolicyEngine;
use crate::error::LoadError;

pub use agentrt_layout::COMPONENTS_DIR_ENV;

/// A component whose bytes are part of the binary.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedComponent {
    /// The policy's name (`lru`), as a lookup is asked for it; not a file name.
    pub name: &'static str,
    /// The component, as its `.wasm` file held it at build time.
    pub bytes: &'static [u8],
}

/// The components a binary embeds, and the folder its build took them from (named when a
/// component is missing, so that the message says where to build it).
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedSet {
    /// The embedded components; looked up by name, first match wins.
    pub components: &'static [EmbeddedComponent],
    /// The folder the build read them from; empty when nothing is embedded.
    pub built_from: &'static str,
}

impl EmbeddedSet {
    /// No embedded components: libraries, tests and tools other than the `agentrt` binary.
    pub const NONE: EmbeddedSet = EmbeddedSet {
        components: &[],
        built_from: "",
    };

    fn get(&self, name: &str) -> Option<EmbeddedComponent> {
        self.components.iter().find(|c| c.name == name).copied()
    }

    /// The file `component` was embedded from, when it still exists and holds other bytes: a
    /// policy rebuilt after the binary, which the embedded copy would silently stand in for.
    /// (The embedded copy still wins the lookup: the build folder may be writable by others.)
    fn rebuilt_since(&self, component: &EmbeddedComponent) -> Option<PathBuf> {
        if self.built_from.is_empty() {
            return None;
        }
        let path = Path::new(self.built_from).join(component_file_name(component.name));
        let bytes = std::fs::read(&path).ok()?;
        (bytes != component.bytes).then_some(path)
    }

    fn names(&self) -> Vec<&'static str> {
        self.components.iter().map(|c| c.name).collect()
    }
}

/// Where a component was found.
#[derive(Clone, Debug)]
pub enum ComponentSource {
    /// A `.wasm` file, read when loaded.
    File(PathBuf),
    /// A component built into the binary.
    Embedded(EmbeddedComponent),
}

impl ComponentSource {
    /// Load and validate it, under the engine's size limit on components.
    pub fn load(&self, engine: &PolicyEngine) -> Result<PolicyComponent, LoadError> {
        match self {
            ComponentSource::File(path) => engine.load_file(path),
            ComponentSource::Embedded(c) => engine.load_bytes(&self.to_string(), c.bytes),
        }
    }
}

impl fmt::Display for ComponentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComponentSource::File(path) => write!(f, "{}", path.display()),
            ComponentSource::Embedded(c) => write!(f, "{} (built into this binary)", c.name),
        }
    }
}

/// No component of that name anywhere the lookup searched; the message lists every place.
#[derive(Debug, thiserror::Error)]
#[error("no policy component `{name}`; looked in:\n{searched}\n{hint}")]
pub struct ComponentNotFound {
    /// The name that was looked up.
    pub name: String,
    searched: String,
    hint: String,
}

#[derive(Clone, Debug)]
enum Place {
    Folder {
        dir: PathBuf,
        label: &'static str,
    },
    /// The components built into the binary; with `only`, just that one.
    Embedded {
        set: EmbeddedSet,
        only: Option<&'static str>,
    },
    /// A folder named by an environment variable that is not set: listed when nothing is found,
    /// so that the message names the variable.
    UnsetVariable(&'static str),
}

/// The places a component name is looked up in, in order.
#[derive(Clone, Debug)]
pub struct ComponentLookup {
    places: Vec<Place>,
}

impl ComponentLookup {
    /// The lookup of this process: `$AGENTRT_COMPONENTS_DIR`, beside the running binary, `embedded`,
    /// then the build output of the source tree this crate was compiled from.
    pub fn from_environment(embedded: EmbeddedSet) -> Self {
        let env_dir = std::env::var_os(COMPONENTS_DIR_ENV)
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from);
        let exe = std::env::current_exe().ok();
        Self::new(env_dir, exe.as_deref(), embedded, source_tree_components_dir())
    }

    /// The lookup from its parts, in the order of the module documentation.
    pub fn new(env_dir: Option<PathBuf>, exe: Option<&Path>, embedded: EmbeddedSet, source_tree_dir: PathBuf) -> Self {
        let mut places = vec![match env_dir {
            Some(dir) => Place::Folder {
                dir,
                label: COMPONENTS_DIR_ENV,
            },
            None => Place::UnsetVariable(COMPONENTS_DIR_ENV),
        }];
        if let Some(bin_dir) = exe.and_then(Path::parent) {
            for dir in installed_components_dirs(bin_dir) {
                places.push(Place::Folder {
                    dir,
                    label: "beside the binary",
                });
            }
        }
        places.push(Place::Embedded {
            set: embedded,
            only: None,
        });
        places.push(Place::Folder {
            dir: source_tree_dir,
            label: "the source tree's build",
        });
        Self { places }
    }

    /// Only the folder `dir`.
    pub fn in_folder(dir: PathBuf) -> Self {
        Self {
            places: vec![Place::Folder {
                dir,
                label: GIVEN_FOLDER,
            }],
        }
    }

    /// A command's `--components DIR`: only `dir`, except that the baseline policy
    /// ([`BASELINE_COMPONENT`], `lru`) comes from the components this lookup's binary embeds
    /// when `dir` has none — a folder of one's own policies is still compared with the LRU the
    /// rest of agentrt uses.
    pub fn given_folder(&self, dir: PathBuf) -> Self {
        let mut lookup = Self::in_folder(dir);
        for place in &self.places {
            if let Place::Embedded { set, .. } = place {
                lookup.places.push(Place::Embedded {
                    set: *set,
                    only: Some(BASELINE_COMPONENT),
                });
            }
        }
        lookup
    }

    /// The first place in the order that has the component `name`.
    pub fn find(&self, name: &str) -> Result<ComponentSource, ComponentNotFound> {
        for place in &self.places {
            match place {
                Place::Folder { dir, .. } => {
                    let path = dir.join(component_file_name(name));
                    if path.is_file() {
                        return Ok(ComponentSource::File(path));
                    }
                }
                Place::Embedded { set, only } => {
                    if only.is_none_or(|only| only == name) {
                        if let Some(component) = set.get(name) {
                            if let Some(rebuilt) = set.rebuilt_since(&component) {
                                tracing::warn!(
                                    "policy `{name}`: running the copy built into this binary, but {} has been \
                                     rebuilt since; rebuild agentrt (`cargo build`) to run the new one, or pass \
                                     its path",
                                    rebuilt.display()
                                );
                            }
                            return Ok(ComponentSource::Embedded(component));
                        }
                    }
                }
                Place::UnsetVariable(_) => {}
            }
        }
        Err(self.not_found(name))
    }

    /// `spec` is a path to a component file when it ends in `.wasm` or holds a path separator
    /// (loading it reports a missing file), and a component name to [`find`](Self::find)
    /// otherwise.
    pub fn resolve(&self, spec: &str) -> Result<ComponentSource, ComponentNotFound> {
        if spec.ends_with(".wasm") || spec.contains('/') || spec.contains(std::path::MAIN_SEPARATOR) {
            return Ok(ComponentSource::File(PathBuf::from(spec)));
        }
        self.find(spec)
    }

    fn not_found(&self, name: &str) -> ComponentNotFound {
        let mut searched = Vec::new();
        let mut embeds_none = None;
        let mut given = None;
        for place in &self.places {
            searched.push(match place {
                Place::Folder { dir, label } => {
                    if *label == GIVEN_FOLDER {
                        given = Some(dir);
                    }
                    format!("  {label}: {}", dir.display())
                }
                Place::UnsetVariable(variable) => format!("  {variable}: (unset)"),
                Place::Embedded { set, only } => {
                    if set.components.is_empty() {
                        embeds_none = Some(set.built_from);
                    }
                    let names = set.names();
                    match only {
                        Some(only) if names.contains(only) => format!("  built into this binary: {only}"),
                        Some(only) => format!("  built into this binary: no {only}"),
                        None if names.is_empty() => "  built into this binary: none".to_string(),
                        None => format!("  built into this binary: {}", names.join(", ")),
                    }
                }
            });
        }
        let file = component_file_name(name);
        let rebuild = |built_from: &str| {
            format!(
                "This agentrt was built before its components (none were in {built_from}): run \
                 `cargo xtask build-policies`, then build agentrt again"
            )
        };
        let hint = match (given, embeds_none) {
            (Some(dir), Some(built_from)) if name == BASELINE_COMPONENT && !built_from.is_empty() => {
                format!("Put {file} in {}, or: {}.", dir.display(), rebuild(built_from))
            }
            (Some(dir), _) => format!(
                "Put {file} in {} (--components), or leave --components out to search the usual places.",
                dir.display()
            ),
            (None, Some(built_from)) if !built_from.is_empty() => format!(
                "{}; or set {COMPONENTS_DIR_ENV} to a folder holding {file}.",
                rebuild(built_from)
            ),
            (None, _) => {
                format!("Run `cargo xtask build-policies`, or set {COMPONENTS_DIR_ENV} to a folder holding {file}.")
            }
        };
        ComponentNotFound {
            name: name.to_string(),
            searched: searched.join("\n"),
            hint,
        }
    }
}

/// How a command's `--components DIR` is named where it is listed.
const GIVEN_FOLDER: &str = "--components";

/// Where `cargo xtask build-policies` put components for the checkout this crate was compiled
/// from: `<target>/components`, with the target folder as `CARGO_TARGET_DIR` said at compile time.
fn source_tree_components_dir() -> PathBuf {
    let workspace_root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("host/runtime lies two folders below the workspace root");
    built_components_dir(&target_dir(
        workspace_root,
        option_env!("CARGO_TARGET_DIR").map(OsStr::new),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineOptions;

    /// An installed layout: `<root>/bin/agentrt`, `<root>/bin/components`,
    /// `<root>/share/agentrt/components`, a folder for the environment variable and a source tree.
    struct Layout {
        root: tempfile::TempDir,
    }

    impl Layout {
        fn new() -> Self {
            let root = tempfile::tempdir().unwrap();
            for dir in ["env", "bin/components", "share/agentrt/components", "tree"] {
                std::fs::create_dir_all(root.path().join(dir)).unwrap();
            }
            Self { root }
        }
        fn dir(&self, relative: &str) -> PathBuf {
            self.root.path().join(relative)
        }
        fn put(&self, dir: &str, name: &str) -> PathBuf {
            let path = self.dir(dir).join(component_file_name(name));
            std::fs::write(&path, b"not read by the lookup").unwrap();
            path
        }
        fn lookup(&self, env_dir: bool, embedded: EmbeddedSet) -> ComponentLookup {
            ComponentLookup::new(
                env_dir.then(|| self.dir("env")),
                Some(&self.dir("bin/agentrt")),
                embedded,
                self.dir("tree"),
            )
        }
    }

    const EMBEDDED: EmbeddedSet = EmbeddedSet {
        components: &[EmbeddedComponent {
            name: "lru",
            bytes: b"embedded lru",
        }],
        built_from: "/build/target/components",
    };

    fn file(source: ComponentSource) -> PathBuf {
        match source {
            ComponentSource::File(path) => path,
            other => panic!("expected a file, got {other}"),
        }
    }

    #[test]
    fn each_place_overrides_the_ones_after_it() {
        let layout = Layout::new();
        let tree = layout.put("tree", "lru");
        let lookup = layout.lookup(true, EMBEDDED);
        // Only in the source tree, and embedded: the embedded one comes first.
        match lookup.find("lru").unwrap() {
            ComponentSource::Embedded(c) => assert_eq!(c.bytes, b"embedded lru"),
            other => panic!("expected the embedded component, got {other}"),
        }
        // Without an embedded one, the source tree's.
        let bare = layout.lookup(true, EmbeddedSet::NONE);
        assert_eq!(file(bare.find("lru").unwrap()), tree);
        // Beside the binary: share/agentrt/components, then bin/components before it.
        let share = layout.put("share/agentrt/components", "lru");
        assert_eq!(file(lookup.find("lru").unwrap()), share);
        let beside = layout.put("bin/components", "lru");
        assert_eq!(file(lookup.find("lru").unwrap()), beside);
        // The environment variable's folder before everything.
        let env = layout.put("env", "lru");
        assert_eq!(file(lookup.find("lru").unwrap()), env);
        // Each place is looked up by name: another name still comes from where it is.
        let ttl = layout.put("tree", "ttl");
        assert_eq!(file(lookup.find("ttl").unwrap()), ttl);
    }

    #[test]
    fn an_embedded_copy_older_than_its_build_folder_is_noticed() {
        let layout = Layout::new();
        let built_from = layout.dir("built");
        std::fs::create_dir_all(&built_from).unwrap();
        let from: &'static str = Box::leak(built_from.display().to_string().into_boxed_str());
        let set = EmbeddedSet {
            components: &[EmbeddedComponent {
                name: "lru",
                bytes: b"embedded lru",
            }],
            built_from: from,
        };
        let lru = set.get("lru").unwrap();
        // The folder no longer has it (another machine): nothing to say.
        assert_eq!(set.rebuilt_since(&lru), None);
        // The same bytes: the binary is up to date.
        std::fs::write(built_from.join("lru.wasm"), b"embedded lru").unwrap();
        assert_eq!(set.rebuilt_since(&lru), None);
        // Rebuilt since: named.
        std::fs::write(built_from.join("lru.wasm"), b"rebuilt lru").unwrap();
        assert_eq!(set.rebuilt_since(&lru), Some(built_from.join("lru.wasm")));
    }

    #[test]
    fn the_installed_folder_is_named_without_dot_dot() {
        let layout = Layout::new();
        let share = layout.put("share/agentrt/components", "ttl");
        let found = file(layout.lookup(false, EmbeddedSet::NONE).find("ttl").unwrap());
        assert_eq!(found, share);
        assert!(!found.to_string_lossy().contains(".."), "{}", found.display());
    }

    #[test]
    fn a_missing_component_names_every_place_in_order_and_how_to_build_it() {
        let layout = Layout::new();
        let message = layout
            .lookup(
                false,
                EmbeddedSet {
                    components: &[],
                    built_from: "/build/target/components",
                },
            )
            .find("cachesage")
            .unwrap_err()
            .to_string();
        let places = [
            "AGENTRT_COMPONENTS_DIR: (unset)".to_string(),
            layout.dir("bin/components").display().to_string(),
            layout.dir("share/agentrt/components").display().to_string(),
            "built into this binary: none".to_string(),
            layout.dir("tree").display().to_string(),
        ];
        let mut from = 0;
        for place in &places {
            let at = message[from..]
                .find(place.as_str())
                .unwrap_or_else(|| panic!("{place:?} missing or out of order in:\n{message}"));
            from += at + place.len();
        }
        assert!(message.contains("no policy component `cachesage`"), "{message}");
        assert!(
            message.contains("built before its components (none were in /build/target/components)")
                && message.contains("cargo xtask build-policies"),
            "{message}"
        );
    }

    #[test]
    fn a_spec_with_a_path_is_a_file_and_a_bare_name_is_looked_up() {
        let layout = Layout::new();
        let lookup = layout.lookup(false, EMBEDDED);
        assert_eq!(
            file(lookup.resolve("/elsewhere/mine.wasm").unwrap()),
            Path::new("/elsewhere/mine.wasm")
        );
        assert_eq!(
            file(lookup.resolve("policies/mine").unwrap()),
            Path::new("policies/mine")
        );
        assert!(matches!(lookup.resolve("lru").unwrap(), ComponentSource::Embedded(_)));
        assert!(lookup.resolve("mine").is_err());
    }

    #[test]
    fn a_given_folder_is_the_only_place() {
        let layout = Layout::new();
        layout.put("tree", "lru");
        let lookup = ComponentLookup::in_folder(layout.dir("env"));
        assert!(lookup.find("lru").is_err());
        let env = layout.put("env", "lru");
        assert_eq!(file(lookup.find("lru").unwrap()), env);
    }

    #[test]
    fn a_given_folder_replaces_every_place_but_the_built_in_baseline() {
        const TWO: EmbeddedSet = EmbeddedSet {
            components: &[
                EmbeddedComponent {
                    name: "lru",
                    bytes: b"embedded lru",
                },
                EmbeddedComponent {
                    name: "ttl",
                    bytes: b"embedded ttl",
                },
            ],
            built_from: "/build/target/components",
        };
        let layout = Layout::new();
        layout.put("tree", "mine");
        let mine = layout.put("env", "mine");
        let lookup = layout.lookup(true, TWO).given_folder(layout.dir("env"));
        assert_eq!(file(lookup.find("mine").unwrap()), mine);
        // The folder lacks the baseline: the built-in one.
        match lookup.find("lru").unwrap() {
            ComponentSource::Embedded(c) => assert_eq!(c.bytes, b"embedded lru"),
            other => panic!("expected the built-in lru, got {other}"),
        }
        // The folder's own lru wins.
        let lru = layout.put("env", "lru");
        assert_eq!(file(lookup.find("lru").unwrap()), lru);
        // Any other built-in is not looked for: the folder is what was asked for.
        let message = lookup.find("ttl").unwrap_err().to_string();
        assert!(
            message.contains(&format!(
                "Put ttl.wasm in {} (--components)",
                layout.dir("env").display()
            )),
            "{message}"
        );
        assert!(message.contains("built into this binary: lru"), "{message}");
        assert!(!message.contains("xtask"), "nothing to build: {message}");

        // A binary built before its components has no lru to offer: say so, and both ways out.
        let bare = layout
            .lookup(
                false,
                EmbeddedSet {
                    components: &[],
                    built_from: "/build/target/components",
                },
            )
            .given_folder(layout.dir("bin/components"));
        let message = bare.find("lru").unwrap_err().to_string();
        assert!(message.contains("built into this binary: no lru"), "{message}");
        assert!(
            message.contains(&format!("Put lru.wasm in {}", layout.dir("bin/components").display()))
                && message.contains("built before its components"),
            "{message}"
        );
    }

    #[test]
    fn embedded_bytes_go_through_the_size_limit_and_the_validation() {
        let cache = tempfile::tempdir().unwrap();
        let engine = PolicyEngine::new(EngineOptions {
            cache_dir: Some(cache.path().to_path_buf()),
            max_component_bytes: 8,
            ..EngineOptions::default()
        })
        .unwrap();
        let oversized = ComponentSource::Embedded(EmbeddedComponent {
            name: "big",
            bytes: &[0; 9],
        });
        let Err(error) = oversized.load(&engine) else {
            panic!("9 bytes over an 8-byte limit loaded");
        };
        assert!(error.reason.contains("8-byte limit"), "{error}");
        assert_eq!(error.source_name, "big (built into this binary)");
        let garbage = ComponentSource::Embedded(EmbeddedComponent {
            name: "junk",
            bytes: b"junk",
        });
        let Err(error) = garbage.load(&engine) else {
            panic!("junk bytes loaded");
        };
        assert_eq!(error.source_name, "junk (built into this binary)");
        assert!(!error.reason.contains("limit"), "{error}");
    }
}
