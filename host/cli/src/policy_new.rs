//! `agentrt policy new NAME --lang rust|python|js|c|go`: a working skeleton in `./NAME`, from the
//! templates in `sdk/templates/<lang>/` (embedded in the binary). Run it in an agentrt checkout's
//! `policies/` folder: `cargo xtask build-policies` then builds the skeleton like every policy
//! there (the templates import their SDK from `../../sdk`), and it passes `agentrt policy check`.
//! Each file's comments say where the logic goes.

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
/// `__TYPE__` (the name in CamelCase) and `__PACKAGE__` (the name without `-`: a Go package) to
/// fill in.
type Template = (&'static str, &'static str);

const RUST: &[Template] = &[
    ("Cargo.toml", include_str!("../../../sdk/templates/rust/Cargo.toml")),
    ("src/lib.rs", include_str!("../../../sdk/templates/rust/src/lib.rs")),
];
const PYTHON: &[Template] = &[
    ("app.py", include_str!("../../../sdk/templates/python/app.py")),
    ("test_app.py", include_str!("../../../sdk/templates/python/test_app.py")),
];
const JS: &[Template] = &[
    ("policy.js", include_str!("../../../sdk/templates/js/policy.js")),
    (
        "policy.test.js",
        include_str!("../../../sdk/templates/js/policy.test.js"),
    ),
];
const C: &[Template] = &[
    ("policy.c", include_str!("../../../sdk/templates/c/policy.c")),
    ("test_policy.c", include_str!("../../../sdk/templates/c/test_policy.c")),
];
const GO: &[Template] = &[
    ("go.mod", include_str!("../../../sdk/templates/go/go.mod")),
    ("policy.go", include_str!("../../../sdk/templates/go/policy.go")),
    (
        "policy_test.go",
        include_str!("../../../sdk/templates/go/policy_test.go"),
    ),
];

impl Lang {
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
    fn next_steps(self, name: &str) -> String {
        let register = match self {
            Lang::Rust => format!("add \"policies/{name}\" to `members` in the workspace's Cargo.toml, then\n  "),
            _ => String::new(),
        };
        format!(
            "{register}cargo xtask build-policies     # → <target>/components/{name}.wasm\n  \
             cargo xtask test               # its native tests with the others\n  \
             agentrt policy check <target>/components/{name}.wasm"
        )
    }
}

pub fn run(args: NewArgs) -> Result<()> {
    let written = create(&args.dir, &args.name, args.lang)?;
    let folder = args.dir.join(&args.name);
    println!("created {} ({} files)", folder.display(), written.len());
    if !is_policies_folder(&args.dir) {
        println!(
            "note: the skeleton imports its SDK from ../../sdk: move it into an agentrt checkout's policies/ folder to build it"
        );
    }
    println!("next:\n  {}", args.lang.next_steps(&args.name));
    Ok(())
}

/// Write the skeleton of `name` in `lang` into `parent/name`; returns the files written.
pub fn create(parent: &Path, name: &str, lang: Lang) -> Result<Vec<PathBuf>> {
    check_name(name)?;
    let templates = lang.templates();
    let folder = parent.join(name);
    if folder.exists() {
        bail!("{} already exists; choose another name or remove it", folder.display());
    }
    let type_name = camel_case(name);
    let mut written = Vec::new();
    for (path, text) in templates {
        let path = folder.join(path);
        std::fs::create_dir_all(path.parent().expect("a template path has a folder"))
            .with_context(|| format!("creating {}", folder.display()))?;
        let text = text
            .replace("__NAME__", name)
            .replace("__TYPE__", &type_name)
            .replace("__PACKAGE__", &name.replace('-', ""));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
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
fn is_policies_folder(dir: &Path) -> bool {
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
                    !text.contains("__NAME__") && !text.contains("__TYPE__") && !text.contains("__PACKAGE__"),
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

    #[test]
    fn type_names_are_camel_case() {
        assert_eq!(camel_case("my-fine-policy2"), "MyFinePolicy2");
        assert_eq!(camel_case("lru"), "Lru");
    }
}
