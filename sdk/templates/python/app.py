"""__NAME__ — an agentrt policy in Python (skeleton from `agentrt policy new`).

sdk/python/README.md has the whole workflow; policies/callrate-py is a worked example.
"""

from agentrt_policy import Config, Policy, export, recency_scores


class Policy__TYPE__(Policy):
    NAME, VERSION, DESCRIPTION = "__NAME__", "0.1.0", "WHAT IT KEEPS AND WHY"

    def __init__(self):
        pass  # YOUR STATE HERE: what the policy learns from events.

    def init(self, config: Config):
        config.expect_only([])  # YOUR CONFIG KEYS HERE: config.get_int("key", default, low, high)

    def observe(self, event):
        pass  # YOUR LOGIC HERE: learn from request, tool and engine events (blocks: observe_block).

    def score(self, items):
        # YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline.
        return recency_scores(items)

    # Also available: observe_block, predict, act (side effects such as warm-ups), and
    # snapshot/restore (state across hot swaps; agentrt_policy.state has the encoding).


Guest = export(Policy__TYPE__)
