"""__NAME__ natively (CPython), through the SDK's harness, which drives the policy as the host
does: `agentrt policy build --test` runs it (`cargo xtask test` in an agentrt checkout)."""

from agentrt_policy import EndReason
from agentrt_policy.testing import Harness, gpu_block, rank, session_end
from app import Policy__TYPE__


def test_a_closed_sessions_blocks_go_first_then_lru():
    policy = Harness(Policy__TYPE__)
    items = [gpu_block(1, last_access=5, session=7), gpu_block(2, last_access=9, session=8)]
    assert rank(items, policy.score(items)) == [1, 0], "LRU: the newest kept first"
    policy.observe([session_end(8, EndReason.CLOSED)])
    assert rank(items, policy.score(items)) == [0, 1], "session 8 closed: its block goes first"


def test_an_idle_end_is_not_a_closing():
    policy = Harness(Policy__TYPE__)
    items = [gpu_block(1, last_access=5, session=7), gpu_block(2, last_access=9, session=8)]
    policy.observe([session_end(8, EndReason.IDLE)])
    assert rank(items, policy.score(items)) == [1, 0]


def test_what_it_learned_survives_a_hot_swap():
    learned = Harness(Policy__TYPE__)
    learned.observe([session_end(8, EndReason.CLOSED)])
    fresh = Harness(Policy__TYPE__)
    fresh.restore(learned.snapshot())
    items = [gpu_block(1, last_access=5, session=7), gpu_block(2, last_access=9, session=8)]
    assert fresh.score(items) == learned.score(items)
