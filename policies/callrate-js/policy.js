// callrate in JavaScript: the reference policy of the language SDKs (policies/callrate/SPEC.md).
//
// Per-agent decayed call counts + recency, one warm-up in `act`. Counts are Numbers kept below
// 2^53 (exact integers; `Math.floor` and `%` only on exact values); u64 fields from the host are
// BigInt. So this ranks, acts and snapshots exactly like the Rust, Python and C versions
// (tests/languages.rs).

import { Policy, StateReader, StateWriter, exportPolicy } from '../../sdk/js/agentrt_policy.js';

const CALL = 65536;
const HIT = 1024;
const COUNT_CAP = 2 ** 36;
const MAGIC = 'CALR';
const FORMAT = 1;

/** Exact `floor(x / d)` for integers below 2^53. */
function div(x, d) {
  return (x - (x % d)) / d;
}

/** `c` decayed over `d` requests: whole half-lives shift, the rest follows the chord to 1/2. */
export function decay(c, d, h) {
  const q = div(d, h);
  if (q >= 64) return 0;
  const b = Math.floor(c / 2 ** q);
  return b - div(b * (d % h), 2 * h);
}

export class CallRate extends Policy {
  static NAME = 'callrate';
  static VERSION = '0.1.0';
  static DESCRIPTION =
    'keeps blocks of agents called often recently (decayed call counts + recency), warms the hottest other agent; JavaScript';

  constructor() {
    super();
    this.halfLife = 64;
    this.recency = 256;
    this.maxAgents = 256;
    this.requests = 0;
    this.last = 0;
    this.pending = false;
    /** agent -> { count, at, anchor (BigInt) } */
    this.agents = new Map();
  }

  init(config) {
    config.expectOnly(['half-life', 'recency', 'max-agents']);
    this.halfLife = config.integer('half-life', 64, 1, 65536);
    this.recency = config.integer('recency', 256, 0, 1 << 20);
    this.maxAgents = config.integer('max-agents', 256, 1, 4096);
  }

  rate(agent) {
    const a = this.agents.get(agent);
    return a === undefined ? 0 : decay(a.count, this.requests - a.at, this.halfLife);
  }

  credit(agent, amount) {
    const a = this.agents.get(agent);
    if (a === undefined) return;
    a.count = Math.min(this.rate(agent) + amount, COUNT_CAP);
    a.at = this.requests;
  }

  observe(event) {
    if (event.tag !== 'request-arrival') return;
    const { agent, anchorHash, warmup } = event.val;
    if (warmup || agent === 0) return;
    this.requests += 1;
    if (!this.agents.has(agent)) this.agents.set(agent, { count: 0, at: this.requests, anchor: 0n });
    this.agents.get(agent).anchor = BigInt(anchorHash);
    this.credit(agent, CALL);
    this.last = agent;
    this.pending = true;
    while (this.agents.size > this.maxAgents) {
      let coldest = null;
      for (const a of this.agents.keys()) {
        const r = this.rate(a);
        if (coldest === null || r < coldest.r || (r === coldest.r && a < coldest.a)) coldest = { r, a };
      }
      this.agents.delete(coldest.a);
    }
  }

  observeBlock(block) {
    if (block.op === 'touched') this.credit(block.agent, HIT);
  }

  score(items) {
    let newest = 0n;
    for (const i of items) if (i.lastAccess > newest) newest = i.lastAccess;
    const window = BigInt(this.recency);
    return items.map((i) => {
      const age = newest - i.lastAccess;
      const fresh = age < window ? this.recency - Number(age) : 0;
      return Math.floor(this.rate(i.agent) / 256) * (this.recency + 1) + fresh;
    });
  }

  act() {
    if (!this.pending) return [];
    this.pending = false;
    let total = 0;
    let best = null;
    for (const [a, e] of this.agents) {
      const r = this.rate(a);
      total += r;
      if (a === this.last || e.anchor === 0n) continue;
      if (best === null || r > best.r || (r === best.r && a < best.a)) best = { r, a, anchor: e.anchor };
    }
    if (best === null || best.r === 0) return [];
    const probability = div(best.r * 65536, total) / 65536;
    return [{ tag: 'warm-prefix', val: { agent: best.a, anchorHash: best.anchor, probability } }];
  }

  snapshot() {
    const w = new StateWriter(MAGIC, FORMAT);
    w.u64(this.requests).u32(this.last).u8(this.pending ? 1 : 0).u32(this.agents.size);
    for (const a of [...this.agents.keys()].sort((x, y) => x - y)) {
      const e = this.agents.get(a);
      w.u32(a).u64(e.count).u64(e.at).u64(e.anchor);
    }
    return w.finish();
  }

  restore(state) {
    if (state.length === 0) return;
    const [r, version] = StateReader.open(state, MAGIC);
    if (version !== FORMAT) throw new Error(`snapshot format ${version}; this policy reads ${FORMAT}`);
    const requests = Number(r.u64());
    const last = r.u32();
    const pending = r.u8() !== 0;
    const n = r.u32();
    if (n > this.maxAgents) throw new Error(`snapshot holds ${n} agents; max-agents is ${this.maxAgents}`);
    const agents = new Map();
    let previous = -1;
    for (let k = 0; k < n; k++) {
      const agent = r.u32();
      if (agent <= previous) throw new Error(`snapshot agents are not in ascending order at ${agent}`);
      previous = agent;
      agents.set(agent, { count: Number(r.u64()), at: Number(r.u64()), anchor: r.u64() });
    }
    r.finish();
    Object.assign(this, { requests, last, pending, agents });
  }
}

export const guest = exportPolicy(CallRate);
