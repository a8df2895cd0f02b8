// Test a JavaScript policy natively, through the same `guest` its component exports and the
// packed paths the host uses (run under `--import sdk/js/testing/register.js`).

import { exportPolicy, encodeBlocks, encodeItems } from '../agentrt_policy.js';

/** One policy instance behind its exported guest, driven as the host drives a component.
 * Refusals (`init`, `restore`) throw the message string the host would report. */
export class Harness {
  constructor(PolicyClass, config = []) {
    this.guest = exportPolicy(PolicyClass);
    this.guest.init(config);
  }
  observe(events) { this.guest.observe(events); }
  /** Block events through the packed path, as the host sends them. */
  observeBlocks(blocks) { this.guest.observeBlocks(encodeBlocks(blocks)); }
  /** Score through the packed path, as the host does; the scores as f32, as the host gets them. */
  score(items) { return Array.from(this.guest.scorePacked(encodeItems(items)), Math.fround); }
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
