"""What vLLM's own suite does not reach: a policy host ranking the evictions of vLLM's real
scheduler and block pool under several agents, preemption, blocks hit and freed again within one
step, and a host that starts missing the deadline mid-run — with vLLM's block-pool invariants
(engine_checks.check_pool) and the plugin's view of the pool (check_tracker) checked after every
step. Under the ``lru`` component the plugin must also be exactly stock vLLM: the same blocks
handed out, in the same order, the same free queue, the same cache.
"""

from __future__ import annotations

import os
import random
import signal

import pytest

import engine_checks
import harness
from agentrt_engine.client import EvictionClient
from engine_checks import check_pool, check_tracker, free_queue_ids, make_request, make_scheduler, model_output

AGENTS = ["planner", "coder", "reviewer", "tester"]


class Workload:
    """Seeded arrivals: each agent's requests share its anchor (a system prompt + tools), then
    differ; some are long enough to preempt others as their decodes grow."""

    def __init__(self, seed: int, steps: int, agents: list[str]) -> None:
        rng = random.Random(seed)
        anchors = {a: harness.prompt(10 + i, rng.randint(40, 80)) for i, a in enumerate(agents)}
        self.arrivals: list[list[tuple[str, list[int], int, str, str]]] = []
        n = 0
        for step in range(steps):
            batch = []
            for _ in range(rng.choice([0, 1, 1, 2])):
                agent = rng.choice(agents)
                suffix = harness.prompt(1000 + n, rng.randint(4, 48))
                batch.append((f"r{n}", anchors[agent] + suffix, rng.randint(8, 40), agent, f"s{rng.randint(1, 3)}"))
                n += 1
            self.arrivals.append(batch)


def run_step(scheduler, arrivals):
    for rid, tokens, max_tokens, agent, session in arrivals:
        scheduler.add_request(make_request(rid, tokens, max_tokens, agent, session))
    out = scheduler.schedule()
    scheduler.update_from_output(out, model_output(scheduler, out))
    return out


def parts(scheduler):
    manager = scheduler.kv_cache_manager
    return manager.block_pool, manager.coordinator.single_type_managers[0]


def check_step(scheduler, tracker, where: str) -> None:
    pool, single = parts(scheduler)
    check_pool(pool, single, scheduler.requests, where)
    if tracker is not None:
        check_tracker(tracker, pool, where)


def attach(installed, scheduler, socket_path, deadline_s: float):
    pool, _ = parts(scheduler)
    pool._agentrt = None
    return installed.attach(pool, EvictionClient(str(socket_path), deadline_s, "test"))


def stock_scheduler(tmp_path, num_blocks: int):
    scheduler = make_scheduler(tmp_path, num_blocks)
    parts(scheduler)[0]._agentrt = None  # detached: exactly vLLM's own
    return scheduler


def step_beside_stock(stock, ours, tracker, arrivals, where: str) -> None:
    """One step of the same arrivals on both: each keeps vLLM's invariants, and they agree on the
    blocks handed out (which, in which order), the free queue and the cache."""
    want, got = run_step(stock, arrivals), run_step(ours, arrivals)
    check_step(stock, None, where + " (stock)")
    check_step(ours, tracker, where)
    assert [(r.req_id, r.block_ids) for r in got.scheduled_new_reqs] == [
        (r.req_id, r.block_ids) for r in want.scheduled_new_reqs
    ], f"{where}: other blocks handed out than vLLM's"
    assert got.num_scheduled_tokens == want.num_scheduled_tokens, where
    assert free_queue_ids(parts(ours)[0]) == free_queue_ids(parts(stock)[0]), f"{where}: free queue differs"
    assert engine_checks.cached_keys(parts(ours)[0]) == engine_checks.cached_keys(parts(stock)[0]), where


def preemptions(scheduler, seen: dict) -> int:
    """Preemptions so far of every request ``scheduler`` has held (finished ones leave it)."""
    seen.update(scheduler.requests)
    return sum(r.num_preemptions for r in seen.values())


def test_under_lru_the_scheduler_steps_exactly_as_stock_vllm(installed, start_host, tmp_path):
    host = start_host("lru")
    stock = stock_scheduler(tmp_path, 32)
    ours = make_scheduler(tmp_path, 32)
    tracker = attach(installed, ours, host.socket_path, 1.0)
    seen: dict = {}
    for step, arrivals in enumerate(Workload(1, 80, AGENTS).arrivals):
        step_beside_stock(stock, ours, tracker, arrivals, f"step {step}")
        preemptions(stock, seen)
    assert preemptions(stock, seen) > 0, "the workload never preempted: make the pool smaller"
    assert tracker.stats["victims_from_policy"] > 0, tracker.stats
    assert tracker.client.stats["rank_answered"] == tracker.client.stats["rank_requests"] > 0
    tracker.client.close()


@pytest.mark.parametrize("policy", ["cachesage", "probe"])
def test_a_policy_that_is_not_lru_keeps_vllms_invariants(installed, start_host, tmp_path, policy):
    """``probe`` ranks by block hash, far from LRU: the victims differ from vLLM's, the engine's
    invariants do not."""
    host = start_host(policy)
    ours = make_scheduler(tmp_path, 32)
    tracker = attach(installed, ours, host.socket_path, 1.0)
    seen: dict = {}
    for step, arrivals in enumerate(Workload(2, 80, AGENTS).arrivals):
        run_step(ours, arrivals)
        check_step(ours, tracker, f"{policy}, step {step}")
        preemptions(ours, seen)
    assert preemptions(ours, seen) > 0, "the workload never preempted: make the pool smaller"
    assert tracker.stats["victims_from_policy"] > 0, tracker.stats
    assert tracker.client.stats["rank_answered"] == tracker.client.stats["rank_requests"] > 0
    tracker.client.close()


def test_a_host_that_stalls_mid_run_leaves_vllms_order_and_invariants(installed, start_host, tmp_path):
    """The host process is stopped (SIGSTOP: descheduled, swapped out, stuck) for twenty steps of
    a run and then continued. While it is stopped every step's ranking passes the 50 ms deadline
    after the step has already allocated, and the plugin evicts in vLLM's order; when it answers
    again, its late answers are dropped, not applied to a later step's candidates. Under ``lru``
    the whole run is stock vLLM's, step by step."""
    host = start_host("lru")
    stock = stock_scheduler(tmp_path, 32)
    ours = make_scheduler(tmp_path, 32)
    tracker = attach(installed, ours, host.socket_path, 0.05)
    stats = tracker.client.stats
    try:
        for step, arrivals in enumerate(Workload(3, 90, AGENTS).arrivals):
            if step == 30:
                answered_before = stats["rank_answered"]
                os.kill(host.proc.pid, signal.SIGSTOP)
            if step == 50:
                missed = stats["deadline_missed"]
                os.kill(host.proc.pid, signal.SIGCONT)
            step_beside_stock(stock, ours, tracker, arrivals, f"step {step}")
    finally:
        os.kill(host.proc.pid, signal.SIGCONT)
    assert answered_before > 0, "no ranking was answered before the host stopped"
    assert missed > 0, "no ranking passed its deadline while the host was stopped"
    assert stats["rank_answered"] > answered_before, "no ranking was answered after the host continued"
    assert stats["late_replies"] > 0, "the stopped host's answers never arrived late"
    assert tracker.stats["fallback_steps"] >= missed, tracker.stats
    tracker.client.close()


def test_requests_hitting_and_freeing_blocks_within_one_step_match_vllm_under_lru(installed, start_host):
    """Many requests in each step (no scheduler: vLLM's KV-cache manager driven directly, as a
    connector or a test does), most of them hits on an agent's anchor that are freed again before
    the step's next eviction: the ranking taken at its first eviction goes stale, and the plugin
    must still evict what vLLM evicts and hand out the blocks vLLM hands out."""
    host = start_host("lru")
    stock = harness.Engine(48)
    stock.pool._agentrt = None
    ours = harness.Engine(48)
    ours.pool._agentrt = None
    tracker = installed.attach(ours.pool, EvictionClient(str(host.socket_path), 1.0, "test"))
    rng = random.Random(5)
    anchors = {a: harness.prompt(20 + i, harness.BLOCK_SIZE * rng.randint(2, 5)) for i, a in enumerate(AGENTS)}
    for step in range(12):
        installed.begin_step()
        for i in range(10):
            agent = rng.choice(AGENTS)
            tokens = anchors[agent] + harness.prompt(5000 + step * 100 + i, rng.randint(8, 100))
            stock_blocks, our_blocks = [], []
            stock.run_request(tokens, agent=agent, on_allocate=stock_blocks.extend)
            ours.run_request(tokens, agent=agent, on_allocate=our_blocks.extend)
            where = f"step {step}, request {i}"
            assert our_blocks == stock_blocks, f"{where}: other blocks handed out than vLLM's"
            assert free_queue_ids(ours.pool) == free_queue_ids(stock.pool), f"{where}: free queue differs"
            check_tracker(tracker, ours.pool, where)
    assert tracker.stats["stale_ranks_skipped"] > 0, "no ranking went stale: the test does not test that"
    assert tracker.stats["victims_from_policy"] > 0, tracker.stats
    tracker.client.close()
