"""closed-first in Python, natively: the same cases as the Rust version's unit tests."""

import pytest

from agentrt_policy import EndReason, Event_RequestArrival, RequestArrival
from agentrt_policy.testing import Err, Harness, gpu_block, rank, session_end
from app import ClosedFirst


def closed(*sessions):
    return [session_end(s, EndReason.CLOSED) for s in sessions]


def arrival(session, warmup=False):
    return Event_RequestArrival(RequestArrival(request_id=1, agent=1, session=session, anchor_hash=0, prompt_tokens=16,
                                               continues=None, warmup=warmup, at_us=0))


def test_a_closed_sessions_blocks_go_first_oldest_first_then_lru():
    p = Harness(ClosedFirst)
    items = [gpu_block(k, t, session=s) for k, s, t in [(1, 7, 10), (2, 9, 20), (3, 7, 30), (4, 9, 40), (5, 0, 5)]]
    assert rank(items, p.score(items)) == [3, 2, 1, 0, 4], "nothing closed: LRU"
    p.observe(closed(9))
    assert rank(items, p.score(items)) == [2, 0, 4, 3, 1], "9's blocks last, oldest last"


def test_idle_and_evicted_ends_change_nothing_and_a_call_reopens():
    p = Harness(ClosedFirst)
    items = [gpu_block(1, 10, session=7), gpu_block(2, 20, session=9)]
    lru = p.score(items)
    p.observe([session_end(7, EndReason.IDLE), session_end(7, EndReason.EVICTED)])
    assert p.score(items) == lru
    p.observe(closed(7) + [arrival(7, warmup=True)])
    assert p.score(items) != lru, "a warm-up does not reopen"
    p.observe([arrival(7)])
    assert p.score(items) == lru, "its own call does"


def test_the_oldest_closing_is_forgotten_beyond_max_sessions_and_the_snapshot_keeps_the_order():
    p = Harness(ClosedFirst, [("max-sessions", "2")])
    p.observe(closed(3, 1, 3, 2))
    state = p.snapshot()
    assert state == b"CLFT\x01\x00" + (2).to_bytes(4, "little") + (1).to_bytes(8, "little") + (2).to_bytes(8, "little")
    fresh = Harness(ClosedFirst, [("max-sessions", "2")])
    fresh.restore(state)
    assert fresh.snapshot() == state
    with pytest.raises(Err) as refused:
        Harness(ClosedFirst, [("max-sessions", "1")]).restore(state)
    assert "max-sessions is 1" in refused.value.value
    twice = b"CLFT\x01\x00" + (2).to_bytes(4, "little") + (5).to_bytes(8, "little") * 2
    with pytest.raises(Err) as refused:
        fresh.restore(twice)
    assert "twice" in refused.value.value
    assert fresh.snapshot() == state, "a refused snapshot changes nothing"


def test_configuration_is_checked_by_key():
    for key, value in [("max-sessions", "0"), ("max-sessions", "x"), ("max-session", "2")]:
        with pytest.raises(Err) as refused:
            Harness(ClosedFirst, [(key, value)])
        assert key in refused.value.value
