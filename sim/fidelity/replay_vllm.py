#!/usr/bin/env python3
"""Replay a simulator op log through vLLM's own KV-cache manager and report its prefix-cache hits.

The simulator (`agentrt sim run --trace T --capacity-blocks N --op-log OPS`) records, for a
replay under vLLM's LRU, every call its scheduler makes into the block pool: requests added (with
their prompt token ids), admissions (with the prefix hit it found), allocations for running
requests, failed allocations, preemptions, generated tokens, frees. This script makes the same
calls on `vllm.v1.core.kv_cache_manager.KVCacheManager` (vLLM's code, unmodified: block pool, free
queue, chained sha256 block hashes, reference counts) and checks, call by call, that vLLM finds
the same prefix hits and succeeds or fails where the simulator did.

Usage: replay_vllm.py OPS.jsonl --num-blocks N [--block-size 16]
Prints one JSON object: {"vllm": "<version>", "admissions": n, "hit_tokens": total,
"hits": [per admission], "mismatches": [first few], "ops": n}. Exit status 0 when every call agreed.
"""

import argparse
import json
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ops")
    ap.add_argument("--num-blocks", type=int, required=True)
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args()

    import importlib.metadata as md

    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    bs = args.block_size
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32)
    config = KVCacheConfig(
        num_blocks=args.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layers.0"], spec)],
    )
    manager = KVCacheManager(
        config,
        max_model_len=1 << 20,
        scheduler_block_size=bs,
        hash_block_size=bs,
        enable_caching=True,
    )
    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(bs, hash_fn)

    requests = {}
    hits = []
    mismatches = []
    n_ops = 0

    def mismatch(n, op, what):
        if len(mismatches) < 20:
            mismatches.append({"op_index": n, "op": op.get("op"), "id": op.get("id"), "what": what})

    with open(args.ops) as f:
        for line in f:
            op = json.loads(line)
            n_ops += 1
            kind = op["op"]
            if kind == "step":
                continue
            req = requests.get(op.get("id"))
            if kind == "add":
                requests[op["id"]] = Request(
                    str(op["id"]),
                    op["prompt"],
                    SamplingParams(max_tokens=1 << 20),
                    None,
                    block_hasher=hasher,
                )
            elif kind in ("admit", "fail_admit"):
                blocks, hit, _ = manager.get_computed_blocks(req)
                if hit != op["hit"]:
                    mismatch(n_ops, op, f"vLLM hit {hit} tokens, simulator {op['hit']}")
                new = manager.allocate_slots(
                    req, op["n"], hit, blocks, full_sequence_must_fit=True
                )
                if kind == "admit":
                    hits.append(hit)
                    if new is None:
                        mismatch(n_ops, op, "vLLM could not admit")
                    else:
                        req.num_computed_tokens = hit + op["n"]
                elif new is not None:
                    mismatch(n_ops, op, "vLLM admitted what the simulator could not")
            elif kind == "sched":
                if manager.allocate_slots(req, op["n"]) is None:
                    mismatch(n_ops, op, "vLLM could not allocate")
                else:
                    req.num_computed_tokens += op["n"]
            elif kind == "fail":
                if manager.allocate_slots(req, op["n"]) is not None:
                    mismatch(n_ops, op, "vLLM allocated what the simulator could not")
            elif kind == "preempt":
                manager.free(req)
                req.num_computed_tokens = 0
            elif kind == "tok":
                req.append_output_token_ids(op["t"])
            elif kind == "free":
                manager.free(req)
            else:
                mismatch(n_ops, op, f"unknown op {kind}")

    print(
        json.dumps(
            {
                "vllm": md.version("vllm"),
                "admissions": len(hits),
                "hit_tokens": sum(hits),
                "hits": hits,
                "mismatches": mismatches,
                "ops": n_ops,
            }
        )
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
