"""Drives SGLang's real RadixCache and token-to-KV allocator from Python the way its scheduler does
for one request (``match_kv_cache`` → lock the prefix → evict if the pool is short → allocate →
insert the request's KV (``checkpoint``) → unlock), without a model or a server.

The request object is a stand-in with the attributes of SGLang's ``Req`` that the plugin reads
(``sampling_params.custom_params``, ``session_id``): building a real ``Req`` needs a tokenizer and
the scheduler's state, and nothing else of it reaches the tree.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace

import torch
from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
from sglang.srt.mem_cache.cache_init_params import CacheInitParams
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey

from agentrt_sglang.patch import serving


def request(agent=None, session=None, warmup=False, sglang_session=None):
    """What ``agentrt serve --engine sglang`` sends, as SGLang's Req carries it."""
    tags = {}
    if agent is not None:
        tags["agentrt_agent"] = agent
    if session is not None:
        tags["agentrt_session"] = session
    if warmup:
        tags["agentrt_warmup"] = True
    return SimpleNamespace(sampling_params=SimpleNamespace(custom_params=tags or None), session_id=sglang_session)


class Engine:
    def __init__(self, num_tokens: int, policy: str = "lru") -> None:
        self.allocator = TokenToKVPoolAllocator(num_tokens, torch.float32, "cpu", kvcache=None, need_sort=False)
        self.cache = RadixCache(
            CacheInitParams(
                disable=False,
                req_to_token_pool=None,
                token_to_kv_pool_allocator=self.allocator,
                page_size=1,
                eviction_policy=policy,
            )
        )
        self.evicted_tokens = 0

    def run_request(self, tokens: list[int], agent=None, session=None, warmup=False, salt=None, sglang_session=None) -> int:
        """One request through the tree. Returns its prefix-hit tokens."""
        req = request(agent, session, warmup, sglang_session)
        cache = self.cache
        match = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens), cache_salt=salt), req=req))
        hit, last = match.device_prefix_len, match.last_device_node
        cache.inc_lock_ref(last)
        need = len(tokens) - hit
        short = need - self.allocator.available_size()
        if short > 0:
            self.evicted_tokens += cache.evict(EvictParams(num_tokens=short)).num_tokens_evicted
        new = self.allocator.alloc(need)
        assert new is not None, "allocation failed: pool too small for the request"
        value = torch.cat([cache.path_device_indices(last), new.to(torch.int64)])
        with serving(req):
            # What RadixCache._insert_cache does for a finished request (it needs the scheduler's
            # req_to_token pool to find the values; here they are at hand).
            result = cache.insert(InsertParams(key=RadixKey(array("q", tokens), cache_salt=salt), value=value))
        if result.prefix_len > hit:
            self.allocator.free(value[hit : result.prefix_len])
        cache.dec_lock_ref(last)
        return hit

    def cached_prefix_tokens(self, tokens: list[int], salt=None) -> int:
        """How many of ``tokens`` are cached (a lookup without a request: no touch reported)."""
        return self.cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens), cache_salt=salt))).device_prefix_len

    def cached_paths(self) -> set[tuple[int, ...]]:
        """Every cached token path from the root to a leaf: the tree's contents."""
        out = set()
        stack = [(self.cache.root_node, ())]
        while stack:
            node, path = stack.pop()
            if node is not self.cache.root_node:
                path = path + tuple(node.key.raw_token_ids())
            if not node.children and path:
                out.add(path)
            stack.extend((child, path) for child in node.children.values())
        return out


def prompt(seed: int, n_tokens: int) -> list[int]:
    """Deterministic distinct token ids per seed."""
    return [(seed * 7919 + i * 31) % 4000 + 10 for i in range(n_tokens)]
