"""End to end on a public trace: a few Claude Code conversations from ``callanjfox/kv-cache-tester``
(Apache-2.0; docs/workloads.md gives the repository, commit and path) replayed through ``agentrt
serve`` in front of a real vLLM (CPU, the tiny model), once with LRU and once with CacheSage, from a
cold cache each time, judged by the user requests' cached tokens
(``usage.prompt_tokens_details.cached_tokens``).

The trace is not in this repository: the test runs when ``AGENTRT_CC_TRACES`` names the folder of
``trace_NNNN.json`` files and skips (saying so) otherwise.

Scaled down to the tiny model (2,048 positions, 80 blocks of 32 tokens): each source block (64 tokens,
its id local to the conversation) becomes **one token**, the same token wherever the id appears, so
two prompts share a token prefix exactly as far as they share block ids (vLLM's 32-token blocks then
share at 32 source blocks' granularity). The conversations are the first ``CONVERSATIONS`` of the
folder, in file-name order, whose requests all fit the tester's default 128,000-token context (as
``cc100`` in docs/results.md: at most 2,000 source blocks, so every prompt fits 2,048 positions);
main threads only. They start at Poisson times so that ``USERS`` are in progress at once, each call
``think_time`` after the previous one (the tester's default timing), and the requests are sent one
after another in that order — the timeline sets who follows whom; the proxy sees no real waits, so
``--session-idle-ms`` is short, as in the other end-to-end tests. Requests go to ``/v1/completions``
with token ids, the conversation as ``x-agent-id`` and ``x-session-id`` (Claude Code sends neither;
the proxy would otherwise name the agent by its anchor, which token-id prompts do not have).
The proxy does not report tool calls it sees in answers (``tool-call`` comes from its MCP gateway
only), so CacheSage's tool-wait model is not used here.

These parameters were fixed before either policy ran on this workload and were not tuned after.

Slow (two vLLM starts and ~1,000 requests): AGENTRT_SKIP_VLLM_SERVE=1 skips it.
Set AGENTRT_E2E_RESULTS=path.md to also write the measured table there (docs/results-vllm.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import SKIP_SERVE_REASON
from test_e2e_serve import HEADER, Outcome, Run, report_runs, series

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

TRACES = os.environ.get("AGENTRT_CC_TRACES")
BLOCKS = 80  # KV-cache blocks of 32 tokens, as in the other end-to-end tests
CONVERSATIONS = 8
USERS = 4
MAX_CONTEXT = 128_000  # the tester's default --max-context
SOURCE_BLOCK = 64
MAX_TOKENS = 4
SEED = 1
VOCAB = 4096  # the tiny model's
SERVE_ARGS = ("--session-idle-ms", "2000")


@dataclass
class Call:
    at_s: float
    conversation: str
    tokens: list[int]


def token_of(conversation: str, block_id: int) -> int:
    """One token per source block: the same id gives the same token (ids are local to a conversation)."""
    digest = hashlib.blake2b(f"{conversation}/{block_id}".encode(), digest_size=8).digest()
    return 16 + int.from_bytes(digest, "little") % (VOCAB - 16)


def conversations(folder: Path) -> list[tuple[str, list[dict]]]:
    picked = []
    for path in sorted(folder.glob("*.json")):
        doc = json.loads(path.read_text())
        main = [r for r in doc["requests"] if r.get("type") != "subagent"]
        if not main or max(r["in"] for r in main) > MAX_CONTEXT:
            continue
        picked.append((doc.get("id", path.stem), main))
        if len(picked) == CONVERSATIONS:
            break
    return picked


def workload(folder: Path) -> list[Call]:
    """Every main-thread request on one timeline: Poisson starts (mean gap = mean length / USERS),
    then think time after each call, the call taking its recorded api_time."""
    convs = conversations(folder)
    assert len(convs) == CONVERSATIONS, f"{folder}: only {len(convs)} conversations fit {MAX_CONTEXT} tokens"
    lengths = [sum(r.get("think_time", 0) + r.get("api_time", 0) for r in reqs) for _, reqs in convs]
    gap = sum(lengths) / len(lengths) / USERS
    rng = random.Random(SEED)
    start = 0.0
    calls = []
    for k, (conv, reqs) in enumerate(convs):
        if k:
            start += rng.expovariate(1 / gap)
        at = start
        for i, r in enumerate(reqs):
            if i:
                at += r.get("think_time", 0)
            calls.append(Call(at, conv, [token_of(conv, b) for b in r["hash_ids"]]))
            at += r.get("api_time", 0)
    calls.sort(key=lambda c: c.at_s)
    return calls


def completion(base: str, call: Call) -> Outcome:
    body = {"model": "tiny", "prompt": call.tokens, "max_tokens": MAX_TOKENS, "temperature": 0}
    headers = {"content-type": "application/json", "x-agent-id": call.conversation, "x-session-id": call.conversation}
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(), headers=headers)
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            reply = json.loads(r.read())
            status = r.status
    except urllib.error.HTTPError as e:
        return Outcome(e.code, 0.0, time.perf_counter() - start, error=e.read().decode(errors="replace")[:500])
    latency = time.perf_counter() - start
    usage = reply.get("usage") or {}
    return Outcome(status, latency, latency, prompt_tokens=usage.get("prompt_tokens", 0),
                   cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)


def run_policy(start_stack, policy: str, calls: list[Call]) -> Run:
    stack = start_stack(policy, blocks=BLOCKS, serve_args=SERVE_ARGS, log_level=os.environ.get("AGENTRT_LOG", "info"))
    run = Run(policy, ready_s=stack.vllm.ready_s or 0.0)
    try:
        before = stack.vllm.metrics()
        t = time.perf_counter()
        for call in calls:
            run.outcomes.append(completion(stack.serve.base, call))
        run.wall_s = time.perf_counter() - t
        after = stack.vllm.metrics()
        for name, attr in (("vllm:prefix_cache_queries_total", "vllm_queries"), ("vllm:prefix_cache_hits_total", "vllm_hits")):
            setattr(run, attr, after.get(name, 0) - before.get(name, 0))
        run.proxy = stack.serve.metrics()
        text = stack.serve.metrics_text()
        run.score_calls = series(text, "agentrt_policy_calls_total", 'primitive="score"')
        run.block_items = series(text, "agentrt_policy_items_total", 'primitive="observe-blocks"')
    finally:
        stack.stop()
    print(f"\n[{policy}] vLLM ready in {run.ready_s:.1f} s; {len(calls)} requests in {run.wall_s:.1f} s; logs in {stack.workdir}")
    return run


@pytest.mark.skipif(not TRACES, reason="AGENTRT_CC_TRACES (a folder of kv-cache-tester trace_NNNN.json) is not set")
def test_cachesage_keeps_up_with_lru_on_claude_code_conversations(start_stack):
    calls = workload(Path(TRACES))
    runs = [run_policy(start_stack, policy, calls) for policy in ("lru", "cachesage")]
    lru, sage = runs
    table = "\n".join([HEADER, *(r.row() for r in runs)])
    prompt = sum(len(c.tokens) for c in calls)
    print(f"\n{len(calls)} requests of {CONVERSATIONS} conversations ({USERS} users), {prompt} prompt tokens, "
          f"{BLOCKS} blocks of 32 tokens\n{table}")
    report_runs(runs, table)
    for r in runs:
        assert not r.failed, f"{r.policy}: failed requests: {[(o.status, o.error) for o in r.failed][:5]}"
        assert r.proxy.get("agentrt_policy_fallbacks_total", 0) == 0, f"{r.policy}: the policy failed and fell back"
    assert sage.user_hit_rate >= lru.user_hit_rate, (
        f"CacheSage's user-request hit rate {sage.user_hit_rate:.4f} is below LRU's {lru.user_hit_rate:.4f}")
