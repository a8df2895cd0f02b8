#!/usr/bin/env python3
"""Two agents of the OpenAI Agents SDK — a researcher, then a writer — talking to `agentrt serve`.

The SDK speaks the OpenAI Responses API (`/v1/responses`) by default (`--api chat` for chat
completions); the only agentrt-specific
thing is the client's ``base_url``, which points at `agentrt serve` instead of the model server.
No headers, no agent ids, no session ids: the proxy names each agent by its anchor (its
``instructions``) and each run by its task.

    python examples/openai-agents/research.py --base-url http://127.0.0.1:8080/v1 --tasks 2

With ``--hints`` each task's two runs are one named session (``x-session-id``, through the run's
model settings) and the agentrt hint package's run hooks close it when the writer's run ends
(sdk/hints/README.md); off by default, so that a run with and a run without hints can be compared.

Needs ``openai-agents`` (examples/setup-venv.sh installs it into ~/.cache/agentrt/venv-agents).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

RESEARCHER = (
    "You are the researcher of a small analyst team. For the question you are given, list the three facts "
    "that matter most and where each comes from. Do not write the answer itself."
)
WRITER = (
    "You are the writer of a small analyst team. Turn the question and the researcher's notes into a short, "
    "plain answer for a busy reader. Keep every number the notes give."
)

TASKS = [
    "How much did the price of solar modules fall in the last decade?",
    "Which programming languages compile to WebAssembly components today?",
    "What limits the context length of large language models on one GPU?",
]


def build_agents(base_url: str, model: str = "tiny", api_key: str = "not-needed", max_tokens: int = 16,
                 api: str = "responses", temperature: float = 0.0):
    """The researcher and the writer, each an Agent at ``base_url`` on the Responses API (the SDK's
    default) or, with ``api="chat"``, on chat completions."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    settings = ModelSettings(max_tokens=max_tokens, temperature=temperature)
    model_class = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel

    def agent(name: str, instructions: str) -> Agent:
        return Agent(name=name, instructions=instructions, model_settings=settings,
                     model=model_class(model=model, openai_client=client))

    return agent("researcher", RESEARCHER), agent("writer", WRITER)


async def run_task(researcher: Agent, writer: Agent, task: str, hints=None) -> tuple[str, str]:
    """The researcher's run, then the writer's on its notes. With ``hints`` (an AgentrtHints) both
    runs are one named session, closed when the writer's run ends."""
    first, last = {}, {}
    if hints is not None:
        session = f"openai-agents-{uuid.uuid4().hex[:12]}"
        settings = RunConfig(model_settings=ModelSettings(extra_headers=agentrt_hints().headers_for(session)))
        first = {"run_config": settings, "hooks": agentrt_hints().AgentrtRunHooks(hints, session, close=False)}
        last = {"run_config": settings, "hooks": agentrt_hints().AgentrtRunHooks(hints, session)}  # closes it
    notes = await Runner.run(researcher, task, **first)
    answer = await Runner.run(writer, f"{task}\n\nThe researcher's notes:\n{notes.final_output}", **last)
    return str(notes.final_output), str(answer.final_output)


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
    parser.add_argument("--max-tokens", type=int, default=16)
    # The SDK takes a Responses answer cut at max_tokens (`response.incomplete`) for an error, and a
    # tiny random test model never ends an answer by itself: tests run it on chat completions.
    parser.add_argument("--api", choices=("responses", "chat"), default="responses")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--hints", action="store_true",
                        help="name each task's session and close it when its last run ends (sdk/hints)")
    args = parser.parse_args(argv)
    set_tracing_disabled(True)  # the SDK would otherwise upload traces to OpenAI
    researcher, writer = build_agents(args.base_url, args.model, max_tokens=args.max_tokens, api=args.api,
                                      temperature=args.temperature)
    hints = agentrt_hints().AgentrtHints(args.base_url) if args.hints else None
    for task in TASKS[: args.tasks]:
        notes, answer = await run_task(researcher, writer, task, hints)
        print(f"task: {task}\n  notes: {notes!r}\n  answer: {answer!r}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
