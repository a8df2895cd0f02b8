"""The plugin's patched BlockPool, driven through vLLM's real KV-cache manager, against a real
agentrt eviction service process."""

from __future__ import annotations

import logging

import pytest

import harness
from eviction_host import SilentHost
from agentrt_engine import wire
from agentrt_engine.client import EvictionClient

PLANNER = harness.prompt(1, 480)  # 15 full blocks: the protected agent's anchor
FLOOD = [harness.prompt(100 + i, 320) for i in range(10)]  # 100 blocks through a 39-block cache


def run_flood(engine) -> int:
    """The planner once, then the flood; returns how many planner tokens are still cached."""
    engine.run_request(PLANNER, agent="planner", session="s1")
    for p in FLOOD:
        engine.run_request(p, agent="worker", session="s2")
    return engine.cached_prefix_tokens(PLANNER)


def cached_hashes(engine) -> set:
    return set(engine.pool.cached_block_hash_to_block._cache)


def plain_engine(installed):
    engine = harness.Engine(40)
    engine.pool._agentrt = None  # detached: exactly vLLM's own behaviour
    return engine


def attached_engine(installed, socket_path, deadline_s=0.05, num_blocks=40):
    engine = harness.Engine(num_blocks, step_hook=installed.begin_step)
    engine.pool._agentrt = None
    tracker = installed.attach(engine.pool, EvictionClient(str(socket_path), deadline_s, "test"))
    return engine, tracker


def test_plain_vllm_evicts_the_planner(installed):
    engine = plain_engine(installed)
    assert run_flood(engine) == 0


def test_plugin_with_lru_policy_matches_vllm_exactly(installed, start_host):
    plain = plain_engine(installed)
    run_flood(plain)
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    assert run_flood(engine) == 0
    assert cached_hashes(engine) == cached_hashes(plain), "LRU through the host = vLLM's own order"
    assert tracker.stats["victims_from_policy"] > 0
    assert tracker.stats["victims_from_vllm"] == 0
    assert tracker.client.stats["rank_answered"] == tracker.client.stats["rank_requests"] > 0
    tracker.client.close()
    counts = host.stop()["eviction"]
    assert counts["rank_requests"] == tracker.client.stats["rank_requests"]
    assert counts["agents_defined"] == 2
    assert counts["block_events"] > 0
    assert counts["malformed"] == 0


def test_a_pinned_agent_survives_the_flood(installed, start_host):
    host = start_host("lru", "--pin", "planner")
    engine, tracker = attached_engine(installed, host.socket_path)
    assert run_flood(engine) == len(PLANNER)  # every full block of the anchor is still cached
    # The same number of blocks was evicted as without the plugin: only which ones changed.
    assert tracker.stats["evictions_needed"] == tracker.stats["victims_from_policy"]
    tracker.client.close()
    host.stop()


def test_one_round_trip_per_step(installed, start_host):
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    run_flood(engine)
    steps_that_evicted = tracker.client.stats["rank_requests"]
    assert 0 < steps_that_evicted <= len(FLOOD) + 1
    # Several allocations in one step share one ranking.
    before = tracker.client.stats["rank_requests"]
    for i in range(3):
        engine.step_hook = None  # no new step between these requests
        engine.run_request(harness.prompt(500 + i, 320), agent="worker")
    assert tracker.client.stats["rank_requests"] - before <= 1
    tracker.client.close()
    host.stop()


def test_removals_name_the_request_that_evicted_them(installed, start_host):
    """A removal's third word carries the evicting request's agent: the host counts the evictions
    each tenant causes (and zeroes the word before a policy sees it)."""
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    sent = []
    report = tracker.client.block_event

    def record(op, agent, position, block_hash, parent_hash):
        sent.append((op, agent, parent_hash))
        report(op, agent, position, block_hash, parent_hash)

    tracker.client.block_event = record
    run_flood(engine)
    planner, worker = tracker.client.wire_agent("planner"), tracker.client.wire_agent("worker")
    removals = [(agent, evictor) for op, agent, evictor in sent if op == wire.OP_REMOVED]
    assert any(agent == planner for agent, _ in removals), "the flood evicted the planner's anchor"
    assert removals and all(evictor == worker for _, evictor in removals), removals
    tracker.client.close()
    host.stop()


def test_blocks_another_session_reuses_are_reported_as_shared(installed, start_host):
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    own = harness.prompt(7, 320)
    engine.run_request(PLANNER, agent="planner", session="s1")
    engine.run_request(own, agent="worker", session="s2")
    engine.run_request(own, agent="worker", session="s2")  # its own session again
    engine.run_request(PLANNER, agent="planner", session="s3")  # another session reuses it
    owners = [info.session for info in tracker.info.values()]
    assert owners.count(0) >= 10, "the planner's blocks, reused by s3, belong to no one session"
    # vLLM recomputes a prompt's last block rather than hit it, so s3 never touched that one.
    assert owners.count(wire.fnv1a64("s1")) == 1
    assert owners.count(wire.fnv1a64("s2")) >= 9, "s2's blocks, reused only by s2, stay s2's"
    tracker.client.close()
    host.stop()


def test_deadline_fallback_when_the_host_does_not_answer(installed, tmp_path, caplog):
    plain = plain_engine(installed)
    run_flood(plain)
    silent = SilentHost(tmp_path / "silent.sock")
    engine, tracker = attached_engine(installed, tmp_path / "silent.sock", deadline_s=0.002)
    assert run_flood(engine) == 0
    assert cached_hashes(engine) == cached_hashes(plain), "fallback is exactly vLLM's order"
    stats = tracker.client.stats
    assert stats["rank_requests"] > 1
    assert stats["deadline_missed"] == stats["rank_requests"]
    assert tracker.stats["victims_from_policy"] == 0
    assert tracker.stats["fallback_steps"] == stats["rank_requests"]
    # Each RANK tells the host how many answers the plugin gave up on since the previous one.
    assert [r[2] for r in silent.ranks][:3] == [0, 1, 1]
    tracker.client.close()


def test_an_unreachable_host_falls_back_without_retrying_every_step(installed, tmp_path):
    engine, tracker = attached_engine(installed, tmp_path / "nobody.sock")
    assert run_flood(engine) == 0
    assert tracker.client.stats["rank_requests"] == 0
    assert tracker.client.stats["connect_failures"] <= 2  # retried at most once a second
    assert tracker.stats["fallback_steps"] > 0


def test_unknown_vllm_version_is_refused(installed, monkeypatch, caplog):
    from vllm.v1.core.block_pool import BlockPool

    before = dict(vars(BlockPool))
    monkeypatch.setitem(installed._state, "installed", False)
    monkeypatch.setattr(installed, "vllm_version", lambda: "0.99.0")
    with caplog.at_level(logging.ERROR, logger="vllm.agentrt_vllm"):
        assert installed.install("/nonexistent.sock") is False
    assert "NOT patching" in caplog.text and "0.99.0" in caplog.text
    assert dict(vars(BlockPool)) == before, "nothing was patched"
    assert installed.check_version("0.32.0+cpu") and installed.check_version("0.33.0")
    assert not installed.check_version("0.31.9")


def test_a_block_hit_and_freed_again_within_a_step_keeps_its_recency(installed, start_host):
    """The plugin ranks once per scheduler step. A block that a request hits and frees again later
    in that step is the most recently used one by then: stock vLLM evicts another, and so must the
    plugin under `lru` (the ranking taken earlier in the step names it among the oldest)."""
    prompts = [harness.prompt(900 + i, harness.BLOCK_SIZE + 1) for i in range(8)]  # one full block each

    def drive(engine, begin_step) -> set:
        engine.step_hook = None
        for p in prompts[:5]:  # five cached blocks, oldest first, one step each
            begin_step()
            engine.run_request(p, agent="worker")
        begin_step()  # one step from here on
        engine.run_request(prompts[5], agent="worker")  # evicts prompts[0]'s block: the ranking is taken
        assert engine.run_request(prompts[1], agent="worker") == harness.BLOCK_SIZE  # a hit, freed again
        engine.run_request(prompts[6], agent="worker")  # evicts again: the oldest is prompts[2]'s
        return cached_hashes(engine)

    stock = drive(harness.Engine(7), lambda: None)
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path, deadline_s=1.0, num_blocks=7)
    assert drive(engine, installed.begin_step) == stock, "the plugin evicted another block than vLLM"
    assert engine.cached_prefix_tokens(prompts[1]) == harness.BLOCK_SIZE, "the block hit last was evicted"
    assert tracker.stats["victims_from_policy"] == 2
    tracker.client.close()
    host.stop()


def test_vllms_other_hashing_paths_keep_the_plugins_view_of_the_pool(installed, tmp_path):
    """``cache_partial_block`` (a prompt's tail, Mamba checkpoints), ``move_block_hashes``
    (copy-on-write) and ``unpin_blocks`` (HiSparse) give a block a hash, move it or release a block
    that stays readable: the plugin reports and tags what it must, and never offers an unpinned
    block to the policy."""
    from engine_checks import check_tracker
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher
    from vllm.utils.hashing import sha256
    from vllm.v1.request import Request
    from vllm.sampling_params import SamplingParams

    pool = BlockPool(num_gpu_blocks=8, enable_caching=True, hash_block_size=16)
    pool._agentrt = None
    tracker = installed.attach(pool, EvictionClient(str(tmp_path / "nobody.sock"), 0.01, "test"))
    sent = []
    tracker.client.block_event = lambda op, agent, position, h, parent: sent.append((op, agent, position, h, parent))
    harness.Engine(2)  # vLLM's none-hash, which the request's hasher chains from
    request = Request(
        request_id="r", prompt_token_ids=harness.prompt(3, 48),
        sampling_params=SamplingParams(max_tokens=1, extra_args={"agentrt_agent": "coder"}),
        pooling_params=None, block_hasher=get_request_block_hasher(16, sha256),
    )
    coder = tracker.client.wire_agent("coder")
    first, tail = pool.get_new_blocks(2)

    pool.cache_partial_block(request, tail, num_tokens=48, kv_cache_group_id=0, block_size=32)
    h48 = int.from_bytes(request.block_hashes[2][-8:], "big")
    h32 = int.from_bytes(request.block_hashes[1][-8:], "big")
    assert sent == [(wire.OP_STORED, coder, 32, h48, h32)], "the tail's partial entry, the request's, after its first block"
    check_tracker(tracker, pool, "after cache_partial_block")

    copy = pool.get_new_blocks(1)[0]
    pool.move_block_hashes(tail, copy)
    assert tracker.info[copy.block_id].agent == coder and tail.block_id not in tracker.info
    check_tracker(tracker, pool, "after move_block_hashes")

    sent.clear()
    pool.cache_partial_block(request, copy, num_tokens=32, kv_cache_group_id=0, block_size=32, replace_existing_hashes=True)
    assert [(op, h) for op, _, _, h, _ in sent] == [(wire.OP_REMOVED, h48), (wire.OP_STORED, h32)]
    check_tracker(tracker, pool, "after a replacing cache_partial_block")

    pool.unpin_blocks([copy], lambda block: None)
    assert copy.ref_cnt == 0 and copy.block_hash is not None
    assert copy.block_id not in [block_id for block_id, _, _ in tracker._candidates(1)], "an unpinned block was offered"
    assert tracker.stats["partial_blocks_cached"] == 2 and tracker.stats["block_hashes_moved"] == 1
    assert tracker.stats["blocks_unpinned"] == 1
