//! The environment a `stdio:` MCP server starts with.
//!
//! Such a server is third-party code running as agentrt's user; it must not inherit agentrt's
//! secrets (`AGENTRT_ADMIN_TOKEN`, `AGENTRT_CACHE_SALT_SECRET`, `AGENTRT_METRICS_TOKEN`,
//! `AGENTRT_UPSTREAM_API_KEY`, …) or anything else of the operator's environment it was not given.
//! So its environment is built from nothing: [`BASE`] (where programs are, the user's home, the
//! locale, the temporary folder, the time zone — what interpreters and package runners such as
//! `npx`/`uvx` need to start, and no secret), plus what the operator names with
//! `--mcp-stdio-env NAME` (passed from agentrt's environment) or `--mcp-stdio-env NAME=VALUE`.
//!
//! Values are never printed: an error names the variable, and `Debug` shows names only.

use std::ffi::OsString;

/// Variables every stdio server gets from agentrt's environment, when set there.
pub const BASE: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"];

/// What the operator adds to [`BASE`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// (name, the value to set; `None`: agentrt's own, if it has one).
    extra: Vec<(String, Option<OsString>)>,
}

impl std::fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.extra.iter().map(|(name, _)| name)).finish()
    }
}

impl ChildEnv {
    /// Parse `--mcp-stdio-env` entries: `NAME` or `NAME=VALUE`.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut extra: Vec<(String, Option<OsString>)> = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            let (name, value) = match entry.split_once('=') {
                Some((name, value)) => (name, Some(OsString::from(value))),
                None => (entry.as_str(), None),
            };
            let valid = !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                // The entry may hold a value: name its position, not its text.
                return Err(format!(
                    "--mcp-stdio-env (entry {}): expected NAME or NAME=VALUE, NAME made of letters, digits and `_`",
                    i + 1
                ));
            }
            if extra.iter().any(|(n, _)| n == name) {
                return Err(format!("--mcp-stdio-env: `{name}` is given twice"));
            }
            extra.push((name.to_string(), value));
        }
        Ok(Self { extra })
    }

    /// The variables a child gets, taking agentrt's values from `lookup`.
    pub fn resolve(&self, lookup: impl Fn(&str) -> Option<OsString>) -> Vec<(String, OsString)> {
        let mut vars: Vec<(String, OsString)> = BASE
            .iter()
            .filter(|name| !self.extra.iter().any(|(n, _)| n == *name))
            .filter_map(|name| Some((name.to_string(), lookup(name)?)))
            .collect();
        for (name, value) in &self.extra {
            if let Some(value) = value.clone().or_else(|| lookup(name)) {
                vars.push((name.clone(), value));
            }
        }
        vars
    }

    /// Give `command` exactly this environment, from agentrt's own.
    pub fn apply(&self, command: &mut tokio::process::Command) {
        command.env_clear();
        command.envs(self.resolve(|name| std::env::var_os(name)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<OsString> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "HOME" => Some("/home/op".into()),
            "GITHUB_TOKEN" => Some("from-env".into()),
            "AGENTRT_ADMIN_TOKEN" => Some("secret".into()),
            _ => None,
        }
    }

    #[test]
    fn a_child_gets_the_base_and_only_what_the_operator_names() {
        let none = ChildEnv::default().resolve(lookup);
        assert_eq!(
            none,
            vec![("PATH".into(), "/usr/bin".into()), ("HOME".into(), "/home/op".into())]
        );
        let env = ChildEnv::parse(&["GITHUB_TOKEN".into(), "MODE=fast".into(), "UNSET".into()]).unwrap();
        let vars = env.resolve(lookup);
        assert!(vars.contains(&("GITHUB_TOKEN".into(), "from-env".into())));
        assert!(vars.contains(&("MODE".into(), "fast".into())));
        assert!(!vars.iter().any(|(n, _)| n == "UNSET" || n.starts_with("AGENTRT_")));
        // An explicit value replaces a base variable's.
        let path = ChildEnv::parse(&["PATH=/opt/bin".into()]).unwrap().resolve(lookup);
        assert_eq!(path.iter().filter(|(n, _)| n == "PATH").count(), 1);
        assert!(path.contains(&("PATH".into(), "/opt/bin".into())));
    }

    #[test]
    fn bad_entries_are_named_by_position_never_by_value() {
        let error = ChildEnv::parse(&["OK".into(), "bad name=hunter2".into()]).unwrap_err();
        assert!(error.contains("entry 2") && !error.contains("hunter2"), "{error}");
        assert!(ChildEnv::parse(&["A=1".into(), "A=2".into()])
            .unwrap_err()
            .contains("twice"));
        let env = ChildEnv::parse(&["TOKEN=hunter2".into()]).unwrap();
        assert_eq!(format!("{env:?}"), r#"["TOKEN"]"#);
    }
}
