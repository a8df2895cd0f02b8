//! `agentrt policy new NAME --lang rust|python|js|c|go`: a working skeleton in `./NAME`, from the
//! templates in `sdk/templates/<lang>/` (embedded in the binary). Each file's comments say where
//! the logic goes.
//!
//! - Anywhere: a standalone project — the skeleton, a README (the events with the language's names,
//!   how to build, test and compare it), the SDK vendored into `NAME/agentrt-sdk/`
//!   ([`crate::policy_sdk`]), and for Rust a manifest that is its own workspace; `agentrt policy
//!   build --test` in the folder builds it and runs its own tests and the conformance kit.
//! - In an agentrt checkout's `policies/` folder: a policy of that checkout — the templates import
//!   the checkout's SDK from `../../sdk`, and `cargo xtask build-policies` builds it with the others.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};

#[derive(Args)]
pub struct NewArgs {
    /// The policy's name: its folder, its component (`NAME.wasm`) and its `info` name. Lowercase
    /// letters, digits and `-`, starting with a letter.
    pub name: String,
    /// The language of the skeleton.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// Where to create the folder (default: the current folder).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    C,
    Go,
}

/// A template file: its path in the skeleton and its text, with `__NAME__` (the policy's name),
/// `__TYPE__` (the name in CamelCase), `__PACKAGE__` (the name without `-`: a Go package),
/// `__MAGIC__` (a 4-character snapshot tag from the name) and `__SDK__` (the SDK's folder,
/// relative to the policy's) to fill in.
type Template = (&'static str, &'static str);

const RUST: &[Template] = &[
    ("Cargo.toml", include_str!("../../sdk/templates/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("../../sdk/templates/rust/src/lib.rs")),
];
/// The Rust manifest of a standalone project: its own workspace, the vendored SDK, the `wasm`
/// profile.
const RUST_STANDALONE_MANIFEST: &str = include_str!("../../sdk/templates/standalone/Cargo.toml");
const GITIGNORE: &str = include_str!("../../sdk/templates/standalone/gitignore");
const PYTHON: &[Template] = &[
    ("app.py", include_str!("../../sdk/templates/python/app.py")),
    ("test_app.py", include_str!("../../sdk/templates/python/test_app.py")),
];
const JS: &[Template] = &[
    ("policy.js", include_str!("../../sdk/templates/js/policy.js")),
    ("policy.test.js", include_str!("../../sdk/templates/js/policy.test.js")),
];
const C: &[Template] = &[
    ("policy.c", include_str!("../../sdk/templates/c/policy.c")),
    ("test_policy.c", include_str!("../../sdk/templates/c/test_policy.c")),
];
const GO: &[Template] = &[
    ("go.mod", include_str!("../../sdk/templates/go/go.mod")),
    ("policy.go", include_str!("../../sdk/templates/go/policy.go")),
    ("policy_test.go", include_str!("../../sdk/templates/go/policy_test.go")),
];

/// A standalone project's README, by language: the events with the language's names, and how to
/// build, test and compare the policy there.
const READMES: [(Lang, &str); 5] = [
    (Lang::Rust, include_str!("../../sdk/templates/rust/README.md")),
    (Lang::Python, include_str!("../../sdk/templates/python/README.md")),
    (Lang::Js, include_str!("../../sdk/templates/js/README.md")),
    (Lang::C, include_str!("../../sdk/templates/c/README.md")),
    (Lang::Go, include_str!("../../sdk/templates/go/README.md")),
];

impl Lang {
    fn readme(self) -> &'static str {
        READMES
            .iter()
            .find(|(l, _)| *l == self)
            .map(|(_, r)| *r)
            .expect("a README per language")
    }

    fn templates(self) -> &'static [Template] {
        match self {
            Lang::Rust => RUST,
            Lang::Python => PYTHON,
            Lang::Js => JS,
            Lang::C => C,
            Lang::Go => GO,
        }
    }

    /// What to do next, printed after the files are written.
    fn next_steps(self, name: &str, placement: Placement) -> String {
        if placement == Placement::Standalone {
            return format!(
                "cd {name}                      # README.md: the events, and what each step does\n  \
                 agentrt policy build --test     # → target/{name}.wasm, its own tests, the conformance kit\n  \
                 agentrt sim table --quick --policies lru,cachesage,belady,target/{name}.wasm"
            );
        }
        let register = match self {
            Lang::Rust => format!("add \"policies/{name}\" to `members` in the workspace's Cargo.toml, then\n  "),
            _ => String::new(),
        };
        format!(
            "{register}cargo xtask build-policies     # → <target>/components/{name}.wasm\n  \
             cargo xtask test               # its native tests with the others\n  \
             agentrt policy test <target>/components/{name}.wasm"
        )
    }
}

/// Where a skeleton goes, which decides how it reaches its SDK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// A policy of the agentrt checkout whose `policies/` folder it is in.
    Checkout,
    /// A project of its own, with the SDK vendored in it.
    Standalone,
}

pub fn run(args: NewArgs) -> Result<()> {
    let placement = placement(&args.dir);
    let written = create(&args.dir, &args.name, args.lang)?;
    let folder = args.dir.join(&args.name);
    match placement {
        Placement::Standalone => println!(
            "created {} ({} files, and agentrt {}'s SDK in {}/)",
            folder.display(),
            written.len(),
            crate::policy_sdk::version(),
            crate::policy_sdk::VENDORED
        ),
        Placement::Checkout => println!(
            "created {} ({} files; a policy of this checkout, built with its SDK)",
            folder.display(),
            written.len()
        ),
    }
    println!("next:\n  {}", args.lang.next_steps(&args.name, placement));
    Ok(())
}

fn placement(parent: &Path) -> Placement {
    if is_policies_folder(parent) {
        Placement::Checkout
    } else {
        Placement::Standalone
    }
}

/// Write the skeleton of `name` in `lang` into `parent/name`; returns the files written (the
/// vendored SDK of a standalone project aside).
pub fn create(parent: &Path, name: &str, lang: Lang) -> Result<Vec<PathBuf>> {
    check_name(name)?;
    let placement = placement(parent);
    let folder = parent.join(name);
    if folder.exists() {
        bail!("{} already exists; choose another name or remove it", folder.display());
    }
    let mut templates: Vec<Template> = lang.templates().to_vec();
    let sdk = match placement {
        Placement::Checkout => "../../sdk".to_string(),
        Placement::Standalone => {
            for template in &mut templates {
                if template.0 == "Cargo.toml" {
                    template.1 = RUST_STANDALONE_MANIFEST;
                }
            }
            templates.push((".gitignore", GITIGNORE));
            templates.push(("README.md", lang.readme()));
            format!("./{}", crate::policy_sdk::VENDORED)
        }
    };
    let type_name = camel_case(name);
    let mut written = Vec::new();
    for (path, text) in templates {
        let path = folder.join(path);
        std::fs::create_dir_all(path.parent().expect("a template path has a folder"))
            .with_context(|| format!("creating {}", folder.display()))?;
        let text = text
            .replace("__NAME__", name)
            .replace("__TYPE__", &type_name)
            .replace("__PACKAGE__", &name.replace('-', ""))
            .replace("__MAGIC__", &snapshot_tag(name))
            .replace("__SDK__", &sdk);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    if placement == Placement::Standalone {
        crate::policy_sdk::vendor(&folder)?;
    }
    Ok(written)
}

/// A name that is a folder, a component file, a Cargo package suffix and an identifier part in
/// every language.
fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
        && !name.contains("--");
    if !ok {
        bail!(
            "policy name {name:?}: use lowercase letters, digits and single `-`, starting with a letter (at most 40)"
        );
    }
    Ok(())
}

/// A 4-character snapshot tag from the name: its first letters and digits, upper-cased, padded
/// with `_` (`my-policy` → `MYPO`, `ab` → `AB__`).
fn snapshot_tag(name: &str) -> String {
    let mut tag: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(4)
        .map(|c| c.to_ascii_uppercase())
        .collect();
    while tag.len() < 4 {
        tag.push('_');
    }
    tag
}

/// `my-policy` → `MyPolicy`.
fn camel_case(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// `dir` is the `policies/` folder of an agentrt checkout (its SDKs are at `../sdk`).
pub fn is_policies_folder(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    dir.file_name().is_some_and(|n| n == "policies") && dir.join("../sdk/README.md").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("agentrt-policy-new-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn every_language_writes_its_files_with_the_name_filled_in() {
        let dir = scratch("langs");
        for (lang, main) in [
            (Lang::Rust, "src/lib.rs"),
            (Lang::Python, "app.py"),
            (Lang::Js, "policy.js"),
            (Lang::C, "policy.c"),
            (Lang::Go, "policy.go"),
        ] {
            let name = format!("my-{lang:?}").to_lowercase();
            let written = create(&dir, &name, lang).unwrap();
            assert!(written.len() >= 2, "{lang:?}: a policy and its test");
            let text = std::fs::read_to_string(dir.join(&name).join(main)).unwrap();
            assert!(
                text.contains(&format!("\"{name}\"")) || text.contains(&format!("'{name}'")),
                "{lang:?}: {text}"
            );
            assert!(text.contains("YOUR LOGIC HERE"), "{lang:?} says where the logic goes");
            for file in written {
                let text = std::fs::read_to_string(&file).unwrap();
                assert!(
                    !["__NAME__", "__TYPE__", "__PACKAGE__", "__MAGIC__", "__SDK__"]
                        .iter()
                        .any(|p| text.contains(p)),
                    "{}",
                    file.display()
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_names_and_an_existing_folder_are_refused_by_what_is_wrong() {
        let dir = scratch("refusals");
        for bad in ["", "My", "9lives", "a_b", "a--b", "a-", "a/b"] {
            let err = create(&dir, bad, Lang::Rust).unwrap_err().to_string();
            assert!(err.contains("policy name"), "{bad:?}: {err}");
        }
        create(&dir, "taken", Lang::C).unwrap();
        let err = create(&dir, "taken", Lang::C).unwrap_err().to_string();
        assert!(err.contains("already exists"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Outside a checkout, every path a skeleton names to reach its SDK exists in the copy
    /// vendored beside it, and the Rust one is a workspace of its own with the `wasm` profile.
    #[test]
    fn a_skeleton_outside_a_checkout_reaches_the_sdk_vendored_beside_it() {
        let dir = scratch("standalone");
        for (lang, file, prefix, suffix) in [
            (Lang::Rust, "Cargo.toml", "agentrt-sdk = { path = \"", "\" }"),
            (
                Lang::Js,
                "policy.js",
                "import { Policy, exportPolicy, recencyScores } from '",
                "';",
            ),
            (
                Lang::Js,
                "policy.test.js",
                "import { Harness, gpuBlock, rank } from '",
                "';",
            ),
            (Lang::Go, "go.mod", "replace agentrt.dev/policy => ", ""),
        ] {
            let name = format!("standalone-{lang:?}").to_lowercase();
            let project = dir.join(&name);
            if !project.exists() {
                create(&dir, &name, lang).unwrap();
            }
            let text = std::fs::read_to_string(project.join(file)).unwrap();
            let target = text
                .lines()
                .find_map(|l| l.strip_prefix(prefix).and_then(|rest| rest.strip_suffix(suffix)))
                .unwrap_or_else(|| panic!("{file}: no line {prefix}…{suffix}:\n{text}"));
            assert!(target.contains("agentrt-sdk"), "{file}: {target}");
            assert!(project.join(target).exists(), "{file}: {target} is not in the project");
            assert!(project.join(".gitignore").is_file());
        }
        let manifest = std::fs::read_to_string(dir.join("standalone-rust/Cargo.toml")).unwrap();
        assert!(manifest.contains("\n[workspace]\n") && manifest.contains("[profile.wasm]"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn type_names_are_camel_case_and_tags_four_characters() {
        assert_eq!(camel_case("my-fine-policy2"), "MyFinePolicy2");
        assert_eq!(camel_case("lru"), "Lru");
        assert_eq!(
            (snapshot_tag("my-policy"), snapshot_tag("ab")),
            ("MYPO".into(), "AB__".into())
        );
    }

    /// A project outside a checkout stands alone: its README names the language's event types and
    /// says how to build, test and compare it, and nothing it writes points into a checkout.
    #[test]
    fn a_standalone_project_has_a_readme_and_no_path_into_a_checkout() {
        let dir = scratch("readme");
        for (lang, event) in [
            (Lang::Rust, "Event::SessionEnd"),
            (Lang::Python, "Event_SessionEnd"),
            (Lang::Js, "'session-end'"),
            (Lang::C, "AGENTRT_POLICY_TYPES_END_REASON_CLOSED"),
            (Lang::Go, "*policy.SessionEnd"),
        ] {
            let name = format!("alone-{lang:?}").to_lowercase();
            let written = create(&dir, &name, lang).unwrap();
            let readme = std::fs::read_to_string(dir.join(&name).join("README.md")).unwrap();
            // Every language's SDK builds the current line.
            for needed in [
                event,
                "agentrt policy build --test",
                "sim table --quick",
                "agentrt:policy@0.5.0",
            ] {
                assert!(readme.contains(needed), "{lang:?}: README lacks {needed:?}");
            }
            for file in written {
                let text = std::fs::read_to_string(&file).unwrap();
                for checkout in [
                    "../../sdk",
                    "sdk/python/README",
                    "sdk/js/README",
                    "policies/callrate",
                    "docs/",
                ] {
                    assert!(!text.contains(checkout), "{}: names {checkout:?}", file.display());
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
