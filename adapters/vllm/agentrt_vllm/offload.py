"""The host-memory tier: an offloading spec for vLLM's ``OffloadingConnector`` whose manager asks
agentrt which copies to drop first and which blocks are worth a copy at all.

vLLM (0.32, ``vllm/v1/kv_offload``) keeps a second copy of computed blocks in host memory. The
scheduler side is ``CPUOffloadingManager`` with a pluggable ``CachePolicy`` (``lru``, ``arc``);
``kv_connector_extra_config`` names an out-of-tree spec with ``spec_name`` and
``spec_module_path``, so this module plugs in without a fork::

    --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
      "kv_connector_extra_config": {"spec_name": "AgentrtOffloadingSpec",
        "spec_module_path": "agentrt_vllm.offload", "cpu_bytes_to_use": 68719476736}}'

What changes against vLLM's own LRU host pool, through the same eviction socket and wire as the
GPU path (``patch.py``), each question bounded by the same deadline:

- **Eviction.** When ``prepare_store`` must free chunks, the policy offers agentrt the
  evict-first window of LRU order — ``max(256, 4 × needed)`` chunks, never the whole pool — as
  host-tier items and drops the ones agentrt ranks first. Same number of chunks freed; only which.
- **Admission.** Before storing, the blocks not yet in host memory are asked about once; those
  the policy scores below zero (``wit/policy.wit``: a host-tier item's negative score) are left
  out of ``keys_to_store``, exactly as vLLM's own ``store_threshold`` leaves blocks out.
- **Events.** Stores (when a copy completes), loads back (``prepare_load``), drops and clears go
  to the policy as block events of the host tier.

No answer in time, no connection, a host that knows no tiers (protocol 1): vLLM's LRU order and
every block stored — the decisions of a stock ``CPUOffloadingManager(cache_policy="lru")``.
Agent, session and position come from the GPU plugin's view of the request (``patch.tag_of``) and
the connector's key positions; 0 where unknown.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Callable, Collection

from vllm.v1.kv_offload.base import OffloadKey, PrepareStoreOutput, ReqContext, get_offload_group_idx
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from agentrt_engine import wire
from agentrt_engine.client import EvictionClient
from agentrt_engine.request_tag import RequestTag

from .tracker import key_hash64

log = logging.getLogger("vllm.agentrt_vllm")

MIN_WINDOW = 256  # chunks offered per eviction at least
WINDOW_FACTOR = 4  # and this many times what is needed


class HostBlock:
    """What the plugin knows of a chunk in host memory (0 where unknown)."""

    __slots__ = ("hash", "agent", "session", "position", "tokens")

    def __init__(self, h: int, agent: int, session: int, position: int, tokens: int) -> None:
        self.hash = h
        self.agent = agent
        self.session = session
        self.position = position
        self.tokens = tokens


class AgentrtLRUPolicy(LRUCachePolicy):
    """vLLM's LRU cache policy whose evictions a chooser may decide within LRU's evict-first
    window. ``chooser(window, n)`` gets ``[(key, lru_rank)]`` oldest first and returns ``n`` keys
    of it, or ``None`` for LRU's own choice."""

    def __init__(self, cache_capacity: int, chooser: Callable | None = None) -> None:
        super().__init__(cache_capacity)
        self.chooser = chooser

    def window(self, size: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, int]]:
        """The first ``size`` evictable, unprotected chunks in LRU order. Pops them off the heap
        and pushes every popped entry back (stale ones too): the heap is left as it was, at
        O(size · log heap), never a walk of the pool."""
        popped = []
        out: list[tuple[OffloadKey, int]] = []
        seen: set[OffloadKey] = set()
        while self._heap and len(out) < size:
            entry = heapq.heappop(self._heap)
            popped.append(entry)
            if not self._is_current(entry):
                continue
            rank, key = entry
            if key in seen or key in protected:
                continue
            seen.add(key)
            out.append((key, rank))
        for entry in popped:
            heapq.heappush(self._heap, entry)
        return out

    def evict(self, n: int, protected: set[OffloadKey]) -> list[tuple[OffloadKey, ChunkStatus]] | None:
        if n == 0 or self.chooser is None:
            return super().evict(n, protected)
        window = self.window(max(MIN_WINDOW, WINDOW_FACTOR * n), protected)
        if len(window) < n:
            return super().evict(n, protected)  # fails the same way (None), state untouched
        chosen = self.chooser(window, n)
        if chosen is None:
            return super().evict(n, protected)
        evicted = []
        for key in chosen:
            chunk = self.chunks[key]
            assert chunk.ref_cnt == 0
            self._evictable.remove(key)
            del self.chunks[key]
            del self._ranks[key]
            evicted.append((key, chunk))
        self._maybe_compact_heap()
        return evicted


class AgentrtOffloadingManager(CPUOffloadingManager):
    """``CPUOffloadingManager`` with LRU's policy ranked by agentrt and stores it admits.

    ``client``: the connection to the eviction service (``None``: behave exactly as vLLM's LRU
    manager). ``tokens_per_chunk``: tokens one chunk holds, per KV cache group. ``tags``: request
    id → ``RequestTag`` (the GPU plugin's ``patch.tag_of``)."""

    def __init__(
        self,
        num_chunks: int,
        client: EvictionClient | None,
        tokens_per_chunk: tuple[int, ...] = (0,),
        tags: Callable[[str], RequestTag | None] | None = None,
        **kwargs,
    ) -> None:
        if kwargs.get("cache_policy", "lru") != "lru":
            raise ValueError(
                f"AgentrtOffloadingSpec ranks the host tier within vLLM's LRU order; "
                f"eviction_policy={kwargs['cache_policy']!r} is not supported with it (leave it unset or 'lru')"
            )
        kwargs.pop("cache_policy", None)
        super().__init__(num_chunks, cache_policy="lru", **kwargs)
        self.client = client
        self.tokens_per_chunk = tokens_per_chunk or (0,)
        self.tags = tags or (lambda _req_id: None)
        self._policy = AgentrtLRUPolicy(num_chunks, self._choose_victims if client is not None else None)
        self.blocks: dict[OffloadKey, HostBlock] = {}
        self.agentrt_stats = {
            "host_evictions": 0,  # chunks dropped to make room
            "host_victims_from_policy": 0,
            "host_eviction_fallbacks": 0,  # evictions decided by LRU (no answer in time, or none)
            "host_admission_asks": 0,
            "host_admission_fallbacks": 0,  # asks without an answer: everything stored
            "host_declined": 0,  # blocks left out of a store because the policy scored them < 0
        }

    # -- what agentrt is told about a chunk ---------------------------------------------------
    def _block(self, key: OffloadKey, req_context: ReqContext | None) -> HostBlock:
        known = self.blocks.get(key)
        if known is not None:
            return known
        group = get_offload_group_idx(key)
        tokens = self.tokens_per_chunk[group] if group < len(self.tokens_per_chunk) else self.tokens_per_chunk[0]
        position = 0
        tag = None
        if req_context is not None:
            end = req_context.get_offload_key_position(key)
            if end is not None:
                position = max(end - tokens, 0)
            tag = self.tags(req_context.req_id)
        agent, session = (tag.agent, tag.session) if tag is not None else (0, 0)
        return HostBlock(key_hash64(key), agent, session, position, tokens)

    @staticmethod
    def _item(block: HostBlock, last_access: int) -> tuple:
        return (block.hash, block.session, last_access, block.agent, block.tokens, block.position)

    def _event(self, op: int, block: HostBlock) -> None:
        self.client.block_event(op, block.agent, block.position, block.hash, 0, wire.TIER_HOST)

    # -- eviction ---------------------------------------------------------------------------------
    def _choose_victims(self, window: list[tuple[OffloadKey, int]], n: int) -> list[OffloadKey] | None:
        self.agentrt_stats["host_evictions"] += n
        items = [self._item(self._block(key, None), rank) for key, rank in window]
        answer = self.client.rank_host(items, n)
        if answer is None:
            self.agentrt_stats["host_eviction_fallbacks"] += 1
            return None
        order, _declined = answer
        chosen: list[OffloadKey] = []
        taken: set[int] = set()
        for i in order:
            if 0 <= i < len(window) and i not in taken:
                taken.add(i)
                chosen.append(window[i][0])
                if len(chosen) == n:
                    break
        self.agentrt_stats["host_victims_from_policy"] += len(chosen)
        # A short answer is filled up from LRU's own head: the count freed never changes.
        for i, (key, _rank) in enumerate(window):
            if len(chosen) == n:
                break
            if i not in taken:
                chosen.append(key)
        return chosen

    # -- admission and bookkeeping -------------------------------------------------------------------
    def prepare_store(self, keys: Collection[OffloadKey], req_context: ReqContext) -> PrepareStoreOutput | None:
        keys = list(keys)
        if self.client is not None:
            fresh = [k for k in keys if self._policy.get(k) is None]
            if fresh:
                declined = self._declined(fresh, req_context)
                if declined:
                    keys = [k for k in keys if k not in declined]
        out = super().prepare_store(keys, req_context)
        if out is not None and self.client is not None:
            for key in out.evicted_keys:
                block = self.blocks.pop(key, None)
                if block is not None:
                    self._event(wire.OP_REMOVED, block)
            for key in out.keys_to_store:
                self.blocks[key] = self._block(key, req_context)
        return out

    def _declined(self, fresh: list[OffloadKey], req_context: ReqContext) -> set[OffloadKey]:
        """The blocks among ``fresh`` (not in host memory) the policy declines to store."""
        self.agentrt_stats["host_admission_asks"] += 1
        # Not stored yet: as recent as anything can be.
        now = self._policy._next_rank + 1
        items = [self._item(self._block(key, req_context), now) for key in fresh]
        answer = self.client.rank_host(items, 0)
        if answer is None:
            self.agentrt_stats["host_admission_fallbacks"] += 1
            return set()
        _order, declined = answer
        out = {fresh[i] for i in declined if 0 <= i < len(fresh)}
        self.agentrt_stats["host_declined"] += len(out)
        return out

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext, success: bool = True) -> None:
        keys = list(keys)
        pending = []
        if self.client is not None:
            for key in keys:
                chunk = self._policy.get(key)
                if chunk is not None and not chunk.is_ready:
                    pending.append(key)
        super().complete_store(keys, req_context, success)
        for key in pending:
            if success:
                block = self.blocks.get(key)
                if block is not None:
                    self._event(wire.OP_STORED, block)
            else:
                self.blocks.pop(key, None)

    def prepare_load(self, keys: Collection[OffloadKey], req_context: ReqContext):
        spec = super().prepare_load(keys, req_context)
        if self.client is not None:
            tag = self.tags(req_context.req_id)
            for key in keys:
                block = self.blocks.get(key)
                if block is None:
                    continue
                if tag is not None and block.session != tag.session:
                    # Another session reuses it: shared content, no one session's (as the GPU
                    # tracker reports it, wit/policy.wit's item.session).
                    block.session = 0
                agent = tag.agent if tag is not None else 0
                self.client.block_event(wire.OP_TOUCHED, agent, block.position, block.hash, 0, wire.TIER_HOST)
        return spec

    def reset_cache(self) -> None:
        super().reset_cache()
        if self.client is not None:
            self.blocks.clear()
            self.client.block_event(wire.OP_ALL_CLEARED, 0, 0, 0, 0, wire.TIER_HOST)


class AgentrtOffloadingSpec(CPUOffloadingSpec):
    """vLLM's CPU offloading spec with :class:`AgentrtOffloadingManager` on the scheduler side;
    the worker side (the copies) is vLLM's own. Uses the engine's eviction-service connection
    (``AGENTRT_EVICTION_SOCKET``, set up by the plugin); without one, vLLM's LRU manager."""

    def get_manager(self) -> AgentrtOffloadingManager:
        if not self._manager:
            from . import patch

            client = patch.shared_client()
            path = os.environ.get("AGENTRT_EVICTION_SOCKET")
            if client is None and path:
                # The block-pool patch did not install (an untested vLLM): the host tier can
                # still ask on a connection of its own.
                deadline_ms = float(os.environ.get("AGENTRT_EVICTION_DEADLINE_MS", "2"))
                client = EvictionClient(path, deadline_ms / 1000.0, patch.vllm_version(), log=log)
            if client is None:
                log.warning("agentrt: AGENTRT_EVICTION_SOCKET unset; the host tier runs vLLM's LRU order")
            self._manager = AgentrtOffloadingManager(
                num_chunks=self.num_chunks,
                client=client,
                tokens_per_chunk=tuple(t * self.blocks_per_chunk for t in self.tokens_per_block),
                tags=patch.tag_of,
                cache_policy=self.eviction_policy,
                enable_events=self.kv_events_config.enable_kv_cache_events,
                store_threshold=int(self.extra_config.get("store_threshold", 0)),
                max_tracker_size=int(self.extra_config.get("max_tracker_size", 64_000)),
            )
            if client is not None:
                client.connected()
                client.watch()
            log.info("agentrt: host tier of %d chunks ranked by the eviction service", self.num_chunks)
        return self._manager
