"""Agent-aware bookkeeping for one vLLM ``BlockPool`` and the eviction decision.

vLLM's free queue is one LRU list of every free block; evicting means popping its head. The
tracker keeps, next to it, each agent's *cached* free blocks in LRU order (``dict`` insertion
order), so gathering eviction candidates touches only the oldest few blocks of each agent and
never walks the whole free list. When an allocation is about to evict cached blocks, the tracker
asks the host to rank candidates (once per scheduler step), then puts each chosen victim into the
head slot that a cached block held (``remove`` + ``prepend_n``) so that vLLM's own pop takes them.
The number of blocks evicted is exactly what vLLM would have evicted and the uncached blocks come
out in vLLM's order; only which cached blocks go changes.

A ranking is a snapshot: a ranked block that is hit, or freed again, later in the same step is
more recent than the ranking says, so it loses its rank for the rest of the step (``stale``).
"""

from __future__ import annotations

import logging

from agentrt_engine import wire
from agentrt_engine.client import EvictionClient
from agentrt_engine.request_tag import RequestTag

log = logging.getLogger("vllm.agentrt_vllm")


def key_hash64(key: bytes) -> int:
    """The u64 that vLLM's KV events publish for a block (``maybe_convert_block_hash``: the low 64
    bits, big-endian, of the block hash) from the block's ``BlockHashWithGroupId`` key, which is
    the hash followed by a 4-byte group id."""
    return int.from_bytes(key[-12:-4], "big")


def prefix_hash64(block_hashes, n: int) -> int:
    """The u64 of the chain hash over a request's first ``n`` hash blocks (0 when ``n`` is 0 or
    past what the request has hashed): the parent of the block that starts there."""
    if n <= 0 or n > len(block_hashes):
        return 0
    return int.from_bytes(block_hashes[n - 1][-8:], "big")


class BlockInfo:
    __slots__ = ("hash", "parent", "agent", "session", "position", "tokens")

    def __init__(self, h: int, parent: int, agent: int, session: int, position: int, tokens: int) -> None:
        self.hash = h
        self.parent = parent
        self.agent = agent
        self.session = session
        self.position = position
        self.tokens = tokens


class PoolTracker:
    def __init__(self, pool, client: EvictionClient, max_candidates: int = 256) -> None:
        self.pool = pool
        self.client = client
        self.max_candidates = max_candidates
        # block_id -> BlockInfo, for blocks whose hash the plugin saw set
        self.info: dict[int, BlockInfo] = {}
        # agent wire id -> {block_id: last_access}, LRU first; only cached blocks in the free queue
        self.free_by_agent: dict[int, dict[int, int]] = {}
        self.clock = 0
        # per-step ranking: block ids to evict first, consumed front to back
        self.step = 0
        self.ranked_step = -1
        self.ranking: list[tuple[int, int]] = []  # (block_id, hash) evict-first
        self.ranking_pos = 0
        # block ids used (hit, allocated, freed again) since the ranking was taken: not victims
        self.stale: set[int] = set()
        self.stats = {
            "evictions_needed": 0,
            "victims_from_policy": 0,
            "victims_from_vllm": 0,
            "fallback_steps": 0,
            "ranking_exhausted": 0,
            "stale_ranks_skipped": 0,
            # vLLM's other paths that give a block a hash or take it away
            "partial_blocks_cached": 0,
            "block_hashes_moved": 0,
            "blocks_unpinned": 0,
        }

    # -- steps -----------------------------------------------------------------------------------
    def begin_step(self) -> None:
        """A scheduler step starts: the next eviction fetches a fresh ranking. Buffered block
        events go out now, off any allocation's path."""
        self.step += 1
        self.ranking = []
        self.ranking_pos = 0
        self.stale.clear()
        self.client.flush()

    # -- bookkeeping hooks -------------------------------------------------------------------------
    def on_cached(self, tag: RequestTag, blocks, start: int, end: int, block_size: int) -> None:
        """``cache_full_blocks`` just cached ``blocks[start:end]`` (``blocks``: the request's list)."""
        parent = 0
        if start > 0:
            prev = blocks[start - 1]
            if prev.block_hash is not None and not prev.is_null:
                parent = key_hash64(prev.block_hash)
        for index in range(start, min(end, len(blocks))):
            blk = blocks[index]
            bh = blk.block_hash
            if bh is None or blk.is_null:
                parent = 0
                continue
            h = key_hash64(bh)
            known = self.info.get(blk.block_id)
            if known is None or known.hash != h:
                position = index * block_size
                self.info[blk.block_id] = BlockInfo(h, parent, tag.agent, tag.session, position, block_size)
                self.client.block_event(wire.OP_STORED, tag.agent, position, h, parent)
            parent = h

    def on_touch(self, tag: RequestTag | None, blocks) -> None:
        """``touch`` is about to run: prefix hits leave the free queue."""
        report = tag is not None and not tag.warmup
        agent = tag.agent if tag is not None else 0
        for blk in blocks:
            if blk.is_null:
                continue
            if self.ranking:
                self.stale.add(blk.block_id)
            info = self.info.get(blk.block_id)
            if blk.ref_cnt == 0 and info is not None:
                lru = self.free_by_agent.get(info.agent)
                if lru is not None:
                    lru.pop(blk.block_id, None)
            if info is not None and tag is not None and info.session != tag.session:
                # Another session reuses it: shared content, no one session's (item.session = 0,
                # as wit/policy.wit defines it).
                info.session = 0
            if report and info is not None:
                self.client.block_event(wire.OP_TOUCHED, agent, info.position, info.hash, info.parent)

    def on_freed(self, blocks) -> None:
        """``free_blocks`` ran: cached blocks that reached ref_cnt 0 joined the queue tail."""
        for blk in blocks:
            if blk.ref_cnt != 0 or blk.block_hash is None or blk.is_null:
                continue
            if self.ranking:
                self.stale.add(blk.block_id)  # used since the ranking: the newest now
            info = self.info.get(blk.block_id)
            agent = info.agent if info is not None else 0
            self.clock += 1
            lru = self.free_by_agent.get(agent)
            if lru is None:
                lru = self.free_by_agent[agent] = {}
            lru.pop(blk.block_id, None)
            lru[blk.block_id] = self.clock

    def on_evicted(self, blk, cause: RequestTag | None) -> None:
        """``_maybe_evict_cached_block`` dropped ``blk``'s hash to make room for ``cause``'s
        allocation (``None`` when no request is being scheduled). The removal's third word carries
        the evicting request's agent, so the host can count evictions each tenant causes."""
        info = self.info.pop(blk.block_id, None)
        agent = info.agent if info is not None else 0
        lru = self.free_by_agent.get(agent)
        if lru is not None:
            lru.pop(blk.block_id, None)
        if info is not None:
            evictor = cause.agent if cause is not None else 0
            self.client.block_event(wire.OP_REMOVED, info.agent, info.position, info.hash, evictor)

    def on_reset(self) -> None:
        self.info.clear()
        self.free_by_agent.clear()
        self.ranking = []
        self.stale.clear()
        self.client.block_event(wire.OP_ALL_CLEARED, 0, 0, 0, 0)

    def on_rehashed(self, tag: RequestTag | None, blk, position: int, tokens: int, parent: int) -> None:
        """``cache_partial_block`` registered a partial prefix entry on ``blk`` (a block of
        ``tag``'s request, ``tokens`` tokens from ``position``), which may have replaced the hashes
        the block had: the old content, if any, is reported removed and the block's new primary
        hash stored, tagged with the request."""
        if blk.is_null:
            return
        self.stats["partial_blocks_cached"] += 1
        known = self.info.get(blk.block_id)
        h = key_hash64(blk.block_hash) if blk.block_hash is not None else None
        if known is not None and known.hash == h:
            return
        if known is not None:
            self.on_evicted(blk, None)  # overwritten by its own request: not evicted for room
        if h is None:
            return
        agent = tag.agent if tag is not None else 0
        session = tag.session if tag is not None else 0
        self.info[blk.block_id] = BlockInfo(h, parent, agent, session, position, tokens)
        self.client.block_event(wire.OP_STORED, agent, position, h, parent)
        if blk.ref_cnt == 0:  # cached while free: an eviction candidate from now on
            self.on_freed([blk])

    def on_hashes_moved(self, src, dst) -> None:
        """``move_block_hashes``: ``src``'s cache entries now name ``dst`` (a private copy; the
        content and its hash are unchanged, so nothing is reported to the host)."""
        self.stats["block_hashes_moved"] += 1
        info = self.info.pop(src.block_id, None)
        lru = self.free_by_agent.get(info.agent if info is not None else 0)
        if lru is not None:
            lru.pop(src.block_id, None)
        if info is not None and dst.block_hash is not None:
            self.info[dst.block_id] = info
            if dst.ref_cnt == 0:
                self.on_freed([dst])

    def on_unpinned(self, blocks) -> None:
        """``unpin_blocks``: released blocks that stay readable until vLLM reuses them. vLLM makes
        them last-resort candidates; the plugin leaves them to vLLM (never ranked, never moved)."""
        for blk in blocks:
            self.stats["blocks_unpinned"] += 1
            self.stale.add(blk.block_id)
            info = self.info.get(blk.block_id)
            lru = self.free_by_agent.get(info.agent if info is not None else 0)
            if lru is not None:
                lru.pop(blk.block_id, None)

    # -- eviction ----------------------------------------------------------------------------------
    def before_allocate(self, num_blocks: int) -> None:
        """Arrange the free-queue head so that popping ``num_blocks`` evicts the policy's choice:
        each victim takes the head slot of a cached block vLLM would have evicted, so the uncached
        blocks keep their places (vLLM hands them out last-in-first-out, for locality)."""
        queue = self.pool.free_block_queue
        if num_blocks <= 0 or num_blocks > queue.num_free_blocks:
            return
        head = []
        tail = queue.fake_free_list_tail
        blk = queue.fake_free_list_head.next_free_block
        while len(head) < num_blocks and blk is not None and blk is not tail:
            head.append(blk)
            blk = blk.next_free_block
        slots = [i for i, b in enumerate(head) if b.block_hash is not None]
        need = len(slots)
        if need == 0:
            return  # vLLM's pop evicts nothing
        self.stats["evictions_needed"] += need
        victims = self._victims(need)
        if not victims:
            self.stats["victims_from_vllm"] += need
            return
        self.stats["victims_from_policy"] += len(victims)
        if len(victims) < need:
            # The ranking ran short: vLLM's own cached head blocks make up the rest, in its order.
            chosen_ids = {b.block_id for b in victims}
            extra = [head[i] for i in slots if head[i].block_id not in chosen_ids][: need - len(victims)]
            self.stats["victims_from_vllm"] += len(extra)
            victims = victims + extra
        front = list(head)
        for i, victim in zip(slots, victims):
            front[i] = victim
        if all(a is b for a, b in zip(front, head)):
            return  # the policy chose vLLM's own victims, in vLLM's order
        for b in front:
            queue.remove(b)
        queue.prepend_n(front)

    def _victims(self, need: int) -> list:
        """Up to ``need`` free cached blocks to evict, from this step's ranking."""
        if self.ranked_step != self.step:
            self.ranked_step = self.step
            self.stale.clear()
            self.ranking = self._fetch_ranking(need)
            self.ranking_pos = 0
            if not self.ranking:
                self.stats["fallback_steps"] += 1
        blocks = self.pool.blocks
        out = []
        while len(out) < need and self.ranking_pos < len(self.ranking):
            block_id, h = self.ranking[self.ranking_pos]
            self.ranking_pos += 1
            if block_id in self.stale:
                self.stats["stale_ranks_skipped"] += 1
                continue
            blk = blocks[block_id]
            info = self.info.get(block_id)
            # Still free, still cached with the same contents?
            if blk.ref_cnt == 0 and blk.block_hash is not None and info is not None and info.hash == h:
                out.append(blk)
        if len(out) < need and self.ranking:
            self.stats["ranking_exhausted"] += 1
        return out

    def _candidates(self, need: int) -> list[tuple[int, BlockInfo | None, int]]:
        """The oldest free cached blocks of every agent: (block_id, info, last_access)."""
        agents = [a for a, lru in self.free_by_agent.items() if lru]
        if not agents:
            return []
        per_agent = max(need, self.max_candidates // len(agents))
        blocks = self.pool.blocks
        # Blocks released by unpin_blocks: vLLM's last resort, left to vLLM.
        readers = getattr(self.pool, "_reuse_watchers", None) or ()
        out = []
        for agent in agents:
            lru = self.free_by_agent[agent]
            stale = []
            taken = 0
            for block_id, last_access in lru.items():
                blk = blocks[block_id]
                if blk.ref_cnt != 0 or blk.block_hash is None or block_id in readers:
                    stale.append(block_id)
                    continue
                out.append((block_id, self.info.get(block_id), last_access))
                taken += 1
                if taken >= per_agent:
                    break
            for block_id in stale:
                del lru[block_id]
        return out

    def _fetch_ranking(self, need: int) -> list[tuple[int, int]]:
        candidates = self._candidates(need)
        if not candidates:
            return []
        items = []
        for block_id, info, last_access in candidates:
            if info is None:
                items.append((key_hash64(self.pool.blocks[block_id].block_hash), 0, last_access, 0, 0, 0))
            else:
                items.append((info.hash, info.session, last_access, info.agent, info.tokens, info.position))
        order = self.client.rank(items, len(items))
        if order is None:
            return []
        ranking = []
        for i in order:
            if 0 <= i < len(candidates):
                ranking.append((candidates[i][0], items[i][0]))
        return ranking

