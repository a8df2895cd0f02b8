//! Fidelity: the simulator's LRU finds exactly the prefix hits vLLM's own `KVCacheManager` finds
//! on the same sequence of scheduler calls. Runs `sim/fidelity/replay_vllm.py` with the vLLM venv
//! (`adapters/vllm/setup-venv.sh` makes it at `.venv-vllm/`); skips, saying why, without it.

mod support;

use agentrt_sim::policies::NativeLru;
use agentrt_sim::prepare::PreparedTrace;
use agentrt_sim::scheduler::{OpLog, Sim, SimConfig};
use agentrt_sim::trace::Trace;
use agentrt_sim::workloads::{generate, GenParams, Workload};
use support::{replay_in_vllm, venv_python};

/// A trace mixing every workload, so that anchors, multi-turn history and tool loops all occur.
fn mixed_trace() -> Trace {
    let mut requests = Vec::new();
    for (i, w) in Workload::ALL.iter().enumerate() {
        // Sessions arrive together, so the cache also fills with running requests and preempts.
        let params = GenParams {
            sessions: 8,
            concurrency: 8.0,
            rate: Some(50.0),
            seed: 40 + i as u64,
            fleet: Default::default(),
        };
        requests.extend(generate(*w, &params).requests);
    }
    Trace { requests }
}

#[test]
fn simulator_lru_hits_equal_vllm_block_pool_hits() {
    let Some(python) = venv_python() else {
        eprintln!("SKIPPED: no vLLM venv at $AGENTRT_VLLM_VENV or .venv-vllm (run adapters/vllm/setup-venv.sh): the fidelity check against vLLM did not run");
        return;
    };
    let trace = mixed_trace();
    let prepared = PreparedTrace::new(&trace, 16, false);
    let dir = tempfile::tempdir().unwrap();
    let ops_path = dir.path().join("ops.jsonl");
    // A small cache: evictions, duplicates and preemptions all happen.
    let blocks = 1500;
    let mut lru = NativeLru;
    let ops = OpLog {
        trace: &trace,
        out: Box::new(std::io::BufWriter::new(std::fs::File::create(&ops_path).unwrap())),
    };
    let sim = Sim::new(SimConfig::new(blocks), &prepared, &mut lru)
        .with_op_log(ops)
        .run()
        .unwrap();
    assert!(
        sim.evictions > 1000,
        "the cache must churn: {} evictions",
        sim.evictions
    );
    assert!(sim.preemptions > 0, "preemption must be exercised too");

    let (report, out) = replay_in_vllm(
        &python,
        "replay_vllm.py",
        &[&ops_path, &"--num-blocks", &blocks.to_string(), &"--block-size", &"16"],
    );
    assert_eq!(report["mismatches"], serde_json::json!([]), "vLLM disagreed: {report}");
    // Every admission (re-admissions after preemption included) found the same hit in both.
    let sim_admissions: Vec<u64> = std::fs::read_to_string(&ops_path)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|op| op["op"] == "admit")
        .map(|op| op["hit"].as_u64().unwrap())
        .collect();
    let vllm_hits: Vec<u64> = report["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_u64().unwrap())
        .collect();
    assert_eq!(vllm_hits, sim_admissions);
    assert!(sim.hit_tokens > 0);
    eprintln!(
        "fidelity: vLLM {} found {} hit tokens over {} admissions; the simulator the same ({} evictions, {} preemptions)",
        report["vllm"], report["hit_tokens"], report["admissions"], sim.evictions, sim.preemptions
    );
    assert!(out.status.success());
}
