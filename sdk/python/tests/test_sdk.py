"""The Python SDK natively: packed decoding, configuration, dispatch, the ranking rule."""

import math

import pytest

from agentrt_policy import BlockOp, Config, ConfigError, Item, ItemKind, Policy, recency_scores, types
from agentrt_policy.packed import MAX_POSITION, decode_blocks, decode_items
from agentrt_policy.testing import Err, Harness, as_f32, rank


def block_words(op: int, agent: int, position: int, block_hash: int, parent: int):
    """The layout of wit/policy.wit's `observe-blocks`, written out independently of the SDK."""
    return [op | (min(position, MAX_POSITION) << 8) | (agent << 32), block_hash, parent]


def item(key=1, agent=1, session=0, last_access=0, tokens=16, position=0, kind=ItemKind.KV_BLOCK):
    return Item(kind=kind, key=key, agent=agent, session=session, last_access=last_access, tokens=tokens,
                position=position)


def test_every_block_op_decodes_with_its_fields_and_unknown_ops_are_skipped():
    words = []
    for op in range(4):
        words += block_words(op, agent=7 + op, position=16 * op, block_hash=2**64 - 1 - op, parent=op)
    words += block_words(9, agent=1, position=0, block_hash=5, parent=0)  # a newer host's op
    words += [1, 2]  # trailing words that do not make an event
    events = list(decode_blocks(words))
    assert [e.op for e in events] == [BlockOp.STORED, BlockOp.TOUCHED, BlockOp.REMOVED, BlockOp.ALL_CLEARED]
    assert [e.agent for e in events] == [7, 8, 9, 10]
    assert [e.position for e in events] == [0, 16, 32, 48]
    assert events[0].block_hash == 2**64 - 1 and events[3].parent_hash == 3
    assert next(decode_blocks(block_words(0, 1, 2**30, 1, 0))).position == MAX_POSITION


def test_packed_items_decode_field_by_field():
    words = [11, 22, 33, 16 | (5 << 32), 48 | (1 << 32), 1, 2, 3, 4 | (6 << 32), 7 | (9 << 32)]
    first, second = decode_items(words + [0, 0])
    assert (first.key, first.session, first.last_access, first.tokens, first.agent, first.position) == (
        11, 22, 33, 16, 5, 48)
    assert first.kind == ItemKind.REQUEST
    assert second.kind == ItemKind.KV_BLOCK, "an unknown kind decodes as kv-block"


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


def test_export_dispatches_typed_and_packed_events_and_scores_alike():
    h = Harness(Recorder, [("keep", "2")])
    block = types.BlockEvent(op=BlockOp.STORED, agent=2, block_hash=9, parent_hash=0, position=0)
    h.observe([types.Event_SessionEnd(value=4), types.Event_Block(value=block)])
    h.observe_blocks(block_words(2, agent=3, position=16, block_hash=10, parent=9))
    policy = h.guest.__class__  # the same Guest class the component exports
    assert policy.__name__ == "Guest"
    items = [item(key=1, agent=1, last_access=50), item(key=2, agent=2, last_access=10)]
    packed = [w for i in items for w in (i.key, i.session, i.last_access, i.tokens | (i.agent << 32), i.position)]
    assert h.score(items) == h.score_packed(packed)
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

    Harness(Ignoring).observe_blocks(block_words(0, 1, 0, 1, 0))
    with pytest.raises(AssertionError):
        Harness(Blind).observe_blocks(block_words(0, 1, 0, 1, 0))


def test_rank_is_the_hosts_rule_on_f32_scores():
    items = [item(last_access=t) for t in (10, 30, 20, 40, 50)]
    assert rank(items, [1.0, 1.0, 2.0, math.nan, 1.0]) == [2, 4, 1, 0, 3]
    # Distinct as f64, equal as f32: the host sees a tie and keeps the more recent.
    assert as_f32(1.0 + 1e-12) == 1.0
    assert rank(items[:2], [1.0 + 1e-12, 1.0]) == [1, 0]
    assert rank(items[:2], [1e39, 0.0]) == [1, 0], "overflows to inf in f32: non-finite, last"


def test_recency_scores_give_the_cases_every_sdk_gives():
    """sdk/conformance/recency_scores.txt: the same batches, the same scores, in all five SDKs."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "conformance" / "recency_scores.txt"
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
