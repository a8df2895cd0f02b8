//! vLLM router's `kv_aware` policy (`vllm-router` 0.1.17), with and without
//! `--kv-aware-session-affinity-ttl-secs`, as the simulator replays it.
//!
//! The router reads each worker's KV events, so it knows which prompt blocks a worker holds
//! (the simulator gives it each replica's cache exactly, without the events' delay). A request
//! goes to the worker that would prefill the fewest of its tokens — the one holding the longest
//! prefix of it; ties to the one with fewer requests in flight, then the first. When no worker
//! holds any of it, the least-loaded worker.
//!
//! Session affinity binds a session to the worker its first call went to. The binding lives
//! while a call of the session is in flight and for the TTL after the last one finished; while
//! it lives, the session's calls go to that worker whatever its load (measured on 0.1.17: 43
//! concurrent calls of one session all went to the bound worker while the other idled). In the
//! simulator a session has one call in flight at a time, so the binding holds when the gap since
//! its previous call finished is within the TTL.
//!
//! Not modelled: the speculative index entries earlier versions wrote for a request's uncached
//! blocks (0.1.17 has no flag for them, and whether it still writes them is not established);
//! with an exact view of the caches they matter only for requests that arrive while the blocks
//! are being computed.

use std::collections::HashMap;

use crate::router_model::Arriving;

/// The `kv_aware` router's session bindings.
pub struct KvAware {
    /// `--kv-aware-session-affinity-ttl-secs`, in ns; `None`: affinity off.
    affinity_ttl_ns: Option<u64>,
    bound: HashMap<u64, usize>,
}

impl KvAware {
    pub fn new(affinity_ttl_ns: Option<u64>) -> Self {
        Self {
            affinity_ttl_ns,
            bound: HashMap::new(),
        }
    }

    /// The worker for `request`.
    pub fn choose(&mut self, request: &Arriving) -> usize {
        let Some(ttl) = self.affinity_ttl_ns else {
            return fewest_to_prefill(request);
        };
        if let (Some(&worker), Some(idle)) = (self.bound.get(&request.session), request.idle_ns) {
            if idle <= ttl {
                return worker;
            }
        }
        let worker = fewest_to_prefill(request);
        self.bound.insert(request.session, worker);
        worker
    }
}

/// The worker holding the longest prefix of the prompt, else the least loaded.
fn fewest_to_prefill(request: &Arriving) -> usize {
    let workers = 0..request.loads.len();
    let by_load = |&a: &usize, &b: &usize| {
        request.loads[a]
            .in_flight
            .cmp(&request.loads[b].in_flight)
            .then(a.cmp(&b))
    };
    if request.cached_blocks.iter().all(|&c| c == 0) {
        return workers.min_by(by_load).expect("at least one worker");
    }
    workers
        .min_by(|a, b| {
            request.cached_blocks[*b]
                .cmp(&request.cached_blocks[*a])
                .then(by_load(a, b))
        })
        .expect("at least one worker")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::EngineLoadView;

    fn arriving<'a>(
        session: u64,
        cached: &'a [usize],
        loads: &'a [EngineLoadView],
        idle_ns: Option<u64>,
    ) -> Arriving<'a> {
        Arriving {
            session,
            idle_ns,
            agent: 0,
            prompt_tokens: 160,
            prompt_hashes: &[],
            block_size: 16,
            cached_blocks: cached,
            loads,
        }
    }

    fn loads(in_flight: [u32; 2]) -> [EngineLoadView; 2] {
        in_flight.map(|in_flight| EngineLoadView {
            in_flight,
            ..EngineLoadView::default()
        })
    }

    #[test]
    fn the_longest_cached_prefix_wins_whatever_the_load_and_nothing_cached_goes_to_the_idlest() {
        let mut kv = KvAware::new(None);
        assert_eq!(kv.choose(&arriving(1, &[2, 5], &loads([0, 9]), None)), 1);
        assert_eq!(kv.choose(&arriving(1, &[0, 0], &loads([3, 1]), None)), 1);
        assert_eq!(
            kv.choose(&arriving(1, &[4, 4], &loads([3, 1]), None)),
            1,
            "a tie: fewer in flight"
        );
    }

    #[test]
    fn a_bound_session_stays_while_its_gap_is_within_the_ttl_then_is_placed_afresh() {
        let mut kv = KvAware::new(Some(1_000));
        assert_eq!(kv.choose(&arriving(7, &[0, 0], &loads([0, 0]), None)), 0);
        // Worker 1 now holds more of the prompt and worker 0 is busy: the binding holds.
        assert_eq!(kv.choose(&arriving(7, &[0, 8], &loads([40, 0]), Some(1_000))), 0);
        // Idle past the TTL: placed by the cache again, and bound there.
        assert_eq!(kv.choose(&arriving(7, &[0, 8], &loads([40, 0]), Some(1_001))), 1);
        assert_eq!(kv.choose(&arriving(7, &[9, 0], &loads([0, 0]), Some(10))), 1);
        // Another session is not bound by it.
        assert_eq!(kv.choose(&arriving(8, &[9, 0], &loads([0, 0]), Some(10))), 0);
    }
}
