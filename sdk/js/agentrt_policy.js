// agentrt's policy SDK for JavaScript: write a policy as a class, build it with componentize-js.
//
// The Rust SDK's `Policy` trait and the Python SDK's `Policy` class, in JavaScript. A policy
// extends `Policy`, overrides what it uses (every method but `score` has a neutral default), and
// its module exports the component's `guest` interface:
//
//   import { Policy, exportPolicy } from '../../sdk/js/agentrt_policy.js';
//   class Mine extends Policy {
//     static NAME = 'mine';
//     score(items) { return items.map((i) => i.position); }
//   }
//   export const guest = exportPolicy(Mine);
//
// `cargo xtask build-policies` builds every `policies/*/policy.js` with componentize-js and every
// WASI feature disabled: the component imports only `agentrt:policy/host`, like a Rust one. Values
// arrive as componentize-js gives them: records as objects with camelCase fields, enums as
// strings ('kv-block'), variants as `{ tag, val }`, u64 as BigInt. The SDK decodes the packed hot
// paths (`observe-blocks`, `score-packed`), so a policy sees block events and items only.

import * as host from 'agentrt:policy/host@0.2.0';
import { decodeBlocks, decodeItems } from './packed.js';

export { host };
export { decodeBlocks, decodeItems, encodeBlocks, encodeItems } from './packed.js';
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
  /** One event that is not a block event (`{ tag, val }`), in arrival order. */
  observe(_event) {}
  /** One KV-block event `{ op, agent, blockHash, parentHash, position }`, typed or packed. */
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

/** The `guest` interface componentize-js exports, driving one `PolicyClass` instance. */
export function exportPolicy(PolicyClass) {
  let policy = new PolicyClass();
  // Block events are the highest-rate input; a policy that ignores them skips their decoding.
  const wantsBlocks = PolicyClass.prototype.observeBlock !== Policy.prototype.observeBlock;
  return {
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
        if (event.tag !== 'block') policy.observe(event);
        else if (wantsBlocks) policy.observeBlock(event.val);
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
}
