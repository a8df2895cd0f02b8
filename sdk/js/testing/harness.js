// Test a JavaScript policy natively, through the same `guest` its component exports and the
// packed paths the host uses (run under `--import …/testing/register.js`).

import { encodeBlocks, encodeEvent, encodeItems, exportPolicy, policyOf } from '../agentrt_policy.js';

/** One policy instance behind its exported guest, driven as the host drives a 0.5 component.
 * Refusals (`init`, `restore`) throw the message string the host would report. */
export class Harness {
  constructor(PolicyClass, config = []) {
    this.guest = exportPolicy(PolicyClass);
    this.guest.init(config);
  }
  /** The policy instance itself, for assertions on its state. */
  get policy() { return policyOf(this.guest); }
  /** A batch as the host sends it: `agent-registered` through `observe`, every run of other
   * events between registrations through `observe-packed`. */
  observe(events) {
    let words = [];
    for (const event of events) {
      if (event.tag === 'agent-registered') {
        if (words.length) this.guest.observePacked(BigUint64Array.from(words));
        words = [];
        this.guest.observe([event]);
      } else {
        words.push(...encodeEvent(event));
      }
    }
    if (words.length) this.guest.observePacked(BigUint64Array.from(words));
  }
  /** Block events through the packed path, as the host sends them. */
  observeBlocks(blocks) { this.guest.observeBlocks(encodeBlocks(blocks)); }
  /** Score through the packed path, as the host does; the scores as f32, as the host gets them. */
  score(items) { return Array.from(this.guest.scorePacked(encodeItems(items)), Math.fround); }
  /** Score through the typed `score` (the contract asks for the same answer). */
  scoreTyped(items) { return Array.from(this.guest.score(items), Math.fround); }
  predict(horizon) { return this.guest.predict(horizon); }
  act() { return this.guest.act(); }
  snapshot() { return this.guest.snapshot(); }
  restore(state) { this.guest.restore(state); }
}

/** The host's ranking rule (sdk/src/ranking.rs): indices keep-most first; higher score first,
 * ties by last-access (most recent first), non-finite scores last. */
export function rank(items, scores) {
  return items.map((_, i) => i).sort((a, b) => {
    const [sa, sb] = [Math.fround(scores[a]), Math.fround(scores[b])];
    const [fa, fb] = [Number.isFinite(sa), Number.isFinite(sb)];
    if (fa !== fb) return fa ? -1 : 1;
    if (fa && sa !== sb) return sb - sa;
    const [la, lb] = [items[a].lastAccess, items[b].lastAccess];
    return la === lb ? 0 : la > lb ? -1 : 1;
  });
}

/** A GPU-tier KV block, 16 tokens at position 0: the item most eviction tests rank. */
export function gpuBlock(key, lastAccess, { agent = 1, session = 0n } = {}) {
  return {
    kind: 'kv-block', key: BigInt(key), agent, session: BigInt(session), lastAccess: BigInt(lastAccess), tokens: 16,
    position: 0, tier: 'gpu',
  };
}

/** A GPU-tier block event at the root of the prefix tree (no parent, position 0). */
export function gpuBlockEvent(op, blockHash, agent = 1) {
  return { op, agent, blockHash: BigInt(blockHash), parentHash: 0n, position: 0, tier: 'gpu' };
}

/** A session ended for `reason` (default: 'idle', as the host infers most ends). */
export function sessionEnd(session, reason = 'idle', atUs = 0n) {
  return { tag: 'session-end', val: { session: BigInt(session), reason, atUs: BigInt(atUs) } };
}
