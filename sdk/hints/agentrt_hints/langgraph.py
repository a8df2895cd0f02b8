"""LangGraph (and any LangChain runnable): close the session when the graph run ends.

    from agentrt_hints import AgentrtHints
    from agentrt_hints.langgraph import AgentrtCallback

    hints = AgentrtHints("http://127.0.0.1:8080/v1")
    graph.invoke(inputs, config={"callbacks": [AgentrtCallback(hints, session)]})

LangChain hands the callback to every run inside the graph (nodes, chat models, tools) and calls
``on_chain_end`` for each; the hook acts only on the outermost run it sees — the graph itself — so
the session is closed exactly once, after the last model call of the run. A run that stops at an
``interrupt()`` (human in the loop) is not over: it is waiting for its user, and the hook says so
(``wait``, kind ``user``) instead of closing it; the run that resumes it closes it when it ends.

Needs ``langchain-core`` (LangGraph depends on it).
"""

from __future__ import annotations

import threading
from typing import Any, Optional
from uuid import UUID

from ._framework import require
from .client import AgentrtHints
from .wire import check_name

_callbacks = require("langchain_core.callbacks", "langchain-core", "agentrt_hints.langgraph.AgentrtCallback")


def _is_interrupt(error: BaseException) -> bool:
    # LangGraph's GraphInterrupt (and its NodeInterrupt), recognised by name so that a plain
    # LangChain setup without langgraph installed works too.
    return any(cls.__name__ == "GraphInterrupt" for cls in type(error).__mro__)


class AgentrtCallback(_callbacks.BaseCallbackHandler):
    """Sends ``session_closed`` for `session` when the outermost run it is given to ends (or a
    user ``wait`` when that run stopped at an interrupt). ``agent``: named in the user wait."""

    # Never let a hint problem fail the graph (the client does not raise on delivery anyway).
    raise_error = False

    def __init__(self, hints: AgentrtHints, session: str, agent: Optional[str] = None):
        super().__init__()
        if not isinstance(hints, AgentrtHints):
            raise ValueError("hints: expected an AgentrtHints (agentrt_hints.AgentrtHints(base_url))")
        self.hints = hints
        self.session = check_name("session", session)
        self.agent = None if agent is None else check_name("agent", agent)
        self._lock = threading.Lock()
        # Runs in progress that this handler saw start, and which of them are outermost; runs of
        # an outermost one that stopped at an interrupt.
        self._running: set = set()
        self._roots: set = set()
        self._interrupted: set = set()
        self._parents: dict = {}

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: Optional[UUID] = None, **kwargs: Any
    ) -> None:
        with self._lock:
            # Outermost for this handler: no parent, or a parent it was not given to (the graph
            # invoked inside someone else's chain).
            if parent_run_id is None or parent_run_id not in self._running:
                self._roots.add(run_id)
            else:
                self._parents[run_id] = parent_run_id
            self._running.add(run_id)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: Optional[UUID] = None, **kwargs: Any
    ) -> None:
        with self._lock:
            root = self._root_of(run_id)
            if _is_interrupt(error) and root is not None:
                self._interrupted.add(root)
            self._forget(run_id)
            # A graph that fails is not closed: the framework may retry the same session.
            self._interrupted.discard(run_id)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: Optional[UUID] = None, **kwargs: Any) -> None:
        with self._lock:
            root = run_id in self._roots
            interrupted = run_id in self._interrupted
            self._interrupted.discard(run_id)
            self._forget(run_id)
        if not root:
            return
        if interrupted:
            self.hints.wait_user(self.session, agent=self.agent)
        else:
            self.hints.close(self.session)

    def _root_of(self, run_id: UUID) -> Optional[UUID]:
        seen = 0
        while run_id not in self._roots:
            parent = self._parents.get(run_id)
            seen += 1
            if parent is None or seen > 10_000:
                return None
            run_id = parent
        return run_id

    def _forget(self, run_id: UUID) -> None:
        self._running.discard(run_id)
        self._roots.discard(run_id)
        self._parents.pop(run_id, None)
