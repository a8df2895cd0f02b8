"""What a plugin knows about a request, read from the tags the proxy put into it.

Every engine's plugin names agents and sessions through this one reading, so that a block vLLM
caches and a node SGLang caches for the same request carry the same agent and session.
"""

from __future__ import annotations

from . import wire
from .client import EvictionClient

_MASK64 = (1 << 64) - 1


class RequestTag:
    """What the plugin knows about a request: agent (wire id), session (u64), warm-up flag."""

    __slots__ = ("agent", "session", "warmup")

    def __init__(self, agent: int, session: int, warmup: bool) -> None:
        self.agent = agent
        self.session = session
        self.warmup = warmup

    @classmethod
    def of(cls, tags, engine_session, client: EvictionClient) -> "RequestTag":
        """A request's tag from the ``agentrt_*`` keys the proxy put into the engine's tag field
        (vLLM's ``vllm_xargs``, which arrive as ``SamplingParams.extra_args``; SGLang's
        ``custom_params``), the engine's own session id standing in when no ``agentrt_session``
        came. Shared by every engine's plugin, so that they all name agents and sessions alike."""
        tags = tags if isinstance(tags, dict) else {}
        agent = client.wire_agent(tags.get("agentrt_agent"))
        session = tags.get("agentrt_session")
        if session is None:
            session = engine_session
        if isinstance(session, int):
            session &= _MASK64
        elif session is not None:
            session = wire.fnv1a64(str(session))
        else:
            session = 0
        return cls(agent, session, bool(tags.get("agentrt_warmup", False)))

    @classmethod
    def of_request(cls, request, tags, client: EvictionClient) -> "RequestTag":
        """:meth:`of` for an engine's request object (its ``session_id`` stands in for the
        session), remembered on the request: the engine asks for a request's tag at every block it
        caches. The memo is keyed on the client because agent wire ids belong to one client."""
        cached = getattr(request, "_agentrt_tag", None)
        if cached is not None and cached[0] is client:
            return cached[1]
        tag = cls.of(tags, getattr(request, "session_id", None), client)
        try:
            request._agentrt_tag = (client, tag)
        except AttributeError:  # a request type with __slots__: compute it again next time
            pass
        return tag
