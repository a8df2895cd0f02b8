"""Class-level patches of SGLang's ``RadixCache`` and the ``agentrt`` radix-cache backend,
installed by the plugin (``sglang.srt.plugins`` entry point) in every SGLang process. Each wrapper
calls SGLang's original and hands the tracker what it needs; a tracker that raises is switched off
for that cache (logged once), so a plugin bug degrades to plain SGLang.

Only caches the ``agentrt`` backend builds carry a tracker (``--radix-cache-backend agentrt``);
every other ``RadixCache`` (the scheduler's in-batch prefix tree, for one) runs unchanged.

Hook points (SGLang 0.5.23, ``sglang/srt/mem_cache/radix_cache.py``):

- ``RadixCache._insert_cache``: the only insert that sees the request (``checkpoint``): tag.
- ``RadixCache._insert_helper``: the nodes an insert created get the request's tag.
- ``RadixCache._split_node``: the upper half of a split node keeps its owner.
- ``RadixCache.match_prefix``: a request's prefix hit (``MatchPrefixParams.req``): touches.
- ``RadixCache.evict``: the policy's order over the evictable nodes; SGLang's after the deadline.
- ``RadixCache.reset``: all cleared.
"""

from __future__ import annotations

import functools
import logging
import time

from agentrt_engine.client import EvictionClient
from agentrt_engine.request_tag import RequestTag
from agentrt_engine.versions import is_supported, may_patch

from .tracker import RadixTracker

log = logging.getLogger("sglang.agentrt_sglang")

# The SGLang versions whose radix cache this plugin was written against and tested with.
SUPPORTED_VERSIONS = ("0.5.23",)
BACKEND = "agentrt"

_state: dict = {"installed": False, "client": None, "current": None, "trackers": []}


def sglang_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return "unknown"


def check_version(version: str) -> bool:
    return is_supported(version, SUPPORTED_VERSIONS)


def request_tag(req, client: EvictionClient) -> RequestTag | None:
    """Agent, session and warm-up flag of an SGLang request: ``custom_params.agentrt_*`` (what
    ``agentrt serve --engine sglang`` sends), SGLang's own ``session_id`` standing in for the
    session."""
    if req is None:
        return None
    params = getattr(req, "sampling_params", None)
    tags = getattr(params, "custom_params", None) if params is not None else None
    return RequestTag.of_request(req, tags, client)


class serving:
    """``with serving(req):`` — what the patched ``_insert_cache`` does around SGLang's insert, so
    the nodes it creates are the request's. Tests insert through ``insert`` inside it."""

    def __init__(self, req) -> None:
        self.req = req

    def __enter__(self):
        self.saved = _state["current"]
        _state["current"] = self.req
        return self

    def __exit__(self, *exc) -> None:
        _state["current"] = self.saved


def _guard(cache, what: str, fn, *args):
    """Run a tracker hook; on error log once and switch the tracker off for this cache."""
    try:
        return fn(*args)
    except Exception:
        log.exception("agentrt: %s failed; eviction falls back to SGLang's order for this cache", what)
        cache._agentrt = None
        return None


def attach(cache, client: EvictionClient, max_candidates: int = 256) -> RadixTracker:
    """Make ``cache`` (a ``RadixCache``; the patches installed) consult the host through
    ``client``. ``cache._agentrt = None`` detaches (the cache then behaves exactly like SGLang's)."""
    tracker = RadixTracker(cache, client, max_candidates)
    cache._agentrt = tracker
    _state["trackers"].append(tracker)
    client.connected()  # connect early, at engine start, not on the first eviction
    client.watch()  # and again as soon as a restarted host is back, not at the next eviction
    return tracker


def install(socket_path: str | None, deadline_ms: float = 2.0, max_candidates: int = 256, force: bool = False) -> bool:
    """Patch SGLang's ``RadixCache`` and register the ``agentrt`` backend (which attaches a tracker
    talking to ``socket_path``). Returns False (and patches nothing) on an unknown SGLang."""
    if _state["installed"]:
        return True
    version = sglang_version()
    if not may_patch(log, "SGLang", version, SUPPORTED_VERSIONS, force, "the radix cache",
                     "AGENTRT_SGLANG_ALLOW_UNTESTED"):
        return False

    from sglang.srt.mem_cache.base_prefix_cache import EvictResult
    from sglang.srt.mem_cache.radix_cache import RadixCache

    needed = ("_insert_cache", "_insert_helper", "_split_node", "match_prefix", "evict", "reset", "_delete_leaf")
    missing = [name for name in needed if not hasattr(RadixCache, name)]
    if missing:
        log.error("agentrt: SGLang %s's RadixCache lacks %s; NOT patching", version, ", ".join(missing))
        return False

    client = EvictionClient(socket_path, deadline_ms / 1000.0, f"sglang-{version}", log=log) if socket_path else None
    _state["client"] = client
    RadixCache._agentrt = None

    orig_insert_cache = RadixCache._insert_cache

    @functools.wraps(orig_insert_cache)
    def _insert_cache(self, req, *args, **kwargs):
        with serving(req):
            return orig_insert_cache(self, req, *args, **kwargs)

    orig_insert_helper = RadixCache._insert_helper

    @functools.wraps(orig_insert_helper)
    def _insert_helper(self, *args, **kwargs):
        result = orig_insert_helper(self, *args, **kwargs)
        t = self._agentrt
        if t is not None:
            _guard(self, "tagging nodes", t.on_inserted, request_tag(_state["current"], t.client), result[1])
        return result

    orig_split = RadixCache._split_node

    @functools.wraps(orig_split)
    def _split_node(self, key, child, split_len):
        new_node = orig_split(self, key, child, split_len)
        t = self._agentrt
        if t is not None:
            _guard(self, "split", t.on_split, new_node, child)
        return new_node

    orig_match = RadixCache.match_prefix

    @functools.wraps(orig_match)
    def match_prefix(self, params):
        result = orig_match(self, params)
        t = self._agentrt
        req = getattr(params, "req", None)
        if t is not None and req is not None:
            _guard(self, "touch", t.on_match, request_tag(req, t.client), result.last_device_node)
        return result

    orig_evict = RadixCache.evict

    @functools.wraps(orig_evict)
    def evict(self, params):
        t = self._agentrt
        if t is None or self.disable:
            return orig_evict(self, params)
        start = time.perf_counter()

        def sglang_order(n: int) -> int:
            return orig_evict(self, type(params)(num_tokens=n)).num_tokens_evicted

        t.client.flush()
        freed = _guard(self, "choosing victims", t.evict, params.num_tokens, sglang_order)
        if freed is None:  # the tracker failed (and is now off): SGLang's own eviction
            return orig_evict(self, params)
        self.update_eviction_metrics(freed, start)
        return EvictResult(num_tokens_evicted=freed)

    orig_reset = RadixCache.reset

    @functools.wraps(orig_reset)
    def reset(self):
        orig_reset(self)
        t = getattr(self, "_agentrt", None)
        if t is not None:
            _guard(self, "reset", t.on_reset)

    RadixCache._insert_cache = _insert_cache
    RadixCache._insert_helper = _insert_helper
    RadixCache._split_node = _split_node
    RadixCache.match_prefix = match_prefix
    RadixCache.evict = evict
    RadixCache.reset = reset

    if client is not None:
        _register_backend(client, max_candidates)
    _state["installed"] = True
    log.info("agentrt: SGLang %s radix cache patched (deadline %.1f ms)", version, deadline_ms)
    return True


def _register_backend(client: EvictionClient, max_candidates: int) -> None:
    """``--radix-cache-backend agentrt``: SGLang's plain ``RadixCache`` (its default chain builds
    the unified tree, which this plugin does not patch) with a tracker on the eviction socket."""
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.mem_cache.registry import register_radix_cache_backend

    def factory(ctx):
        cache = RadixCache(ctx.params)
        if not cache.disable:
            attach(cache, client, max_candidates)
            log.info("agentrt: radix cache eviction ranked by the host at %s", client.path)
        return cache

    try:
        register_radix_cache_backend(BACKEND, factory)
    except ValueError as e:  # registered already in this process
        log.warning("agentrt: %s", e)


def stats() -> dict:
    """Counters of the client and every tracker, for logs and tests."""
    out: dict = {}
    client = _state["client"]
    if client is not None:
        out.update(client.stats)
    for t in _state["trackers"]:
        for k, v in t.stats.items():
            out[k] = out.get(k, 0) + v
    return out
