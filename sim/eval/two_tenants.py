#!/usr/bin/env python3
"""Two tenants on one engine, one flooding sessions past the knee (issue 48's tenant target):
tenant `steady` runs SWE-agent-shaped programs about 6 at a time (below the knee alone), tenant
`flood` about 48 at a time. Reads a `swe` trace (its sessions in order) and writes the steady
tenant alone and both together, with Poisson starts (seeded):

    agentrt sim gen --workload swe --sessions 400 --out swe400.jsonl
    python3 sim/eval/two_tenants.py swe400.jsonl alone.jsonl together.jsonl
    agentrt sim knee --trace alone.jsonl --axis users --base-users 1 --points 1 --arms vllm,cap,thunderagent,working-set
    agentrt sim knee --trace together.jsonl --axis users --base-users 1 --points 1 --arms vllm,cap,thunderagent,working-set

A session's unloaded length is ~250 s (34 calls of a few seconds each and their tools), so a
start every 40 s keeps ~6 programs going and every 5 s ~48. The first 64 sessions are the steady
tenant's, the next 336 the flood's (both ~2,700 s of starts).
"""
import json
import random
import sys

src, alone, together = sys.argv[1:4]
sessions = []
for line in open(src):
    r = json.loads(line)
    if not sessions or sessions[-1][0] != r["session"]:
        sessions.append((r["session"], []))
    sessions[-1][1].append(r)

rng = random.Random(48)
steady, flood = sessions[:64], sessions[64:400]


def starts(group, mean_gap_s):
    t, out = 0.0, []
    for name, reqs in group:
        out.append((t, name, reqs))
        t += rng.expovariate(1.0 / mean_gap_s)
    return out


def write(path, groups):
    lines = []
    for tenant, timed in groups:
        for t, name, reqs in timed:
            for i, r in enumerate(reqs):
                r = dict(r, tenant=tenant)
                if i == 0:
                    r["after_ms"] = round(t * 1000.0, 3)
                lines.append(r)
    with open(path, "w") as f:
        for r in lines:
            f.write(json.dumps(r) + "\n")


steady_timed = starts(steady, 40.0)
flood_timed = starts(flood, 5.0)
write(alone, [("steady", steady_timed)])
write(together, [("steady", steady_timed), ("flood", flood_timed)])
