//! Which policy a name on the command line means: a native baseline, Bélády, or a Wasm
//! component (by name or path) with its `init` settings.

/// How a policy is named on every `sim` command's `--policies`, for their help (the rules of
/// [`PolicySpec::parse`]).
const POLICY_NAMING: &str = "Each one a built-in name (lru, ttl, arc, session-retain, cachesage, \
     cachesage-evict, belady, lru-native, closed-first), a component's name, or a \
     component file (`target/mine.wasm`: its row is `mine`); a Wasm policy may carry `init` settings \
     as `:key=value` (`cachesage:w=8:k=2`, `target/mine.wasm:alpha=0.5`), so that variants of one \
     component compare in one run.";

/// The help of a `--policies` flag: `lead` (what the command does with them), then how each is
/// named.
pub fn policies_help(lead: &str) -> String {
    format!("{lead} {POLICY_NAMING}")
}

/// A policy to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySpec {
    /// vLLM's LRU in the simulator, no Wasm.
    NativeLru,
    /// LRU with the blocks of sessions the framework closed first (native; hears the hints).
    ClosedFirst,
    /// Bélády's offline optimum (needs an LRU run first).
    Belady,
    /// A component by name (found by the [`ComponentLookup`](agentrt_runtime::ComponentLookup)) or path (ending in `.wasm`), with
    /// `init` configuration.
    Wasm {
        name: String,
        component: String,
        init: Vec<(String, String)>,
    },
}

impl PolicySpec {
    pub fn name(&self) -> &str {
        match self {
            PolicySpec::NativeLru => "lru-native",
            PolicySpec::ClosedFirst => "closed-first",
            PolicySpec::Belady => "belady",
            PolicySpec::Wasm { name, .. } => name,
        }
    }

    fn wasm(name: &str, component: &str, init: &[(&str, &str)]) -> Self {
        PolicySpec::Wasm {
            name: name.to_string(),
            component: component.to_string(),
            init: init.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    /// Parse a name: `lru`, `ttl`, `cachesage`, `cachesage-evict` (no warm-ups), `belady`,
    /// `lru-native`, `closed-first`, or any
    /// component name the lookup finds — a Wasm one optionally followed by its `init`
    /// configuration as `:key=value` pairs (`cachesage:prior=2:k=2`), so that variants of one component
    /// can be compared in one run.
    ///
    /// A component file (a name ending in `.wasm` or holding a path separator, as the lookup
    /// tells them apart) is loaded from that path and named by its file name.
    pub fn parse(name: &str) -> Self {
        let mut parts = name.split(':');
        let stem = parts.next().unwrap_or_default();
        let extra: Vec<(&str, &str)> = parts.filter_map(|kv| kv.split_once('=')).collect();
        match stem {
            "lru-native" => PolicySpec::NativeLru,
            "closed-first" => PolicySpec::ClosedFirst,
            "belady" => PolicySpec::Belady,
            "cachesage-evict" => {
                let init: Vec<_> = [("prefetch", "false")].into_iter().chain(extra).collect();
                Self::wasm(name, "cachesage", &init)
            }
            other if is_component_file(other) => {
                // A file's row is named by the file (`./out/mine.wasm:k=2` → `mine:k=2`): a
                // whole path would crowd every table it appears in.
                let stem = std::path::Path::new(other)
                    .file_stem()
                    .map_or_else(|| other.to_string(), |s| s.to_string_lossy().into_owned());
                Self::wasm(&format!("{stem}{}", &name[other.len()..]), other, &extra)
            }
            other => Self::wasm(name, other, &extra),
        }
    }
}

/// `spec` names a component file rather than a component (the rule of
/// `ComponentLookup::resolve`).
fn is_component_file(spec: &str) -> bool {
    spec.ends_with(".wasm") || spec.contains('/') || spec.contains(std::path::MAIN_SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(spec: &PolicySpec) -> Vec<(&str, &str)> {
        match spec {
            PolicySpec::Wasm { init, .. } => init.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            other => panic!("{other:?} is not a component"),
        }
    }

    #[test]
    fn names_map_to_the_baselines_the_variants_and_components() {
        assert_eq!(PolicySpec::parse("lru-native"), PolicySpec::NativeLru);
        assert_eq!(PolicySpec::parse("belady"), PolicySpec::Belady);
        assert_eq!(PolicySpec::parse("closed-first"), PolicySpec::ClosedFirst);
        let evict = PolicySpec::parse("cachesage-evict:k=2");
        assert_eq!(evict.name(), "cachesage-evict:k=2");
        assert_eq!(init(&evict), [("prefetch", "false"), ("k", "2")]);
        // A path is a component named by its file; a pair without `=` is not a setting.
        match PolicySpec::parse("./mine.wasm:w=8:junk") {
            PolicySpec::Wasm { name, component, init } => {
                assert_eq!((name.as_str(), component.as_str()), ("mine:w=8:junk", "./mine.wasm"));
                assert_eq!(init, [("w".to_string(), "8".to_string())]);
            }
            other => panic!("{other:?}"),
        }
    }
}
