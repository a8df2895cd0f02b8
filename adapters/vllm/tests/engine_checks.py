"""vLLM's block-pool invariants, checked from outside, and a scheduler built the way vLLM's own
scheduler tests build one (a bare OPT ``config.json``: no weights, no tokenizer). Used by
test_engine_invariants.py after every step.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, make_block_hash_with_group_id
from vllm.v1.request import Request

BLOCK_SIZE = 16


def make_scheduler(model_dir: Path, num_blocks: int, max_num_seqs: int = 6, max_num_batched_tokens: int = 192):
    """vLLM's ``Scheduler`` with prefix caching over ``num_blocks`` blocks of ``BLOCK_SIZE``."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config_json = model_dir / "config.json"
    if not config_json.exists():
        config_json.write_text('{"architectures": ["OPTForCausalLM"], "model_type": "opt"}')
    model_config = ModelConfig(model=str(model_dir), dtype="float16", seed=42, skip_tokenizer_init=True, max_model_len=2048)
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=2048,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        watermark=0.0,  # admission and preemption exactly as the pool allows
    )
    cache_config = CacheConfig(block_size=BLOCK_SIZE, gpu_memory_utilization=0.9, cache_dtype="auto", enable_prefix_caching=True)
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config)
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=1, dtype=torch.float32)
    kv_cache_config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
    cache_config.num_gpu_blocks = num_blocks
    register_all_kvcache_specs(vllm_config)
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=BLOCK_SIZE,
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


def make_request(request_id: str, tokens: list[int], max_tokens: int, agent: str, session: str) -> Request:
    init_none_hash(sha256)
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args={"agentrt_agent": agent, "agentrt_session": session})
    return Request(
        request_id=request_id,
        prompt_token_ids=tokens,
        sampling_params=params,
        pooling_params=None,
        block_hasher=get_request_block_hasher(BLOCK_SIZE, sha256),
    )


def model_output(scheduler, out):
    """What a model runner returns for ``out``: one sampled token for every request whose
    scheduled tokens reach its end (a chunk of a longer prompt samples nothing)."""
    from vllm.v1.outputs import ModelRunnerOutput

    ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in ids:
        req = scheduler.requests[rid]
        sampled.append([7] if req.num_computed_tokens >= req.num_tokens else [])
    return ModelRunnerOutput(
        req_ids=ids,
        req_id_to_index={rid: i for i, rid in enumerate(ids)},
        sampled_token_ids=sampled,
        logprobs=None,
        prompt_logprobs_dict={},
        pooler_output=[],
    )


def free_queue_ids(pool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue.get_all_free_blocks()]


def block_tables(single_type_manager) -> dict[str, list[int]]:
    return {rid: [b.block_id for b in blocks] for rid, blocks in single_type_manager.req_to_blocks.items()}


def cached_keys(pool) -> set:
    return set(pool.cached_block_hash_to_block._cache)


def check_pool(pool, single_type_manager, requests: dict, where: str) -> None:
    """The invariants of vLLM's block pool that the plugin must keep, whatever it evicts:

    - free queue: a well-formed list holding exactly the blocks nobody references;
    - ref counts: each block's equals the number of requests whose block table holds it;
    - block hashes: the hash map and the blocks' own hashes agree;
    - nothing evicted in use: every cached block a request holds still has that request's hash.
    """
    queue = pool.free_block_queue
    ids = free_queue_ids(pool)
    assert len(ids) == len(set(ids)) == queue.num_free_blocks, f"{where}: free queue malformed: {ids}"
    unreferenced = {b.block_id for b in pool.blocks if b.ref_cnt == 0 and not b.is_null}
    assert set(ids) == unreferenced, f"{where}: free queue {sorted(ids)} != unreferenced blocks {sorted(unreferenced)}"

    holders = Counter(b.block_id for blocks in single_type_manager.req_to_blocks.values() for b in blocks if not b.is_null)
    wrong = {b.block_id: (b.ref_cnt, holders[b.block_id]) for b in pool.blocks if not b.is_null and b.ref_cnt != holders[b.block_id]}
    assert not wrong, f"{where}: ref counts (block: (ref_cnt, holders)) {wrong}"

    by_hash = pool.cached_block_hash_to_block._cache
    for key, entry in by_hash.items():
        blocks = entry.values() if isinstance(entry, dict) else [entry]
        for blk in blocks:
            assert blk.block_hash == key or key in pool.cached_block_hashes_by_block.get(blk.block_id, ()), (
                f"{where}: the hash map names block {blk.block_id} for a hash it does not carry"
            )
    for blk in pool.blocks:
        if blk.block_hash is not None:
            assert blk.block_hash in by_hash, f"{where}: block {blk.block_id} carries a hash the map lacks"

    group = single_type_manager.kv_cache_group_id
    for rid, blocks in single_type_manager.req_to_blocks.items():
        cached = single_type_manager.num_cached_block.get(rid, 0)
        hashes = requests[rid].block_hashes
        for i, blk in enumerate(blocks[:cached]):
            if blk.is_null:
                continue
            assert blk.block_hash == make_block_hash_with_group_id(hashes[i], group), (
                f"{where}: block {blk.block_id}, #{i} of request {rid}, lost its content while in use"
            )


def check_tracker(tracker, pool, where: str) -> None:
    """The plugin's own view agrees with the pool: it knows every cached block, under the hash the
    block carries now, and nothing else."""
    from agentrt_vllm.tracker import key_hash64

    cached = {b.block_id: key_hash64(b.block_hash) for b in pool.blocks if b.block_hash is not None}
    known = {block_id: info.hash for block_id, info in tracker.info.items()}
    assert known == cached, f"{where}: the tracker's blocks {sorted(known)} != the pool's cached blocks {sorted(cached)}"
