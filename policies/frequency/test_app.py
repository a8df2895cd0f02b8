"""The frequency policy natively (CPython), through the SDK's test harness."""

import json

import pytest

from agentrt_policy import Item, ItemKind, Tier, types
from agentrt_policy.testing import Err, Harness, rank
from app import Frequency


def arrival(request_id: int, agent: int, warmup: bool = False):
    return types.Event_RequestArrival(
        value=types.RequestArrival(
            request_id=request_id,
            agent=agent,
            session=1,
            anchor_hash=agent,
            prompt_tokens=100,
            continues=None,
            warmup=warmup,
            at_us=request_id,
        )
    )


def block(key: int, agent: int, last_access: int) -> Item:
    return Item(kind=ItemKind.KV_BLOCK, key=key, agent=agent, session=1, last_access=last_access, tokens=16,
                position=0, tier=Tier.GPU)


def calls(*agents):
    return [arrival(i, a) for i, a in enumerate(agents)]


def test_a_busy_agents_older_block_outranks_a_rare_agents_newer_one():
    items = [block(1, agent=1, last_access=10), block(2, agent=2, last_access=20)]
    policy = Harness(Frequency)
    policy.observe(calls(*[1] * 10, 2))
    assert rank(items, policy.score(items)) == [0, 1]
    lru = Harness(Frequency, [("weight", "0")])
    lru.observe(calls(*[1] * 10, 2))
    assert rank(items, lru.score(items)) == [1, 0]


def test_weight_0_is_exactly_lru_order():
    items = [block(k, agent=k % 5, last_access=(k * 7919) % 101) for k in range(60)]
    policy = Harness(Frequency, [("weight", "0")])
    policy.observe(calls(*[1, 1, 2, 3, 1, 4]))
    by_recency = sorted(range(len(items)), key=lambda i: -items[i].last_access)
    assert rank(items, policy.score(items)) == by_recency


def test_rates_decay_so_a_newly_busy_agent_takes_over():
    items = [block(1, agent=1, last_access=10), block(2, agent=2, last_access=10)]
    policy = Harness(Frequency, [("half-life", "4")])
    policy.observe(calls(*[1] * 20, *[2] * 12))
    assert rank(items, policy.score(items))[0] == 1
    assert [f.agent for f in policy.predict(1)][:2] == [2, 1]


def test_warmups_are_not_calls_and_agents_are_bounded():
    policy = Harness(Frequency, [("max-agents", "3")])
    policy.observe([arrival(i, 100 + i) for i in range(10)] + [arrival(99, 7, warmup=True)])
    state = json.loads(policy.snapshot())
    assert len(state["rates"]) == 3
    assert "7" not in state["rates"]


def test_predictions_are_shares_of_recent_calls():
    policy = Harness(Frequency)
    assert policy.predict(1) == []
    policy.observe(calls(1, 1, 1, 2))
    forecasts = policy.predict(1)
    assert [f.agent for f in forecasts] == [1, 2]
    assert sum(f.probability for f in forecasts) == pytest.approx(1.0)
    assert forecasts[0].probability > 0.7


def test_snapshot_round_trips_and_foreign_state_is_refused_by_name():
    learned = Harness(Frequency)
    learned.observe(calls(1, 1, 2))
    fresh = Harness(Frequency)
    fresh.restore(learned.snapshot())
    items = [block(1, agent=1, last_access=1), block(2, agent=2, last_access=2)]
    assert fresh.score(items) == learned.score(items)
    for bad, words in [(b'{"format": 2}', "format"), (b"not json", "not a frequency snapshot")]:
        with pytest.raises(Err) as refused:
            fresh.restore(bad)
        assert words in str(refused.value.value)
    assert fresh.score(items) == learned.score(items), "a refused snapshot changes nothing"


def test_configuration_is_checked():
    for config, words in [([("wieght", "1")], "wieght"), ([("half-life", "0")], "half-life")]:
        with pytest.raises(Err) as refused:
            Harness(Frequency, config)
        assert words in str(refused.value.value)
