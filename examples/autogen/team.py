#!/usr/bin/env python3
"""An AutoGen AgentChat team — a planner and a critic taking turns — talking to `agentrt serve`.

Each agent is a plain ``AssistantAgent`` with its own system message on an
``OpenAIChatCompletionClient``; the only agentrt-specific thing is ``base_url``, which points at
`agentrt serve` instead of the model server. The proxy names each agent by its anchor (system
message) and each run of the team by its task.

    python examples/autogen/team.py --base-url http://127.0.0.1:8080/v1 --tasks 2

With ``--hints`` each task's run is a named session (``x-session-id``) and the agentrt hint package
closes it when the team's termination condition ends the run (sdk/hints/README.md); off by default,
so that a run with and a run without hints can be compared.

Needs ``autogen-agentchat`` and ``autogen-ext[openai]`` (examples/setup-venv.sh installs them
into ~/.cache/agentrt/venv-agents).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient

PLANNER = (
    "You are the planner of a two-person team. Propose a short plan for the task in at most five numbered "
    "steps, and revise it when the critic objects."
)
CRITIC = (
    "You are the critic of a two-person team. Read the plan and name its weakest step and why, in two "
    "sentences. Say APPROVE when nothing important is missing."
)

TASKS = [
    "Plan the migration of a web service from one database to another without downtime.",
    "Plan a load test for an API that serves language-model completions.",
    "Plan the rollout of a new cache eviction policy to a fleet of inference servers.",
]


def build_team(base_url: str, model: str = "tiny", api_key: str = "not-needed", max_tokens: int = 16,
               turns: int = 4, headers: dict | None = None) -> RoundRobinGroupChat:
    """The planner and the critic on one client aimed at ``base_url``, sending ``headers`` with
    every request."""
    extra = {} if headers is None else {"default_headers": headers}
    client = OpenAIChatCompletionClient(
        model=model, base_url=base_url, api_key=api_key, max_tokens=max_tokens, temperature=0, max_retries=0, **extra,
        # A local model AutoGen does not know: say what it can do.
        model_info={"vision": False, "function_calling": False, "json_output": False, "family": "unknown",
                    "structured_output": False},
    )
    planner = AssistantAgent("planner", model_client=client, system_message=PLANNER)
    critic = AssistantAgent("critic", model_client=client, system_message=CRITIC)
    # `turns` messages after the task: the planner and the critic alternate.
    return RoundRobinGroupChat([planner, critic], termination_condition=MaxMessageTermination(turns + 1))


def agentrt_hints():
    """The hint package: installed (`pip install sdk/hints`), else this checkout's."""
    checkout = str(Path(__file__).resolve().parents[2] / "sdk" / "hints")
    if checkout not in sys.path:
        sys.path.append(checkout)
    import agentrt_hints

    return agentrt_hints


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1", help="agentrt serve's /v1")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--tasks", type=int, default=2, help=f"how many of the {len(TASKS)} tasks to run")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--hints", action="store_true",
                        help="name each task's session and close it when the team's run ends (sdk/hints)")
    args = parser.parse_args(argv)
    hints = agentrt_hints().AgentrtHints(args.base_url) if args.hints else None
    for task in TASKS[: args.tasks]:
        session = f"autogen-{uuid.uuid4().hex[:12]}"
        headers = agentrt_hints().headers_for(session) if hints is not None else None
        team = build_team(args.base_url, args.model, max_tokens=args.max_tokens, turns=args.turns, headers=headers)
        if hints is not None:
            agentrt_hints().close_on_termination(team, hints, session)  # the one line of setup
        result = await team.run(task=task)
        print(f"task: {task}")
        for message in result.messages[1:]:
            print(f"  {message.source}: {getattr(message, 'content', '')!r}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
