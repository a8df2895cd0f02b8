// closed-first in JavaScript: the blocks of sessions the framework closed go first, LRU otherwise.
//
// The rule of policies/closed-first-rust/SPEC.md; scores and snapshots are the Rust version's to
// the bit (tests/closed_first.rs). Ticks and sessions are BigInt (u64); a score is computed as a
// BigInt and converted once.

import { Policy, StateReader, StateWriter, exportPolicy } from '../../sdk/js/agentrt_policy.js';

const MAGIC = 'CLFT';
const FORMAT = 1;

export class ClosedFirst extends Policy {
  static NAME = 'closed-first';
  static VERSION = '0.1.0';
  static DESCRIPTION = 'the blocks of sessions the framework closed go first, LRU otherwise; JavaScript (SPEC.md)';

  constructor() {
    super();
    this.maxSessions = 16384;
    /** Closed sessions, oldest closing first (a Map keeps insertion order). */
    this.closed = new Map();
  }

  init(config) {
    config.expectOnly(['max-sessions']);
    this.maxSessions = config.integer('max-sessions', 16384, 1, 2 ** 20);
  }

  observe(event) {
    const v = event.val;
    if (event.tag === 'session-end' && v.reason === 'closed' && v.session !== 0n && !this.closed.has(v.session)) {
      this.closed.set(v.session, true);
      if (this.closed.size > this.maxSessions) this.closed.delete(this.closed.keys().next().value);
    } else if (event.tag === 'request-arrival' && !v.warmup) {
      this.closed.delete(v.session);
    }
  }

  score(items) {
    if (items.length === 0) return [];
    let [oldest, newest] = [items[0].lastAccess, items[0].lastAccess];
    for (const i of items) {
      if (i.lastAccess < oldest) oldest = i.lastAccess;
      if (i.lastAccess > newest) newest = i.lastAccess;
    }
    const openBonus = newest - oldest + 1n;
    return items.map((i) => Number(i.lastAccess - oldest + (this.closed.has(i.session) ? 0n : openBonus)));
  }

  snapshot() {
    const w = new StateWriter(MAGIC, FORMAT).u32(this.closed.size);
    for (const session of this.closed.keys()) w.u64(session);
    return w.finish();
  }

  restore(state) {
    if (state.length === 0) return;
    const [r, version] = StateReader.open(state, MAGIC);
    if (version !== FORMAT) throw new Error(`unknown closed-first snapshot format ${version} (this version reads ${FORMAT})`);
    const count = r.u32();
    if (count > this.maxSessions) {
      throw new Error(`snapshot holds ${count} closed sessions; max-sessions is ${this.maxSessions}`);
    }
    const closed = new Map();
    for (let n = 0; n < count; n++) {
      const session = r.u64();
      if (session === 0n || closed.has(session)) throw new Error(`snapshot lists session ${session} twice or as 0`);
      closed.set(session, true);
    }
    r.finish();
    this.closed = closed;
  }
}

export const guest = exportPolicy(ClosedFirst);
