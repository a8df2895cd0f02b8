// agentrt's policy SDK for JavaScript: write a policy as a class, build it with componentize-js.
//
// The Rust SDK's `Policy` trait and the Python SDK's `Policy` class, in JavaScript. A policy
// extends `Policy`, overrides what it uses (every method but `score` has a neutral default), and
// its module exports the component's `guest` interface:
//
//   import { Policy, exportPolicy } from './agentrt-sdk/js/agentrt_policy.js';
//   class Mine extends Policy {
//     static NAME = 'mine';
//     score(items) { return items.map((i) => i.position); }
//   }
//   export const guest = exportPolicy(Mine);
//
// `agentrt policy build` (or, in a checkout, `cargo xtask build-policies`) builds a `policy.js`
// with componentize-js and every WASI feature disabled into an `agentrt:policy@0.5.0` component:
// it imports only `agentrt:policy/host`, like a Rust one. Values arrive as componentize-js gives
// them: records as objects with camelCase fields, enums as strings ('kv-block', 'closed'),
// variants as `{ tag, val }`, u64 as BigInt. The SDK decodes the packed hot paths
// (`observe-packed`, `observe-blocks`, `score-packed`), so a policy sees typed events and items.

import { decodeBlocks, decodeEvents, decodeItems } from './packed.js';

export { CONTRACT_VERSION, host } from './contract.js';
export {
  decodeBlocks, decodeEvents, decodeItems, encodeBlocks, encodeEvent, encodeItems,
} from './packed.js';
export { StateReader, StateWriter } from './state.js';

/** A configuration the policy refuses; the host reports the message from `init`. */
export class ConfigError extends Error {}

/** The `init` configuration: key/value strings with getters that name the bad key. */
export class Config {
  constructor(pairs) {
    this.values = new Map(pairs);
  }
  /** Refuse keys the policy does not know, so a typo is never silently ignored. */
  expectOnly(known) {
    const unknown = [...this.values.keys()].filter((k) => !known.includes(k)).sort();
    if (unknown.length) {
      throw new ConfigError(`unknown config key(s) ${unknown.join(', ')}; known: ${known.join(', ') || 'none'}`);
    }
  }
  /** The raw value of `key`, or undefined. */
  get(key) {
    return this.values.get(key);
  }
  /** `key` as a whole number (decimal digits) in `low..=high`, or `fallback` when absent. Exact
   * up to 2^53. */
  integer(key, fallback, low, high) {
    const raw = this.values.get(key);
    if (raw === undefined) return fallback;
    if (!/^[0-9]{1,15}$/.test(raw)) throw new ConfigError(`config key ${key}: ${JSON.stringify(raw)} is not a whole number`);
    const value = Number(raw);
    if (value < low || value > high) throw new ConfigError(`config key ${key}: ${value} is outside ${low}..=${high}`);
    return value;
  }
  /** `key` as a number in `[low, high]`, or `fallback` when absent. */
  number(key, fallback, low = -Infinity, high = Infinity) {
    const raw = this.values.get(key);
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (raw.trim() === '' || Number.isNaN(value)) throw new ConfigError(`config key ${key}: ${JSON.stringify(raw)} is not a number`);
    if (value < low || value > high) throw new ConfigError(`config key ${key}: ${value} is outside [${low}, ${high}]`);
    return value;
  }
}

/** Recency as a score, as in every agentrt SDK (sdk/conformance/recency_scores.txt): the batch's
 * least recently used item scores 0, newer ones the engine ticks since it — LRU's order under the
 * host's ranking rule (higher = keep), and never negative: a negative score on a host-tier block
 * means "not worth storing", which recency alone never says. */
export function recencyScores(items) {
  if (items.length === 0) return [];
  let oldest = items[0].lastAccess;
  for (const i of items) if (i.lastAccess < oldest) oldest = i.lastAccess;
  return items.map((i) => Number(i.lastAccess - oldest));
}

/** An agentrt policy. One instance lives per component instance, called from one thread. */
export class Policy {
  static NAME = 'unnamed';
  static VERSION = '0.1.0';
  static DESCRIPTION = '';

  /** Configure a fresh instance; throw `ConfigError` to refuse. Accepts no keys by default. */
  init(config) {
    config.expectOnly([]);
  }
  /** One event that is not a block event, in arrival order, typed or packed: `{ tag, val }`
   * with `tag` 'session-end' (`val.reason`: 'closed' when the framework said so, 'idle' inferred
   * from silence, 'evicted' when the host stopped following it), 'session-wait' (`val.kind`:
   * 'tool' or 'user'), 'handoff' (`val.toAgent` runs next), 'request-arrival', … (README). */
  observe(_event) {}
  /** One KV-block event `{ op, agent, blockHash, parentHash, position, tier }`, typed or packed. */
  observeBlock(_block) {}
  /** One priority per item, same order; higher = keep. Ties go to the most recent. */
  score(_items) {
    throw new Error(`${this.constructor.NAME}: score is not implemented`);
  }
  predict(_horizon) {
    return [];
  }
  act() {
    return [];
  }
  /** Learned state (a Uint8Array), for a hot swap or a restart. */
  snapshot() {
    return new Uint8Array(0);
  }
  /** Continue from a snapshot; throw to refuse it. Accepts only empty state by default. */
  restore(state) {
    if (state.length) throw new Error(`this policy keeps no state but was given ${state.length} bytes`);
  }
}

/** A refusal as the contract's `result` error: the message of what was thrown. */
function refusal(e) {
  return e instanceof Error ? e.message : String(e);
}

/** The instance each exported guest drives, for native tests (`policyOf`). */
const instances = new WeakMap();

/** The policy instance `guest` (from `exportPolicy`) drives: for assertions on its state. */
export function policyOf(guest) {
  return instances.get(guest)();
}

/** The `guest` interface componentize-js exports, driving one `PolicyClass` instance. */
export function exportPolicy(PolicyClass) {
  let policy = new PolicyClass();
  // Block events are the highest-rate input; a policy that ignores them skips their decoding, and
  // one that ignores the other events skips theirs.
  const wantsBlocks = PolicyClass.prototype.observeBlock !== Policy.prototype.observeBlock;
  const wantsOthers = PolicyClass.prototype.observe !== Policy.prototype.observe;
  const guest = {
    info() {
      return { name: PolicyClass.NAME, version: PolicyClass.VERSION, description: PolicyClass.DESCRIPTION };
    },
    init(config) {
      const fresh = new PolicyClass();
      try {
        fresh.init(new Config(config));
      } catch (e) {
        throw refusal(e);
      }
      policy = fresh;
    },
    observe(events) {
      for (const event of events) {
        if (event.tag !== 'block') {
          if (wantsOthers) policy.observe(event);
        } else if (wantsBlocks) policy.observeBlock(event.val);
      }
    },
    observePacked(packed) {
      if (!wantsBlocks && !wantsOthers) return;
      for (const event of decodeEvents(packed, { blocks: wantsBlocks, others: wantsOthers })) {
        if (event.tag === 'block') policy.observeBlock(event.val);
        else policy.observe(event);
      }
    },
    observeBlocks(packed) {
      if (!wantsBlocks) return;
      for (const block of decodeBlocks(packed)) policy.observeBlock(block);
    },
    score(items) {
      return policy.score(items);
    },
    scorePacked(packed) {
      return policy.score(decodeItems(packed));
    },
    predict(horizon) {
      return policy.predict(horizon);
    },
    act() {
      return policy.act();
    },
    snapshot() {
      return policy.snapshot();
    },
    restore(state) {
      try {
        policy.restore(state);
      } catch (e) {
        throw refusal(e);
      }
    },
  };
  instances.set(guest, () => policy);
  return guest;
}
