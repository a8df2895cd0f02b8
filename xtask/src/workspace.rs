//! The folders every xtask command works in, resolved once: the workspace root and the build's
//! target folder (`CARGO_TARGET_DIR`, relative to the root when relative; `<root>/target` by
//! default — the rule of `agentrt_layout::target_dir`, which the `agentrt` build script and the
//! runtime's component lookup follow too).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentrt_layout::{built_components_dir, target_dir, COMPONENTS_DIR_ENV};

pub struct Workspace {
    pub root: PathBuf,
    pub target: PathBuf,
}

impl Workspace {
    /// The workspace xtask was built from, with this process's `CARGO_TARGET_DIR`.
    pub fn from_environment() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the workspace")
            .to_path_buf();
        Self::new(root, std::env::var_os("CARGO_TARGET_DIR").as_deref())
    }

    pub fn new(root: PathBuf, cargo_target_dir: Option<&OsStr>) -> Self {
        let target = target_dir(&root, cargo_target_dir);
        Self { root, target }
    }

    /// What a policy build reads (wit/, sdk/) and where it keeps its intermediate files.
    pub fn tree(&self) -> agentrt_policy_build::Tree {
        agentrt_policy_build::Tree::checkout(&self.root, &self.target)
    }

    /// Where `build-policies` writes components.
    pub fn components(&self) -> PathBuf {
        built_components_dir(&self.target)
    }

    /// `program` run in the root, told the target folder (absolute, so that a relative
    /// `CARGO_TARGET_DIR` cannot mean another folder to it) and the components folder: the cargo
    /// it starts, the binaries and tests that cargo builds and whatever they start look where
    /// xtask built.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.root)
            .env("CARGO_TARGET_DIR", &self.target)
            .env(COMPONENTS_DIR_ENV, self.components());
        command
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(command: &'a Command, name: &str) -> Option<&'a OsStr> {
        command
            .get_envs()
            .find(|(key, _)| *key == OsStr::new(name))
            .and_then(|(_, value)| value)
    }

    #[test]
    fn a_relative_target_dir_is_resolved_once_against_the_root_and_handed_to_children() {
        let workspace = Workspace::new(PathBuf::from("/src/agentrt"), Some(OsStr::new("out/t")));
        assert_eq!(workspace.target, Path::new("/src/agentrt/out/t"));
        assert_eq!(workspace.components(), Path::new("/src/agentrt/out/t/components"));
        let child = workspace.command("cargo");
        assert_eq!(child.get_current_dir(), Some(Path::new("/src/agentrt")));
        assert_eq!(
            env_of(&child, "CARGO_TARGET_DIR"),
            Some(OsStr::new("/src/agentrt/out/t"))
        );
        assert_eq!(
            env_of(&child, COMPONENTS_DIR_ENV),
            Some(OsStr::new("/src/agentrt/out/t/components"))
        );
    }

    #[test]
    fn without_cargo_target_dir_everything_is_under_root_target() {
        let workspace = Workspace::new(PathBuf::from("/src/agentrt"), None);
        assert_eq!(workspace.target, Path::new("/src/agentrt/target"));
        assert_eq!(workspace.components(), Path::new("/src/agentrt/target/components"));
    }
}
