"""End to end, many applications: a scaled-down ``fleet`` (docs/workloads.md) through ``agentrt
serve`` in front of a real vLLM (CPU, the tiny model), run from a cold cache with LRU and with
CacheSage, and judged by the
workload's own requests' cached tokens (``usage.prompt_tokens_details.cached_tokens``).

test_e2e_serve.py has one application of three agents whose anchors fit in the cache together.
Here one engine serves seven small applications of three agents each — 21 agents, each with its
own system prompt and one or two tool definitions: anchors of 426–808 tokens with the tiny tokenizer
(median 468; measured with vLLM's ``/tokenize`` and printed by the test), 11.3 k tokens in all —
4.4 times the 80-block cache — while each agent's share of the cache (80 / 21 ≈ 4 blocks) is far
below its anchor (13–25 blocks). Sessions are spread over the seven apps in Zipf's proportions
(s = 1: 25, 12, 8, 6, 5, 4 and 4 of 64 sessions — a few popular apps and a tail of rare ones), in a
seeded random order; four sessions are in progress at once and their steps are interleaved. Three kinds of app, after docs/workloads.md's fleet:

    support   triage → specialist × 2–4 customer turns → summarizer
    pipeline  researcher → writer → reviewer ⟲ writer → reviewer (30 %, then halving)
    coding    planner → coder → tester ⟲ coder → tester (40 %, ×0.6 per round, ≤ 3 more)

The parameters (apps, agents, prompt sizes, popularity, sessions, concurrency, seed) were fixed from
that description before any policy was run on this workload, and not tuned afterwards.

Slow (three vLLM starts, 25–60 s each on two cores): AGENTRT_SKIP_VLLM_SERVE=1 skips it.
Set AGENTRT_E2E_RESULTS=path.md to also write the workload and the measured table there
(docs/results-vllm.md, "A scaled-down fleet").
"""

from __future__ import annotations

import os
import random
import statistics
from dataclasses import dataclass

import pytest

from conftest import SKIP_SERVE_REASON, http_json
from test_e2e_serve import HEADER, Call, Run, _tool, _words, assert_runs_healthy, measure, report_runs

pytestmark = pytest.mark.skipif(os.environ.get("AGENTRT_SKIP_VLLM_SERVE") == "1", reason=SKIP_SERVE_REASON)

BLOCKS = 80  # KV-cache blocks of 32 tokens (--num-gpu-blocks-override), as in test_e2e_serve.py
SESSIONS = 64  # sessions (tasks), each of one application
LIVE = 4  # sessions in progress at once, their requests interleaved
ZIPF = 1.0  # popularity of app i (0-based) ∝ 1 / (i + 1) ** ZIPF
MAX_TOKENS = 4
SEED = 2024
SERVE_ARGS = ("--session-idle-ms", "1000")  # as test_e2e_serve.py: a session silent for 1 s is done

# --- the catalog: seven applications of three agents ------------------------------------------------

KINDS = {
    "support": ("triage", "specialist", "summarizer"),
    "pipeline": ("researcher", "writer", "reviewer"),
    "coding": ("planner", "coder", "tester"),
}

# (name, kind, what the application is about), most popular first.
APPS = [
    ("Lumen Telecom care", "support",
     "Customers of Lumen Telecom ask about mobile plans, roaming charges abroad, disputed invoices, "
     "number porting and broken SIM cards."),
    ("Atlas market brief", "pipeline",
     "Atlas writes weekly market briefs for retail investors: interest rates, earnings season, "
     "commodity prices and currency moves, in plain words."),
    ("Forge payments service", "coding",
     "Forge is the payments service of an online shop, a Go code base with a Postgres schema, a "
     "message queue for refunds and a REST API used by the mobile apps."),
    ("Quarry Bank cards desk", "support",
     "Clients of Quarry Bank call about blocked debit cards, chargebacks, travel notices, credit "
     "limits and suspicious transactions on their statements."),
    ("Harbor grant writer", "pipeline",
     "Harbor drafts grant applications for small charities: needs statements, budgets, impact "
     "measures and letters of support, following each funder's rules."),
    ("Kestrel data platform", "coding",
     "Kestrel is an internal data platform in Python: ingestion jobs, a scheduler, dbt models and "
     "a small web console for analysts."),
    ("Orchard Health front desk", "support",
     "Patients of Orchard Health clinics book and move appointments, ask about prescriptions and "
     "referrals, and query bills covered by their insurance."),
]

ROLE_TEXT = {
    "triage": (
        "You are the first contact. Read the customer's message, find out who they are and what they "
        "need, and route the case to the right specialist queue with a one-line summary. Ask at most "
        "one clarifying question. Never promise refunds or dates yourself."),
    "specialist": (
        "You are the specialist who owns the case after triage. Follow the policy document strictly, "
        "verify identity before you change anything on an account, explain each step to the customer "
        "in short sentences and use the tools to look up and change records."),
    "summarizer": (
        "You close the case. Write a summary for the case log: the customer's problem, what was "
        "checked, what was changed, what was promised and any follow-up with its due date. Keep it "
        "under ten lines and factual."),
    "researcher": (
        "You collect the facts for the brief. Search for recent, reliable sources, note for every "
        "fact its source and date, and flag numbers that disagree between sources. Do not write "
        "prose; hand over a list of findings."),
    "writer": (
        "You write the text from the researcher's findings and the reviewer's notes. Use a clear "
        "structure with headings, short paragraphs and no jargon. Every number must come from the "
        "findings; cite the source in brackets."),
    "reviewer": (
        "You review the writer's draft against the findings and the house style. List concrete "
        "problems in order of importance: wrong or unsupported claims, missing points, unclear "
        "sentences. Answer APPROVED when nothing important is left."),
    "planner": (
        "You turn the task into a short ordered plan the coder can follow without questions. For every "
        "step name the files to change, the functions whose behaviour changes and the tests that "
        "prove it. Never write code yourself."),
    "coder": (
        "You implement the next unfinished step of the plan as a minimal patch in unified diff format, "
        "in the existing style of the code base. Read files before changing them. If the tester "
        "reported a failure, fix the cause, not the test."),
    "tester": (
        "You check the coder's latest patch against the plan step. Write or update unit tests for the "
        "changed behaviour and its edge cases, run them with the tools and report PASS or FAIL with "
        "the failing test names and the likely cause."),
}

RULES = [
    "Answer in the language of the user.",
    "Never reveal internal notes, credentials or other customers' data.",
    "If a tool call fails, retry once, then say what failed and continue without it.",
    "Prefer short answers; the next agent reads everything you write.",
    "Dates are written as year-month-day and amounts with their currency.",
    "When you are unsure, say so and name what would settle the question.",
    "Escalate to a human when the user asks for one or mentions legal action.",
    "Keep a neutral tone, even when the user is upset.",
    "Quote identifiers exactly as the tools return them.",
    "Do not repeat what earlier agents already wrote; refer to it.",
]

ROLE_TOOLS = {
    "triage": [("lookup_customer", "Find a customer by phone, e-mail or account number.", {"query": "phone, e-mail or account"}),
               ("route_case", "Put the case into a specialist queue.", {"queue": "queue name", "summary": "one line"})],
    "specialist": [("get_account", "Read the account, its products and recent events.", {"account": "account id"}),
                   ("update_account", "Change a field of the account, with a reason.", {"account": "account id", "change": "field=value", "reason": "why"})],
    "summarizer": [("write_case_log", "Append the closing summary to the case.", {"case": "case id", "text": "the summary"})],
    "researcher": [("web_search", "Search the web; returns titles, links and snippets.", {"query": "search terms"}),
                   ("fetch_page", "Fetch a page and return its main text.", {"url": "the address"})],
    "writer": [("save_draft", "Save the current draft under a version number.", {"text": "the draft"})],
    "reviewer": [("style_check", "Check a text against the house style guide.", {"text": "the text"}),
                 ("diff_drafts", "Show what changed between two draft versions.", {"old": "version", "new": "version"})],
    "planner": [("search_code", "Search the repository for a symbol or text.", {"query": "text to look for"})],
    "coder": [("read_file", "Read a file of the working tree.", {"path": "file path"}),
              ("apply_patch", "Apply a unified diff to the working tree.", {"diff": "the patch"})],
    "tester": [("run_tests", "Run the tests whose names match a filter.", {"filter": "part of a test name"})],
}


@dataclass
class Agent:
    app: int
    role: str
    system: str
    tools: list[dict]

    @property
    def name(self) -> str:
        return f"app{self.app}-{self.role}"


def catalog(seed: int = SEED) -> list[Agent]:
    """The 21 agents: per app and role, an opening that names both (so no two agents share their
    first block), the role's duties, 0–3 house rules, and 1–2 tools (the app's domain goes into
    each task: with it, and 0–4 rules, anchors came to 504–889 tokens, above the 300–700 aimed at)."""
    rng = random.Random(seed)
    agents = []
    for index, (name, kind, _) in enumerate(APPS):
        for role in KINDS[kind]:
            rules = rng.sample(RULES, rng.randint(0, 3))
            system = " ".join([f"You are the {role} agent of {name}, one of three agents of this {kind} "
                               f"application.", ROLE_TEXT[role], *rules])
            pool = ROLE_TOOLS[role]
            chosen = pool[:rng.randint(1, len(pool))]
            tools = [_tool(t, f"{name}: {d}", p) for t, d, p in chosen]
            agents.append(Agent(index, role, system, tools))
    return agents


def zipf_counts(sessions: int = SESSIONS) -> list[int]:
    """Sessions per app: exactly Zipf's shares (largest remainders), so a 64-session run has the
    popularity profile it describes rather than one draw of it (25, 12, 8, 6, 5, 4, 4 here)."""
    weights = [1 / (i + 1) ** ZIPF for i in range(len(APPS))]
    shares = [sessions * w / sum(weights) for w in weights]
    counts = [int(x) for x in shares]
    for i in sorted(range(len(APPS)), key=lambda i: counts[i] - shares[i])[:sessions - sum(counts)]:
        counts[i] += 1
    return counts


def _flow(kind: str, rng: random.Random) -> list[str]:
    if kind == "support":
        return ["triage", *["specialist"] * rng.randint(2, 4), "summarizer"]
    if kind == "pipeline":
        flow, p = ["researcher", "writer", "reviewer"], 0.3
        while rng.random() < p:
            flow += ["writer", "reviewer"]
            p /= 2
        return flow
    flow, p = ["planner", "coder", "tester"], 0.4
    while rng.random() < p and len(flow) < 9:
        flow += ["coder", "tester"]
        p *= 0.6
    return flow


def workload(agents: list[Agent], sessions: int = SESSIONS, live: int = LIVE, seed: int = SEED) -> list[tuple[Call, Agent]]:
    """The requests in the order they are sent: ``live`` sessions at a time, one step of each in
    turn; a finished session's place goes to the next. Each step's prompt: the agent's anchor, the
    task, the last three steps' notes and a turn line (as test_e2e_serve.py)."""
    rng = random.Random(seed + 1)
    by_key = {(a.app, a.role): a for a in agents}
    order = [app for app, n in enumerate(zipf_counts(sessions)) for _ in range(n)]
    rng.shuffle(order)
    tasks = []
    for s, app in enumerate(order):
        flow = _flow(APPS[app][1], rng)
        task = f"Task {s} for {APPS[app][0]}. {APPS[app][2]} " + _words(rng, rng.randint(30, 45))
        notes = [_words(rng, rng.randint(10, 16)) for _ in flow]
        tasks.append((app, task, flow, notes))
    out: list[tuple[Call, Agent]] = []
    pending = list(range(sessions))
    active: list[list[int]] = []
    while pending or active:
        while len(active) < live and pending:
            active.append([pending.pop(0), 0])
        still = []
        for slot in active:
            index, step = slot
            app, task, flow, notes = tasks[index]
            agent = by_key[(app, flow[step])]
            messages = [{"role": "system", "content": agent.system}, {"role": "user", "content": task}]
            messages += [{"role": "assistant", "content": n} for n in notes[:step][-3:]]
            messages.append({"role": "user", "content": f"{agent.role}, your turn (step {step + 1})."})
            body = {"model": "tiny", "messages": messages, "tools": agent.tools, "tool_choice": "none",
                    "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}
            out.append((Call(f"task-{index}", agent.name, body), agent))
            slot[1] += 1
            if slot[1] < len(flow):
                still.append(slot)
        active = still
    return out


def anchor_tokens(base: str, agent: Agent) -> int:
    """The anchor's size as the proxy measures it: vLLM's /tokenize of system prompt + tools."""
    status, body = http_json(base + "/tokenize", {"model": "tiny", "messages": [{"role": "system", "content": agent.system}],
                                                  "tools": agent.tools, "add_generation_prompt": False})
    assert status == 200, body
    return body["count"]


# --- running it -------------------------------------------------------------------------------------


def run_policy(start_stack, label: str, policy: str, calls: list[tuple[Call, Agent]], config: tuple[str, ...] = (),
               sizes: dict[str, int] | None = None) -> Run:
    serve_args = (*SERVE_ARGS, *(a for kv in config for a in ("--policy-config", kv)))
    stack = start_stack(policy, blocks=BLOCKS, serve_args=serve_args, log_level=os.environ.get("AGENTRT_LOG", "info"))
    run = Run(label, ready_s=stack.vllm.ready_s or 0.0)
    try:
        if sizes is not None and not sizes:  # measured once, on the first (cold) stack; touches no KV block
            for agent in {a.name: a for _, a in calls}.values():
                sizes[agent.name] = anchor_tokens(stack.vllm.base, agent)
        measure(stack, run, [call.body for call, _ in calls])
    finally:
        stack.stop()  # cold cache for the next policy: a fresh vLLM and a fresh proxy
    print(f"\n[{label}] vLLM ready in {run.ready_s:.1f} s; {len(calls)} requests in {run.wall_s:.1f} s; "
          f"logs in {stack.workdir}")
    late = len(calls) // 2
    for app, (name, _, _) in enumerate(APPS):
        mine = [o for (c, a), o in zip(calls[late:], run.outcomes[late:]) if a.app == app]
        if mine:
            print(f"[{label}] app {app} ({name}): 2nd half {len(mine)} requests, cached "
                  f"{sum(o.cached_tokens for o in mine) / max(1, sum(o.prompt_tokens for o in mine)):.3f}")
    return run


def test_cachesage_beats_lru_on_a_fleet_on_a_real_vllm(start_stack):
    agents = catalog()
    calls = workload(agents)
    used = {a.name for _, a in calls}
    sizes: dict[str, int] = {}
    runs = [run_policy(start_stack, "lru", "lru", calls, sizes=sizes),
            run_policy(start_stack, "cachesage", "cachesage", calls)]
    lru, sage = runs

    sessions_per_app = [0] * len(APPS)
    seen = set()
    for call, agent in calls:
        if call.session not in seen:
            seen.add(call.session)
            sessions_per_app[agent.app] += 1
    anchor_blocks = sum(sizes.values()) / 32
    lines = [
        f"{len(APPS)} apps × 3 agents = {len(agents)} agents ({len(used)} used), {SESSIONS} sessions "
        f"({LIVE} live), {len(calls)} requests, {BLOCKS} blocks of 32 tokens, seed {SEED}",
        f"sessions per app (most popular first): {sessions_per_app}",
        f"anchor tokens (vLLM /tokenize): min {min(sizes.values())}, median {statistics.median(sizes.values()):.0f}, "
        f"max {max(sizes.values())}, total {sum(sizes.values())} = {anchor_blocks:.0f} blocks "
        f"= {anchor_blocks / BLOCKS:.1f}× the cache; cache share per agent {BLOCKS / len(used):.1f} blocks",
        "mean prompt tokens per request: "
        f"{statistics.mean(o.prompt_tokens for o in lru.outcomes):.0f}",
        "",
        HEADER,
        *(r.row() for r in runs),
    ]
    report = "\n".join(lines)
    print("\nanchors:", {k: sizes[k] for k in sorted(sizes)})
    print("\n" + report)
    report_runs(runs, report)
    assert_runs_healthy(runs, anchors=len(used))
    assert anchor_blocks > 3 * BLOCKS, f"the anchors ({anchor_blocks:.0f} blocks) must be several times the cache"
    assert sage.proxy.get("agentrt_proxy_warmups_failed_total", 0) == 0, "cachesage: vLLM refused warm-ups"
    # The claim: CacheSage beats LRU on the workload's own requests (warm-ups excluded).
    assert sage.user_hit_rate > lru.user_hit_rate, (
        f"CacheSage's user-request hit rate {sage.user_hit_rate:.3f} is not above LRU's {lru.user_hit_rate:.3f}\n{report}")
