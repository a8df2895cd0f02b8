"""callrate in Python, natively: the same cases as the Rust version's unit tests."""

import pytest

from agentrt_policy import BlockOp, Item, ItemKind, Tier, types
from agentrt_policy.testing import Err, Harness, gpu_block_event, rank
from app import CallRate, decay


def arrival(agent: int, warmup: bool = False):
    return types.Event_RequestArrival(
        value=types.RequestArrival(request_id=0, agent=agent, session=1, anchor_hash=agent * 100, prompt_tokens=64,
                                   continues=None, warmup=warmup, at_us=0))


def calls(*agents):
    return [arrival(a) for a in agents]


def block(agent: int, last_access: int) -> Item:
    return Item(kind=ItemKind.KV_BLOCK, key=agent << 32 | last_access, agent=agent, session=1,
                last_access=last_access, tokens=16, position=0, tier=Tier.GPU)


def test_decay_halves_per_half_life_and_follows_the_chord_between():
    assert decay(1 << 20, 0, 64) == 1 << 20
    assert decay(1 << 20, 64, 64) == 1 << 19
    assert decay(1 << 20, 32, 64) == 3 << 18
    assert decay(1 << 20, 64 * 64, 64) == 0


def test_a_busy_agents_older_block_outranks_a_rare_agents_newer_one():
    p = Harness(CallRate)
    p.observe(calls(1, 1, 1, 2))
    items = [block(1, 10), block(2, 20), block(1, 12)]
    assert rank(items, p.score(items)) == [2, 0, 1]


def test_act_warms_the_hottest_other_agent_once_per_arrival():
    p = Harness(CallRate)
    p.observe(calls(1, 1, 2))
    (warm,) = p.act()
    assert (warm.value.agent, warm.value.anchor_hash) == (1, 100)
    assert 0.6 < warm.value.probability < 0.7
    assert p.act() == []
    p.observe([arrival(1, warmup=True)])
    assert p.act() == []


def test_hits_credit_known_agents_through_the_packed_path():
    p = Harness(CallRate)
    p.observe(calls(1, 2))
    p.observe_blocks([gpu_block_event(BlockOp.TOUCHED, 7, agent=agent) for agent in (1, 9)])
    items = [block(1, 1), block(2, 1)]
    scores = p.score(items)
    assert scores[0] > scores[1]
    assert len(p.snapshot()) == 6 + 8 + 4 + 1 + 4 + 2 * 28


def test_snapshots_round_trip_and_damage_is_refused_by_name():
    learned = Harness(CallRate)
    learned.observe(calls(1, 2, 1, 3))
    state = learned.snapshot()
    fresh = Harness(CallRate)
    fresh.restore(state)
    assert fresh.snapshot() == state
    for bad, words in [(b"XXXX\x01\x00", "not from this policy"), (state[:-1], "truncated"),
                       (state + b"\x00", "trailing")]:
        with pytest.raises(Err) as refused:
            fresh.restore(bad)
        assert words in refused.value.value
    with pytest.raises(Err) as refused:
        Harness(CallRate, [("max-agents", "2")]).restore(state)
    assert "max-agents" in refused.value.value


def test_configuration_is_checked_by_key():
    for config, words in [(("half-life", "0"), "half-life"), (("recency", "-1"), "recency"),
                          (("max-agent", "3"), "max-agent")]:
        with pytest.raises(Err) as refused:
            Harness(CallRate, [config])
        assert words in refused.value.value
