"""A real MCP server for the gateway's tests, built with the official Python SDK (`mcp`).

Tools (annotations as a real server would set them):
  lookup(topic)   read-only, open-world: a fact that changes every --change-every-ms, after
                  --delay-ms (a GAIA-style web lookup); the result says which version it is and
                  when it was read (wall clock), so a client can check every answer's age.
  record(note)    writes (no annotations): appends a note, returns how many there are.
  fail(message)   read-only, always fails (an `isError` result).
  slow(seconds)   read-only: sleeps; counts calls it did not finish (cancelled).
  crash()         read-only: the process exits in the middle of the call.
  stats()         no annotations: what the server has done (calls per tool, cancellations).
A resource `facts://about`, a resource template `facts://topic/{topic}`, a prompt `ask`.

  python lookup_server.py --port 8123 [--delay-ms 200] [--change-every-ms 2000]
  python lookup_server.py --stdio ...
"""

import argparse
import asyncio
import json
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--stdio", action="store_true")
parser.add_argument("--delay-ms", type=float, default=200.0)
parser.add_argument("--change-every-ms", type=float, default=2000.0)
args = parser.parse_args()

EPOCH = time.time()
counts = {"lookup": 0, "record": 0, "slow": 0, "slow_cancelled": 0, "fail": 0}
notes: list[str] = []

server = MCPServer("lookup", instructions="Facts that change over time, for agentrt's gateway tests.")

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=True)


def version_at(t: float) -> int:
    return int((t - EPOCH) * 1000 // args.change_every_ms)


@server.tool(annotations=READ_ONLY)
async def lookup(topic: str) -> str:
    """Look a topic up (slow, read-only; the answer changes over time)."""
    counts["lookup"] += 1
    read_at = time.time()
    await asyncio.sleep(args.delay_ms / 1000)
    version = version_at(read_at)
    return json.dumps({"topic": topic, "fact": f"{topic} is at version {version}", "version": version, "read_at": read_at})


@server.tool()
def record(note: str) -> str:
    """Record a note (a write: never to be answered from memory)."""
    counts["record"] += 1
    notes.append(note)
    return f"{len(notes)} notes"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def fail(message: str) -> str:
    """Always fails."""
    counts["fail"] += 1
    raise ValueError(f"fail tool asked to fail: {message}")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def slow(seconds: float) -> str:
    """Sleep, then answer; a call cancelled first is counted."""
    counts["slow"] += 1
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        counts["slow_cancelled"] += 1
        raise
    return f"slept {seconds}"


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def crash() -> str:
    """The server dies in the middle of this call."""
    await asyncio.sleep(0.05)
    os._exit(3)


@server.tool()
def stats() -> str:
    """What the server has done so far."""
    return json.dumps({**counts, "notes": len(notes), "pid": os.getpid(), "epoch": EPOCH})


@server.resource("facts://about")
def about() -> str:
    return "facts that change over time"


@server.resource("facts://topic/{topic}")
def topic_resource(topic: str) -> str:
    return f"about {topic}"


@server.prompt()
def ask(topic: str) -> str:
    """A prompt asking about a topic."""
    return f"What is known about {topic}?"


if __name__ == "__main__":
    if args.stdio:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
