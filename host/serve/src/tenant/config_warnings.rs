//! What a config file that parses should still say differently, for the operator's log at start
//! and on every reload: keys in the old underscored spelling (`api_keys`; every key is dashed now,
//! like the flags', and the old spelling is still read), and a file that every user on the
//! machine may read while it holds secrets (API keys, admin tokens, or tokens in `[serve]`).
//! Warnings name the file and the key, never a value.

use std::path::Path;

/// The `[serve]` keys whose values are secrets (their flags hide their values too).
const SECRET_FLAGS: [&str; 6] = [
    "admin-token",
    "metrics-token",
    "cache-salt-secret",
    "upstream-api-key",
    "tenant",
    "tenant-admin",
];

/// The warnings for the config file at `path`, whose text is `text` (a file that parses).
pub fn warnings(path: &Path, text: &str) -> Vec<String> {
    let Ok(root) = toml::from_str::<toml::Table>(text) else {
        return Vec::new();
    };
    let mut warnings: Vec<String> = old_spellings(&root)
        .into_iter()
        .map(|(table, key)| {
            format!(
                "{}: {table}`{key}` is the old spelling; write `{}` (keys are dashed, like the flags'; \
                 the underscored form is still read)",
                path.display(),
                key.replace('_', "-")
            )
        })
        .collect();
    if let Some(mode) = readable_by_others(path) {
        if holds_secrets(&root) {
            warnings.push(format!(
                "{}: every user on this machine may read it (mode {mode:03o}) and it holds API keys or \
                 tokens; make it the proxy's own: chmod 600 {}",
                path.display(),
                path.display()
            ));
        }
    }
    warnings
}

/// The file's keys spelled with `_` where a `-` is meant, as (table, key): the tables of the
/// file's schema and `[serve]` (whose keys are flags' names), never a tenant's name.
fn old_spellings(root: &toml::Table) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut check = |table: &str, keys: &toml::Table| {
        for key in keys.keys().filter(|k| k.contains('_')) {
            found.push((table.to_string(), key.clone()));
        }
    };
    check("", root);
    for name in ["serve", "defaults", "public"] {
        if let Some(toml::Value::Table(t)) = root.get(name) {
            check(&format!("[{name}] "), t);
        }
    }
    if let Some(toml::Value::Table(tenants)) = root.get("tenants") {
        for (tenant, section) in tenants {
            let Some(section) = section.as_table() else { continue };
            check(&format!("[tenants.{tenant}] "), section);
            if let Some(toml::Value::Table(share)) = section.get("share") {
                check(&format!("[tenants.{tenant}] share."), share);
            }
        }
    }
    found
}

/// The file's permission bits when others (not its owner, not its group) may read it.
#[cfg(unix)]
fn readable_by_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o004 != 0).then_some(mode)
}

#[cfg(not(unix))]
fn readable_by_others(_path: &Path) -> Option<u32> {
    None
}

/// Whether a tenant has API keys or admin tokens, or `[serve]` a secret flag (either spelling).
fn holds_secrets(root: &toml::Table) -> bool {
    let non_empty = |t: &toml::Table, key: &str| {
        [key.to_string(), key.replace('-', "_")]
            .iter()
            .any(|k| t.get(k).and_then(toml::Value::as_array).is_some_and(|a| !a.is_empty()))
    };
    let tenants = root
        .get("tenants")
        .and_then(toml::Value::as_table)
        .is_some_and(|tenants| {
            tenants
                .values()
                .filter_map(toml::Value::as_table)
                .any(|t| non_empty(t, "api-keys") || non_empty(t, "admin-tokens"))
        });
    let serve = root.get("serve").and_then(toml::Value::as_table).is_some_and(|serve| {
        serve
            .keys()
            .any(|k| SECRET_FLAGS.contains(&k.replace('_', "-").as_str()))
    });
    tenants || serve
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(text: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agentrt.toml");
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        (dir, path)
    }

    fn warnings_of(text: &str, mode: u32) -> Vec<String> {
        let (_dir, path) = written(text, mode);
        warnings(&path, text)
    }

    #[test]
    fn old_spellings_are_named_with_their_table_but_tenant_names_are_not() {
        let text = "[serve]\nupstream_max_in_flight = 4\n[defaults]\nmax_in_flight = 3\n\
                    [tenants.team_a]\napi_keys = [\"sk-secret\"]\nshare = { min_blocks = 1 }\n";
        let found = warnings_of(text, 0o600);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(
            found[0].contains("[serve] `upstream_max_in_flight` is the old spelling; write `upstream-max-in-flight`")
        );
        assert!(found[1].contains("[defaults] `max_in_flight`"), "{found:?}");
        assert!(found[2].contains("[tenants.team_a] `api_keys`"), "{found:?}");
        assert!(found[3].contains("[tenants.team_a] share.`min_blocks`"), "{found:?}");
        assert!(found.iter().all(|w| !w.contains("sk-secret")));
        assert!(warnings_of("[tenants.team_a]\napi-keys = [\"k\"]\n", 0o600).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_may_read_is_named_only_when_it_holds_secrets() {
        let keyed = "[tenants.alpha]\napi-keys = [\"sk-secret\"]\n";
        let found = warnings_of(keyed, 0o644);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("mode 644") && found[0].contains("chmod 600"),
            "{found:?}"
        );
        assert!(!found[0].contains("sk-secret"));
        assert!(
            warnings_of(keyed, 0o640).is_empty(),
            "the group may read it: the operator's choice"
        );
        assert!(
            warnings_of("unauthenticated = true\n", 0o644).is_empty(),
            "nothing secret in it"
        );
        assert_eq!(warnings_of("[serve]\nadmin-token = \"t\"\n", 0o604).len(), 1);
    }
}
