"""callrate in Python: the reference policy of the language SDKs (policies/callrate/SPEC.md).

Per-agent decayed call counts + recency, one warm-up in `act`. Every quantity is an integer until
the one conversion to f32, so this ranks, acts and snapshots exactly like the Rust, JavaScript and C
versions (tests/languages.rs).
"""

from typing import Dict, List

from agentrt_policy import BlockOp, Config, ConfigError, Item, Policy, export, types
from agentrt_policy.state import Reader, Writer

CALL = 1 << 16
HIT = 1 << 10
COUNT_CAP = 1 << 36
MAGIC = b"CALR"
FORMAT = 1


def decay(c: int, d: int, h: int) -> int:
    """`c` decayed over `d` requests: whole half-lives shift, the rest follows the chord to 1/2."""
    q = d // h
    if q >= 64:
        return 0
    b = c >> q
    return b - b * (d % h) // (2 * h)


def integer(config: Config, key: str, default: int, low: int, high: int) -> int:
    raw = config.get(key)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19):
        raise ConfigError(f"config key {key}: {raw!r} is not a whole number")
    value = int(raw)
    if not low <= value <= high:
        raise ConfigError(f"config key {key}: {value} is outside {low}..={high}")
    return value


class CallRate(Policy):
    NAME, VERSION = "callrate", "0.1.0"
    DESCRIPTION = "keeps blocks of agents called often recently (decayed call counts + recency), warms the hottest other agent; Python"

    def __init__(self) -> None:
        self.half_life, self.recency, self.max_agents = 64, 256, 256
        self.requests, self.last, self.pending = 0, 0, False
        # agent -> [count, at, anchor]
        self.agents: Dict[int, List[int]] = {}

    def init(self, config: Config) -> None:
        config.expect_only(["half-life", "recency", "max-agents"])
        self.half_life = integer(config, "half-life", 64, 1, 65536)
        self.recency = integer(config, "recency", 256, 0, 1 << 20)
        self.max_agents = integer(config, "max-agents", 256, 1, 4096)

    def rate(self, agent: int) -> int:
        a = self.agents.get(agent)
        return 0 if a is None else decay(a[0], self.requests - a[1], self.half_life)

    def credit(self, agent: int, amount: int) -> None:
        a = self.agents.get(agent)
        if a is not None:
            a[0] = min(self.rate(agent) + amount, COUNT_CAP)
            a[1] = self.requests

    def observe(self, event) -> None:
        if not isinstance(event, types.Event_RequestArrival):
            return
        arrival = event.value
        if arrival.warmup or arrival.agent == 0:
            return
        self.requests += 1
        entry = self.agents.setdefault(arrival.agent, [0, self.requests, 0])
        entry[2] = arrival.anchor_hash
        self.credit(arrival.agent, CALL)
        self.last, self.pending = arrival.agent, True
        while len(self.agents) > self.max_agents:
            del self.agents[min(self.agents, key=lambda a: (self.rate(a), a))]

    def observe_block(self, block) -> None:
        if block.op == BlockOp.TOUCHED:
            self.credit(block.agent, HIT)

    def score(self, items: List[Item]) -> List[float]:
        newest = max((i.last_access for i in items), default=0)
        scores = []
        for i in items:
            age = newest - i.last_access
            fresh = self.recency - age if age < self.recency else 0
            scores.append(float((self.rate(i.agent) >> 8) * (self.recency + 1) + fresh))
        return scores

    def act(self):
        if not self.pending:
            return []
        self.pending = False
        total = sum(self.rate(a) for a in self.agents)
        candidates = [(self.rate(a), -a) for a, e in self.agents.items() if a != self.last and e[2] != 0]
        if not candidates:
            return []
        rate, negative = max(candidates)
        if rate == 0:
            return []
        agent = -negative
        return [
            types.SideEffect_WarmPrefix(
                types.WarmPrefix(agent=agent, anchor_hash=self.agents[agent][2], probability=(rate * 65536 // total) / 65536)
            )
        ]

    def snapshot(self) -> bytes:
        w = Writer(MAGIC, FORMAT).u64(self.requests).u32(self.last).u8(int(self.pending)).u32(len(self.agents))
        for agent in sorted(self.agents):
            count, at, anchor = self.agents[agent]
            w.u32(agent).u64(count).u64(at).u64(anchor)
        return w.finish()

    def restore(self, state: bytes) -> None:
        if not state:
            return
        r, version = Reader.open(state, MAGIC)
        if version != FORMAT:
            raise ValueError(f"snapshot format {version}; this policy reads {FORMAT}")
        requests, last, pending, n = r.u64(), r.u32(), r.u8() != 0, r.u32()
        if n > self.max_agents:
            raise ValueError(f"snapshot holds {n} agents; max-agents is {self.max_agents}")
        agents: Dict[int, List[int]] = {}
        previous = -1
        for _ in range(n):
            agent = r.u32()
            if agent <= previous:
                raise ValueError(f"snapshot agents are not in ascending order at {agent}")
            previous = agent
            agents[agent] = [r.u64(), r.u64(), r.u64()]
        r.finish()
        self.requests, self.last, self.pending, self.agents = requests, last, pending, agents


Guest = export(CallRate)
