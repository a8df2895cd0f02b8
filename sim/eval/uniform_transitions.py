#!/usr/bin/env python3
"""A trace with no agent structure to learn: 12 agents, 600 sessions of 4–8 calls, each call to an
agent drawn uniformly at random; an agent's later call in a session extends its own previous prompt
and answer (its history), so session continuity is the only thing a policy can use. Sessions start
every 0.5 s on average (Poisson), 20 ms between a session's calls. Seeded; writes the trace format
(sim/src/trace.rs) to stdout.

    python3 sim/eval/uniform_transitions.py > uniform.jsonl
    agentrt sim run --trace uniform.jsonl --capacity-blocks 3000 --policies lru,cachesage,belady
"""
import json
import random
import sys

AGENTS = 12
SESSIONS = 600
rng = random.Random(7)
anchors = {a: rng.randint(400, 900) for a in range(AGENTS)}
t = 0.0
for s in range(SESSIONS):
    t += rng.expovariate(2.0)
    task = [{"seg": f"u{s}/task", "tokens": rng.randint(60, 200)}]
    history = {}
    for k in range(rng.randint(4, 8)):
        a = rng.randrange(AGENTS)
        own = history.get(a, [])
        prompt = [{"seg": f"sys/agent-{a}", "tokens": anchors[a]}] + task + own + [{"seg": f"u{s}/in-{k}", "tokens": rng.randint(30, 120)}]
        answer = {"seg": f"u{s}/out-{k}", "tokens": rng.randint(80, 250)}
        history[a] = prompt[1 + len(task):] + [answer]
        line = {"session": f"u{s}", "agent": f"agent-{a}", "after_ms": round(t * 1000, 1) if k == 0 else 20.0,
                "prompt": prompt, "output_tokens": answer["tokens"]}
        sys.stdout.write(json.dumps(line) + "\n")
