"""The simulated twin of adapters/vllm/eval/routers.py: the same agents, sessions and calls as a
trace (token counts from the tiny model's own tokenizer and chat template), replayed on two
simulated replicas of the same cache (2,560 tokens: the real run's 80 blocks of 32, here 160 of 16) under the simulator's models of the
same routers (docs/replicas.md, "Real run: every router").

    .venv-vllm/bin/python adapters/vllm/eval/routers_twin.py [--out DIR]   # default target/routers-real

Uses the tiny model routers.py made in DIR (made here when missing) and the release `agentrt`.
What differs from the real run, by construction: the simulator's latency is an H100's, not a CPU's
(compare hit rates, not TTFT); each group's four sessions run concurrently rather than one call at
a time; an answer in a session's history is counted as the two tokens "ok." would take, not the
model's own four; prefixes match in 16-token blocks, not 32.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from routers import AGENTRT, ANCHORS, AT_ONCE, BLOCK, BLOCKS, REPO, TARGET, workload  # noqa: E402

# The simulator's block size (16 tokens); the real replicas' cache is the same number of tokens.
SIM_BLOCK = 16

ROWS = [
    ("round_robin", ["--router", "round-robin"], "lru"),
    ("cache_aware", ["--router", "cache-aware"], "lru"),
    ("kv_aware", ["--router", "kv-aware"], "lru"),
    ("kv_aware + affinity", ["--router", "kv-aware", "--kv-aware-session-affinity-ttl-secs", "60"], "lru"),
    ("agentrt router, lru", ["--router", "agentrt"], "lru"),
    ("agentrt router, cachesage", ["--router", "agentrt"], "cachesage"),
]


def trace(tokenizer) -> list[dict]:
    def count(messages: list[dict]) -> int:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=True)
        # Newer transformers answer a BatchEncoding.
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    lines = []
    for s, calls in enumerate(workload()):
        history: list[dict] = []
        group = s // AT_ONCE
        for turn, (agent, task) in enumerate(calls):
            system = [{"role": "system", "content": ANCHORS[agent]}]
            segments = [{"seg": f"sys/{agent}", "tokens": count(system)}]
            so_far = system
            for k, message in enumerate(history):
                tokens = count(so_far + [message]) - count(so_far)
                segments.append({"seg": f"s{s}/m{k}", "tokens": tokens})
                so_far = so_far + [message]
            user = {"role": "user", "content": task}
            segments.append({"seg": f"s{s}/m{len(history)}", "tokens": count(so_far + [user]) - count(so_far)})
            # A group starts a minute after the previous one; its sessions a few ms apart.
            after = group * 60_000.0 + (s % AT_ONCE) if turn == 0 else 0.0
            lines.append({"session": f"session-{s}", "agent": agent, "after_ms": after, "prompt": segments,
                          "output_tokens": 4})
            history += [user, {"role": "assistant", "content": "ok."}]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=TARGET / "routers-real")
    a = parser.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    model = a.out / "tiny-model"
    if not (model / "config.json").is_file():
        subprocess.run([sys.executable, str(REPO / "adapters/vllm/make_tiny_model.py"), str(model)], check=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    path = a.out / "twin.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in trace(tokenizer)))
    rows = []
    for name, flags, policy in ROWS:
        out = a.out / f"twin-{len(rows)}.json"
        subprocess.run([str(AGENTRT), "sim", "run", "--trace", str(path),
                        "--capacity-blocks", str(BLOCKS * BLOCK // SIM_BLOCK), "--replicas", "2", *flags, "--policies", policy,
                        "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
        result = json.loads(out.read_text())["policies"][policy]
        rows.append({"router": name, "hit_rate": result["hit_rate"], "ttft_ms_mean": result["ttft_ms_mean"]})
        print(json.dumps(rows[-1]), flush=True)
    (a.out / "twin.json").write_text(json.dumps(rows, indent=2))
    print("\n| router | simulated hit rate |")
    print("|---|---:|")
    for r in rows:
        print(f"| {r['router']} | {100 * r['hit_rate']:.1f} % |")


if __name__ == "__main__":
    main()
