// __NAME__ — an agentrt policy in JavaScript (skeleton from `agentrt policy new`).
// README.md (in a project made outside an agentrt checkout) lists the events and how to build,
// test and table it.

import { Policy, exportPolicy, recencyScores } from '__SDK__/js/agentrt_policy.js';

export class Policy__TYPE__ extends Policy {
  static NAME = '__NAME__';
  static VERSION = '0.1.0';
  static DESCRIPTION = 'WHAT IT KEEPS AND WHY';

  constructor() {
    super();
    // YOUR STATE HERE: what the policy learns from events.
  }

  init(config) {
    config.expectOnly([]); // YOUR CONFIG KEYS HERE: config.integer('key', fallback, low, high)
  }

  observe(_event) {
    // YOUR LOGIC HERE: learn from events ({ tag, val }; blocks go to observeBlock), e.g. a
    // session the framework closed: tag 'session-end' with val.reason 'closed'.
  }

  score(items) {
    // YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline.
    return recencyScores(items);
  }

  // Also available: observeBlock, predict, act (side effects such as warm-ups), and
  // snapshot/restore (state across hot swaps; StateWriter/StateReader have the encoding).
}

export const guest = exportPolicy(Policy__TYPE__);
