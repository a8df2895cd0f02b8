//! The routers the simulator puts in front of several replicas (`sim run --router`):
//!
//! - `round-robin`: each request to the next replica;
//! - `session`: session-sticky rendezvous hashing — `agentrt serve`'s fallback, the same code
//!   (`agentrt_router::SessionSticky`);
//! - `kv`: NVIDIA Dynamo's KV-aware selection, its default cost (`dynamo-kv-router` 1.6.1,
//!   `DefaultWorkerScorer`, default weights): for each replica, `prefill_blocks + decode_blocks`
//!   where `prefill_blocks = max(0, (queued prefill tokens + prompt tokens) / block size −
//!   blocks of the prompt it holds)` and `decode_blocks` = the blocks its requests will hold; the
//!   lowest wins (temperature 0; ties to the replica with fewer requests, then the first). The
//!   router sees each replica's cache exactly (its KV events, without their delay);
//! - `agentrt`: `kv` plus agentrt's hint — the replica of the session's last call, else the one
//!   that last received the agent's anchor (a call or a warm-up), unless it has more than 4 requests in flight beyond the least busy
//!   (`agentrt_router::HintRule`, the same code) — which Dynamo's `affinity_target` makes the
//!   choice while it is eligible;
//! - `cache-aware`: vLLM's router `--policy cache_aware` ([`approx_tree`]): an approximate tree of
//!   what it sent where, and the least-loaded worker when the load is imbalanced;
//! - `kv-aware`: vLLM's router `--policy kv_aware` ([`kv_aware`]): the longest cached prefix
//!   from KV events, with session affinity under `--kv-aware-session-affinity-ttl-secs`.

mod approx_tree;
mod kv_aware;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentrt_router::{HintRule, Placement, Replica, ReplicaId, Replicas, RouteRequest, SessionSticky};

use crate::scheduler::EngineLoadView;
use approx_tree::ApproxTree;
pub use approx_tree::{CacheAwareConfig, CHARS_PER_TOKEN};
use kv_aware::KvAware;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterKind {
    RoundRobin,
    Session,
    Kv,
    Agentrt,
    CacheAware,
    KvAware,
}

impl RouterKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::RoundRobin => "round-robin",
            Self::Session => "session",
            Self::Kv => "kv",
            Self::Agentrt => "agentrt",
            Self::CacheAware => "cache-aware",
            Self::KvAware => "kv-aware",
        }
    }
}

/// A router and its settings (`sim run --router …` and the router's own flags).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RouterSpec {
    pub kind: RouterKind,
    /// `cache-aware`'s thresholds (vLLM router's `--cache-threshold`, `--balance-*-threshold`, …).
    pub cache_aware: CacheAwareConfig,
    /// `kv-aware`'s session affinity TTL (vLLM router's `--kv-aware-session-affinity-ttl-secs`),
    /// in ns; `None`: no affinity.
    pub kv_affinity_ttl_ns: Option<u64>,
}

impl From<RouterKind> for RouterSpec {
    fn from(kind: RouterKind) -> Self {
        Self {
            kind,
            cache_aware: CacheAwareConfig::default(),
            kv_affinity_ttl_ns: None,
        }
    }
}

/// One request, as a router sees it.
pub(crate) struct Arriving<'a> {
    pub session: u64,
    /// How long ago the session's previous call finished; `None` for its first.
    pub idle_ns: Option<u64>,
    pub agent: u32,
    pub prompt_tokens: u32,
    /// The prompt's block-chain hashes.
    pub prompt_hashes: &'a [u64],
    pub block_size: usize,
    /// Per replica: blocks of the prompt's prefix it holds.
    pub cached_blocks: &'a [usize],
    /// Per replica: its load.
    pub loads: &'a [EngineLoadView],
}

pub(crate) struct RouterModel {
    kind: RouterKind,
    next: usize,
    sticky: SessionSticky,
    ids: Vec<ReplicaId>,
    placement: Placement,
    rule: HintRule,
    /// The `cache-aware` router's picture of the workers' caches.
    tree: Option<ApproxTree>,
    /// The `kv-aware` router's session bindings.
    kv_aware: KvAware,
    /// Simulated time 0 as an `Instant` (the hint rule's clock).
    epoch: Instant,
    pub hinted: u64,
}

impl RouterModel {
    pub fn new(spec: RouterSpec, replicas: usize, block_size: usize) -> Self {
        let kind = spec.kind;
        let named = Replicas::new(
            (0..replicas)
                .map(|i| Replica::parse(&format!("r{i}=http://replica-{i}")).expect("valid"))
                .collect(),
        )
        .expect("unique names");
        Self {
            kind,
            next: 0,
            sticky: SessionSticky::new(&named),
            ids: named.ids().collect(),
            placement: Placement::default(),
            rule: HintRule::default(),
            tree: (kind == RouterKind::CacheAware).then(|| ApproxTree::new(spec.cache_aware, replicas, block_size)),
            kv_aware: KvAware::new(spec.kv_affinity_ttl_ns),
            epoch: Instant::now(),
            hinted: 0,
        }
    }

    fn at(&self, now_ns: u64) -> Instant {
        self.epoch + Duration::from_nanos(now_ns)
    }

    /// The replica for `request` at `now_ns`.
    pub fn choose(&mut self, request: &Arriving, now_ns: u64) -> usize {
        let n = self.ids.len();
        match self.kind {
            RouterKind::RoundRobin => {
                self.next = (self.next + 1) % n;
                self.next
            }
            RouterKind::Session => {
                let id = self
                    .sticky
                    .choose(&RouteRequest {
                        session: Some(format!("{:016x}", request.session)),
                        ..Default::default()
                    })
                    .expect("no replica is excluded");
                self.index(id)
            }
            RouterKind::Kv => kv_choice(request),
            RouterKind::Agentrt => {
                let loads: HashMap<ReplicaId, u32> = self
                    .ids
                    .iter()
                    .zip(request.loads)
                    .map(|(id, l)| (*id, l.in_flight))
                    .collect();
                let hints = self.rule.hints(
                    &self.placement,
                    request.agent,
                    Some(request.session),
                    &loads,
                    self.at(now_ns),
                );
                match hints.affinity {
                    Some(id) => {
                        self.hinted += 1;
                        self.index(id)
                    }
                    None => kv_choice(request),
                }
            }
            RouterKind::CacheAware => {
                let in_flight: Vec<u32> = request.loads.iter().map(|l| l.in_flight).collect();
                self.tree
                    .as_mut()
                    .expect("built for cache-aware")
                    .choose(request.prompt_hashes, &in_flight, now_ns)
            }
            RouterKind::KvAware => self.kv_aware.choose(request),
        }
    }

    /// A call of `session` went to replica `replica` at `now_ns`.
    pub fn session_placed(&mut self, session: u64, replica: usize, now_ns: u64) {
        let at = self.at(now_ns);
        self.placement.session_placed(session, self.ids[replica], at);
    }

    /// `agent`'s anchor went to replica `replica` (its call, or its warm-up) at `now_ns`.
    pub fn placed(&mut self, agent: u32, replica: usize, now_ns: u64) {
        let at = self.at(now_ns);
        self.placement.placed(agent, self.ids[replica], at);
    }

    fn index(&self, id: ReplicaId) -> usize {
        self.ids.iter().position(|r| *r == id).expect("a known replica")
    }
}

/// Dynamo's default selection: the lowest `prefill_blocks + decode_blocks`.
fn kv_choice(request: &Arriving) -> usize {
    let bs = request.block_size as f64;
    let cost = |i: usize| {
        let load = &request.loads[i];
        let raw_prefill = (load.prefill_tokens + u64::from(request.prompt_tokens)) as f64 / bs;
        let prefill = (raw_prefill - request.cached_blocks[i] as f64).max(0.0);
        // Dynamo adds the request's own blocks to every replica's decode blocks: no difference.
        prefill + load.decode_blocks as f64
    };
    (0..request.loads.len())
        .min_by(|&a, &b| {
            cost(a)
                .total_cmp(&cost(b))
                .then(request.loads[a].in_flight.cmp(&request.loads[b].in_flight))
                .then(a.cmp(&b))
        })
        .expect("at least one replica")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arriving<'a>(cached: &'a [usize], loads: &'a [EngineLoadView]) -> Arriving<'a> {
        Arriving {
            session: 1,
            idle_ns: None,
            agent: 3,
            prompt_tokens: 320,
            prompt_hashes: &[],
            block_size: 16,
            cached_blocks: cached,
            loads,
        }
    }

    #[test]
    fn kv_prefers_the_replica_holding_the_prompt_until_its_load_outweighs_it() {
        let idle = [EngineLoadView::default(); 2];
        assert_eq!(kv_choice(&arriving(&[0, 15], &idle)), 1);
        let busy_one = [
            EngineLoadView::default(),
            EngineLoadView {
                prefill_tokens: 16 * 40,
                decode_blocks: 0,
                in_flight: 2,
            },
        ];
        assert_eq!(
            kv_choice(&arriving(&[0, 15], &busy_one)),
            0,
            "40 blocks queued outweigh 15 cached"
        );
        assert_eq!(kv_choice(&arriving(&[0, 0], &idle)), 0, "a tie goes to the first");
    }

    #[test]
    fn agentrt_follows_the_anchor_where_kv_sees_nothing() {
        let idle = [EngineLoadView::default(); 2];
        let mut router = RouterModel::new(RouterKind::Agentrt.into(), 2, 16);
        assert_eq!(router.choose(&arriving(&[0, 0], &idle), 0), 0);
        router.placed(3, 1, 10);
        assert_eq!(router.choose(&arriving(&[0, 0], &idle), 20), 1, "the warm-up's replica");
        assert_eq!(router.hinted, 1);
    }

    #[test]
    fn round_robin_cycles_and_session_sticks() {
        let idle = [EngineLoadView::default(); 3];
        let mut rr = RouterModel::new(RouterKind::RoundRobin.into(), 3, 16);
        let picks: Vec<usize> = (0..3).map(|t| rr.choose(&arriving(&[0; 3], &idle), t)).collect();
        assert_eq!(picks.iter().collect::<std::collections::HashSet<_>>().len(), 3);
        let mut session = RouterModel::new(RouterKind::Session.into(), 3, 16);
        let first = session.choose(&arriving(&[0; 3], &idle), 0);
        assert!((0..5).all(|t| session.choose(&arriving(&[0; 3], &idle), t) == first));
    }
}
