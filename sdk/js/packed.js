// The packed forms the host uses on its hot paths, decoded into the contract's shapes (the ones
// componentize-js gives typed calls: records as objects with camelCase fields, enums as strings,
// variants as `{ tag, val }`, an absent option as undefined, u64 as BigInt) — and encoded, as the
// host does, for native tests.
//
// This module and `contract.js` are what is particular to the contract line, `agentrt:policy@0.5.0`.
// Layouts (wit/policy.wit, `observe-packed`, `observe-blocks`, `score-packed`; the Rust SDK's
// `packed` module is the reference):
//
//   block event, 3 words: [op | tier << 4 | position << 8 | agent << 32, block hash, parent hash]
//   score item,  5 words: [key, session, last-access, tokens | agent << 32,
//                          position | kind << 32 | tier << 40]
//   event: a header [kind | payload words << 8 | flags << 16 | agent << 32] and its payload
//          (every kind but agent-registered, which always comes typed through `observe`)

export const WORDS_PER_EVENT = 3;
export const ITEM_WORDS = 5;
export const MAX_POSITION = (1 << 24) - 1;

export const BLOCK_OPS = ['stored', 'touched', 'removed', 'all-cleared'];
export const TIERS = ['gpu', 'host'];
export const ITEM_KINDS = ['kv-block', 'request', 'tool-result', 'session'];
export const END_REASONS = ['closed', 'idle', 'evicted'];
export const WAIT_KINDS = ['tool', 'user'];
/** The `event` case names by ordinal (the header's kind). */
export const EVENT_KINDS = [
  'agent-registered', 'request-arrival', 'request-finish', 'tool-call', 'tool-return', 'session-end', 'engine-load',
  'block', 'session-wait', 'handoff', 'engine-capacity',
];
const BLOCK = 7;

const U32 = 0xffffffffn;
const low = (w) => Number(w & U32);
const high = (w) => Number(w >> 32n);

function block(head, blockHash, parentHash) {
  const op = BLOCK_OPS[Number(head & 0xfn)];
  const tier = TIERS[Number((head >> 4n) & 0xfn)];
  if (op === undefined || tier === undefined) return undefined;
  return {
    op,
    agent: high(head),
    blockHash: BigInt(blockHash),
    parentHash: BigInt(parentHash),
    position: Number((head >> 8n) & BigInt(MAX_POSITION)),
    tier,
  };
}

/** Block events from `observe-blocks` words (a `BigUint64Array` or an array of BigInt). Ops and
 * tiers this SDK does not know (a newer host) and trailing words that do not make a whole event
 * are skipped. */
export function decodeBlocks(words) {
  const events = [];
  for (let i = 0; i + WORDS_PER_EVENT <= words.length; i += WORDS_PER_EVENT) {
    const b = block(BigInt(words[i]), words[i + 1], words[i + 2]);
    if (b !== undefined) events.push(b);
  }
  return events;
}

/** Score items from `score-packed` words. Unknown kinds (a newer host) decode as `kv-block`,
 * unknown tiers as `host`; trailing words that do not make a whole item are ignored (the host
 * checks one score per item). */
export function decodeItems(words) {
  const items = [];
  for (let i = 0; i + ITEM_WORDS <= words.length; i += ITEM_WORDS) {
    const tokensAgent = BigInt(words[i + 3]);
    const positionKind = BigInt(words[i + 4]);
    items.push({
      kind: ITEM_KINDS[Number((positionKind >> 32n) & 0xffn)] ?? 'kv-block',
      key: BigInt(words[i]),
      agent: high(tokensAgent),
      session: BigInt(words[i + 1]),
      lastAccess: BigInt(words[i + 2]),
      tokens: low(tokensAgent),
      position: low(positionKind),
      tier: TIERS[Number((positionKind >> 40n) & 0xffn)] ?? 'host',
    });
  }
  return items;
}

/** Events from `observe-packed` words, oldest first, as `{ tag, val }` like `observe` receives.
 * Kinds this SDK does not know, payloads shorter than it reads, unknown reasons or wait kinds and
 * a trailing partial event are skipped (the header says how many words to skip). With
 * `blocks: false` block events are skipped without decoding, with `others: false` every other
 * kind (for a policy that ignores them). */
export function decodeEvents(words, { blocks = true, others = true } = {}) {
  const events = [];
  let at = 0;
  while (at < words.length) {
    const head = BigInt(words[at]);
    const size = Number((head >> 8n) & 0xffn);
    const start = at + 1;
    at = start + size;
    if (at > words.length) break;
    const kind = Number(head & 0xffn);
    if (!(kind === BLOCK ? blocks : others)) continue;
    const event = decodeEvent(head, kind, Array.from(words.slice(start, at), BigInt));
    if (event !== undefined) events.push(event);
  }
  return events;
}

function decodeEvent(head, kind, p) {
  const flags = Number((head >> 16n) & 0xffffn);
  const agent = high(head);
  const flag = (bit) => (flags & (1 << bit)) !== 0;
  switch (kind) {
    case 1:
      if (p.length < 6) return undefined;
      return { tag: 'request-arrival', val: {
        requestId: p[0], agent, session: p[1], anchorHash: p[2], promptTokens: low(p[4]),
        continues: flag(1) ? { sharedTokens: low(p[5]), previousTokens: high(p[5]) } : undefined,
        warmup: flag(0), atUs: p[3],
      } };
    case 2:
      if (p.length < 5) return undefined;
      return { tag: 'request-finish', val: {
        requestId: p[0], agent, session: p[1], promptTokens: low(p[3]), cachedTokens: high(p[3]),
        outputTokens: low(p[4]), warmup: flag(0), ok: flag(1), atUs: p[2],
      } };
    case 3:
      if (p.length < 4) return undefined;
      return { tag: 'tool-call', val: { session: p[0], agent, tool: p[1], argsHash: p[2], atUs: p[3] } };
    case 4:
      if (p.length < 5) return undefined;
      return { tag: 'tool-return', val: {
        session: p[0], agent, tool: p[1], argsHash: p[2], resultTokens: low(p[4]), latencyUs: p[3], ok: flag(0),
      } };
    case 5: {
      const reason = END_REASONS[flags & 0xff];
      if (p.length < 2 || reason === undefined) return undefined;
      return { tag: 'session-end', val: { session: p[0], reason, atUs: p[1] } };
    }
    case 6:
      if (p.length < 3) return undefined;
      return { tag: 'engine-load', val: {
        queueDepth: low(p[0]), running: high(p[0]), freeBlocks: low(p[1]), totalBlocks: high(p[1]), atUs: p[2],
      } };
    case BLOCK: {
      const b = p.length < WORDS_PER_EVENT ? undefined : block(p[0], p[1], p[2]);
      return b === undefined ? undefined : { tag: 'block', val: b };
    }
    case 8: {
      const waitKind = WAIT_KINDS[flags & 0xff];
      if (p.length < 4 || waitKind === undefined) return undefined;
      return { tag: 'session-wait', val: {
        session: p[0], agent, kind: waitKind, tool: p[1], expectedUs: p[2], hinted: flag(8), atUs: p[3],
      } };
    }
    case 9:
      if (p.length < 3) return undefined;
      return { tag: 'handoff', val: { session: p[0], fromAgent: agent, toAgent: low(p[1]), atUs: p[2] } };
    case 10:
      if (p.length < 5) return undefined;
      return { tag: 'engine-capacity', val: {
        capacityTokens: p[0], residentTokens: p[1], residentSessions: low(p[2]), heldSessions: high(p[2]),
        prefillUsPerKtoken: low(p[3]), decodeStepUs: high(p[3]), atUs: p[4],
      } };
    default:
      return undefined;
  }
}

const blockHead = (b) =>
  BigInt(BLOCK_OPS.indexOf(b.op)) | (BigInt(TIERS.indexOf(b.tier ?? 'gpu')) << 4n) |
  (BigInt(Math.min(b.position, MAX_POSITION)) << 8n) | (BigInt(b.agent) << 32n);

/** The words of block events, as the host packs them (for tests). */
export function encodeBlocks(blocks) {
  const words = new BigUint64Array(blocks.length * WORDS_PER_EVENT);
  blocks.forEach((b, n) => {
    words[n * 3] = blockHead(b);
    words[n * 3 + 1] = BigInt(b.blockHash);
    words[n * 3 + 2] = BigInt(b.parentHash);
  });
  return words;
}

/** The words of score items, as the host packs them (for tests). */
export function encodeItems(items) {
  const words = new BigUint64Array(items.length * ITEM_WORDS);
  items.forEach((item, n) => {
    const at = n * ITEM_WORDS;
    words[at] = BigInt(item.key);
    words[at + 1] = BigInt(item.session);
    words[at + 2] = BigInt(item.lastAccess);
    words[at + 3] = BigInt(item.tokens) | (BigInt(item.agent) << 32n);
    words[at + 4] = BigInt(item.position) | (BigInt(ITEM_KINDS.indexOf(item.kind)) << 32n) |
      (BigInt(TIERS.indexOf(item.tier ?? 'gpu')) << 40n);
  });
  return words;
}

const pair = (lo, hi) => BigInt(lo) | (BigInt(hi) << 32n);

/** One event's `observe-packed` words (an array of BigInt), as the host packs it; empty for
 * `agent-registered`, which the host always sends typed (for tests). */
export function encodeEvent({ tag, val: v }) {
  const kind = EVENT_KINDS.indexOf(tag);
  const bits = (...flags) => flags.reduce((all, on, bit) => all | (on ? 1 << bit : 0), 0);
  let flags = 0;
  let agent = 0;
  let payload;
  switch (tag) {
    case 'request-arrival':
      [flags, agent] = [bits(v.warmup, v.continues !== undefined && v.continues !== null), v.agent];
      payload = [v.requestId, v.session, v.anchorHash, v.atUs, v.promptTokens,
        v.continues ? pair(v.continues.sharedTokens, v.continues.previousTokens) : 0n];
      break;
    case 'request-finish':
      [flags, agent] = [bits(v.warmup, v.ok), v.agent];
      payload = [v.requestId, v.session, v.atUs, pair(v.promptTokens, v.cachedTokens), v.outputTokens];
      break;
    case 'tool-call':
      agent = v.agent;
      payload = [v.session, v.tool, v.argsHash, v.atUs];
      break;
    case 'tool-return':
      [flags, agent] = [bits(v.ok), v.agent];
      payload = [v.session, v.tool, v.argsHash, v.latencyUs, v.resultTokens];
      break;
    case 'session-end':
      flags = END_REASONS.indexOf(v.reason);
      payload = [v.session, v.atUs];
      break;
    case 'engine-load':
      payload = [pair(v.queueDepth, v.running), pair(v.freeBlocks, v.totalBlocks), v.atUs];
      break;
    case 'block':
      payload = Array.from(encodeBlocks([v]));
      break;
    case 'session-wait':
      [flags, agent] = [WAIT_KINDS.indexOf(v.kind) | (v.hinted ? 1 << 8 : 0), v.agent];
      payload = [v.session, v.tool, v.expectedUs, v.atUs];
      break;
    case 'handoff':
      agent = v.fromAgent;
      payload = [v.session, v.toAgent, v.atUs];
      break;
    case 'engine-capacity':
      payload = [v.capacityTokens, v.residentTokens, pair(v.residentSessions, v.heldSessions),
        pair(v.prefillUsPerKtoken, v.decodeStepUs), v.atUs];
      break;
    default:
      return [];
  }
  const header = BigInt(kind) | (BigInt(payload.length) << 8n) | (BigInt(flags) << 16n) | (BigInt(agent) << 32n);
  return [header, ...payload.map(BigInt)];
}
