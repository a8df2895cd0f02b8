#!/usr/bin/env python3
"""Replay a host-pool operation log through vLLM's own CPUOffloadingManager and compare.

The simulator's host tier (sim/src/offload/) is a model of vLLM's scheduler-side host pool,
`vllm.v1.kv_offload.cpu.manager.CPUOffloadingManager` with its `lru` or `arc` cache policy. The
Rust test `sim/tests/host_fidelity.rs` drives the simulator's pool through a generated sequence of
prepare_store / complete_store / lookup / prepare_load / complete_load / on_request_finished calls
and writes each call with what the simulator answered. This script makes the same calls on vLLM's
class (unmodified; no GPU is needed: this is the scheduler side) and checks every answer: which
keys are stored, into which slots, which keys are evicted, each lookup, each load's slots.

Usage: replay_host_pool.py OPS.jsonl
The first line is {"chunks": N, "policy": "lru"|"arc"}; then one operation a line.
Prints one JSON object: {"vllm": "<version>", "policy", "ops", "evictions", "refused",
"mismatches": [first few]}. Exit status 0 when every answer agreed.
"""

import json
import sys


def main() -> int:
    import importlib.metadata as md

    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    with open(sys.argv[1]) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    header, ops = lines[0], lines[1:]
    manager = CPUOffloadingManager(
        num_chunks=header["chunks"], cache_policy=header["policy"], enable_events=True
    )

    def key(k: int) -> bytes:
        return make_offload_key(k.to_bytes(8, "big"), 0)

    def name(k: bytes) -> int:
        return int.from_bytes(k[:-4], "big")

    contexts: dict[int, ReqContext] = {}

    def context(req: int, keys) -> ReqContext:
        ctx = contexts.get(req)
        if ctx is None:
            ctx = contexts[req] = ReqContext(req_id=str(req))
            manager.on_new_request(ctx)
        for k, end in keys:
            ctx.set_offload_key_position(key(k), end)
        return ctx

    mismatches = []
    evictions = refused = 0
    for i, op in enumerate(ops):
        kind = op["op"]
        if kind == "store":
            ctx = context(op["req"], op["keys"])
            out = manager.prepare_store([key(k) for k, _ in op["keys"]], ctx)
            got = None
            if out is None:
                refused += 1
            else:
                got = {
                    "store": [name(k) for k in out.keys_to_store],
                    "chunks": [int(c) for c in out.store_spec.block_ids],
                    "evicted": [name(k) for k in out.evicted_keys],
                }
                evictions += len(out.evicted_keys)
        elif kind == "complete_store":
            manager.complete_store([key(k) for k in op["keys"]], ReqContext(req_id="x"), success=op["ok"])
            got = None
        elif kind == "lookup":
            got = manager.lookup(key(op["key"]), ReqContext(req_id="lookup")).name
        elif kind == "load":
            ctx = context(op["req"], op["keys"])
            spec = manager.prepare_load([key(k) for k, _ in op["keys"]], ctx)
            got = [int(c) for c in spec.block_ids]
        elif kind == "complete_load":
            manager.complete_load([key(k) for k in op["keys"]], ReqContext(req_id="x"))
            got = None
        elif kind == "finish":
            ctx = contexts.pop(op["req"], None)
            if ctx is not None:
                manager.on_request_finished(ctx)
            got = None
        else:
            raise SystemExit(f"line {i + 2}: unknown op {kind!r}")
        if "expect" in op and got != op["expect"]:
            mismatches.append({"line": i + 2, "op": op, "vllm": got})
            if len(mismatches) >= 5:
                break
        list(manager.take_events())

    print(
        json.dumps(
            {
                "vllm": md.version("vllm"),
                "policy": header["policy"],
                "ops": len(ops),
                "evictions": evictions,
                "refused": refused,
                "mismatches": mismatches,
            }
        )
    )
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
