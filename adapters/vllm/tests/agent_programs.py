"""A load generator of agent programs, for an engine past its knee (issue 48's shape): each
program is one agent session — a system prompt shared by its agent type, then calls whose
context grows by the model's answer and a tool result each turn, a tool pause between two calls —
and ``programs`` of them run at once, closed loop. What a program says of its life is what an
agent framework says: its session's id and agent (``x-session-id``, ``x-agent-id``) and a
closing with its last call (``x-agentrt-session-end: closed``) — or, with ``thunder=True``,
ThunderAgent's client conventions: ``program_id`` in the body and ``POST /programs/release`` at
its end, which ``agentrt serve`` reads as the same identity and closing.

With ``total`` above ``programs``, each of the ``programs`` slots starts a new program when its
last one ends, until ``total`` have started: the load stays at ``programs`` at once instead of
draining, and calls per minute are counted over that steady window only — up to the moment the
first slot finds no program left to start (``Result.window_s``), so neither the tail, where fewer
programs run, nor its calls count.

Used by ``test_e2e_admission.py`` (the small version CI runs) and runnable against any
OpenAI-compatible URL::

    .venv-vllm/bin/python adapters/vllm/tests/agent_programs.py --url http://127.0.0.1:8080 --programs 16
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

FILLER = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
          "upsilon phi chi psi omega").split()


# The programs of docs/results-vllm.md's sweeps, by engine (make_tiny_model.py's --size), fixed
# before any arm ran: the tiny model's contexts grow to ~1.5 k tokens; the prefill-heavy model's
# to ~3.8 k, with a few more answer tokens, within its 8,192-token window.
LOADS = {
    "tiny": dict(turns=6, pause=(0.5, 2.0), system_words=100, turn_words=50, max_tokens=8),
    "prefill-heavy": dict(turns=10, pause=(0.5, 2.0), system_words=200, turn_words=50, max_tokens=16),
}


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(FILLER) for _ in range(n))


@dataclass
class Call:
    ok: bool
    latency_s: float
    ttft_s: float
    prompt_tokens: int
    cached_tokens: int
    ended_s: float = 0.0  # from the run's start
    # Why a call failed, in a few words (``failure_kind``); empty for an answered one.
    error: str = ""


@dataclass
class Result:
    programs: int
    calls: list[Call] = field(default_factory=list)
    wall_s: float = 0.0
    # The steady window: until the first slot had no program left to start (``wall_s`` when every
    # program started at once).
    window_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        window = self.window_s or self.wall_s
        answered = [c for c in self.calls if c.ok]
        ok = [c for c in answered if c.ended_s <= window]
        lat = sorted(c.latency_s for c in ok) or [0.0]
        prompt = sum(c.prompt_tokens for c in ok)
        cached = sum(c.cached_tokens for c in ok)

        def q(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))]

        return {
            "programs": self.programs,
            "calls": len(self.calls),
            "failed": len(self.calls) - len(answered),
            # What the failed calls died of, and after how long at most: a client's read timeout
            # (``timed out``: no byte for that long, as a call held in a proxy's queue sees it)
            # reads differently from an HTTP error.
            "failures": {kind: {"calls": len(lat), "longest_s": round(max(lat), 1)}
                         for kind, lat in failure_latencies(self.calls).items()},
            "wall_s": round(self.wall_s, 2),
            "window_s": round(window, 2),
            "calls_per_min": round(60 * len(ok) / window, 1) if window else 0.0,
            "hit_rate": round(cached / prompt, 3) if prompt else 0.0,
            "latency_p50_s": round(statistics.median(lat), 3),
            "latency_p99_s": round(q(0.99), 3),
            "ttft_p50_s": round(statistics.median([c.ttft_s for c in ok] or [0.0]), 3),
        }


class StreamError(Exception):
    """An error event in a stream whose status was 200 (``data: {"error": …}``)."""


def failure_kind(error: BaseException) -> str:
    """A failed call's cause in a few words: ``timed out`` (the client's read or connect timeout),
    ``HTTP <status>``, ``error event`` (a stream that ended in an error: a held stream's status is
    sent before its call goes), ``refused`` or the exception's type."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code}"
    if isinstance(error, StreamError):
        return "error event"
    reason = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "refused"
    return type(reason).__name__


def failure_latencies(calls: list[Call]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = collections.defaultdict(list)
    for c in calls:
        if not c.ok:
            out[c.error].append(c.latency_s)
    return dict(out)


def failures_said(summary: dict) -> str:
    """``summary``'s failures for a progress line: ``N failed`` and, when any, of what."""
    kinds = ", ".join(f"{kind} ×{f['calls']} (longest {f['longest_s']} s)" for kind, f in summary["failures"].items())
    return f"{summary['failed']} failed" + (f": {kinds}" if kinds else "")


def post(url: str, body: dict, headers: dict[str, str], timeout: float) -> urllib.request.addinfourl:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json", **headers})
    return urllib.request.urlopen(request, timeout=timeout)


def one_call(base: str, body: dict, headers: dict[str, str], timeout: float) -> Call:
    """One streamed chat completion: its latency, time to first piece and usage."""
    started = time.monotonic()
    ttft = None
    usage = {}
    error = ""
    try:
        with post(base + "/v1/chat/completions", body, headers, timeout) as reply:
            for raw in reply:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                if ttft is None:
                    ttft = time.monotonic() - started
                event = json.loads(line[6:])
                if event.get("error"):
                    raise StreamError(event["error"])
                usage = event.get("usage") or usage
        ok = True
    except Exception as e:  # noqa: BLE001  (a failed call is counted, not raised)
        ok, error = False, failure_kind(e)
    latency = time.monotonic() - started
    details = usage.get("prompt_tokens_details") or {}
    return Call(ok, latency, ttft if ttft is not None else latency, usage.get("prompt_tokens", 0),
                details.get("cached_tokens") or 0, error=error)


def program(base: str, index: int, turns: int, rng: random.Random, *, pause: tuple[float, float],
            system_words: int, turn_words: int, max_tokens: int, thunder: bool, timeout: float,
            out: list[Call], lock: threading.Lock, started: float) -> None:
    agent = f"agent-{index % 4}"
    session = f"program-{index}-{rng.randrange(1 << 30)}"
    system = f"You are {agent}. Tools: " + words(random.Random(index % 4), system_words)
    messages = [{"role": "system", "content": system},
                {"role": "user", "content": "task: " + words(rng, turn_words)}]
    for turn in range(turns):
        body = {"model": "tiny", "messages": messages, "max_tokens": max_tokens, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0}
        headers = {"x-agent-id": agent}
        if thunder:
            body["program_id"] = session
        else:
            headers["x-session-id"] = session
            if turn + 1 == turns:
                headers["x-agentrt-session-end"] = "closed"
        call = one_call(base, body, headers, timeout)
        call.ended_s = time.monotonic() - started
        with lock:
            out.append(call)
        messages = messages + [{"role": "assistant", "content": words(rng, max_tokens)},
                               {"role": "user", "content": "tool result: " + words(rng, turn_words)}]
        if turn + 1 < turns:
            time.sleep(rng.uniform(*pause))
    if thunder:
        try:
            post(base + "/programs/release", {"program_id": session}, {}, timeout).read()
        except Exception:  # noqa: BLE001
            pass


def run(base: str, programs: int, turns: int = 6, *, pause: tuple[float, float] = (0.5, 2.0),
        system_words: int = 120, turn_words: int = 90, max_tokens: int = 8, thunder: bool = False,
        seed: int = 1, timeout: float = 300.0, total: int | None = None) -> Result:
    """``programs`` programs of ``turns`` calls each at once — ``total`` in all (``programs`` by
    default: all started together), each slot starting the next when its program ends; returns
    every call."""
    total = max(total or programs, programs)
    result = Result(programs)
    lock = threading.Lock()
    next_program = iter(range(total))
    started = time.monotonic()

    def slot() -> None:
        while True:
            with lock:
                index = next(next_program, None)
                if index is None:
                    if total > programs and not result.window_s:
                        result.window_s = time.monotonic() - started
                    return
            program(base, index, turns, random.Random(seed * 100_003 + index), pause=pause,
                    system_words=system_words, turn_words=turn_words, max_tokens=max_tokens, thunder=thunder,
                    timeout=timeout, out=result.calls, lock=lock, started=started)

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(programs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.wall_s = time.monotonic() - started
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the OpenAI-compatible base URL (agentrt serve or vLLM)")
    parser.add_argument("--programs", type=int, default=8, help="programs at once")
    parser.add_argument("--turns", type=int, default=6, help="calls per program")
    parser.add_argument("--total", type=int, help="programs in all, started as slots free up (default: --programs)")
    parser.add_argument("--thunder", action="store_true", help="ThunderAgent's conventions (program_id, release)")
    args = parser.parse_args()
    print(json.dumps(run(args.url, args.programs, args.turns, thunder=args.thunder, total=args.total).summary()))


if __name__ == "__main__":
    main()
