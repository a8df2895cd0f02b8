// The packed forms the host uses on its hot paths, decoded into the contract's shapes (the ones
// componentize-js gives typed calls: records as objects with camelCase fields, enums as strings,
// u64 as BigInt). Layouts (wit/policy.wit, `observe-blocks` and `score-packed`; the Rust SDK's
// `packed` module is the reference):
//
//   block event, 3 words: [op | position << 8 | agent << 32, block hash, parent hash]
//   score item,  5 words: [key, session, last-access, tokens | agent << 32, position | kind << 32]

export const WORDS_PER_EVENT = 3;
export const ITEM_WORDS = 5;
export const MAX_POSITION = (1 << 24) - 1;

export const BLOCK_OPS = ['stored', 'touched', 'removed', 'all-cleared'];
export const ITEM_KINDS = ['kv-block', 'request', 'tool-result'];

const U32 = 0xffffffffn;

/** Block events from packed words (a `BigUint64Array` or an array of BigInt). Ops this SDK does
 * not know (a newer host) and trailing words that do not make a whole event are skipped. */
export function decodeBlocks(words) {
  const events = [];
  for (let i = 0; i + WORDS_PER_EVENT <= words.length; i += WORDS_PER_EVENT) {
    const head = BigInt(words[i]);
    const op = BLOCK_OPS[Number(head & 0xffn)];
    if (op === undefined) continue;
    events.push({
      op,
      agent: Number(head >> 32n),
      blockHash: BigInt(words[i + 1]),
      parentHash: BigInt(words[i + 2]),
      position: Number((head >> 8n) & BigInt(MAX_POSITION)),
    });
  }
  return events;
}

/** Score items from packed words. Unknown kinds (a newer host) decode as `kv-block`; trailing
 * words that do not make a whole item are ignored (the host checks one score per item). */
export function decodeItems(words) {
  const items = [];
  for (let i = 0; i + ITEM_WORDS <= words.length; i += ITEM_WORDS) {
    const tokensAgent = BigInt(words[i + 3]);
    const positionKind = BigInt(words[i + 4]);
    items.push({
      kind: ITEM_KINDS[Number((positionKind >> 32n) & 0xffn)] ?? 'kv-block',
      key: BigInt(words[i]),
      agent: Number(tokensAgent >> 32n),
      session: BigInt(words[i + 1]),
      lastAccess: BigInt(words[i + 2]),
      tokens: Number(tokensAgent & U32),
      position: Number(positionKind & U32),
    });
  }
  return items;
}

/** The words of block events, as the host packs them (for tests). */
export function encodeBlocks(blocks) {
  const words = new BigUint64Array(blocks.length * WORDS_PER_EVENT);
  blocks.forEach((b, n) => {
    const position = BigInt(Math.min(b.position, MAX_POSITION));
    words[n * 3] = BigInt(BLOCK_OPS.indexOf(b.op)) | (position << 8n) | (BigInt(b.agent) << 32n);
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
    words[at + 4] = BigInt(item.position) | (BigInt(ITEM_KINDS.indexOf(item.kind)) << 32n);
  });
  return words;
}
