"""The plugin's patched RadixCache — SGLang's real class with its real token allocator, driven as
the scheduler drives it — against a real agentrt eviction service process running real policy
components."""

from __future__ import annotations

import logging

import pytest

import harness
from agentrt_sglang import patch
from agentrt_sglang.tracker import path_hash
from agentrt_engine import wire
from agentrt_engine.client import EvictionClient
from eviction_host import SilentHost

PLANNER = harness.prompt(1, 480)  # the protected agent's anchor
FLOOD = [harness.prompt(100 + i, 320) for i in range(10)]  # 3,200 tokens through a 1,200-token pool
POOL_TOKENS = 1200


def run_flood(engine) -> int:
    """The planner once, then the flood; returns how many planner tokens are still cached."""
    engine.run_request(PLANNER, agent="planner", session="s1")
    for p in FLOOD:
        engine.run_request(p, agent="worker", session="s2")
    return engine.cached_prefix_tokens(PLANNER)


def plain_engine(installed):
    return harness.Engine(POOL_TOKENS)  # no tracker attached: exactly SGLang's own behaviour


def attached_engine(installed, socket_path, deadline_s=0.05):
    engine = harness.Engine(POOL_TOKENS)
    tracker = installed.attach(engine.cache, EvictionClient(str(socket_path), deadline_s, "sglang-test"))
    return engine, tracker


def test_plain_sglang_evicts_the_planner(installed):
    engine = plain_engine(installed)
    assert run_flood(engine) == 0


def test_lru_policy_through_the_host_matches_sglang_exactly(installed, start_host):
    plain = plain_engine(installed)
    run_flood(plain)
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    assert run_flood(engine) == 0
    assert engine.cached_paths() == plain.cached_paths(), "LRU through the host = SGLang's own LRU"
    assert engine.evicted_tokens == plain.evicted_tokens
    assert tracker.stats["nodes_from_policy"] > 0
    assert tracker.stats["tokens_from_sglang"] == 0
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
    assert run_flood(engine) == len(PLANNER), "every token of the anchor is still cached"
    # Every allocation got its room (run_request asserts it), all of it from the policy's order.
    assert tracker.stats["tokens_from_sglang"] == 0 and tracker.stats["nodes_from_policy"] > 0
    tracker.client.close()
    host.stop()


@pytest.mark.parametrize("policy", ["cachesage", "guard"])
def test_a_policy_component_unchanged_ranks_sglangs_evictions(installed, start_host, policy):
    """The same component file the vLLM path loads, behind the same socket: it answers every
    ranking the radix cache asks for, and its order is the one SGLang evicts in."""
    host = start_host(policy)
    engine, tracker = attached_engine(installed, host.socket_path, deadline_s=1.0)
    # Two rounds: the planner comes back after each flood, so the policy sees it recur.
    for _ in range(2):
        run_flood(engine)
    client = tracker.client.stats
    assert client["rank_requests"] > 0
    assert client["rank_answered"] == client["rank_requests"], "no ranking fell back to SGLang's order"
    assert tracker.stats["fallback_evictions"] == 0
    assert tracker.stats["nodes_from_policy"] > 0 and tracker.stats["tokens_from_policy"] > 0
    assert engine.allocator.available_size() + engine.cache.evictable_size() + engine.cache.protected_size() == POOL_TOKENS, (
        "no token leaked: the allocator and the tree still account for the whole pool"
    )
    tracker.client.close()
    counts = host.stop()["eviction"]
    assert counts["malformed"] == 0


def test_stores_touches_and_removals_name_agents_and_sessions(installed, start_host):
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    sent = []
    report = tracker.client.block_event

    def record(op, agent, position, block_hash, parent_hash):
        sent.append((op, agent, position, block_hash))
        report(op, agent, position, block_hash, parent_hash)

    tracker.client.block_event = record
    run_flood(engine)
    engine.run_request(FLOOD[-1], agent="worker", session="s2")  # a hit: touches
    planner, worker = tracker.client.wire_agent("planner"), tracker.client.wire_agent("worker")
    stored = {agent for op, agent, _, _ in sent if op == wire.OP_STORED}
    assert stored == {planner, worker}
    removed = [agent for op, agent, _, _ in sent if op == wire.OP_REMOVED]
    assert planner in removed, "the flood evicted the planner's anchor, reported as the planner's"
    assert any(op == wire.OP_TOUCHED and agent == worker for op, agent, _, _ in sent)
    tracker.client.close()
    host.stop()


def test_nodes_another_session_reuses_are_reported_as_shared(installed, start_host):
    host = start_host("lru")
    engine, tracker = attached_engine(installed, host.socket_path)
    own = harness.prompt(7, 320)
    engine.run_request(PLANNER, agent="planner", session="s1")
    engine.run_request(own, agent="worker", session="s2")
    engine.run_request(own, agent="worker", session="s2")  # its own session again
    engine.run_request(PLANNER, agent="planner", session="s3")  # another session reuses it
    sessions = {tuple(n.key.raw_token_ids())[:4]: n._agentrt.session for n in engine.cache.root_node.children.values()}
    assert sessions[tuple(PLANNER[:4])] == 0, "the planner's node, reused by s3, belongs to no one session"
    assert sessions[tuple(own[:4])] == wire.fnv1a64("s2"), "s2's node, reused only by s2, stays s2's"
    tracker.client.close()
    host.stop()


def test_a_split_keeps_the_lower_halfs_identity(installed, tmp_path):
    engine, tracker = attached_engine(installed, tmp_path / "nobody.sock")
    long = harness.prompt(3, 200)
    engine.run_request(long, agent="a", session="s")
    (node,) = engine.cache.root_node.children.values()
    before = node._agentrt.hash
    engine.run_request(long[:120] + harness.prompt(4, 50), agent="b", session="t")  # splits at 120
    (upper,) = engine.cache.root_node.children.values()
    lower = next(c for c in upper.children.values() if c is node)
    assert len(upper.key) == 120 and len(lower.key) == 80
    assert lower._agentrt.hash == before, "the lower half still names the same content"
    assert upper._agentrt.hash == path_hash(upper, engine.cache.root_node) != before
    assert (upper._agentrt.agent, lower._agentrt.position, lower._agentrt.parent) == (
        tracker.client.wire_agent("a"), 120, upper._agentrt.hash)


def test_deadline_fallback_is_sglangs_own_order(installed, tmp_path):
    plain = plain_engine(installed)
    run_flood(plain)
    silent = SilentHost(tmp_path / "silent.sock")
    engine, tracker = attached_engine(installed, tmp_path / "silent.sock", deadline_s=0.002)
    assert run_flood(engine) == 0
    assert engine.cached_paths() == plain.cached_paths(), "the fallback is exactly SGLang's order"
    stats = tracker.client.stats
    assert stats["rank_requests"] > 1
    assert stats["deadline_missed"] == stats["rank_requests"]
    assert tracker.stats["nodes_from_policy"] == 0
    assert tracker.stats["fallback_evictions"] == stats["rank_requests"]
    # Each RANK tells the host how many answers the plugin gave up on since the previous one.
    assert [r[2] for r in silent.ranks][:3] == [0, 1, 1]
    tracker.client.close()


def test_an_unreachable_host_falls_back_without_retrying_every_eviction(installed, tmp_path):
    plain = plain_engine(installed)
    run_flood(plain)
    engine, tracker = attached_engine(installed, tmp_path / "nobody.sock")
    assert run_flood(engine) == 0
    assert engine.cached_paths() == plain.cached_paths()
    assert tracker.client.stats["rank_requests"] == 0
    assert tracker.client.stats["connect_failures"] <= 2  # retried at most once a second
    assert tracker.stats["fallback_evictions"] > 0


def test_request_tags_come_from_custom_params_and_sglangs_session_id(installed, tmp_path):
    client = EvictionClient(str(tmp_path / "nobody.sock"), 0.01, "test")
    tag = patch.request_tag(harness.request(agent=7, session=2**64 + 5), client)
    assert (tag.agent, tag.session, tag.warmup) == (7, 5, False)
    tag = patch.request_tag(harness.request(agent="coder", warmup=True, sglang_session="agentrt-00ff"), client)
    assert tag.agent == client.wire_agent("coder") and tag.agent & wire.DEFINED_AGENT_BIT
    assert (tag.session, tag.warmup) == (wire.fnv1a64("agentrt-00ff"), True)
    untagged = patch.request_tag(harness.request(), client)
    assert (untagged.agent, untagged.session) == (0, 0)


def test_the_agentrt_backend_builds_a_tracked_radix_cache(installed):
    from types import SimpleNamespace

    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from sglang.srt.mem_cache.registry import get_radix_cache_factory

    factory = get_radix_cache_factory(patch.BACKEND)
    assert factory is not None, "--radix-cache-backend agentrt is registered"
    params = CacheInitParams(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=None, page_size=1)
    cache = factory(SimpleNamespace(params=params))
    assert type(cache) is RadixCache and cache._agentrt is not None
    assert RadixCache.create_simulated()._agentrt is None, "other radix trees stay plain SGLang"


def test_unknown_sglang_version_is_refused(installed, monkeypatch, caplog):
    from sglang.srt.mem_cache.radix_cache import RadixCache

    before = dict(vars(RadixCache))
    monkeypatch.setitem(installed._state, "installed", False)
    monkeypatch.setattr(installed, "sglang_version", lambda: "0.9.0")
    with caplog.at_level(logging.ERROR, logger="sglang.agentrt_sglang"):
        assert installed.install("/nonexistent.sock") is False
    assert "NOT patching" in caplog.text and "0.9.0" in caplog.text
    assert dict(vars(RadixCache)) == before, "nothing was patched"
    assert installed.check_version("0.5.23") and not installed.check_version("0.5.22")


def test_the_plugin_does_nothing_without_a_socket(monkeypatch):
    from agentrt_sglang import plugin

    calls = []
    monkeypatch.delenv("AGENTRT_EVICTION_SOCKET", raising=False)
    monkeypatch.setattr(patch, "install", lambda *a, **k: calls.append(a))
    plugin.register()
    assert calls == []
