"""Drives vLLM's real KV-cache manager and block pool from Python, the way the scheduler does
(``get_computed_blocks`` → ``allocate_slots`` → ``free``), without a model or an engine.

Each ``run_request`` is one scheduler step: the request is admitted, its whole prompt is
"computed" (blocks cached), and it finishes. That is the block pool's view of a ``max_tokens=1``
chat completion.
"""

from __future__ import annotations

import torch
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
from vllm.v1.request import Request

BLOCK_SIZE = 32


class Engine:
    def __init__(self, num_blocks: int, step_hook=None) -> None:
        init_none_hash(sha256)
        spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=1, head_size=8, dtype=torch.float32)
        config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)],
        )
        self.manager = KVCacheManager(
            config,
            max_model_len=8192,
            scheduler_block_size=BLOCK_SIZE,
            hash_block_size=BLOCK_SIZE,
            enable_caching=True,
        )
        self.hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
        self.step_hook = step_hook
        self.next_id = 0

    @property
    def pool(self):
        return self.manager.block_pool

    def run_request(self, tokens: list[int], agent=None, session=None, warmup=False, on_allocate=None) -> int:
        """One request through admission, prefill and finish. Returns its prefix-hit tokens;
        ``on_allocate`` gets the ids of the blocks the allocation handed out, in order."""
        if self.step_hook is not None:
            self.step_hook()
        extra = {}
        if agent is not None:
            extra["agentrt_agent"] = agent
        if session is not None:
            extra["agentrt_session"] = session
        if warmup:
            extra["agentrt_warmup"] = True
        self.next_id += 1
        req = Request(
            request_id=f"r{self.next_id}",
            prompt_token_ids=list(tokens),
            sampling_params=SamplingParams(max_tokens=1, extra_args=extra or None),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        computed, hit_tokens, _ = self.manager.get_computed_blocks(req)[:3]
        new_tokens = len(tokens) - hit_tokens
        blocks = self.manager.allocate_slots(req, new_tokens, hit_tokens, computed)
        assert blocks is not None, "allocation failed: pool too small for the request"
        if on_allocate is not None:
            on_allocate(blocks.get_block_ids()[0])
        req.num_computed_tokens = len(tokens)
        self.manager.free(req)
        return hit_tokens

    def cached_prefix_tokens(self, tokens: list[int]) -> int:
        """How many of ``tokens`` a new request would find cached (no side effects)."""
        req = Request(
            request_id="probe",
            prompt_token_ids=list(tokens),
            sampling_params=SamplingParams(max_tokens=1),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        hashes = req.block_hashes
        hits = self.manager.coordinator.find_longest_cache_hit(hashes, len(tokens))[1]
        return hits


def prompt(seed: int, n_tokens: int) -> list[int]:
    """Deterministic distinct token ids per seed."""
    return [(seed * 7919 + i * 31) % 4000 + 10 for i in range(n_tokens)]
