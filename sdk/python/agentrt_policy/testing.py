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

from agentrt_policy import Item, Policy, export


class Harness:
    """One policy instance behind its exported `Guest`, as the host would drive it. Refusals
    (`init`, `restore`) raise `componentize_py_types.Err` carrying the message the host reports."""

    def __init__(self, policy_class: type, config: Sequence[Tuple[str, str]] = ()):
        self.guest = export(policy_class)()
        self.guest.init(list(config))

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


__all__ = ["Err", "Harness", "Policy", "as_f32", "rank"]
