"""__NAME__ natively (CPython), through the SDK's harness: `cargo xtask test` runs it."""

from agentrt_policy import Item, ItemKind
from agentrt_policy.testing import Harness, rank
from app import Policy__TYPE__


def test_newest_first_until_you_change_it():
    policy = Harness(Policy__TYPE__)
    items = [Item(kind=ItemKind.KV_BLOCK, key=k, agent=1, session=0, last_access=t, tokens=16, position=0)
             for k, t in [(1, 5), (2, 9)]]
    assert rank(items, policy.score(items)) == [1, 0]
