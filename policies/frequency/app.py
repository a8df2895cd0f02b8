"""Agent frequency — a policy written in Python, to show the contract is not Rust-only.

KV blocks of agents that are called often stay longer than blocks of agents called rarely, even
when the rare agent's blocks are newer: an orchestrator or a judge called on every turn keeps its
prefix while a one-off helper's goes first. An agent's call rate is an exponentially decayed
count of its requests (`half-life` counted in requests, so the policy reads no clock); a block's
score is its recency within the batch (0 = oldest, 1 = newest) plus `weight` times its agent's
rate relative to the busiest agent. With the default `weight=2`, an agent's blocks outrank those
of any agent called less than half as often, whatever their age; with `weight=0` the order is
exactly LRU's.

Config: `weight` (default 2.0), `half-life` (default 64 requests), `max-agents` (default 1024:
rates kept; the smallest go first). State: the rates, as JSON (a few KB).
"""

import json
from typing import Dict, List, Tuple

from agentrt_policy import Config, Forecast, ForecastKind, Item, Policy, export, types

FORMAT = 1


class Frequency(Policy):
    NAME = "frequency"
    VERSION = "0.1.0"
    DESCRIPTION = "keeps blocks of frequently called agents (decayed request counts) + recency; Python"

    def __init__(self) -> None:
        self.weight = 2.0
        self.half_life = 64.0
        self.max_agents = 1024
        self.requests = 0
        # agent -> (decayed count, request number when it was last brought up to date)
        self.rates: Dict[int, Tuple[float, int]] = {}

    def init(self, config: Config) -> None:
        config.expect_only(["weight", "half-life", "max-agents"])
        self.weight = config.get_float("weight", 2.0, 0.0, 1000.0)
        self.half_life = config.get_float("half-life", 64.0, 1.0, 1e9)
        self.max_agents = config.get_int("max-agents", 1024, 1, 1 << 20)

    def rate(self, agent: int) -> float:
        count, at = self.rates.get(agent, (0.0, self.requests))
        return count * 0.5 ** ((self.requests - at) / self.half_life)

    def observe(self, event) -> None:
        if isinstance(event, types.Event_RequestArrival) and not event.value.warmup:
            self.requests += 1
            agent = event.value.agent
            self.rates[agent] = (self.rate(agent) + 1.0, self.requests)
            if len(self.rates) > self.max_agents:
                coldest = min(self.rates, key=self.rate)
                del self.rates[coldest]

    def score(self, items: List[Item]) -> List[float]:
        if not items:
            return []
        newest = max(i.last_access for i in items)
        span = max(newest - min(i.last_access for i in items), 1)
        rates = {agent: self.rate(agent) for agent in {i.agent for i in items}}
        busiest = max(max(rates.values()), 1e-9)
        return [1.0 - (newest - i.last_access) / span + self.weight * rates[i.agent] / busiest for i in items]

    def predict(self, horizon: int) -> List[Forecast]:
        """The agents most likely to be called next, by their share of the recent calls."""
        rates = {agent: self.rate(agent) for agent in self.rates}
        total = sum(rates.values())
        if total <= 0.0:
            return []
        top = sorted(rates, key=rates.get, reverse=True)[:3]
        return [
            Forecast(
                kind=ForecastKind.NEXT_AGENT,
                session=0,
                agent=agent,
                subject=0,
                probability=rates[agent] / total,
                steps=1,
            )
            for agent in top
        ]

    def snapshot(self) -> bytes:
        rates = {str(agent): [count, at] for agent, (count, at) in self.rates.items()}
        return json.dumps({"format": FORMAT, "requests": self.requests, "rates": rates}).encode()

    def restore(self, state: bytes) -> None:
        if not state:
            return
        try:
            doc = json.loads(state)
            if doc.get("format") != FORMAT:
                raise ValueError(f"snapshot format {doc.get('format')!r}, this policy reads {FORMAT}")
            rates = {int(agent): (float(count), int(at)) for agent, (count, at) in doc["rates"].items()}
            requests = int(doc["requests"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"not a frequency snapshot: {e}") from None
        self.requests, self.rates = requests, rates


Guest = export(Frequency)
