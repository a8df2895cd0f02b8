"""closed-first in Python: the blocks of sessions the framework closed go first, LRU otherwise.

The rule of policies/closed-first-rust/SPEC.md; scores and snapshots are the Rust version's to the
bit (tests/closed_first.rs).
"""

from typing import Dict, List

from agentrt_policy import Config, EndReason, Event_RequestArrival, Event_SessionEnd, Item, Policy, export
from agentrt_policy.state import Reader, Writer

MAGIC = b"CLFT"
FORMAT = 1


class ClosedFirst(Policy):
    NAME, VERSION = "closed-first", "0.1.0"
    DESCRIPTION = "the blocks of sessions the framework closed go first, LRU otherwise; Python (SPEC.md)"

    def __init__(self) -> None:
        self.max_sessions = 16384
        # Closed sessions, oldest closing first (a dict keeps insertion order).
        self.closed: Dict[int, None] = {}

    def init(self, config: Config) -> None:
        config.expect_only(["max-sessions"])
        self.max_sessions = config.get_int("max-sessions", 16384, 1, 1 << 20)

    def observe(self, event) -> None:
        if isinstance(event, Event_SessionEnd):
            end = event.value
            if end.reason == EndReason.CLOSED and end.session != 0 and end.session not in self.closed:
                self.closed[end.session] = None
                if len(self.closed) > self.max_sessions:
                    del self.closed[next(iter(self.closed))]
        elif isinstance(event, Event_RequestArrival) and not event.value.warmup:
            self.closed.pop(event.value.session, None)

    def score(self, items: List[Item]) -> List[float]:
        if not items:
            return []
        oldest = min(i.last_access for i in items)
        open_bonus = max(i.last_access for i in items) - oldest + 1
        closed = self.closed
        return [float(i.last_access - oldest + (0 if i.session in closed else open_bonus)) for i in items]

    def snapshot(self) -> bytes:
        w = Writer(MAGIC, FORMAT).u32(len(self.closed))
        for session in self.closed:
            w.u64(session)
        return w.finish()

    def restore(self, state: bytes) -> None:
        if not state:
            return
        r, version = Reader.open(state, MAGIC)
        if version != FORMAT:
            raise ValueError(f"unknown closed-first snapshot format {version} (this version reads {FORMAT})")
        count = r.u32()
        if count > self.max_sessions:
            raise ValueError(f"snapshot holds {count} closed sessions; max-sessions is {self.max_sessions}")
        closed: Dict[int, None] = {}
        for _ in range(count):
            session = r.u64()
            if session == 0 or session in closed:
                raise ValueError(f"snapshot lists session {session} twice or as 0")
            closed[session] = None
        r.finish()
        self.closed = closed


Guest = export(ClosedFirst)
