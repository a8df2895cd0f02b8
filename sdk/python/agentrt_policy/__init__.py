"""agentrt's policy SDK for Python: write a policy as a class, build it with componentize-py.

The Rust SDK's `Policy` trait, in Python. A policy subclasses `Policy`, overrides what it uses
(every method but `score` has a neutral default), and its module exports the component:

    from agentrt_policy import Config, Policy, export

    class Mine(Policy):
        NAME, DESCRIPTION = "mine", "what it keeps and why"
        def score(self, items):
            return [float(i.position) for i in items]

    Guest = export(Mine)

`agentrt policy build` (or, in a checkout, `cargo xtask build-policies`) builds an `app.py` with
`componentize-py --stub-wasi` into an `agentrt:policy@0.5.0` component: it imports only
`agentrt:policy/host`, like a Rust one, so it runs under the same sandbox (no filesystem, network
or clock beyond the host's imports). The SDK decodes the packed hot paths (`observe-packed`,
`observe-blocks`, `score-packed`) so a policy sees typed events and items only. Python runs ~50x slower than Rust here (docs/policy-host.md); it is
for trying ideas, and the host's deadline and LRU fallback protect the serving path either way.
"""

from typing import Dict, Iterable, List, Optional, Tuple

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host, types
from wit_world.imports.types import (  # noqa: F401  (re-exported for policy authors)
    AgentRegistered,
    BlockEvent,
    BlockOp,
    EndReason,
    EngineCapacity,
    EngineLoad,
    Event,
    Event_AgentRegistered,
    Event_Block,
    Event_EngineCapacity,
    Event_EngineLoad,
    Event_Handoff,
    Event_RequestArrival,
    Event_RequestFinish,
    Event_SessionEnd,
    Event_SessionWait,
    Event_ToolCall,
    Event_ToolReturn,
    Forecast,
    ForecastKind,
    Handoff,
    Item,
    ItemKind,
    LogLevel,
    RequestArrival,
    RequestFinish,
    SessionEnd,
    SessionWait,
    SideEffect,
    Tier,
    ToolCall,
    ToolReturn,
    WaitKind,
)

from agentrt_policy.packed import decode_blocks, decode_events, decode_items

# The contract line the SDK builds (`agentrt policy test` prints the one a component speaks).
# What else is particular to it: the packed layouts, in agentrt_policy/packed.py.
CONTRACT_VERSION = "0.5.0"

__all__ = [
    "AgentRegistered",
    "BlockEvent",
    "BlockOp",
    "CONTRACT_VERSION",
    "Config",
    "ConfigError",
    "EndReason",
    "EngineCapacity",
    "EngineLoad",
    "Event",
    "Event_AgentRegistered",
    "Event_Block",
    "Event_EngineCapacity",
    "Event_EngineLoad",
    "Event_Handoff",
    "Event_RequestArrival",
    "Event_RequestFinish",
    "Event_SessionEnd",
    "Event_SessionWait",
    "Event_ToolCall",
    "Event_ToolReturn",
    "Forecast",
    "ForecastKind",
    "Handoff",
    "Item",
    "ItemKind",
    "LogLevel",
    "Policy",
    "RequestArrival",
    "RequestFinish",
    "SessionEnd",
    "SessionWait",
    "SideEffect",
    "Tier",
    "ToolCall",
    "ToolReturn",
    "WaitKind",
    "export",
    "host",
    "recency_scores",
    "types",
]


class ConfigError(ValueError):
    """A configuration the policy refuses; the host reports the message from `init`."""


class Config:
    """The `init` configuration: key/value strings with typed getters that name the bad key."""

    def __init__(self, pairs: Iterable[Tuple[str, str]]):
        self._values: Dict[str, str] = dict(pairs)

    def expect_only(self, known: Iterable[str]) -> None:
        """Refuse keys the policy does not know, so a typo is never silently ignored."""
        unknown = sorted(set(self._values) - set(known))
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}")

    def get(self, key: str) -> Optional[str]:
        """The raw value of `key`, or None when it is absent."""
        return self._values.get(key)

    def get_float(self, key: str, default: float, low: float = float("-inf"), high: float = float("inf")) -> float:
        return self._get(key, default, float, "a number", low, high)

    def get_int(self, key: str, default: int, low: int, high: int) -> int:
        return self._get(key, default, int, "an integer", low, high)

    def _get(self, key: str, default, convert, what: str, low, high):
        raw = self._values.get(key)
        if raw is None:
            return default
        try:
            value = convert(raw)
        except ValueError:
            raise ConfigError(f"config key {key}: {raw!r} is not {what}") from None
        if not low <= value <= high:
            raise ConfigError(f"config key {key}: {value} is outside [{low}, {high}]")
        return value


def recency_scores(items: List[Item]) -> List[float]:
    """Recency as a score, as in every agentrt SDK (sdk/conformance/recency_scores.txt): the
    batch's least recently used item scores 0, newer ones the engine ticks since it — LRU's order
    under the host's ranking rule (higher = keep), and never negative: a negative score on a
    host-tier block means "not worth storing", which recency alone never says."""
    oldest = min((i.last_access for i in items), default=0)
    return [float(i.last_access - oldest) for i in items]


class Policy:
    """An agentrt policy. One instance lives per component instance and is called from one
    thread at a time. Override what the policy uses; the defaults do nothing."""

    NAME = "unnamed"
    VERSION = "0.1.0"
    DESCRIPTION = ""

    def init(self, config: Config) -> None:
        """Configure a fresh instance; raise `ConfigError` to refuse. Accepts no keys by default."""
        config.expect_only([])

    def observe(self, event: Event) -> None:
        """One event that is not a block event, in arrival order, whether it arrived typed or
        packed: an `Event_*` case whose `.value` is the record — `Event_SessionEnd` (`.reason`:
        `EndReason.CLOSED` when the framework said so, `IDLE` inferred from silence, `EVICTED`
        when the host stopped following it), `Event_SessionWait` (`.kind`: `WaitKind.TOOL` or
        `USER`), `Event_Handoff` (`.to_agent` runs next), `Event_RequestArrival`, … (README)."""

    def observe_block(self, block: BlockEvent) -> None:
        """One KV-block event, whether it arrived typed or packed."""

    def score(self, items: List[Item]) -> List[float]:
        """One priority per item, same order; higher = keep. Ties go to the most recent."""
        raise NotImplementedError

    def predict(self, horizon: int) -> List[Forecast]:
        return []

    def act(self) -> List[SideEffect]:
        return []

    def snapshot(self) -> bytes:
        """Learned state, for a hot swap or a restart."""
        return b""

    def restore(self, state: bytes) -> None:
        """Continue from a snapshot; raise `ValueError` to refuse it. Accepts only empty state
        by default."""
        if state:
            raise ValueError(f"this policy keeps no state but was given {len(state)} bytes")


def export(policy_class: type) -> type:
    """The `Guest` class componentize-py exports, driving one `policy_class` instance.

    The instance lives in this closure rather than on the `Guest` object, so the policy keeps its
    state however often the bindings construct `Guest`.
    """
    current: List[Optional[Policy]] = [policy_class()]
    # Block events are the highest-rate input; a policy that ignores them skips their decoding,
    # and one that ignores the other events skips theirs.
    wants_blocks = policy_class.observe_block is not Policy.observe_block
    wants_others = policy_class.observe is not Policy.observe

    def policy() -> Policy:
        return current[0]

    class Guest(exports.Guest):
        def info(self) -> types.PolicyInfo:
            return types.PolicyInfo(
                name=policy_class.NAME, version=policy_class.VERSION, description=policy_class.DESCRIPTION
            )

        def init(self, config: List[Tuple[str, str]]) -> None:
            fresh = policy_class()
            try:
                fresh.init(Config(config))
            except ValueError as e:
                raise Err(str(e))
            current[0] = fresh

        def observe(self, events: List[Event]) -> None:
            p = policy()
            for event in events:
                if not isinstance(event, types.Event_Block):
                    if wants_others:
                        p.observe(event)
                elif wants_blocks:
                    p.observe_block(event.value)

        def observe_packed(self, packed: List[int]) -> None:
            if not (wants_blocks or wants_others):
                return
            p = policy()
            for event in decode_events(packed, blocks=wants_blocks, others=wants_others):
                if isinstance(event, types.Event_Block):
                    p.observe_block(event.value)
                else:
                    p.observe(event)

        def observe_blocks(self, packed: List[int]) -> None:
            if wants_blocks:
                p = policy()
                for block in decode_blocks(packed):
                    p.observe_block(block)

        def score(self, items: List[Item]) -> List[float]:
            return policy().score(items)

        def score_packed(self, packed: List[int]) -> List[float]:
            return policy().score(decode_items(packed))

        def predict(self, horizon: int) -> List[Forecast]:
            return policy().predict(horizon)

        def act(self) -> List[SideEffect]:
            return policy().act()

        def snapshot(self) -> bytes:
            return policy().snapshot()

        def restore(self, state: bytes) -> None:
            try:
                policy().restore(bytes(state))
            except ValueError as e:
                raise Err(str(e))

        def _policy(self) -> Policy:
            """The instance being driven (for native tests; the host never calls it)."""
            return policy()

    Guest.__name__ = Guest.__qualname__ = "Guest"
    return Guest
