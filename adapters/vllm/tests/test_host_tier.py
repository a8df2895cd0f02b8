"""The host-memory tier: vLLM's real ``CPUOffloadingManager``, built through the plugin's
``AgentrtOffloadingSpec`` (and a stock ``CPUOffloadingSpec`` to compare with), driven the way the
offloading connector's scheduler side drives it (``prepare_store`` → ``complete_store`` →
``on_request_finished``; ``prepare_load`` → ``complete_load`` for a hit), against a real agentrt
eviction service process with real policy components. No GPU: the scheduler side is plain Python
(the worker side, which copies the bytes, needs CUDA or XPU: see the README).

Policies: ``probe`` (a test fixture of the 0.3 line) scores ``key + bias``, so its host-tier
ranking (lowest block hash first) differs from LRU's and ``bias`` < 0 makes it decline the
blocks whose hash is below ``-bias``; ``callrate-c`` is a component of the 0.2 line (C SDK).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from agentrt_engine import wire
from agentrt_engine.client import EvictionClient
from agentrt_vllm.offload import MIN_WINDOW, AgentrtOffloadingManager, AgentrtOffloadingSpec
from agentrt_engine.request_tag import RequestTag
from agentrt_vllm.tracker import key_hash64
from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

BLOCK_TOKENS = 16
KV_BYTES_PER_BLOCK = 1 << 16  # a multiple of the spec's alignment: chunks = bytes / this
POOL = 300  # host chunks: more than MIN_WINDOW, so a window is not the whole pool


def config(spec_name: str, chunks: int = POOL, **extra) -> OffloadingConfig:
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=BLOCK_TOKENS, layer_names=("layer.0",), group_id=0),),
        worker_kv_bytes_per_block=KV_BYTES_PER_BLOCK,
        enable_kv_cache_events=False,
        extra_config={
            "spec_name": spec_name,
            "spec_module_path": "agentrt_vllm.offload",
            "cpu_bytes_to_use": chunks * KV_BYTES_PER_BLOCK,
            **extra,
        },
        engine_id="test",
        model=OffloadingModelConfig(name="test", dtype="float16"),
        cache=OffloadingCacheConfig(tokens_per_hash=BLOCK_TOKENS, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0,
            world_size=1,
            tp_size=1,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=True,
        ),
    )


def stock_manager():
    """vLLM's own host pool, as ``--kv-offloading-backend native`` builds it (LRU)."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    spec = OffloadingSpecFactory.create_spec(config("CPUOffloadingSpec"))
    assert type(spec) is CPUOffloadingSpec
    return spec.get_manager()


def agentrt_manager(client: EvictionClient | None, tags=None) -> AgentrtOffloadingManager:
    """The plugin's spec, loaded the way the connector loads it (``spec_name`` +
    ``spec_module_path``), its manager on ``client``."""
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    spec = OffloadingSpecFactory.create_spec(config("AgentrtOffloadingSpec"))
    assert isinstance(spec, AgentrtOffloadingSpec)
    manager = spec.get_manager()
    assert isinstance(manager, AgentrtOffloadingManager)
    assert manager._num_chunks == POOL
    # The spec took the engine's connection (none in a test process): give it the test's.
    manager.client = client
    manager._policy.chooser = manager._choose_victims if client is not None else None
    if tags is not None:
        manager.tags = tags
    return manager


def block_hash(seed: int) -> bytes:
    """A 32-byte block hash, as vLLM's sha256 block hasher makes them."""
    return hashlib.sha256(struct.pack("<Q", seed)).digest()


def keys(first: int, n: int) -> list:
    return [make_offload_key(block_hash(i), 0) for i in range(first, first + n)]


class Driver:
    """Calls a manager the way the connector's scheduler side does."""

    def __init__(self, manager) -> None:
        self.manager = manager
        self.next_req = 0

    def request(self, req_id: str | None = None) -> ReqContext:
        self.next_req += 1
        return ReqContext(req_id=req_id or f"req-{self.next_req}")

    def store(self, ks: list, req_id: str | None = None) -> list:
        """One request's computed blocks offered for storing; returns what was stored."""
        ctx = self.request(req_id)
        self.manager.on_new_request(ctx)
        for i, k in enumerate(ks):
            ctx.set_offload_key_position(k, (i + 1) * BLOCK_TOKENS)
        out = self.manager.prepare_store(ks, ctx)
        assert out is not None, "the pool could not make room"
        self.manager.complete_store(out.keys_to_store, ctx)
        self.manager.on_request_finished(ctx)
        return list(out.keys_to_store)

    def hit(self, ks: list) -> None:
        """A later request's prefix continues in host memory: load, complete, finish."""
        ctx = self.request()
        self.manager.on_new_request(ctx)
        assert all(self.manager.lookup(k, ctx) == LookupResult.HIT for k in ks)
        self.manager.prepare_load(ks, ctx)
        self.manager.touch(ks, ctx)
        self.manager.complete_load(ks, ctx)
        self.manager.on_request_finished(ctx)

    def resident(self, universe: list) -> set:
        ctx = ReqContext(req_id="probe-lookup")
        return {k for k in universe if self.manager.lookup(k, ctx) == LookupResult.HIT}


def workload(driver: Driver) -> list:
    """Fill the pool, hit some old blocks, then overflow it: evictions of a few chunks at a
    time. Returns every key offered."""
    universe = []
    for r in range(POOL // 20):  # 15 requests of 20 blocks: the pool is full
        ks = keys(1000 * r, 20)
        universe += ks
        driver.store(ks)
    driver.hit(universe[:40])  # the oldest two requests become the most recent
    for r in range(POOL // 20, POOL // 20 + 6):  # 6 more: 120 chunks to evict, 20 at a time
        ks = keys(1000 * r, 20)
        universe += ks
        driver.store(ks)
    return universe


def run_beside_stock(client: EvictionClient | None):
    """The workload through agentrt's manager on ``client`` and through vLLM's own LRU manager:
    ``(manager, what agentrt's keeps, what vLLM's keeps)``."""
    manager = agentrt_manager(client)
    driver = Driver(manager)
    universe = workload(driver)
    stock = Driver(stock_manager())
    workload(stock)
    return manager, driver.resident(universe), stock.resident(universe)


def client_for(host, deadline_s: float = 2.0) -> EvictionClient:
    # A generous deadline: these tests check decisions, not latency (a loaded 2-core machine
    # can deschedule the host for milliseconds).
    client = EvictionClient(str(host.socket_path), deadline_s, "test")
    assert client.connected()
    return client


def test_stock_lru_baseline_is_what_the_comparisons_assume():
    driver = Driver(stock_manager())
    universe = workload(driver)
    resident = driver.resident(universe)
    assert len(resident) == POOL
    assert set(universe[:40]) <= resident, "the hit blocks survive LRU"
    assert not set(universe[40:160]) & resident, "LRU dropped the oldest unhit requests"


def test_the_policys_host_tier_ranking_decides_the_victims(start_host):
    host = start_host("probe")
    client = client_for(host)
    manager = agentrt_manager(client)
    driver = Driver(manager)
    universe = workload(driver)
    stock = Driver(stock_manager())
    workload(stock)
    resident = driver.resident(universe)
    assert len(resident) == POOL, "the same number of chunks freed as vLLM's"
    assert resident != stock.resident(universe), "the policy, not LRU, chose"
    # Each eviction dropped the lowest-hashed chunks of the window it offered, so over the run
    # the dropped chunks hash lower, on average, than what stayed of the first 300.
    dropped = [k for k in universe if k not in resident]
    assert len(dropped) == len(universe) - POOL
    assert np.mean([key_hash64(k) for k in dropped]) < np.mean([key_hash64(k) for k in resident if k in universe[:300]])
    stats = manager.agentrt_stats
    assert stats["host_evictions"] == len(dropped)
    assert stats["host_victims_from_policy"] == len(dropped)
    assert stats["host_eviction_fallbacks"] == 0
    assert stats["host_declined"] == 0, "probe with bias 0 scores every block >= 0"
    client.close()
    counts = host.stop()["eviction"]
    assert counts["host_tier_ranks"] == client.stats["rank_requests"] > 0
    assert counts["malformed"] == 0


def test_the_eviction_window_is_lrus_head_and_not_the_pool(start_host):
    """The items of one eviction: LRU's first max(256, 4n) unprotected chunks, oldest first."""
    host = start_host("probe")
    client = client_for(host)
    manager = agentrt_manager(client)
    driver = Driver(manager)
    for r in range(POOL // 20):
        driver.store(keys(1000 * r, 20))
    seen = []
    ask = client.rank_host

    def record(items, want):
        seen.append((list(items), want))
        return ask(items, want)

    client.rank_host = record
    driver.store(keys(99_000, 4))  # 4 chunks to free
    evictions = [(items, want) for items, want in seen if want > 0]
    assert len(evictions) == 1
    items, want = evictions[0]
    assert want == 4
    assert len(items) == MIN_WINDOW < POOL
    # vLLM's LRU re-ranks a finished request's blocks tail first, so a prompt's last block is
    # the oldest of its request (the prefix outlives its tail).
    lru_head = [key_hash64(k) for r in range(POOL // 20) for k in reversed(keys(1000 * r, 20))][:MIN_WINDOW]
    assert [it[0] for it in items] == lru_head
    ranks = [it[2] for it in items]
    assert ranks == sorted(ranks), "last_access: oldest first"
    assert all(it[4] == BLOCK_TOKENS for it in items)
    assert items[0][5] == 19 * BLOCK_TOKENS, "position: the block's first token in its prompt"
    client.close()
    host.stop()


def test_a_negative_score_declines_a_store(start_host):
    # probe scores key + bias: blocks hashing below 2^63 score below zero.
    host = start_host("probe", "--init", f"bias={-float(1 << 63)}")
    client = client_for(host)
    manager = agentrt_manager(client)
    driver = Driver(manager)
    offered = keys(0, 40)
    stored = driver.store(offered)
    low = [k for k in offered if key_hash64(k) < (1 << 63) - (1 << 40)]
    high = [k for k in offered if key_hash64(k) > (1 << 63) + (1 << 40)]
    assert low and high
    assert not set(low) & set(stored), "blocks scored below zero are not stored"
    assert set(high) <= set(stored)
    assert driver.resident(offered) == set(stored)
    assert manager.agentrt_stats["host_declined"] == len(offered) - len(stored)
    # prepare_store's contract: keys_to_store is a subset of the offer; a declined block is
    # offered again later and asked about again, never half-stored.
    ctx = driver.request()
    out = manager.prepare_store(offered, ctx)
    assert out.keys_to_store == [] and out.evicted_keys == []
    client.close()
    stopped = host.stop()
    assert "eviction" in stopped, (host.proc.returncode, host.stderr[-3000:])
    counts = stopped["eviction"]
    assert counts["host_tier_declined"] == 2 * (len(offered) - len(stored))


def test_agent_session_and_position_reach_the_policy(start_host):
    host = start_host("probe")
    client = client_for(host)
    planner = client.wire_agent("planner")
    tags = {"req-planner": RequestTag(planner, wire.fnv1a64("s1"), False)}
    manager = agentrt_manager(client, tags=tags.get)
    driver = Driver(manager)
    sent = []
    ask = client.rank_host

    def record(items, want):
        sent.append(list(items))
        return ask(items, want)

    client.rank_host = record
    ks = keys(7, 3)
    driver.store(ks, req_id="req-planner")
    (admission,) = sent
    assert [(it[0], it[1], it[3], it[5]) for it in admission] == [
        (key_hash64(k), wire.fnv1a64("s1"), planner, i * BLOCK_TOKENS) for i, k in enumerate(ks)
    ]
    assert all(manager.blocks[k].session == wire.fnv1a64("s1") for k in ks)
    # Another session's request loads them back: shared content, no one session's.
    tags["req-other"] = RequestTag(planner, wire.fnv1a64("s2"), False)
    ctx = ReqContext(req_id="req-other")
    manager.prepare_load(ks[:2], ctx)
    manager.complete_load(ks[:2], ctx)
    assert [manager.blocks[k].session for k in ks] == [0, 0, wire.fnv1a64("s1")]
    client.close()
    counts = host.stop()["eviction"]
    assert counts["agents_defined"] == 1
    assert counts["malformed"] == 0


def test_host_down_is_exactly_vllms_lru(tmp_path):
    client = EvictionClient(str(tmp_path / "nobody.sock"), 0.002, "test")
    manager, resident, stock_resident = run_beside_stock(client)
    assert resident == stock_resident
    assert manager.agentrt_stats["host_victims_from_policy"] == 0
    assert manager.agentrt_stats["host_eviction_fallbacks"] > 0


def test_past_the_deadline_is_exactly_vllms_lru(start_host):
    """A host that answers too late (the probe burns CPU in every score) is not waited for."""
    host = start_host("probe", "--init", "burn=200000000")
    client = client_for(host, deadline_s=0.0005)
    manager, resident, stock_resident = run_beside_stock(client)
    assert resident == stock_resident
    # Every score burns past the host's own CPU deadline (20 ms) too, so once its breaker opens
    # the host may answer fast — in LRU order, declining nothing: the same pool either way.
    assert client.stats["deadline_missed"] > 0
    assert manager.agentrt_stats["host_admission_fallbacks"] > 0
    client.close()
    host.stop()


def test_a_0_2_line_component_leaves_the_host_tier_to_lru(start_host):
    host = start_host("callrate-c")
    client = client_for(host)
    manager, resident, stock_resident = run_beside_stock(client)
    assert resident == stock_resident
    stats = manager.agentrt_stats
    assert stats["host_victims_from_policy"] == stats["host_evictions"] > 0, "answered, in LRU order"
    assert stats["host_declined"] == 0
    client.close()
    host.stop()


def test_an_lru_component_through_the_host_is_exactly_vllms_lru(start_host):
    host = start_host("lru")
    client = client_for(host)
    manager, resident, stock_resident = run_beside_stock(client)
    assert resident == stock_resident
    assert manager.agentrt_stats["host_victims_from_policy"] > 0
    client.close()
    host.stop()


def test_eviction_policy_other_than_lru_is_refused_with_a_clear_error():
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    spec = OffloadingSpecFactory.create_spec(config("AgentrtOffloadingSpec", eviction_policy="arc"))
    with pytest.raises(ValueError, match="eviction_policy='arc' is not supported"):
        spec.get_manager()


def test_ranked_answers_decode_in_both_layouts():
    """A GPU answer keeps protocol 1's bytes; a host-tier answer appends its declined list."""
    gpu = struct.pack("<IBI2I", 7, 0, 2, 1, 0)
    assert wire.decode_ranked(gpu) == (7, False, [1, 0], None)
    host = struct.pack("<IBI1II2I", 8, wire.FLAG_DECLINED, 1, 2, 2, 0, 3)
    assert wire.decode_ranked(host) == (8, False, [2], [0, 3])
    with pytest.raises(ValueError, match="declined"):
        wire.decode_ranked(struct.pack("<IBI1II1I", 9, wire.FLAG_DECLINED, 1, 2, 2, 0))
    with pytest.raises(ValueError, match="trailing"):
        wire.decode_ranked(gpu + b"\0")
    item = wire.rank(1, 1, 0, [(5, 6, 7, 8, 16, 32)], wire.TIER_HOST)[17:]
    assert wire.ITEM.unpack(item) == (5, 6, 7, 8, 16, 32, wire.TIER_HOST)
    assert wire.block_word0(wire.OP_STORED, 3, 16, wire.TIER_HOST) == (1 << 4) | (16 << 8) | (3 << 32)


class Protocol1Host:
    """MOCK for what the real service no longer is: a host of protocol 1 (before tiers). It
    answers HELLO with 1 and every RANK with evict-first indices and no declined list, as the old
    host did. Records the RANK items' tier fields and the BLOCKS words it got."""

    def __init__(self, path) -> None:
        import socket
        import threading

        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(1)
        self.tiers: list[int] = []
        self.block_words = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        reader = wire.FrameReader()
        while data := conn.recv(1 << 16):
            reader.feed(data)
            while (frame := reader.next()) is not None:
                kind, body = frame
                if kind == wire.KIND_HELLO:
                    conn.sendall(wire.frame(wire.KIND_HELLO_OK, struct.pack("<H", 1)))
                elif kind == wire.KIND_BLOCKS:
                    self.block_words += len(body) // 8
                elif kind == wire.KIND_RANK:
                    rid, want, _missed = struct.unpack_from("<III", body, 0)
                    n = (len(body) - 12) // wire.ITEM.size
                    self.tiers += [wire.ITEM.unpack_from(body, 12 + i * wire.ITEM.size)[6] for i in range(n)]
                    order = list(range(min(want, n)))
                    conn.sendall(wire.frame(wire.KIND_RANKED, struct.pack(f"<IBI{len(order)}I", rid, 0, len(order), *order)))


def test_a_protocol_1_host_is_not_asked_about_the_host_tier(tmp_path):
    old = Protocol1Host(tmp_path / "old.sock")
    client = EvictionClient(str(tmp_path / "old.sock"), 2.0, "test")
    manager, resident, stock_resident = run_beside_stock(client)
    assert resident == stock_resident, "LRU, everything stored"
    assert client.host_protocol == 1
    # The first question went out before the host's HELLO_OK was read; its answer carried no
    # declined list and was not taken for one about the host tier. None after that.
    assert len(old.tiers) <= 20 and set(old.tiers) == {wire.TIER_HOST}
    assert client.stats["host_tier_unsupported"] >= 2
    client.flush()
    assert old.block_words == 0, "no host-tier events to a host that would count them as GPU blocks"
    client.close()


def test_the_spec_connects_from_the_plugins_environment(start_host, monkeypatch):
    from agentrt_vllm import patch
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory

    host = start_host("probe")
    monkeypatch.setitem(patch._state, "client", None)  # the block-pool patch did not install
    monkeypatch.setenv("AGENTRT_EVICTION_SOCKET", str(host.socket_path))
    monkeypatch.setenv("AGENTRT_EVICTION_DEADLINE_MS", "2000")
    manager = OffloadingSpecFactory.create_spec(config("AgentrtOffloadingSpec")).get_manager()
    assert manager.client is not None and manager.client.deadline_s == 2.0
    driver = Driver(manager)
    workload(driver)
    assert manager.agentrt_stats["host_victims_from_policy"] == manager.agentrt_stats["host_evictions"] > 0
    manager.client.close()
    assert host.stop()["eviction"]["connections"] == 1
