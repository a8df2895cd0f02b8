"""Test a Python policy natively, in CPython, through the same dispatch code its component runs.

`cargo xtask test` runs every `policies/*/test_*.py` and `sdk/python/tests/` with pytest, on the
bindings componentize-py generates for `wit/policy.wit` (`componentize-py bindings`), so a
policy's logic is tested in milliseconds before it is ever compiled to Wasm:

    from agentrt_policy.testing import Harness, rank

    policy = Harness(Mine, [("agent", "3")])
    policy.observe([...])
    assert rank(items, policy.score(items))[0] == 2

The host-side tests (tests/python_policy.rs) then check the built component.
"""

import math
import struct
from typing import List, Sequence, Tuple

from componentize_py_types import Err

from agentrt_policy import (
    BlockEvent,
    BlockOp,
    EndReason,
    Event,
    Event_AgentRegistered,
    Event_SessionEnd,
    Item,
    ItemKind,
    Policy,
    SessionEnd,
    Tier,
    export,
)
from agentrt_policy.packed import block_words, event_words, item_words


class Harness:
    """One policy instance behind its exported `Guest`, driven as the host drives a 0.5 component:
    events packed (`observe-packed`, registrations typed), block events packed (`observe-blocks`),
    items packed (`score-packed`). Refusals (`init`, `restore`) raise `componentize_py_types.Err`
    carrying the message the host reports. Other exports (`score_packed`, `observe_blocks` with
    raw words, …) are reached through `.guest`, or as attributes of the harness."""

    def __init__(self, policy_class: type, config: Sequence[Tuple[str, str]] = ()):
        self.guest = export(policy_class)()
        self.guest.init(list(config))

    def observe(self, events: List[Event]) -> None:
        """Send a batch as the host does: `agent-registered` through `observe`, every run of other
        events between registrations through `observe-packed`."""
        words: List[int] = []
        for event in events:
            if isinstance(event, Event_AgentRegistered):
                if words:
                    self.guest.observe_packed(words)
                    words = []
                self.guest.observe([event])
            else:
                words += event_words(event)
        if words:
            self.guest.observe_packed(words)

    def observe_blocks(self, blocks: List[BlockEvent]) -> None:
        """Block events through the packed path, as the host sends them."""
        self.guest.observe_blocks([w for b in blocks for w in block_words(b)])

    def score(self, items: List[Item]) -> List[float]:
        """Score through `score-packed`, as the host does."""
        return self.guest.score_packed([w for i in items for w in item_words(i)])

    def score_typed(self, items: List[Item]) -> List[float]:
        """Score through the typed `score` (the contract asks for the same answer)."""
        return self.guest.score(items)

    @property
    def policy(self) -> Policy:
        """The policy instance itself, for assertions on its state."""
        return self.guest._policy()

    def __getattr__(self, name):
        return getattr(self.guest, name)


_F32_MAX = 3.4028234663852886e38


def as_f32(score: float) -> float:
    """A score as the host receives it: the contract's scores are f32."""
    if math.isnan(score) or abs(score) > _F32_MAX:
        return score if math.isnan(score) else math.copysign(math.inf, score)
    return struct.unpack("f", struct.pack("f", score))[0]


def rank(items: List[Item], scores: List[float]) -> List[int]:
    """The host's ranking rule (sdk/src/ranking.rs) on the scores as f32: indices from keep-most
    to evict-first; higher score first, ties by last-access (most recent first), non-finite
    scores last."""

    def key(i: int):
        s = as_f32(scores[i])
        finite = math.isfinite(s)
        return (0 if finite else 1, -s if finite else 0.0, -items[i].last_access)

    return sorted(range(len(items)), key=key)


def gpu_block(key: int, last_access: int, agent: int = 1, session: int = 0) -> Item:
    """A GPU-tier KV block, 16 tokens at position 0: the item most eviction tests rank, told apart
    by its key and last access."""
    return Item(kind=ItemKind.KV_BLOCK, key=key, agent=agent, session=session, last_access=last_access, tokens=16,
                position=0, tier=Tier.GPU)


def gpu_block_event(op: BlockOp, block_hash: int, agent: int = 1) -> BlockEvent:
    """A GPU-tier block event at the root of the prefix tree (no parent, position 0)."""
    return BlockEvent(op=op, agent=agent, block_hash=block_hash, parent_hash=0, position=0, tier=Tier.GPU)


def session_end(session: int, reason: EndReason = EndReason.IDLE, at_us: int = 0) -> Event:
    """A session ended for `reason` (default: idle, as the host infers most ends)."""
    return Event_SessionEnd(SessionEnd(session=session, reason=reason, at_us=at_us))


__all__ = ["Err", "Harness", "Policy", "as_f32", "gpu_block", "gpu_block_event", "rank", "session_end"]
