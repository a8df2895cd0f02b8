//! Fidelity of the host tier: the simulator's host pool (sim/src/offload/) answers every call
//! exactly as vLLM's own `CPUOffloadingManager` does, under the `lru` and the `arc` cache policy,
//! on the same generated sequence of a few thousand prepare_store / complete_store / lookup /
//! prepare_load / complete_load / on_request_finished calls (evictions, refused stores, pinned and
//! write-pending chunks, failed stores included). Runs `sim/fidelity/replay_host_pool.py` with the
//! vLLM venv (`$AGENTRT_VLLM_VENV`, else `.venv-vllm`); skips, saying why, without it.

use std::io::Write;

use agentrt_sim::offload::host_policy::{HostKey, HostPolicyKind};
use agentrt_sim::offload::host_pool::{HostPool, KeyAt, Lookup};
use agentrt_sim::offload::ranked::{BlockOwner, NoRanker};
use agentrt_sim::rng::Rng;
use serde_json::{json, Value};
use support::{replay_in_vllm, venv_python};

mod support;

/// One request as the connector drives it: its prompt's keys, how far they were offered, the
/// load or stores it has in flight.
struct Req {
    id: u64,
    keys: Vec<KeyAt>,
    next_offer: usize,
    loading: Option<Vec<HostKey>>,
    looked_up: bool,
}

/// Drives `pool` through a generated call sequence and writes each call with the pool's answer.
struct Driver {
    pool: HostPool,
    rng: Rng,
    out: Vec<Value>,
    stores_in_flight: Vec<Vec<HostKey>>,
    counts: Counts,
}

#[derive(Default, Debug)]
struct Counts {
    evicted: usize,
    refused: usize,
    loads: usize,
    hits: usize,
    pending_hits: usize,
}

fn at(keys: &[KeyAt]) -> Value {
    keys.iter().map(|k| json!([k.key, k.end_token])).collect()
}

impl Driver {
    /// A prompt: a shared prefix of one of a few families (Zipf-popular), then keys of its own.
    fn prompt(&mut self, id: u64) -> Vec<KeyAt> {
        let family = self.rng.zipf(12, 1.0) as u64;
        let shared = self.rng.range(0, 10) as usize;
        let own = self.rng.range(1, 8) as usize;
        (0..shared)
            .map(|i| (family << 32) | (i as u64 + 1))
            .chain((0..own).map(|i| (1 << 48) | (id << 8) | i as u64))
            .enumerate()
            .map(|(i, key)| KeyAt {
                key,
                end_token: (i as u32 + 1) * 16,
                owner: BlockOwner::default(),
            })
            .collect()
    }

    /// The admission scan: consecutive lookups from the first key; a load of the ready hits.
    fn admit(&mut self, r: &mut Req) {
        r.looked_up = true;
        let start = self.rng.range(0, 3) as usize; // the GPU hit, in blocks
        let mut hits = Vec::new();
        for k in r.keys.iter().skip(start) {
            let got = self.pool.lookup(k.key);
            self.out.push(json!({"op": "lookup", "key": k.key, "expect": match got {
                Lookup::Hit => "HIT", Lookup::HitPending => "HIT_PENDING", Lookup::Miss => "MISS",
            }}));
            match got {
                Lookup::Hit => hits.push(*k),
                Lookup::HitPending => {
                    self.counts.pending_hits += 1;
                    return; // vLLM defers the request: no load this time
                }
                Lookup::Miss => break,
            }
        }
        if hits.is_empty() || self.rng.chance(0.2) {
            return;
        }
        self.counts.loads += 1;
        self.counts.hits += hits.len();
        let ids = self.pool.prepare_load(r.id, &hits);
        self.out
            .push(json!({"op": "load", "req": r.id, "keys": at(&hits), "expect": ids}));
        r.next_offer = start + hits.len();
        r.loading = Some(hits.iter().map(|k| k.key).collect());
    }

    /// One step's store offer: the next few computed blocks.
    fn offer(&mut self, r: &mut Req) {
        let end = (r.next_offer + self.rng.range(1, 6) as usize).min(r.keys.len());
        let offered = r.keys[r.next_offer..end].to_vec();
        let got = self.pool.prepare_store(r.id, &offered, &mut NoRanker);
        let expect = match &got {
            None => {
                self.counts.refused += 1;
                Value::Null
            }
            Some(o) => {
                self.counts.evicted += o.evicted.len();
                json!({"store": o.keys_to_store, "chunks": o.chunk_ids, "evicted": o.evicted})
            }
        };
        self.out
            .push(json!({"op": "store", "req": r.id, "keys": at(&offered), "expect": expect}));
        if let Some(o) = got {
            r.next_offer = end; // refused keys are not offered again; `None` is retried
            if !o.keys_to_store.is_empty() {
                self.stores_in_flight.push(o.keys_to_store);
            }
        }
    }

    fn complete_a_store(&mut self) {
        let i = self.rng.range(0, self.stores_in_flight.len() as u64 - 1) as usize;
        let keys = self.stores_in_flight.swap_remove(i);
        let ok = !self.rng.chance(0.03);
        self.pool.complete_store(&keys, ok);
        self.out.push(json!({"op": "complete_store", "keys": keys, "ok": ok}));
    }
}

fn ops_for(policy: HostPolicyKind, seed: u64) -> (Vec<Value>, Counts) {
    let chunks = 64;
    let mut d = Driver {
        pool: HostPool::new(chunks, policy, true),
        rng: Rng::new(seed),
        out: vec![json!({"chunks": chunks, "policy": policy.name()})],
        stores_in_flight: Vec::new(),
        counts: Counts::default(),
    };
    let mut live: Vec<Req> = Vec::new();
    let mut next_id = 1;
    while d.out.len() < 4000 {
        if live.len() < 6 && d.rng.chance(0.3) {
            let keys = d.prompt(next_id);
            live.push(Req {
                id: next_id,
                keys,
                next_offer: 0,
                loading: None,
                looked_up: false,
            });
            next_id += 1;
        }
        // Phases of fast and slow copies: loads need completed stores, refusals a pool full of
        // write-pending chunks.
        let copy_rate = if (d.out.len() / 500).is_multiple_of(2) {
            0.9
        } else {
            0.4
        };
        if !d.stores_in_flight.is_empty() && d.rng.chance(copy_rate) {
            d.complete_a_store();
        }
        if live.is_empty() {
            continue;
        }
        let i = d.rng.range(0, live.len() as u64 - 1) as usize;
        let mut r = live.swap_remove(i);
        if !r.looked_up {
            d.admit(&mut r);
        } else if let Some(keys) = r.loading.take() {
            d.pool.complete_load(&keys);
            d.out.push(json!({"op": "complete_load", "keys": keys}));
        } else if r.next_offer < r.keys.len() {
            d.offer(&mut r);
        } else {
            d.pool.on_request_finished(r.id);
            d.out.push(json!({"op": "finish", "req": r.id}));
            continue;
        }
        live.push(r);
    }
    (d.out, d.counts)
}

#[test]
fn host_pool_lru_and_arc_answer_as_vllms_cpu_offloading_manager() {
    let Some(python) = venv_python() else {
        eprintln!("SKIPPED: no vLLM venv at $AGENTRT_VLLM_VENV or .venv-vllm (run adapters/vllm/setup-venv.sh): the host-tier fidelity check against vLLM did not run");
        return;
    };
    for policy in [HostPolicyKind::Lru, HostPolicyKind::Arc] {
        let (ops, counts) = ops_for(policy, 24);
        // The sequence must exercise what it checks.
        assert!(counts.evicted > 500, "{policy:?}: too few evictions: {counts:?}");
        assert!(counts.refused > 10, "{policy:?}: refused stores must occur: {counts:?}");
        assert!(counts.loads > 50 && counts.pending_hits > 0, "{policy:?}: {counts:?}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("host-ops.jsonl");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for op in &ops {
            writeln!(f, "{op}").unwrap();
        }
        f.flush().unwrap();
        drop(f);
        let (report, out) = replay_in_vllm(&python, "replay_host_pool.py", &[&path]);
        assert_eq!(report["mismatches"], json!([]), "vLLM disagreed ({policy:?}): {report}");
        assert_eq!(report["evictions"].as_u64(), Some(counts.evicted as u64));
        assert_eq!(report["refused"].as_u64(), Some(counts.refused as u64));
        assert!(out.status.success());
        eprintln!(
            "host fidelity ({}): vLLM {} agreed on {} calls ({} evictions, {} refused stores, {} loads)",
            policy.name(),
            report["vllm"],
            report["ops"],
            counts.evicted,
            counts.refused,
            counts.loads
        );
    }
}
