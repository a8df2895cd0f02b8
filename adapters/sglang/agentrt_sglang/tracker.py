"""Agent-aware bookkeeping for one SGLang ``RadixCache`` and its eviction decision.

SGLang's radix tree holds variable-length nodes; eviction frees whole nodes, leaves first (a node
becomes evictable once its children are gone), in the order of the configured strategy
(``--radix-eviction-policy``: LRU by ``last_access_time`` by default). The tracker gives every
node an identity the policy can follow (a 64-bit hash of the node's whole token path, salt and
extra key: stable when a later insert splits the node above it), tags new nodes with the request
that stored them, and, when SGLang must evict, asks the host to rank the evictable nodes — leaves
and the unlocked ancestors that become leaves as their children go. It then evicts exactly as
SGLang does (whole nodes, children before parents, until enough tokens are free), only in the
policy's order. The number of tokens freed is what SGLang would free; only which nodes changes.

Nothing here raises into SGLang: the patch wraps every hook (``patch._guard``).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import struct

from agentrt_engine import wire
from agentrt_engine.client import EvictionClient
from agentrt_engine.request_tag import RequestTag

log = logging.getLogger("sglang.agentrt_sglang")


class NodeInfo:
    """What the tracker knows of one tree node (kept on the node as ``node._agentrt``)."""

    __slots__ = ("hash", "parent", "agent", "session", "position")

    def __init__(self, h: int, parent: int, agent: int, session: int, position: int) -> None:
        self.hash = h
        self.parent = parent
        self.agent = agent
        self.session = session
        self.position = position


def _path(node, root) -> list:
    """The nodes from the root's child down to ``node``."""
    out = []
    while node is not None and node is not root:
        out.append(node)
        node = node.parent
    out.reverse()
    return out


def path_hash(node, root) -> int:
    """A u64 naming the content of ``node``: its whole token path from the root, with the
    namespace (``cache_salt``, ``extra_key``) SGLang keys the tree by. A split keeps the lower
    half's hash (its path is unchanged) and gives the upper half a new one."""
    digest = hashlib.blake2b(digest_size=8)
    key = node.key
    digest.update(repr((key.cache_salt, key.extra_key)).encode())
    for n in _path(node, root):
        digest.update(n.key.raw_token_ids().tobytes())
    return struct.unpack("<Q", digest.digest())[0]


def _position(node, root) -> int:
    """The token offset of ``node``'s first token in its prompt."""
    return sum(len(n.key) for n in _path(node, root)[:-1])


class RadixTracker:
    def __init__(self, cache, client: EvictionClient, max_candidates: int = 256) -> None:
        self.cache = cache
        self.client = client
        self.max_candidates = max_candidates
        self.stats = {
            "evictions_needed": 0,  # evict() calls that had tokens to free
            "nodes_from_policy": 0,
            "tokens_from_policy": 0,
            "tokens_from_sglang": 0,  # freed in SGLang's own order (no answer, or the ranking ran short)
            "fallback_evictions": 0,
        }

    # -- tags ------------------------------------------------------------------------------------
    def info(self, node) -> NodeInfo | None:
        return getattr(node, "_agentrt", None)

    def on_inserted(self, tag: RequestTag | None, last_node) -> None:
        """An insert ended at ``last_node``: tag the nodes on its path that have no tag yet (the
        ones this insert created) with the inserting request."""
        root = self.cache.root_node
        agent = tag.agent if tag is not None else 0
        session = tag.session if tag is not None else 0
        parent_hash = 0
        position = 0
        for node in _path(last_node, root):
            info = self.info(node)
            if info is None:
                h = path_hash(node, root)
                node._agentrt = NodeInfo(h, parent_hash, agent, session, position)
                self.client.block_event(wire.OP_STORED, agent, position, h, parent_hash)
                info = node._agentrt
            parent_hash = info.hash
            position += len(node.key)

    def on_split(self, new_node, child) -> None:
        """``_split_node`` cut ``child`` in two: ``new_node`` is its upper part (same owner)."""
        old = self.info(child)
        if old is None:
            return
        root = self.cache.root_node
        h = path_hash(new_node, root)
        new_node._agentrt = NodeInfo(h, old.parent, old.agent, old.session, old.position)
        old.parent = h
        old.position += len(new_node.key)
        self.client.block_event(wire.OP_STORED, old.agent, new_node._agentrt.position, h, new_node._agentrt.parent)

    def on_match(self, tag: RequestTag | None, last_node) -> None:
        """A request's prefix hit ends at ``last_node``: its nodes are touched by it; a node
        another session reuses is shared content (``session`` 0, as wit/policy.wit defines)."""
        if tag is None:
            return
        for node in _path(last_node, self.cache.root_node):
            info = self.info(node)
            if info is None:
                continue
            if info.session != tag.session:
                info.session = 0
            if not tag.warmup:
                self.client.block_event(wire.OP_TOUCHED, tag.agent, info.position, info.hash, info.parent)

    def on_reset(self) -> None:
        self.client.block_event(wire.OP_ALL_CLEARED, 0, 0, 0, 0)

    # -- eviction --------------------------------------------------------------------------------
    def _evictable(self) -> list:
        """SGLang's evictable leaves and the unlocked ancestors that become leaves as their
        children are evicted, oldest first, at most ``max_candidates``."""
        cache = self.cache
        root = cache.root_node
        seen = {}
        for leaf in cache.evictable_leaves:
            node = leaf
            while node is not root and node.lock_ref == 0 and id(node) not in seen:
                seen[id(node)] = node
                node = node.parent
        nodes = list(seen.values())
        if len(nodes) > self.max_candidates:
            nodes = heapq.nsmallest(self.max_candidates, nodes, key=lambda n: n.last_access_time)
        return nodes

    def _ready(self, node) -> bool:
        """Evictable now: unlocked, still in the tree, no child left."""
        return node.lock_ref == 0 and not node.evicted and not node.children and node.parent is not None

    def evict(self, num_tokens: int, evict_in_sglang_order) -> int:
        """Free at least ``num_tokens`` tokens (as SGLang's ``evict`` does), in the policy's order;
        ``evict_in_sglang_order(n)`` frees ``n`` tokens SGLang's own way and returns how many."""
        if num_tokens <= 0:
            return evict_in_sglang_order(num_tokens)
        self.stats["evictions_needed"] += 1
        candidates = self._evictable()
        order = self._rank(candidates)
        if order is None:
            self.stats["fallback_evictions"] += 1
            freed = evict_in_sglang_order(num_tokens)
            self.stats["tokens_from_sglang"] += freed
            return freed
        rank_of = {id(candidates[i]): r for r, i in enumerate(order)}
        heap = [(rank_of[id(n)], n.id, n) for n in candidates if id(n) in rank_of and self._ready(n)]
        heapq.heapify(heap)
        cache = self.cache
        freed = 0
        done = set()
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            if id(node) in done or not self._ready(node):
                continue
            done.add(id(node))
            parent = node.parent
            freed += self.evict_node(node)
            self.stats["nodes_from_policy"] += 1
            r = rank_of.get(id(parent))
            if r is not None and parent is not cache.root_node and self._ready(parent):
                heapq.heappush(heap, (r, parent.id, parent))
        self.stats["tokens_from_policy"] += freed
        if freed < num_tokens:
            more = evict_in_sglang_order(num_tokens - freed)
            self.stats["tokens_from_sglang"] += more
            freed += more
        return freed

    def evict_node(self, node) -> int:
        """Evict one leaf exactly as SGLang's ``evict`` loop body does; returns its tokens."""
        cache = self.cache
        n = len(node.value)
        cache.token_to_kv_pool_allocator.free_segment(node.value, start_pos=0)
        cache._delete_leaf(node)
        cache.kv_events.record_remove(node)
        self.on_evicted(node)
        return n

    def on_evicted(self, node) -> None:
        info = self.info(node)
        if info is not None:
            # No request is known to cause an SGLang eviction (the scheduler frees ahead of a batch).
            self.client.block_event(wire.OP_REMOVED, info.agent, info.position, info.hash, 0)

    def _rank(self, candidates: list) -> list[int] | None:
        if not candidates:
            return None
        root = self.cache.root_node
        items = []
        for node in candidates:
            info = self.info(node)
            if info is None:
                # Stored before the tracker attached (or by a path it does not see): untagged.
                info = node._agentrt = NodeInfo(path_hash(node, root), 0, 0, 0, _position(node, root))
            # Microseconds of SGLang's monotonic access time: what its LRU orders by.
            last_access = int(node.last_access_time * 1e6)
            items.append((info.hash, info.session, last_access, info.agent, len(node.key), info.position))
        order = self.client.rank(items, len(items))
        if order is None:
            return None
        return [i for i in order if 0 <= i < len(candidates)]
