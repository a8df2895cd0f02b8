"""The Python SDK natively: packed decoding, configuration, dispatch, the ranking rule."""

import dataclasses
import enum
import math
import pathlib
import re

import pytest

from agentrt_policy import (
    BlockOp,
    Config,
    ConfigError,
    EndReason,
    Item,
    ItemKind,
    Policy,
    Tier,
    recency_scores,
    types,
)
from agentrt_policy.packed import (
    MAX_POSITION,
    block_words,
    decode_blocks,
    decode_events,
    decode_items,
    event_words,
    item_words,
)
from agentrt_policy.testing import Err, Harness, as_f32, gpu_block_event, rank, session_end
from wit_world.imports.types import Continuation


def item(key=1, agent=1, session=0, last_access=0, tokens=16, position=0, kind=ItemKind.KV_BLOCK, tier=Tier.GPU):
    return Item(kind=kind, key=key, agent=agent, session=session, last_access=last_access, tokens=tokens,
                position=position, tier=tier)


CONFORMANCE = pathlib.Path(__file__).resolve().parents[2] / "conformance"


def render(value) -> str:
    """A decoded value as sdk/conformance/packed.txt writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name.lower().replace("_", "-")
    if value is None:
        return "none"
    if isinstance(value, Continuation):
        return f"{value.shared_tokens}/{value.previous_tokens}"
    if dataclasses.is_dataclass(value):
        name = {"BlockEvent": "block", "Item": "item"}.get(type(value).__name__)
        if name is None:  # an Event_* case: the case's name, then its record's fields
            name = re.sub(r"(?<!^)(?=[A-Z])", "-", type(value).__name__.removeprefix("Event_")).lower()
            value = value.value
        fields = " ".join(f"{f.name.replace('_', '-')}={render(getattr(value, f.name))}"
                          for f in dataclasses.fields(value))
        return f"{name} {fields}"
    return str(value)


def test_packed_words_decode_as_in_every_sdk():
    """sdk/conformance/packed.txt: the Rust SDK's words, and what every SDK decodes them to."""
    decoders = {"events": decode_events, "blocks": decode_blocks, "items": decode_items}
    cases = 0
    for line in (CONFORMANCE / "packed.txt").read_text().splitlines():
        if line.startswith("#") or "->" not in line:
            continue
        left, want = (part.strip() for part in line.split("->"))
        export, *words = left.split()
        decoded = [render(v) for v in decoders[export]([int(w) for w in words])]
        assert (" ; ".join(decoded) or "nothing") == want, line
        cases += 1
    assert cases >= 25


def test_encoders_write_the_words_the_host_sends():
    """The harness's encoders (the host's side) give back the words of every case that decodes."""
    encoders = {"events": event_words, "blocks": block_words, "items": item_words}
    decoders = {"events": decode_events, "blocks": decode_blocks, "items": decode_items}
    cases = 0
    for line in (CONFORMANCE / "packed.txt").read_text().splitlines():
        if line.startswith("#") or "->" not in line:
            continue
        export, *words = line.split("->")[0].split()
        values = list(decoders[export]([int(w) for w in words]))
        again = [w for v in values for w in encoders[export](v)]
        assert list(decoders[export](again)) == values, line
        cases += len(values)
    assert cases >= 25


def test_config_names_what_it_refuses():
    with pytest.raises(ConfigError, match="unknown config key.*wieght.*known: weight"):
        Config([("wieght", "1")]).expect_only(["weight"])
    with pytest.raises(ConfigError, match="weight.*'x' is not a number"):
        Config([("weight", "x")]).get_float("weight", 1.0)
    with pytest.raises(ConfigError, match=r"n: 9 is outside \[0, 3\]"):
        Config([("n", "9")]).get_int("n", 1, 0, 3)
    assert Config([]).get_float("weight", 1.5) == 1.5


class Recorder(Policy):
    """Records what reaches it; keeps one agent's blocks."""

    NAME = "recorder"

    def __init__(self):
        self.events, self.blocks, self.keep = [], [], 0

    def init(self, config):
        config.expect_only(["keep"])
        self.keep = config.get_int("keep", 0, 0, 100)

    def observe(self, event):
        self.events.append(event)

    def observe_block(self, block):
        self.blocks.append(block)

    def score(self, items):
        return [r + (1e6 if i.agent == self.keep else 0.0) for r, i in zip(recency_scores(items), items)]


def every_kind():
    """One event of every kind the contract has, as the Rust SDK's tests build them."""
    cases = [line.split("->")[0].split()[1:] for line in (CONFORMANCE / "packed.txt").read_text().splitlines()
             if line.startswith("events ") and "nothing" not in line]
    events = [e for words in cases for e in decode_events([int(w) for w in words])]
    registered = types.Event_AgentRegistered(types.AgentRegistered(agent=2, name="coder", anchor_hash=5,
                                                                   anchor_tokens=64))
    return [registered] + events


def test_typed_and_packed_events_reach_the_policy_alike():
    typed, packed = Harness(Recorder), Harness(Recorder)
    events = every_kind()
    typed.guest.observe(events)
    packed.observe(events)  # as the host sends them: registrations typed, the rest packed
    assert {type(e).__name__ for e in events} >= {"Event_SessionEnd", "Event_SessionWait", "Event_Handoff"}
    kinds = len({type(e).__name__ for e in events})
    assert kinds == 11, "every kind of the contract"
    assert typed.policy.events == packed.policy.events
    assert typed.policy.blocks == packed.policy.blocks and len(packed.policy.blocks) == 2
    assert [e.value.reason for e in packed.policy.events if isinstance(e, types.Event_SessionEnd)] == [
        EndReason.CLOSED, EndReason.IDLE, EndReason.EVICTED]


def test_export_dispatches_typed_and_packed_blocks_and_scores_alike():
    h = Harness(Recorder, [("keep", "2")])
    block = gpu_block_event(BlockOp.STORED, 9, agent=2)
    h.observe([session_end(4, EndReason.CLOSED), types.Event_Block(value=block)])
    h.observe_blocks([gpu_block_event(BlockOp.REMOVED, 10, agent=3)])
    assert [b.op for b in h.policy.blocks] == [BlockOp.STORED, BlockOp.REMOVED]
    assert h.guest.__class__.__name__ == "Guest"  # the same Guest class the component exports
    items = [item(key=1, agent=1, last_access=50), item(key=2, agent=2, last_access=10, tier=Tier.HOST)]
    assert h.score(items) == h.score_typed(items)
    assert rank(items, h.score(items)) == [1, 0], "the kept agent's older block first"


def test_refusals_reach_the_host_as_err_with_the_message():
    with pytest.raises(Err) as refused:
        Harness(Recorder, [("keep", "many")])
    assert "keep" in str(refused.value.value)
    h = Harness(Recorder)
    with pytest.raises(Err) as refused:
        h.restore(b"\x01")
    assert "keeps no state" in str(refused.value.value)
    h.restore(b"")


def test_a_policy_that_ignores_blocks_is_not_handed_them():
    class Blind(Policy):
        def observe_block(self, block):  # pragma: no cover - must never run
            raise AssertionError("decoded for a policy that ignores blocks")

    class Ignoring(Policy):
        def score(self, items):
            return [0.0] * len(items)

    block = gpu_block_event(BlockOp.STORED, 1)
    Harness(Ignoring).observe_blocks([block])
    Harness(Ignoring).observe([types.Event_Block(block)])
    with pytest.raises(AssertionError):
        Harness(Blind).observe_blocks([block])
    with pytest.raises(AssertionError):
        Harness(Blind).observe([types.Event_Block(block)])


def test_rank_is_the_hosts_rule_on_f32_scores():
    items = [item(last_access=t) for t in (10, 30, 20, 40, 50)]
    assert rank(items, [1.0, 1.0, 2.0, math.nan, 1.0]) == [2, 4, 1, 0, 3]
    # Distinct as f64, equal as f32: the host sees a tie and keeps the more recent.
    assert as_f32(1.0 + 1e-12) == 1.0
    assert rank(items[:2], [1.0 + 1e-12, 1.0]) == [1, 0]
    assert rank(items[:2], [1e39, 0.0]) == [1, 0], "overflows to inf in f32: non-finite, last"


def test_recency_scores_give_the_cases_every_sdk_gives():
    """sdk/conformance/recency_scores.txt: the same batches, the same scores, in all five SDKs."""
    path = CONFORMANCE / "recency_scores.txt"
    cases = 0
    for line in path.read_text().splitlines():
        if line.startswith("#") or "->" not in line:
            continue
        left, right = line.split("->")
        stamps = [int(w) for w in left.split()]
        want = [float(w) for w in right.split()]
        got = recency_scores([item(key=i, last_access=t) for i, t in enumerate(stamps)])
        # Compared as the f32 the contract carries.
        assert [as_f32(x) for x in got] == [as_f32(x) for x in want], line
        cases += 1
    assert cases >= 8
