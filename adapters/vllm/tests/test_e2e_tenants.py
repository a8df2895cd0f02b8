"""Two tenants on one real vLLM (CPU, tiny model) through `agentrt serve`: an agent application and
a tenant flooding the engine with unique long prompts. Without shares, one LRU over every block
lets the flood evict the agents' anchors; with `--share agents=N`, each tenant's own policy ranks
its own blocks and the flood, above its (zero) guarantee, gives up blocks first.

The workload is test_e2e_serve's (planner → coder → tester sessions, 4 live); after each agent
call the flood tenant sends one unique document. The agents' guarantee is half the cache, chosen
before any run. Three runs, each on a fresh vLLM: the agents alone, both tenants under one LRU,
both under shares. Figures: docs/results-vllm.md."""

from __future__ import annotations

import os
import random

import pytest

from conftest import SKIP_SERVE_REASON
from test_e2e_serve import BLOCKS, TASK_WORDS, Outcome, series, stream_call, workload

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

GUARANTEE = BLOCKS // 2  # the agents' share of the cache, in blocks
FLOOD_WORDS = 300  # each flood document: unique words, several hundred tokens
AGENTS = {"authorization": "Bearer key-agents"}
FLOOD = {"authorization": "Bearer key-flood"}


def flood_body(i: int) -> dict:
    rng = random.Random(10_000 + i)
    document = f"Document {i}: " + " ".join(rng.choice(TASK_WORDS) for _ in range(FLOOD_WORDS))
    return {"model": "tiny", "messages": [{"role": "user", "content": "Summarise: " + document}],
            "max_tokens": 4, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def hit_rate(outcomes: list[Outcome]) -> float:
    prompt = sum(o.prompt_tokens for o in outcomes)
    return sum(o.cached_tokens for o in outcomes) / prompt if prompt else 0.0


def run(start_stack, shares: bool, with_flood: bool = True, blocks: int = BLOCKS) -> tuple[list[Outcome], list[Outcome], str]:
    args = ("--tenant", "key-agents=agents", "--tenant", "key-flood=flood", "--session-idle-ms", "1000")
    if shares:
        args += ("--share", f"agents={GUARANTEE}")
    # vLLM refuses a context longer than its whole cache (less the null block); the longest prompt
    # here is ~900 tokens.
    vllm_args = ("--max-model-len", str(min(2048, (blocks - 1) * 32)))  # block 0 is the null block
    stack = start_stack("lru", blocks=blocks, serve_args=args, vllm_args=vllm_args)
    agents, flood = [], []
    try:
        for i, call in enumerate(workload()):
            agents.append(stream_call(stack.serve.base, call.body, AGENTS))
            if with_flood:
                flood.append(stream_call(stack.serve.base, flood_body(i), FLOOD))
        metrics = stack.serve.metrics_text()
    finally:
        stack.stop()
    return agents, flood, metrics


def test_a_guaranteed_tenant_keeps_its_cache_next_to_a_flood(start_stack):
    # The figure a guarantee should protect: the agents alone on a cache of their guarantee's size.
    alone, _, _ = run(start_stack, shares=False, with_flood=False, blocks=GUARANTEE)
    shared_agents, shared_flood, _ = run(start_stack, shares=False)
    shares_agents, shares_flood, metrics = run(start_stack, shares=True)
    for outcomes in (alone, shared_agents, shared_flood, shares_agents, shares_flood):
        failed = [(o.status, o.error) for o in outcomes if o.status != 200 or o.error]
        assert not failed, failed[:5]
    table = (f"| setup | agents' hit rate | flood's hit rate | agents' requests | flood requests |\n|---|---|---|---|---|\n"
             f"| the agents alone on {GUARANTEE} blocks (no flood) | {hit_rate(alone):.3f} | – | {len(alone)} | 0 |\n"
             f"| one LRU over every block | {hit_rate(shared_agents):.3f} | {hit_rate(shared_flood):.3f} | "
             f"{len(shared_agents)} | {len(shared_flood)} |\n"
             f"| --share agents={GUARANTEE} (each tenant's LRU) | {hit_rate(shares_agents):.3f} | "
             f"{hit_rate(shares_flood):.3f} | {len(shares_agents)} | {len(shares_flood)} |")
    print(f"\n{BLOCKS} blocks of 32 tokens; agents guaranteed {GUARANTEE}\n{table}")
    results = os.environ.get("AGENTRT_E2E_RESULTS")
    if results:
        with open(results, "w") as f:
            f.write(table + "\n")
    # What the flood took from the agents, against their alone-at-guarantee figure, and what the
    # guarantee gives back. (A first version asserted +5 pp over shared LRU, fixed before any run;
    # it measured +4.5 pp — all the flood had taken, as the alone-at-guarantee run then showed.
    # The assertions now say what a guarantee promises.)
    taken = hit_rate(alone) - hit_rate(shared_agents)
    regained = hit_rate(shares_agents) - hit_rate(shared_agents)
    print(f"the flood took {taken * 100:.1f} pp of the agents' hit rate; the guarantee gave back {regained * 100:.1f} pp")
    assert taken > 0.02, "the flood must hurt the agents for this test to mean anything"
    assert hit_rate(shares_agents) >= hit_rate(alone) - 0.01, "with shares, within 1 pp of alone at the guarantee"
    assert regained >= 0.5 * taken, "a guarantee gives back at least half of what the flood took"
    # The proxy's per-tenant view agrees: the flood's blocks were the ones evicted, and the
    # agents' hit rate on /metrics is the one the clients saw.
    evicted = {t: series(metrics, "agentrt_tenant_cache_evictions_total", f'tenant="{t}"') for t in ("agents", "flood")}
    caused = {t: series(metrics, "agentrt_tenant_cache_evictions_caused_total", f'tenant="{t}"') for t in ("agents", "flood")}
    print("evictions suffered by tenant:", evicted, "caused:", caused)
    assert evicted["flood"] > evicted["agents"]
    # The flood's unique prompts need new blocks on every request: it causes most evictions.
    assert caused["flood"] > caused["agents"]
    cached = series(metrics, "agentrt_tenant_cached_tokens_total", 'tenant="agents"')
    prompt = series(metrics, "agentrt_tenant_prompt_tokens_total", 'tenant="agents"')
    assert abs(cached / prompt - hit_rate(shares_agents)) < 0.01
