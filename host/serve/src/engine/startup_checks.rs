//! What an operator must hear when `agentrt serve` starts, beyond "listening": whether any engine
//! plugin will ask the policies which KV blocks to evict (without one, the engine evicts in its
//! own order and the policies' rankings go unused), and whether the upstream answers (until it
//! does, every request gets 502).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentrt_eviction::EvictionMetrics;

use crate::engine::kind::EngineKind;
use crate::engine::upstream::Upstream;

/// How long after start an engine plugin should have connected to the eviction socket: an engine
/// loading a large model takes minutes.
pub const PLUGIN_GRACE: Duration = Duration::from_secs(180);

/// How often an upstream that does not answer is asked again, until it does.
const UPSTREAM_RETRY: Duration = Duration::from_secs(10);

/// The eviction path as started: one engine's socket and its counters, or the replicas'.
pub enum EvictionPath {
    /// No socket: no plugin can connect.
    None,
    /// `--eviction-socket PATH` and its live counters.
    Socket(PathBuf, Arc<EvictionMetrics>),
    /// Each replica's socket (`--replica-eviction-socket`): `/metrics` shows each one's plugin.
    Replicas,
}

/// Say at once when no plugin can rank evictions, and later when none has connected within
/// [`PLUGIN_GRACE`]; ask the upstream for its models until it answers.
pub fn spawn(engine: EngineKind, path: EvictionPath, upstream: Upstream) {
    match path {
        EvictionPath::None => tracing::warn!("{}", no_socket_line(engine)),
        EvictionPath::Socket(path, metrics) => {
            tokio::spawn(async move {
                tokio::time::sleep(PLUGIN_GRACE).await;
                if metrics.counts().connections == 0 {
                    tracing::warn!("{}", silent_plugin_line(engine, &path));
                }
            });
        }
        EvictionPath::Replicas => {}
    }
    tokio::spawn(check_upstream(upstream));
}

/// How an operator sets up agentrt's plugin in one engine: the lines below name only the engine
/// configured (`--engine`), so an SGLang operator is not sent to vLLM's package and guide.
struct PluginSetup {
    /// The engine's name as its users write it.
    engine: &'static str,
    /// The plugin's Python package (`pip show` finds it when it is installed).
    package: &'static str,
    /// What the engine must be started with, besides the socket's variable.
    start_flags: &'static str,
    /// Where the setup is written down.
    guide: &'static str,
}

impl PluginSetup {
    fn of(engine: EngineKind) -> Self {
        match engine {
            EngineKind::Vllm => Self {
                engine: "vLLM",
                package: "agentrt-vllm",
                start_flags: "",
                guide: "docs/deploy.md",
            },
            EngineKind::Sglang => Self {
                engine: "SGLang",
                package: "agentrt-sglang",
                start_flags: " and --radix-cache-backend agentrt",
                guide: "adapters/sglang/README.md",
            },
        }
    }
}

/// The warning when no eviction socket is configured.
fn no_socket_line(engine: EngineKind) -> String {
    let PluginSetup {
        engine,
        package,
        start_flags,
        guide,
    } = PluginSetup::of(engine);
    format!(
        "no --eviction-socket: no engine plugin will ask which KV blocks to evict, so the policy's \
         eviction rankings go unused ({engine} evicts in its own order). Install the agentrt plugin in \
         {engine} (pip show {package}), start it with AGENTRT_EVICTION_SOCKET=PATH{start_flags}, and give \
         agentrt serve --eviction-socket PATH ({guide})"
    )
}

/// The warning when no plugin has connected to the socket at `path` within [`PLUGIN_GRACE`].
fn silent_plugin_line(engine: EngineKind, path: &Path) -> String {
    let PluginSetup {
        engine,
        package,
        start_flags,
        ..
    } = PluginSetup::of(engine);
    format!(
        "no engine plugin has connected to the eviction socket {path} in {grace} s: {engine} evicts in its \
         own order until one does. Check that {engine} runs with AGENTRT_EVICTION_SOCKET={path}{start_flags} \
         and can reach that path, that the plugin is installed (pip show {package}), and \
         {engine}'s log for lines starting `agentrt:`",
        path = path.display(),
        grace = PLUGIN_GRACE.as_secs(),
    )
}

/// Ask `upstream` for `/v1/models` until it answers: a warning the first time it does not, a
/// line naming its models when it does.
async fn check_upstream(upstream: Upstream) {
    let mut warned = false;
    loop {
        match models(&upstream).await {
            Ok(models) => {
                let late = if warned { " now" } else { "" };
                tracing::info!("the upstream {} answers{late}; it serves {models}", upstream.shown());
                return;
            }
            Err(why) if !warned => {
                warned = true;
                tracing::warn!(
                    "the upstream {} does not answer ({why}): requests get 502 until it does; asking again \
                     every {} s",
                    upstream.shown(),
                    UPSTREAM_RETRY.as_secs()
                );
            }
            Err(_) => {}
        }
        tokio::time::sleep(UPSTREAM_RETRY).await;
    }
}

/// The upstream's model ids, as one phrase, or why it did not say.
async fn models(upstream: &Upstream) -> Result<String, String> {
    let bytes = upstream.get_body("/v1/models").await?;
    let listing: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let ids: Vec<&str> = listing["data"]
        .as_array()
        .map(|models| models.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    Ok(if ids.is_empty() {
        "no model it lists".to_string()
    } else {
        format!("model {}", ids.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every start-up line about the plugin names the engine configured and its plugin's package,
    /// never the other engine's.
    #[test]
    fn the_plugin_lines_name_the_configured_engine_and_its_package() {
        let path = Path::new("/run/agentrt/evict.sock");
        for (engine, name, package, other_name, other_package) in [
            (EngineKind::Sglang, "SGLang", "agentrt-sglang", "vLLM", "agentrt-vllm"),
            (EngineKind::Vllm, "vLLM", "agentrt-vllm", "SGLang", "agentrt-sglang"),
        ] {
            for line in [no_socket_line(engine), silent_plugin_line(engine, path)] {
                assert!(line.contains(name), "{engine:?}: the line does not name {name}: {line}");
                assert!(
                    line.contains(&format!("pip show {package}")),
                    "{engine:?}: the line does not name the plugin's package {package}: {line}"
                );
                assert!(
                    !line.contains(other_name) && !line.contains(other_package),
                    "{engine:?}: the line names the other engine: {line}"
                );
            }
        }
    }
}
