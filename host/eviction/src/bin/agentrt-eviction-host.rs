//! `agentrt-eviction-host` — hosts one policy component for an engine's plugin (vLLM or SGLang)
//! without the proxy: the eviction service on a Unix socket and, optionally, vLLM's KV-event
//! subscriber. For the adapters' tests and for trying a plugin by hand; `agentrt serve` embeds the
//! same services.
//!
//! ```text
//! agentrt-eviction-host --policy target/components/lru.wasm --socket /tmp/evict.sock \
//!     [--kv-endpoint tcp://127.0.0.1:5557 [--kv-replay tcp://127.0.0.1:5558] [--kv-topic kv]] \
//!     [--pin AGENT] [--init key=value] [--act-every-ms N]
//! ```
//!
//! Prints `ready` on stdout once listening; on SIGTERM or SIGINT prints one line of final counts
//! (`counts eviction={…} kv_events={…}`) and exits 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agentrt_eviction::{
    AgentResolver, EvictionOptions, EvictionService, InternedAgents, KvEventSubscriber, KvEventsConfig,
};
use agentrt_runtime::types::Pin;
use agentrt_runtime::{EngineOptions, PolicyEngine, PolicyHandle, SlotConfig};
use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "agentrt-eviction-host",
    about = "Host a policy for the agentrt engine plugins (vLLM, SGLang)"
)]
struct Args {
    /// Policy component (.wasm).
    #[arg(long)]
    policy: PathBuf,
    /// Unix socket for the plugin (the plugin's AGENTRT_EVICTION_SOCKET).
    #[arg(long)]
    socket: PathBuf,
    /// `key=value` passed to the policy's init (repeatable).
    #[arg(long = "init", value_parser = parse_pair)]
    init: Vec<(String, String)>,
    /// Pin an agent (by name) for the whole run: its blocks go to the keep end of every ranking.
    #[arg(long)]
    pin: Vec<String>,
    /// vLLM's `--kv-events-config` endpoint; enables the KV-event subscriber.
    #[arg(long)]
    kv_endpoint: Option<String>,
    /// vLLM's replay endpoint, for filling sequence gaps.
    #[arg(long)]
    kv_replay: Option<String>,
    #[arg(long, default_value = "")]
    kv_topic: String,
    /// Call the policy's `act` this often and carry out pin/unpin (0 = never).
    #[arg(long, default_value_t = 0)]
    act_every_ms: u64,
}

fn parse_pair(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("AGENTRT_LOG").unwrap_or_else(|_| EnvFilter::new("info")))
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let engine = PolicyEngine::new(EngineOptions::default())?;
    let component = engine
        .load_file(&args.policy)
        .with_context(|| format!("loading {}", args.policy.display()))?;
    let mut slot = SlotConfig::new("vllm/kv-cache");
    slot.init = args.init.clone();
    let policy = Arc::new(PolicyHandle::start(&engine, Arc::new(component), slot)?);

    let agents = Arc::new(InternedAgents::default());
    let options = EvictionOptions {
        agents: agents.clone(),
        ..EvictionOptions::default()
    };
    let service = EvictionService::bind_with(&args.socket, policy.clone(), options)
        .with_context(|| format!("binding {}", args.socket.display()))?;
    for name in &args.pin {
        let agent = agents.resolve(name, policy.as_ref());
        service.pins().pin(&Pin {
            agent,
            session: 0,
            ttl_ms: u32::MAX,
        });
        tracing::info!(agent = %name, handle = agent, "pinned for the whole run");
    }

    let subscriber = match &args.kv_endpoint {
        Some(endpoint) => Some(
            KvEventSubscriber::spawn(
                KvEventsConfig::for_vllm(endpoint, args.kv_replay.as_deref(), &args.kv_topic),
                policy.clone(),
            )
            .await?,
        ),
        None => None,
    };

    if args.act_every_ms > 0 {
        let (policy, pins) = (policy.clone(), service.pins());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(args.act_every_ms));
            loop {
                tick.tick().await;
                match policy.act() {
                    Ok(effects) => {
                        for effect in effects {
                            match effect {
                                agentrt_runtime::types::SideEffect::Pin(p) => pins.pin(&p),
                                agentrt_runtime::types::SideEffect::Unpin(p) => pins.unpin(&p),
                                _ => {}
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "act failed"),
                }
            }
        });
    }

    // Handlers first: a SIGTERM right after "ready" must still print the counts line.
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    println!("ready");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    let kv = subscriber.as_ref().map(|s| s.counts()).unwrap_or_default();
    println!("counts eviction={:?} kv_events={:?}", service.counts(), kv);
    if let Some(s) = subscriber {
        s.shutdown().await;
    }
    drop(service);
    Ok(())
}
