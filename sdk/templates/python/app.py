"""__NAME__ — an agentrt policy in Python (skeleton from `agentrt policy new`).

It starts as the simplest rule a framework's hints make possible — the blocks of sessions the
framework closed go first, LRU otherwise — so that you can see every part a policy has: events in,
scores out, state kept across a hot swap. Replace what it does; README.md (in a project made
outside an agentrt checkout) lists the events with their class names and how to build, test and
table it.
"""

from typing import Dict, List

from agentrt_policy import (
    Config,
    EndReason,
    Event_RequestArrival,
    Event_SessionEnd,
    Item,
    Policy,
    export,
    recency_scores,
)
from agentrt_policy.state import Reader, Writer

# Tags this policy's snapshots (4 bytes), so that `restore` refuses another policy's state.
MAGIC = b"__MAGIC__"
FORMAT = 1
# State is bounded: a policy that grows without end reaches its memory cap (128 MiB by default).
MAX_CLOSED = 10_000


class Policy__TYPE__(Policy):
    NAME, VERSION, DESCRIPTION = "__NAME__", "0.1.0", "WHAT IT KEEPS AND WHY"

    def __init__(self):
        # YOUR STATE HERE: what the policy learns from events. The skeleton's: the sessions the
        # framework closed, oldest first (a dict keeps insertion order).
        self.closed: Dict[int, None] = {}

    def init(self, config: Config):
        config.expect_only([])  # YOUR CONFIG KEYS HERE: config.get_int("key", default, low, high)

    def observe(self, event):
        # YOUR LOGIC HERE: learn from events (README.md lists them; block events go to
        # observe_block). The skeleton hears a session's end — closed by the framework, so its
        # content will not be asked for again, unlike an idle or evicted end — and a closed
        # session's next call, which says the closing was wrong.
        if isinstance(event, Event_SessionEnd):
            if event.value.reason == EndReason.CLOSED:
                self.closed[event.value.session] = None
                if len(self.closed) > MAX_CLOSED:
                    del self.closed[next(iter(self.closed))]
        elif isinstance(event, Event_RequestArrival) and not event.value.warmup:
            self.closed.pop(event.value.session, None)

    def score(self, items: List[Item]) -> List[float]:
        # YOUR LOGIC HERE: one score per item, higher = keep; the host breaks ties by recency.
        # The skeleton: recency (LRU's order), lifted above every block of a closed session.
        recency = recency_scores(items)
        lift = max(recency, default=0.0) + 1.0
        return [r if i.session in self.closed else r + lift for r, i in zip(recency, items)]

    def snapshot(self) -> bytes:
        # What `restore` needs to go on after a hot swap or a restart (the kit warns when a policy
        # that learned something writes nothing).
        w = Writer(MAGIC, FORMAT).u32(len(self.closed))
        for session in self.closed:
            w.u64(session)
        return w.finish()

    def restore(self, state: bytes) -> None:
        if not state:
            return
        r, version = Reader.open(state, MAGIC)
        if version != FORMAT:
            raise ValueError(f"snapshot format {version}; this version reads {FORMAT}")
        closed = {r.u64(): None for _ in range(r.u32())}
        r.finish()
        self.closed = closed

    # Also available: observe_block (KV-block events), predict and act (side effects such as
    # warm-ups); agentrt_policy.host has the clock, the log and a seed.


Guest = export(Policy__TYPE__)
