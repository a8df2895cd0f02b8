"""End to end: a multi-agent workload through ``agentrt serve`` in front of a real vLLM (CPU, the
tiny model), run twice from a cold cache — once with the LRU policy, once with CacheSage — and
judged by vLLM's own prefix-cache counters (``vllm:prefix_cache_queries_total`` /
``vllm:prefix_cache_hits_total``).

The whole path is real: the proxy identifies agents by their anchors (system prompt + tools) and
sessions by their task, tells the policy, and forwards ``vllm_xargs``; the agentrt plugin inside
vLLM tags blocks and asks the proxy's eviction socket which cached blocks to evict; vLLM's KV
events reach the same policy over ZMQ; CacheSage's warm-ups go to vLLM as real requests.

The workload: three agents (planner → coder → tester, then coder → tester rounds while the tester
finds problems), each with its own system prompt and a tool definition (530–690 tokens of anchor
with the tiny tokenizer, 16–21 blocks of 32), and many sessions interleaved four at a time, each
with its own task. The KV cache has 80 blocks: the three anchors (~58 blocks) fit beside one
request's own blocks, but not beside the last few requests' task text too, so LRU keeps evicting
anchors between uses. The agent sequence is learnable: a session always starts with the planner,
the planner hands over to the coder, the coder to the tester.

Slow (two vLLM starts, 25–60 s each on two cores): AGENTRT_SKIP_VLLM_SERVE=1 skips it.
Set AGENTRT_E2E_RESULTS=path.md to also write the measured table there (docs/results-vllm.md).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conftest import SKIP_SERVE_REASON

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

BLOCKS = 80  # KV-cache blocks of 32 tokens (--num-gpu-blocks-override)
SESSIONS = 48  # tasks, each a planner → coder → tester (→ coder → tester)* session
LIVE = 4  # sessions in progress at once, their requests interleaved
MAX_TOKENS = 4
SEED = 7
# A session's next step comes 3 requests later (~0.1–0.3 s here); one silent for 1 s is done. The
# proxy then reports it ended, so CacheSage stops valuing a finished task's blocks.
SERVE_ARGS = ("--session-idle-ms", "1000")

# --- the workload ---------------------------------------------------------------------------------

SYSTEM = {
    "planner": (
        "You are the planner of a small software team made of a planner, a coder and a tester. "
        "You receive a task from a user and turn it into a short, ordered plan that the coder can follow "
        "without asking questions. For every step name the module and the files to change, the public "
        "functions whose behaviour changes, and the tests that must prove the change. Prefer small steps "
        "that each leave the build green. Point out risks: data migrations, backwards compatibility, "
        "security of user input, concurrency, and anything that needs a feature flag. Never write code "
        "yourself and never guess file contents: use the tools to look."
    ),
    "coder": (
        "You are the coder of a small software team made of a planner, a coder and a tester. You get the "
        "user's task, the planner's numbered plan and, on later rounds, the tester's report. Implement the "
        "next unfinished step of the plan as a minimal, reviewable patch in unified diff format. Keep the "
        "existing style of the code base: naming, error handling, logging and comments. Do not reformat "
        "code you do not change. Every new function gets a doc comment that says what it does and what it "
        "returns on failure. Handle errors explicitly; never swallow an exception. If the tester reported a "
        "failure, fix the cause, not the test. Use the tools to read files before you change them and to "
        "run the formatter and the linter after. When a step cannot be done as planned, say why in one "
        "sentence and propose the smallest change to the plan. End with the list of files you touched."
    ),
    "tester": (
        "You are the tester of a small software team made of a planner, a coder and a tester. You get the "
        "user's task, the plan and the coder's latest patch. Decide whether the patch does what the plan "
        "step promised. Write or update unit tests for the changed behaviour, including the edge cases: "
        "empty input, very large input, invalid input, concurrent callers and failures of dependencies. "
        "Run the relevant tests with the tools and read the failures carefully. Report in this format: a "
        "line PASS or FAIL, then for every failure the test name, the expected and the actual result, and "
        "the most likely cause in the code. Do not fix the code yourself. Be strict about regressions: a "
        "test that passed before the patch and fails after it is always a FAIL. Mention flaky tests "
        "separately and never count them as passes. Keep the report short; the coder reads it next."
    ),
}


def _tool(name: str, description: str, params: dict[str, str]) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
        "required": list(params)}}}


TOOLS = {
    "planner": [_tool("search_code", "Search the repository for a symbol or text.", {"query": "text to look for"})],
    "coder": [_tool("apply_patch", "Apply a unified diff to the working tree.", {"diff": "the patch"})],
    "tester": [_tool("run_tests", "Run the tests whose names match a filter.", {"filter": "part of a test name"})],
}

TASK_WORDS = (
    "parser cache index query retry timeout user account invoice report export import schema migration "
    "endpoint handler worker queue batch stream buffer token session login logout audit metric alert config "
    "flag feature rollout test fixture mock client server latency memory leak crash panic deadlock race lock "
    "thread async await future promise json yaml csv sql table column row key value map list set tree graph "
    "node edge path file folder module package build release"
).split()


@dataclass
class Call:
    session: str
    agent: str
    body: dict


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(TASK_WORDS) for _ in range(n))


def workload(sessions: int = SESSIONS, live: int = LIVE, seed: int = SEED) -> list[Call]:
    """The requests in the order they are sent: ``live`` sessions at a time, one step of each in
    turn; a finished session's place goes to the next task. Deterministic, so both policies get
    exactly the same prompts. Each step's prompt: the agent's anchor, the task, the last three
    steps' notes (stand-ins for the previous agents' answers) and a one-line turn marker."""
    rng = random.Random(seed)
    tasks = []
    for s in range(sessions):
        flow = ["planner", "coder", "tester"]
        while rng.random() < 0.5 and len(flow) < 9:  # the tester found a problem: another round
            flow += ["coder", "tester"]
        task = f"Task {s}: " + _words(rng, rng.randint(30, 45))
        notes = [_words(rng, rng.randint(10, 16)) for _ in flow]
        tasks.append((f"task-{s}", task, flow, notes))
    calls: list[Call] = []
    pending = list(range(sessions))
    active: list[list[int]] = []
    while pending or active:
        while len(active) < live and pending:
            active.append([pending.pop(0), 0])
        still = []
        for slot in active:
            index, step = slot
            key, task, flow, notes = tasks[index]
            agent = flow[step]
            messages = [{"role": "system", "content": SYSTEM[agent]}, {"role": "user", "content": task}]
            messages += [{"role": "assistant", "content": n} for n in notes[:step][-3:]]
            messages.append({"role": "user", "content": f"{agent}, your turn."})
            body = {"model": "tiny", "messages": messages, "tools": TOOLS[agent], "tool_choice": "none",
                    "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            calls.append(Call(key, agent, body))
            slot[1] += 1
            if slot[1] < len(flow):
                still.append(slot)
        active = still
    return calls


# --- running it -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int
    ttft_s: float
    latency_s: float
    prompt_tokens: int = 0
    cached_tokens: int = 0
    error: str | None = None


def stream_call(base: str, body: dict, headers: dict | None = None) -> Outcome:
    """POST a streamed chat completion; time to the first byte of the first SSE event, total time,
    the usage chunk, and any error (HTTP status, an SSE error event, no [DONE])."""
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json", **(headers or {})})
    start = time.perf_counter()
    ttft = None
    usage = None
    done = False
    error = None
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status = r.status
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                if ttft is None:
                    ttft = time.perf_counter() - start
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if "error" in chunk:
                    error = json.dumps(chunk["error"])
                if chunk.get("usage"):
                    usage = chunk["usage"]
    except urllib.error.HTTPError as e:
        return Outcome(e.code, 0.0, time.perf_counter() - start, error=e.read().decode(errors="replace")[:500])
    latency = time.perf_counter() - start
    if not done and error is None:
        error = "stream ended without [DONE]"
    out = Outcome(status, ttft if ttft is not None else latency, latency, error=error)
    if usage:
        out.prompt_tokens = usage.get("prompt_tokens", 0)
        out.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return out


@dataclass
class Run:
    policy: str
    outcomes: list[Outcome] = field(default_factory=list)
    wall_s: float = 0.0
    vllm_queries: float = 0.0
    vllm_hits: float = 0.0
    proxy: dict[str, float] = field(default_factory=dict)
    ready_s: float = 0.0
    score_calls: float = 0.0  # RANKs the plugin sent that reached the policy
    block_items: float = 0.0  # block events (tags, touches, removals) the policy observed

    @property
    def hit_rate(self) -> float:
        return self.vllm_hits / self.vllm_queries if self.vllm_queries else 0.0

    @property
    def user_hit_rate(self) -> float:
        prompt = sum(o.prompt_tokens for o in self.outcomes)
        return sum(o.cached_tokens for o in self.outcomes) / prompt if prompt else 0.0

    @property
    def late_user_hit_rate(self) -> float:
        """User-request hit rate over the second half of the run (CacheSage has learned by then)."""
        late = self.outcomes[len(self.outcomes) // 2:]
        prompt = sum(o.prompt_tokens for o in late)
        return sum(o.cached_tokens for o in late) / prompt if prompt else 0.0

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != 200 or o.error is not None]

    def row(self) -> str:
        ttft = statistics.mean(o.ttft_s for o in self.outcomes) * 1e3
        p50 = statistics.median(o.ttft_s for o in self.outcomes) * 1e3
        rps = len(self.outcomes) / self.wall_s
        tps = sum(o.prompt_tokens for o in self.outcomes) / self.wall_s
        return (f"| {self.policy} | {self.hit_rate:.3f} | {self.user_hit_rate:.3f} | {self.late_user_hit_rate:.3f} | "
                f"{ttft:.1f} | {p50:.1f} | "
                f"{rps:.1f} | {tps:.0f} | {self.proxy.get('agentrt_proxy_warmups_sent_total', 0):.0f} | "
                f"{len(self.failed)}/{len(self.outcomes)} |")


def series(text: str, name: str, label: str) -> float:
    """Sum of the Prometheus series ``name`` whose labels contain ``label``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and label in line)


HEADER = ("| policy | hit rate (vLLM counters) | hit rate (user requests) | user, 2nd half | mean TTFT ms | "
          "p50 TTFT ms | req/s | prompt tok/s | warm-ups | failed |\n|---|---|---|---|---|---|---|---|---|---|")


def measure(stack, run: Run, bodies: list[dict]) -> None:
    """Send `bodies` through the proxy in order and record into `run` what the client, vLLM's
    counters and the proxy's metrics saw."""
    before = stack.vllm.metrics()
    start = time.perf_counter()
    for body in bodies:
        run.outcomes.append(stream_call(stack.serve.base, body))
    run.wall_s = time.perf_counter() - start
    time.sleep(0.5)  # let a last warm-up land before reading the counters
    after = stack.vllm.metrics()
    run.vllm_queries = after.get("vllm:prefix_cache_queries_total", 0) - before.get("vllm:prefix_cache_queries_total", 0)
    run.vllm_hits = after.get("vllm:prefix_cache_hits_total", 0) - before.get("vllm:prefix_cache_hits_total", 0)
    run.proxy = stack.serve.metrics()
    text = stack.serve.metrics_text()
    run.score_calls = series(text, "agentrt_policy_calls_total", 'primitive="score"')
    run.block_items = series(text, "agentrt_policy_items_total", 'primitive="observe-blocks"')


def run_policy(start_stack, policy: str, calls: list[Call]) -> Run:
    stack = start_stack(policy, blocks=BLOCKS, serve_args=SERVE_ARGS, log_level=os.environ.get("AGENTRT_LOG", "info"))
    run = Run(policy, ready_s=stack.vllm.ready_s or 0.0)
    try:
        measure(stack, run, [call.body for call in calls])
    finally:
        stack.stop()  # cold cache for the next policy: a fresh vLLM and a fresh proxy
    print(f"\n[{policy}] vLLM ready in {run.ready_s:.1f} s; {len(calls)} requests in {run.wall_s:.1f} s; "
          f"logs in {stack.workdir}")
    late = len(calls) // 2
    for agent in SYSTEM:
        mine = [o for c, o in zip(calls[late:], run.outcomes[late:]) if c.agent == agent]
        print(f"[{policy}] {agent}: 2nd-half mean cached tokens {statistics.mean(o.cached_tokens for o in mine):.0f}"
              f" of {statistics.mean(o.prompt_tokens for o in mine):.0f}")
    return run


def report_runs(runs: list[Run], table: str) -> None:
    """Print what each run's policy and proxy did; write the table to $AGENTRT_E2E_RESULTS if set."""
    for r in runs:
        print(f"[{r.policy}] policy: {r.score_calls:.0f} rankings, {r.block_items:.0f} block events")
        print(f"[{r.policy}] proxy:", {k: v for k, v in r.proxy.items() if k.startswith("agentrt_proxy_")
                                       and not k.startswith("agentrt_proxy_overhead")})
    results = os.environ.get("AGENTRT_E2E_RESULTS")
    if results:
        with open(results, "w") as f:
            f.write(table + "\n")


def assert_runs_healthy(runs: list[Run], anchors: int) -> None:
    """Every run: no failed request, no policy fallback, the ranking path and block tags in use, and
    each of the `anchors` counted by vLLM's tokenizer."""
    for r in runs:
        assert not r.failed, f"{r.policy}: failed requests: {[(o.status, o.error) for o in r.failed][:5]}"
        assert r.vllm_queries > 0, f"{r.policy}: vLLM counted no prefix-cache queries"
        assert r.proxy.get("agentrt_proxy_requests_failed_total", 0) == 0
        assert r.proxy.get("agentrt_policy_fallbacks_total", 0) == 0, f"{r.policy}: the policy failed and fell back"
        assert r.score_calls > 0, f"{r.policy}: vLLM never asked the policy to rank an eviction"
        assert r.block_items > 0, f"{r.policy}: no block tags reached the policy"
        assert r.proxy.get("agentrt_proxy_anchors_tokenized_total", 0) == anchors, "vLLM counted each anchor"


def test_cachesage_beats_lru_on_a_real_vllm(start_stack):
    calls = workload()
    runs = [run_policy(start_stack, policy, calls) for policy in ("lru", "cachesage")]
    lru, sage = runs
    table = "\n".join([HEADER, *(r.row() for r in runs)])
    print(f"\n{len(calls)} requests, {SESSIONS} sessions ({LIVE} live), {BLOCKS} blocks of 32 tokens\n{table}")
    report_runs(runs, table)
    assert_runs_healthy(runs, anchors=len(SYSTEM))
    assert sage.proxy.get("agentrt_proxy_warmups_failed_total", 0) == 0, "vLLM refused CacheSage's warm-ups"
    assert sage.hit_rate > lru.hit_rate, (
        f"CacheSage's hit rate {sage.hit_rate:.3f} is not above LRU's {lru.hit_rate:.3f}\n{table}")
    # vLLM's counters include CacheSage's warm-ups, and a warm-up of an anchor that is already
    # cached counts as hits: the user requests' own cached tokens must show the gain too.
    assert sage.user_hit_rate > lru.user_hit_rate, (
        f"CacheSage's user-request hit rate {sage.user_hit_rate:.3f} is not above LRU's {lru.user_hit_rate:.3f}\n{table}")


# --- a real framework as the client ------------------------------------------------------------------


def load_langgraph_example():
    pytest.importorskip("langgraph.graph", reason="langgraph is not installed: run adapters/vllm/setup-venv.sh")
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed: run adapters/vllm/setup-venv.sh")
    import importlib.util

    from conftest import REPO

    path = REPO / "examples" / "langgraph" / "graph.py"
    spec = importlib.util.spec_from_file_location("agentrt_langgraph_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_langgraph_graph_through_agentrt_serve(start_stack):
    """The operator's path, walked by a real framework: examples/langgraph unchanged but for
    base_url, every node streaming its answer without asking for usage (as LangChain does against
    any URL but OpenAI's), through the proxy in front of vLLM with the plugin (installed from its
    wheel) ranking evictions. The proxy must name the three ChatOpenAI nodes as three agents and
    each run of the graph as one session; every call must succeed; the prompt and cached tokens of
    the streamed calls must reach `/metrics` while the client gets no usage chunk it did not ask
    for; and `/metrics` must show the plugin connected and its rankings answered."""
    from langchain_core.messages import HumanMessage
    from langchain_openai import ChatOpenAI

    example = load_langgraph_example()
    stack = start_stack("cachesage", admin_token="e2e-admin")
    graph = example.build_graph(stack.serve.base + "/v1", max_tokens=8, stream=True)
    # Tasks long enough (~20 blocks each, in each node's prompt) that the 80-block cache must evict.
    rng = random.Random(3)
    tasks = [f"{task} Context: {_words(rng, 300)}" for task in example.TASKS[:3]]
    for task in tasks:
        result = graph.invoke({"task": task})  # ChatOpenAI(max_retries=0): a failed call raises here
        assert all(isinstance(result[k], str) for k in ("plan", "patch", "review")), result
    listing = stack.serve.tenants()
    print("\nGET /admin/tenants:", json.dumps(listing))
    (tenant,) = listing["tenants"]
    assert tenant["agents"] == 3, f"three ChatOpenAI nodes with three system prompts are three agents: {tenant}"
    assert tenant["sessions"] == len(tasks), f"one session per task: {tenant}"

    # One more streamed call, read as LangChain reads it: no usage reaches a client that did not ask.
    answer = ChatOpenAI(model="tiny", base_url=stack.serve.base + "/v1", api_key="not-needed", max_tokens=4,
                        streaming=True, max_retries=0).invoke([HumanMessage(tasks[0])])
    assert not answer.usage_metadata, f"the client got a usage chunk it did not ask for: {answer.usage_metadata}"

    time.sleep(0.5)  # the last finish reaches the tenant's counters
    proxy = stack.serve.metrics()
    text = stack.serve.metrics_text()
    print("eviction path:", {k: v for k, v in proxy.items() if k.startswith("agentrt_engine_")})
    print("tokens:", {k: v for k, v in proxy.items() if k.startswith("agentrt_tenant_") and "tokens" in k})
    assert proxy["agentrt_proxy_requests_total"] == 3 * len(tasks) + 1
    assert proxy["agentrt_proxy_requests_failed_total"] == 0
    assert proxy["agentrt_proxy_upstream_errors_total"] == 0
    assert proxy["agentrt_proxy_bad_requests_total"] == 0
    # Every call streamed and none asked for usage: without the proxy asking, these stay 0.
    assert proxy["agentrt_tenant_prompt_tokens_total"] > 3 * len(tasks) * 300, proxy
    assert proxy["agentrt_tenant_cached_tokens_total"] > 0, "each node's second call hits its anchor"
    assert proxy["agentrt_engine_plugin_connected"] >= 1, "the plugin is connected"
    assert proxy["agentrt_engine_rank_requests_total"] > 0, "vLLM asked the policy which blocks to evict"
    assert proxy["agentrt_engine_rank_fallbacks_total"] == 0
    assert series(text, "agentrt_policy_calls_total", 'primitive="score"') > 0, "the policy ranked them"
    vllm = stack.vllm.metrics()
    assert vllm.get("vllm:request_success_total", 0) >= 3 * len(tasks), "vLLM finished every call"


def test_tenants_never_hit_each_others_prompts_unless_the_anchor_is_public(start_stack, tmp_path):
    """A prefix-cache hit is visible in timing and in `cached_tokens`: a tenant that could hit
    another tenant's blocks could test what that tenant sent. The proxy salts each tenant's
    requests (vLLM's `cache_salt`), so the same prompt from beta after alpha computes from scratch,
    while each tenant still hits its own cache. An anchor the operator marks public (config file,
    reloaded without a restart) carries one salt for every tenant: then beta hits alpha's blocks."""
    from conftest import http_json

    config = tmp_path / "tenants.toml"
    tenants = '[tenants.alpha]\napi_keys = ["key-a"]\n[tenants.beta]\napi_keys = ["key-b"]\n'
    config.write_text(tenants)
    stack = start_stack("lru", admin_token="adm",
                        serve_args=("--config", str(config), "--cache-salt-secret", "e2e-salt"))
    rng = random.Random(5)
    system, shared_system = _words(rng, 220), _words(rng, 220)

    def cached(key: str, system: str = system) -> int:
        body = {"model": "tiny", "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Summarise the notes."}]}
        status, reply = http_json(stack.serve.base + "/v1/chat/completions", body,
                                  headers={"authorization": f"Bearer {key}"})
        assert status == 200, reply
        return (reply["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0

    first_alpha, second_alpha = cached("key-a"), cached("key-a")
    first_beta, second_beta = cached("key-b"), cached("key-b")
    print(f"\ncached tokens: alpha {first_alpha} → {second_alpha}; beta {first_beta} → {second_beta}")
    assert first_alpha == 0
    assert second_alpha >= 64, "a tenant hits its own cached prompt"
    assert first_beta == 0, "another tenant's identical prompt is not a hit"
    assert second_beta >= 64, "beta hits its own blocks"

    # The operator marks the shared anchor public: its hash from alpha's stats, then a reload.
    def anchors() -> set:
        status, stats = http_json(stack.serve.base + "/admin/tenants/alpha/stats",
                                  headers={"authorization": "Bearer adm"})
        assert status == 200, stats
        return {a["hash"] for a in stats["tables"]["anchor_list"]}

    before = anchors()
    cached("key-a", shared_system)
    (public,) = anchors() - before
    config.write_text(f'{tenants}[public]\nanchors = ["{public}"]\n')
    status, reloaded = http_json(stack.serve.base + "/admin/reload", {}, headers={"authorization": "Bearer adm"})
    assert status == 200, reloaded
    # Alpha's first request under the public salt finds none of its privately salted blocks.
    assert cached("key-a", shared_system) == 0, "the public salt is not alpha's own"
    beta_on_public = cached("key-b", shared_system)
    print(f"beta on alpha's public anchor: {beta_on_public} cached tokens")
    assert beta_on_public >= 64, "a public anchor's blocks serve every tenant"


def streamed(base: str, path: str, body: dict) -> str:
    """The text of a streamed call's answer, whole."""
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
        return r.read().decode()


def test_responses_and_messages_apis_through_the_proxy(start_stack):
    """Agent SDKs speak the Responses API (OpenAI Agents SDK) and the Anthropic Messages API; vLLM
    serves both. Through the proxy each call is identified (one agent per system prompt), its
    usage counted, streamed or not, and the second call of an agent hits its cached anchor. A
    streamed chat completion or completion that does not ask for usage is counted too, and its
    client gets no usage chunk."""
    from conftest import http_json

    stack = start_stack("lru", admin_token="adm")
    rng = random.Random(11)
    researcher, writer = _words(rng, 220), _words(rng, 220)
    calls = {
        "/v1/responses": lambda stream: {"model": "tiny", "instructions": researcher, "input": "Summarise the notes.",
                                         "max_output_tokens": 4, "temperature": 0, "stream": stream},
        "/v1/messages": lambda stream: {"model": "tiny", "system": writer, "max_tokens": 4, "temperature": 0,
                                        "messages": [{"role": "user", "content": "Summarise the notes."}], "stream": stream},
    }

    def cached(path: str, reply: dict) -> int:
        usage = reply["usage"]
        if path == "/v1/responses":
            return (usage.get("input_tokens_details") or {}).get("cached_tokens") or 0
        return usage.get("cache_read_input_tokens") or 0

    def counted() -> tuple[float, float]:
        time.sleep(0.3)  # a stream's finish is told after its last byte
        proxy = stack.serve.metrics()
        return proxy.get("agentrt_tenant_prompt_tokens_total", 0), proxy.get("agentrt_tenant_cached_tokens_total", 0)

    for path, body in calls.items():
        first = http_json(stack.serve.base + path, body(False))
        second = http_json(stack.serve.base + path, body(False))
        assert first[0] == 200 and second[0] == 200, (first, second)
        print(f"\n{path}: cached tokens {cached(path, first[1])} → {cached(path, second[1])}")
        assert cached(path, second[1]) >= 64, f"{path}: the agent's second call hits its anchor"
        before = counted()
        answer = streamed(stack.serve.base, path, body(True))
        assert "data:" in answer, answer[:500]
        after = counted()
        assert after[0] > before[0] and after[1] >= before[1] + 64, f"{path}: the streamed call counted: {before} → {after}"

    # Chat completions and completions stream usage only when asked; the proxy asks for it.
    quiet = {
        "/v1/chat/completions": {"model": "tiny", "max_tokens": 4, "temperature": 0, "stream": True,
                                 "messages": [{"role": "system", "content": researcher},
                                              {"role": "user", "content": "Summarise the notes."}]},
        "/v1/completions": {"model": "tiny", "max_tokens": 4, "temperature": 0, "stream": True,
                            "prompt": researcher},
    }
    for path, body in quiet.items():
        for _ in range(2):  # the second one hits the first one's blocks
            before = counted()
            answer = streamed(stack.serve.base, path, body)
            after = counted()
            assert answer.rstrip().endswith("data: [DONE]"), answer[-300:]
            assert '"usage"' not in answer, f"{path}: a usage chunk the client did not ask for: {answer[-500:]}"
            assert after[0] > before[0], f"{path}: the streamed call's prompt tokens were not counted"
        assert after[1] >= before[1] + 64, f"{path}: the streamed call's cached tokens were not counted"
    status, tenants = http_json(stack.serve.base + "/admin/tenants", headers={"authorization": "Bearer adm"})
    assert status == 200, tenants
    # Responses, Messages, the chat completion (the researcher's anchor again) and the completion.
    assert tenants["tenants"][0]["agents"] == 3, tenants
    proxy = stack.serve.metrics()
    assert proxy["agentrt_proxy_requests_failed_total"] == 0
    assert proxy["agentrt_tenant_cached_tokens_total"] >= 128, proxy


def agents_python() -> Path:
    """The venv of examples/setup-venv.sh (AGENTRT_AGENTS_VENV overrides); skip without it."""
    venv = Path(os.environ.get("AGENTRT_AGENTS_VENV", Path.home() / ".cache" / "agentrt" / "venv-agents"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no agent-frameworks venv at {venv}: run examples/setup-venv.sh")
    return python


# examples/openai-agents needs answers that end: the OpenAI Agents SDK refuses one cut at max_tokens
# (Responses: `response.incomplete`; chat completions: "finish_reason='length' but produced no
# assistant text"), and the plain tiny model never ends one. It runs on the variant that does
# (make_tiny_model.py --ends-answers), with room for its longest answer to these tasks.
EXAMPLE_ARGS = {"autogen/team.py": ("--max-tokens", "8"), "openai-agents/research.py": ("--max-tokens", "64")}


@pytest.mark.parametrize("example, agents", [("autogen/team.py", 2)])
def test_an_agent_framework_example_through_agentrt_serve(start_stack, example, agents):
    """examples/autogen, unchanged but for base_url, runs against the proxy and a real vLLM: every
    call succeeds and each agent is one agent."""
    import subprocess

    from conftest import REPO

    python = agents_python()
    stack = start_stack("cachesage", admin_token="e2e-admin")
    tasks = 2
    run = subprocess.run([str(python), str(REPO / "examples" / example), "--base-url", stack.serve.base + "/v1",
                          "--tasks", str(tasks), *EXAMPLE_ARGS[example]], capture_output=True, text=True, timeout=600)
    print(run.stdout[-2000:], run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    (tenant,) = stack.serve.tenants()["tenants"]
    assert tenant["agents"] == agents, tenant
    proxy = stack.serve.metrics()
    assert proxy["agentrt_proxy_requests_total"] >= 2 * tasks
    assert proxy["agentrt_proxy_requests_failed_total"] == 0
    assert proxy["agentrt_proxy_bad_requests_total"] == 0


def test_the_openai_agents_sdk_example_through_agentrt_serve(start_stack, tiny_model_that_ends):
    """examples/openai-agents, unchanged but for base_url, runs on the Responses API (the SDK's
    default) against the proxy and a real vLLM serving the tiny model that ends its answers: both
    runs of both tasks complete, every call succeeds, and the researcher and the writer are two
    agents."""
    import subprocess

    from conftest import REPO

    python = agents_python()
    stack = start_stack("cachesage", admin_token="e2e-admin", model=tiny_model_that_ends)
    tasks = 2
    example = "openai-agents/research.py"
    run = subprocess.run([str(python), str(REPO / "examples" / example), "--base-url", stack.serve.base + "/v1",
                          "--tasks", str(tasks), *EXAMPLE_ARGS[example]], capture_output=True, text=True, timeout=600)
    print(run.stdout[-2000:], run.stderr[-3000:])
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("answer:") == tasks, run.stdout
    (tenant,) = stack.serve.tenants()["tenants"]
    assert tenant["agents"] == 2, tenant
    proxy = stack.serve.metrics()
    assert proxy["agentrt_proxy_requests_total"] >= 2 * tasks
    assert proxy["agentrt_proxy_requests_failed_total"] == 0
    assert proxy["agentrt_proxy_bad_requests_total"] == 0
