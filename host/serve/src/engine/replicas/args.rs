//! The flags of several replicas (`--replica`, `--router`, the per-replica KV events and eviction
//! sockets), and checking the sockets' names against the replicas.

use std::collections::HashMap;

use agentrt_router::Replicas;

/// The flags of several replicas.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ReplicaArgs {
    /// `NAME=URL` (repeatable): an upstream replica. With any, requests go to the replica the
    /// router (or its fallback, session-sticky hashing) chooses; `--upstream` still answers
    /// `/v1/models` and counts anchors' tokens.
    #[arg(long = "replica", value_name = "NAME=URL")]
    pub replicas: Vec<String>,
    /// `NAME=ENDPOINT` (repeatable): where replica NAME publishes KV events (vLLM's
    /// `--kv-events-config` endpoint); the router subscribes to it to see the replica's cache.
    /// agentrt subscribes to it too and feeds the replica's block events to the policy (when the
    /// publisher binds it: an `ipc://` or wildcard `tcp://*:` endpoint).
    #[arg(id = "replica_kv_events", long = "replica-kv-events", value_name = "NAME=ENDPOINT")]
    pub kv_events: Vec<String>,
    /// `NAME=PATH` (repeatable): the Unix socket replica NAME's vLLM plugin connects to
    /// (`AGENTRT_EVICTION_SOCKET` in that vLLM's env). Each replica's plugin gets a socket of its
    /// own; one policy view spans them, in which each replica's blocks are its own.
    #[arg(long = "replica-eviction-socket", value_name = "NAME=PATH")]
    pub eviction_sockets: Vec<String>,
    /// NVIDIA Dynamo's selection service (`python -m dynamo.select_service`), e.g.
    /// http://127.0.0.1:8092. Without it: session-sticky hashing only.
    #[arg(long)]
    pub router: Option<String>,
    /// The model name the replicas are registered under at the router.
    #[arg(long, default_value = "default")]
    pub router_model: String,
    /// The replicas' KV block size (vLLM's `--block-size`): the router hashes prompts in blocks of it.
    #[arg(long, default_value_t = 16)]
    pub router_block_size: u32,
    /// How long a request waits for the router before session-sticky hashing places it.
    #[arg(long, default_value_t = 50)]
    pub router_deadline_ms: u64,
    /// After a router failure, how long requests skip it (and pay no deadline) before it is asked again.
    #[arg(long, default_value_t = 2000)]
    pub router_retry_ms: u64,
}

/// `--replica-eviction-socket NAME=PATH`s by replica name; every name a `--replica`, none twice.
pub(super) fn eviction_sockets<'a>(
    replicas: &Replicas,
    flags: &'a [String],
) -> anyhow::Result<HashMap<&'a str, std::path::PathBuf>> {
    let mut sockets = HashMap::new();
    for flag in flags {
        let (name, path) = flag
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .ok_or_else(|| anyhow::anyhow!("--replica-eviction-socket {flag:?}: expected NAME=PATH"))?;
        anyhow::ensure!(
            replicas.all().iter().any(|r| r.name == name),
            "--replica-eviction-socket {flag:?}: no --replica is named {name:?}"
        );
        anyhow::ensure!(
            sockets.insert(name, std::path::PathBuf::from(path)).is_none(),
            "--replica-eviction-socket: replica {name:?} is given two sockets"
        );
    }
    Ok(sockets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentrt_router::Replica;

    #[test]
    fn each_eviction_socket_names_one_replica_once() {
        let replicas = Replicas::new(vec![
            Replica::parse("a=http://x").unwrap(),
            Replica::parse("b=http://y").unwrap(),
        ])
        .unwrap();
        let flags = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ok = flags(&["a=/tmp/a.sock", "b=/tmp/b.sock"]);
        let sockets = eviction_sockets(&replicas, &ok).unwrap();
        assert_eq!(sockets["b"], std::path::PathBuf::from("/tmp/b.sock"));
        let unknown = eviction_sockets(&replicas, &flags(&["c=/tmp/c.sock"]))
            .unwrap_err()
            .to_string();
        assert!(unknown.contains("no --replica is named \"c\""), "{unknown}");
        let twice = eviction_sockets(&replicas, &flags(&["a=/1", "a=/2"]))
            .unwrap_err()
            .to_string();
        assert!(twice.contains("two sockets"), "{twice}");
        assert!(eviction_sockets(&replicas, &flags(&["a"])).is_err());
    }
}
