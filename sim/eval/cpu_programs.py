#!/usr/bin/env python3
"""Closed-loop agent programs shaped like the real-vLLM check on the tiny CPU model (issue 48's
held-out run): prompts growing to ~2.8 k tokens over 12 calls, a tool of 0.5-2 s between calls,
a 400-token system prompt shared by every program. For `sim knee --latency prefill-free`, with
the run's 300-block cache of 32 tokens (`--capacity-blocks 600` at the simulator's 16):

    python3 sim/eval/cpu_programs.py > cpu-programs.jsonl
    agentrt sim knee --trace cpu-programs.jsonl --axis programs --points 8,16,32,64 \
        --capacity-blocks 600 --latency prefill-free \
        --arms vllm,cap,thunderagent,working-set

(sim/eval/knee.sh runs it so; the figures are in docs/admission.md.)

Deterministic (seed 1). 256 programs: four times the largest point, so that every point keeps
all its programs busy.
"""
import json
import random

rng = random.Random(1)
for p in range(256):
    prompt = [{"seg": "sys/agent", "tokens": 400}, {"seg": f"p{p}/task", "tokens": 100}]
    for call in range(12):
        last = call == 11
        line = {
            "session": f"p{p}",
            "agent": "agent",
            "after_ms": 0 if call == 0 else round(rng.uniform(500, 2000), 1),
            "prompt": list(prompt),
            "output_tokens": 40,
        }
        if last:
            line["hints"] = {"closes": True}
        else:
            line["tool_call"] = True
            line["hints"] = {"wait": {"kind": "tool", "tool": "shell"}}
        print(json.dumps(line))
        prompt.append({"seg": f"p{p}/act-{call}", "tokens": 40})
        prompt.append({"seg": f"p{p}/obs-{call}", "tokens": rng.randint(100, 220)})
