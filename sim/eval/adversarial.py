#!/usr/bin/env python3
"""Traces built to break a policy that puts the framework's hints first (docs/results.md,
"Traces built to break it"): rewrite an imported trace's agents and closings.

    python3 sim/eval/adversarial.py IN.jsonl OUT.jsonl [--one-agent] [--close-half] [--lie F] [--seed N]

--one-agent   every request is one agent's ("one"): the agent tells nothing about a session.
--close-half  closings for half of the sessions only, chosen against the policy: the sessions
              whose last prompt another session asks for again soonest (their closing is true,
              but their content is not dead) come first; the rest of the half at random.
--lie F       a fraction F of the closing sessions that call more than once also close at a
              random earlier call, and then call again: a lying hint.

The choice of the half looks at the whole trace (the future): it is an adversary, not a
framework. Prints what it changed.
"""

import argparse
import bisect
import json
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--one-agent", action="store_true")
    ap.add_argument("--close-half", action="store_true")
    ap.add_argument("--lie", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    lines = [json.loads(l) for l in open(a.src) if l.strip()]
    by_session = {}
    for i, r in enumerate(lines):
        by_session.setdefault(r["session"], []).append(i)
    closing = [s for s, idx in by_session.items() if lines[idx[-1]].get("hints", {}).get("closes")]
    kept = set(closing)
    if a.close_half:
        kept = set(harmful_half(lines, by_session, closing, rng))
        for s in closing:
            if s not in kept:
                lines[by_session[s][-1]].get("hints", {}).pop("closes", None)
    lied = 0
    if a.lie > 0:
        liars = [s for s in sorted(kept) if len(by_session[s]) > 1]
        rng.shuffle(liars)
        for s in liars[: round(a.lie * len(kept))]:
            early = rng.choice(by_session[s][:-1])
            lines[early].setdefault("hints", {})["closes"] = True
            lied += 1
    if a.one_agent:
        for r in lines:
            r["agent"] = "one"
    with open(a.out, "w") as f:
        for r in lines:
            if r.get("hints") == {}:
                del r["hints"]
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    print(
        f"{a.src}: {len(by_session)} sessions, {len(closing)} closing; kept {len(kept)} closings"
        f"{' (the half whose content comes back soonest)' if a.close_half else ''}, {lied} lying"
        f"{', one agent' if a.one_agent else ''} → {a.out}"
    )


def harmful_half(lines, by_session, closing, rng):
    """Half of all sessions, taken from the closing ones: those whose last prompt's own
    segments (not the anchor's) another session's later request carries soonest first."""
    uses = {}
    for i, r in enumerate(lines):
        for seg in r["prompt"]:
            if not seg["seg"].startswith(("sys/", "tools/")):
                uses.setdefault(seg["seg"], []).append(i)
    soonest = {}
    for s in closing:
        last = by_session[s][-1]
        later = [
            j - last
            for seg in lines[last]["prompt"]
            for j in uses.get(seg["seg"], [])[bisect.bisect_right(uses.get(seg["seg"], []), last) :][:64]
            if lines[j]["session"] != s
        ]
        soonest[s] = min(later) if later else None
    reused = sorted((d, s) for s, d in soonest.items() if d is not None)
    never = [s for s, d in soonest.items() if d is None]
    rng.shuffle(never)
    order = [s for _, s in reused] + never
    return order[: len(by_session) // 2]


if __name__ == "__main__":
    main()
