//! Where agentrt's files are. Three parties must agree on it: `cargo xtask` writes the policy
//! components, the `agentrt` binary's build script embeds some of them, and the runtime's
//! component lookup finds them at run time — in the build's target folder or in an installed
//! layout beside the binary. Each reads the rules from here, so they cannot drift apart.

use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

/// The environment variable naming a components folder searched before all others; `cargo
/// xtask` sets it for every command it starts.
pub const COMPONENTS_DIR_ENV: &str = "AGENTRT_COMPONENTS_DIR";

/// The folder under the target folder that `cargo xtask build-policies` writes components into.
pub const BUILT_COMPONENTS: &str = "components";

/// Folders, relative to the folder holding the `agentrt` binary, where an installed `agentrt`
/// looks for components, in lookup order: an unpacked archive (`agentrt` beside `components/`),
/// then a prefix install (`/usr/local/bin/agentrt` and `/usr/local/share/agentrt/components`).
pub const INSTALLED_COMPONENTS: [&str; 2] = ["components", "../share/agentrt/components"];

/// The folders of [`INSTALLED_COMPONENTS`] for a binary in `bin_dir`, in lookup order, with their
/// `..` taken off `bin_dir` (a message names `/usr/local/share/…`, not `/usr/local/bin/../share/…`).
pub fn installed_components_dirs(bin_dir: &Path) -> Vec<PathBuf> {
    INSTALLED_COMPONENTS
        .iter()
        .map(|relative| {
            let mut dir = bin_dir.to_path_buf();
            for part in Path::new(relative).components() {
                match part {
                    Component::ParentDir => {
                        dir.pop();
                    }
                    other => dir.push(other),
                }
            }
            dir
        })
        .collect()
}

/// The components the `agentrt` binary embeds when they are built. The Python policy
/// (`frequency`) is not among them: it carries CPython and weighs about 18 MB.
pub const EMBEDDED_COMPONENTS: [&str; 7] = [
    "lru",
    "ttl",
    "cachesage",
    "guard",
    "fair-share",
    "tool-memo",
    "working-set",
];

/// The baseline policy: what every other policy is compared with, and whose order the host falls
/// back to. A command given its own components folder still finds it built in.
pub const BASELINE_COMPONENT: &str = "lru";

/// The build's target folder: `cargo_target_dir` (the value of `CARGO_TARGET_DIR`), taken
/// relative to the workspace root when it is relative, or `<workspace root>/target` when it is
/// unset or empty.
pub fn target_dir(workspace_root: &Path, cargo_target_dir: Option<&OsStr>) -> PathBuf {
    match cargo_target_dir.filter(|dir| !dir.is_empty()) {
        Some(dir) => workspace_root.join(dir),
        None => workspace_root.join("target"),
    }
}

/// Where `cargo xtask build-policies` puts components, for the target folder `target_dir`.
pub fn built_components_dir(target_dir: &Path) -> PathBuf {
    target_dir.join(BUILT_COMPONENTS)
}

/// The file name of the component called `name`.
pub fn component_file_name(name: &str) -> String {
    format!("{name}.wasm")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_dir_defaults_to_target_under_the_root() {
        let root = Path::new("/src/agentrt");
        assert_eq!(target_dir(root, None), Path::new("/src/agentrt/target"));
        assert_eq!(target_dir(root, Some(OsStr::new(""))), Path::new("/src/agentrt/target"));
    }

    #[test]
    fn a_relative_target_dir_is_taken_from_the_root_and_an_absolute_one_as_is() {
        let root = Path::new("/src/agentrt");
        assert_eq!(
            target_dir(root, Some(OsStr::new("build/out"))),
            Path::new("/src/agentrt/build/out")
        );
        assert_eq!(
            target_dir(root, Some(OsStr::new("/var/tmp/t"))),
            Path::new("/var/tmp/t")
        );
    }

    #[test]
    fn an_installed_binary_looks_beside_itself_then_in_the_prefix_share_folder() {
        assert_eq!(
            installed_components_dirs(Path::new("/usr/local/bin")),
            [
                Path::new("/usr/local/bin/components"),
                Path::new("/usr/local/share/agentrt/components")
            ]
        );
    }

    #[test]
    fn components_are_built_under_the_target_dir() {
        assert_eq!(
            built_components_dir(Path::new("/t")).join(component_file_name("lru")),
            Path::new("/t/components/lru.wasm")
        );
    }
}
