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
        flight = self.begin(tokens, agent, session, warmup, salt, sglang_session)
        assert flight is not None, "allocation failed: pool too small for the request"
        self.finish(flight)
        return flight.hit

    def begin(self, tokens: list[int], agent=None, session=None, warmup=False, salt=None, sglang_session=None):
        """Admit a request: match its prefix, lock it, evict if the pool is short, allocate the
        rest. ``None`` (nothing held) when even eviction cannot make room."""
        req = request(agent, session, warmup, sglang_session)
        cache = self.cache
        match = cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens), cache_salt=salt), req=req))
        flight = InFlight(req, list(tokens), salt, match.device_prefix_len, match.last_device_node)
        cache.inc_lock_ref(flight.last)
        flight.prefix = cache.path_device_indices(flight.last)
        if not self.grow(flight, len(tokens) - flight.hit):
            cache.dec_lock_ref(flight.last)
            return None
        return flight

    def grow(self, flight, n: int) -> bool:
        """``n`` more KV slots for a request in flight (its prefill, or decoded tokens), evicting
        if the pool is short; False, with nothing taken, when eviction cannot free enough."""
        short = n - self.allocator.available_size()
        if short > 0:
            self.evicted_tokens += self.cache.evict(EvictParams(num_tokens=short)).num_tokens_evicted
        new = self.allocator.alloc(n)
        if new is None:
            return False
        flight.slots.append(new.to(torch.int64))
        return True

    def finish(self, flight) -> None:
        """What ``RadixCache._insert_cache`` does for a finished request: insert its KV (``checkpoint``),
        free what the tree already had, unlock its prefix."""
        cache = self.cache
        value = torch.cat([flight.prefix, *flight.slots])
        key = RadixKey(array("q", flight.tokens[: len(value)]), cache_salt=flight.salt)
        with serving(flight.req):
            result = cache.insert(InsertParams(key=key, value=value))
        if result.prefix_len > flight.hit:
            self.allocator.free(value[flight.hit : result.prefix_len])
        cache.dec_lock_ref(flight.last)

    def retract(self, flight) -> None:
        """What SGLang's scheduler does to a request it retracts for room: its own KV freed,
        nothing inserted, its prefix unlocked."""
        for slots in flight.slots:
            self.allocator.free(slots)
        flight.slots = []
        self.cache.dec_lock_ref(flight.last)

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


class InFlight:
    """A request between admission and finish: its locked prefix and the slots it allocated."""

    def __init__(self, req, tokens: list[int], salt, hit: int, last) -> None:
        self.req = req
        self.tokens = tokens
        self.salt = salt
        self.hit = hit
        self.last = last
        self.prefix = None
        self.slots: list = []


def prompt(seed: int, n_tokens: int) -> list[int]:
    """Deterministic distinct token ids per seed."""
    return [(seed * 7919 + i * 31) % 4000 + 10 for i in range(n_tokens)]
