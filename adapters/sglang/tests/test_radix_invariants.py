"""SGLang's radix cache and token allocator under a policy host, with requests in flight (their
prefixes locked while others evict), several agents, decode growth, retraction when the pool runs
out, and a host stalled mid-run — SGLang's own invariants checked after every step:

- every KV slot is in exactly one place: the allocator's free list, a tree node, or a request in
  flight;
- ``evictable_size`` and ``protected_size`` are the tokens of the unlocked and locked nodes;
- ``evictable_leaves`` is exactly the unlocked nodes without a child;
- nothing evicted in use: a request's locked prefix is still in the tree, on the same slots;
- the plugin names every node by its current token path.

Under the ``lru`` component the tree must also be SGLang's own, step by step.
"""

from __future__ import annotations

import os
import random
import signal

import pytest
import torch

import harness
from agentrt_sglang.tracker import path_hash
from agentrt_engine.client import EvictionClient

POOL_TOKENS = 800
AGENTS = ["planner", "coder", "reviewer", "tester"]


def nodes(cache):
    stack = list(cache.root_node.children.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def check_radix(engine, flights, where: str, tracked: bool) -> None:
    cache, allocator = engine.cache, engine.allocator
    owned = [allocator.get_all_free_pages().tolist()]
    owned += [n.value.tolist() for n in nodes(cache)]
    owned += [s.tolist() for f in flights for s in f.slots]
    slots = [slot for part in owned for slot in part]
    assert len(slots) == len(set(slots)), f"{where}: a KV slot is owned twice"
    assert sorted(slots) == list(range(1, POOL_TOKENS + 1)), f"{where}: KV slots leaked: {POOL_TOKENS - len(slots)}"

    unlocked = sum(len(n.key) for n in nodes(cache) if n.lock_ref == 0)
    locked = sum(len(n.key) for n in nodes(cache) if n.lock_ref > 0)
    assert (cache.evictable_size(), cache.protected_size()) == (unlocked, locked), where
    leaves = {n for n in nodes(cache) if n.lock_ref == 0 and not any(not c.evicted for c in n.children.values())}
    assert cache.evictable_leaves == leaves, f"{where}: evictable_leaves disagrees with the tree"

    for f in flights:
        node, path = f.last, []
        while node is not cache.root_node:
            assert not node.evicted and node.lock_ref > 0, f"{where}: a locked prefix node was evicted"
            path.append(node)
            node = node.parent
        values = torch.cat([n.value for n in reversed(path)]) if path else torch.empty(0, dtype=torch.int64)
        assert torch.equal(values, f.prefix), f"{where}: a request's prefix moved to other slots while locked"

    if tracked:
        for n in nodes(cache):
            assert n._agentrt.hash == path_hash(n, cache.root_node), f"{where}: the plugin's name of a node is stale"


class Run:
    """Seeded steps: requests of several agents (their anchors shared) arrive, decode a few tokens
    a step, finish; a request that cannot grow is retracted, as SGLang's scheduler retracts one."""

    def __init__(self, seed: int, agents: list[str]) -> None:
        self.rng = random.Random(seed)
        self.agents = agents
        self.anchors = {a: harness.prompt(10 + i, self.rng.randint(60, 140)) for i, a in enumerate(agents)}
        self.n = 0

    def plan(self, steps: int) -> list[dict]:
        """What each step does, drawn once so that two engines do exactly the same."""
        out = []
        for _ in range(steps):
            arrivals = []
            for _ in range(self.rng.choice([0, 1, 1, 2])):
                agent = self.rng.choice(self.agents)
                tokens = self.anchors[agent] + harness.prompt(1000 + self.n, self.rng.randint(10, 120))
                arrivals.append((agent, f"s{self.rng.randint(1, 3)}", tokens, self.rng.randint(2, 12)))
                self.n += 1
            out.append({"arrivals": arrivals, "decode": self.rng.randint(1, 8)})
        return out


def step(engine, flights: list, plan: dict) -> int:
    """One step: admit the arrivals, then every request in flight decodes ``decode`` tokens or,
    past its budget, finishes. Returns how many requests were retracted."""
    retracted = 0
    for agent, session, tokens, budget in plan["arrivals"]:
        flight = engine.begin(tokens, agent=agent, session=session)
        if flight is not None:
            flight.budget = budget
            flights.append(flight)
    for flight in list(flights):
        if flight.budget <= 0:
            flights.remove(flight)
            engine.finish(flight)
            continue
        n = plan["decode"]
        if engine.grow(flight, n):
            flight.tokens.extend([7] * n)
            flight.budget -= 1
        else:
            flights.remove(flight)
            engine.retract(flight)
            retracted += 1
    return retracted


def attached(installed, socket_path, deadline_s):
    engine = harness.Engine(POOL_TOKENS)
    tracker = installed.attach(engine.cache, EvictionClient(str(socket_path), deadline_s, "sglang-test"))
    return engine, tracker


def run_beside_stock(engine, steps: int, on_step=None) -> int:
    """The same steps on ``engine`` and on a plain SGLang cache, compared after each; returns how
    many requests were retracted."""
    stock, stock_flights = harness.Engine(POOL_TOKENS), []
    flights, retracted = [], 0
    for i, plan in enumerate(Run(1, AGENTS).plan(steps)):
        if on_step is not None:
            on_step(i)
        retracted += step(stock, stock_flights, plan)
        step(engine, flights, plan)
        where = f"step {i}"
        check_radix(stock, stock_flights, where + " (stock)", tracked=False)
        check_radix(engine, flights, where, tracked=True)
        assert engine.cached_paths() == stock.cached_paths(), f"{where}: the tree differs from SGLang's own"
        assert engine.allocator.available_size() == stock.allocator.available_size(), where
        assert [f.hit for f in flights] == [f.hit for f in stock_flights], f"{where}: other prefix hits"
    return retracted


def test_under_lru_the_radix_cache_steps_exactly_as_sglangs(installed, start_host):
    host = start_host("lru")
    engine, tracker = attached(installed, host.socket_path, 1.0)
    assert run_beside_stock(engine, 80) > 0, "the run never retracted a request: make the pool smaller"
    assert tracker.stats["nodes_from_policy"] > 0 and tracker.stats["tokens_from_sglang"] == 0, tracker.stats
    assert tracker.client.stats["rank_answered"] == tracker.client.stats["rank_requests"] > 0
    tracker.client.close()


@pytest.mark.parametrize("policy", ["cachesage", "probe"])
def test_a_policy_that_is_not_lru_keeps_sglangs_invariants(installed, start_host, policy):
    """``probe`` ranks by node hash, far from LRU: other nodes go, SGLang's invariants hold."""
    host = start_host(policy)
    engine, tracker = attached(installed, host.socket_path, 1.0)
    flights, retracted = [], 0
    for i, plan in enumerate(Run(2, AGENTS).plan(80)):
        retracted += step(engine, flights, plan)
        check_radix(engine, flights, f"{policy}, step {i}", tracked=True)
    assert retracted > 0, "the run never retracted a request: make the pool smaller"
    assert tracker.stats["nodes_from_policy"] > 0, tracker.stats
    assert tracker.client.stats["rank_answered"] == tracker.client.stats["rank_requests"] > 0
    tracker.client.close()


def test_a_host_that_stalls_mid_run_leaves_sglangs_order_and_invariants(installed, start_host):
    """The host is stopped (SIGSTOP) for twenty steps, then continued: its rankings pass the 50 ms
    deadline meanwhile (SGLang's order), and its late answers are dropped when they come, never
    applied to a later eviction's candidates. Under ``lru`` the whole run is SGLang's own."""
    host = start_host("lru")
    engine, tracker = attached(installed, host.socket_path, 0.05)
    stats, marks = tracker.client.stats, {}

    def stall(i: int) -> None:
        if i == 30:
            marks["answered"] = stats["rank_answered"]
            os.kill(host.proc.pid, signal.SIGSTOP)
        if i == 50:
            marks["missed"] = stats["deadline_missed"]
            os.kill(host.proc.pid, signal.SIGCONT)

    try:
        run_beside_stock(engine, 90, on_step=stall)
    finally:
        os.kill(host.proc.pid, signal.SIGCONT)
    assert marks["answered"] > 0, "no ranking was answered before the host stopped"
    assert marks["missed"] > 0, "no ranking passed its deadline while the host was stopped"
    assert stats["rank_answered"] > marks["answered"], "no ranking was answered after the host continued"
    assert stats["late_replies"] > 0, "the stopped host's answers never arrived late"
    tracker.client.close()
