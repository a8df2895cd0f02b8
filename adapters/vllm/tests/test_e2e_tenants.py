"""Two tenants on one real vLLM (CPU, tiny model) through `agentrt serve`: an agent application and
a tenant flooding the engine with unique long prompts. Without shares, one LRU over every block
lets the flood evict the agents' anchors; with `--share agents=N`, each tenant's own policy ranks
its own blocks and the flood, above its (zero) guarantee, gives up blocks first.

The workload is test_e2e_serve's (planner → coder → tester sessions, 4 live); after each agent
call the flood tenant sends one unique document. The agents' guarantee is half the cache, chosen
before any run. Figures: docs/results-vllm.md."""

from __future__ import annotations

import os
import random

import pytest

from conftest import SKIP_SERVE_REASON
from test_e2e_serve import BLOCKS, TASK_WORDS, Outcome, stream_call, workload

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


def run(start_stack, shares: bool) -> tuple[list[Outcome], list[Outcome]]:
    args = ("--tenant", "key-agents=agents", "--tenant", "key-flood=flood", "--session-idle-ms", "1000")
    if shares:
        args += ("--share", f"agents={GUARANTEE}")
    stack = start_stack("lru", blocks=BLOCKS, serve_args=args)
    agents, flood = [], []
    try:
        for i, call in enumerate(workload()):
            agents.append(stream_call(stack.serve.base, call.body, AGENTS))
            flood.append(stream_call(stack.serve.base, flood_body(i), FLOOD))
    finally:
        stack.stop()
    return agents, flood


def test_a_guaranteed_tenant_keeps_its_cache_next_to_a_flood(start_stack):
    shared_agents, shared_flood = run(start_stack, shares=False)
    shares_agents, shares_flood = run(start_stack, shares=True)
    for outcomes in (shared_agents, shared_flood, shares_agents, shares_flood):
        failed = [(o.status, o.error) for o in outcomes if o.status != 200 or o.error]
        assert not failed, failed[:5]
    table = (f"| setup | agents' hit rate | flood's hit rate | agents' requests | flood requests |\n|---|---|---|---|---|\n"
             f"| one LRU over every block | {hit_rate(shared_agents):.3f} | {hit_rate(shared_flood):.3f} | "
             f"{len(shared_agents)} | {len(shared_flood)} |\n"
             f"| --share agents={GUARANTEE} (each tenant's LRU) | {hit_rate(shares_agents):.3f} | "
             f"{hit_rate(shares_flood):.3f} | {len(shares_agents)} | {len(shares_flood)} |")
    print(f"\n{BLOCKS} blocks of 32 tokens; agents guaranteed {GUARANTEE}\n{table}")
    results = os.environ.get("AGENTRT_E2E_RESULTS")
    if results:
        with open(results, "w") as f:
            f.write(table + "\n")
    assert hit_rate(shares_agents) >= hit_rate(shared_agents) + 0.05, "a guarantee keeps the agents' cache"
