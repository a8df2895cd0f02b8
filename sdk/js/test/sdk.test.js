// The JavaScript SDK natively (Node.js): packed decoding against the layouts the Rust SDK encodes,
// configuration errors, snapshots, and the export glue. `cargo xtask test` runs it.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  Config, Policy, StateReader, StateWriter, decodeBlocks, decodeEvents, decodeItems, encodeBlocks, encodeEvent,
  encodeItems, exportPolicy, recencyScores,
} from '../agentrt_policy.js';
import { Harness, gpuBlock, gpuBlockEvent, rank, sessionEnd } from '../testing/harness.js';

const U64_MAX = 2n ** 64n - 1n;

const CONFORMANCE = new URL('../../conformance/', import.meta.url);

const kebab = (name) => name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
/** The fields of each record in the contract's order, as packed.txt writes them. */
const FIELDS = {
  block: ['op', 'agent', 'blockHash', 'parentHash', 'position', 'tier'],
  item: ['kind', 'key', 'agent', 'session', 'lastAccess', 'tokens', 'position', 'tier'],
  'request-arrival': ['requestId', 'agent', 'session', 'anchorHash', 'promptTokens', 'continues', 'warmup', 'atUs'],
  'request-finish': ['requestId', 'agent', 'session', 'promptTokens', 'cachedTokens', 'outputTokens', 'warmup', 'ok',
    'atUs'],
  'tool-call': ['session', 'agent', 'tool', 'argsHash', 'atUs'],
  'tool-return': ['session', 'agent', 'tool', 'argsHash', 'resultTokens', 'latencyUs', 'ok'],
  'session-end': ['session', 'reason', 'atUs'],
  'engine-load': ['queueDepth', 'running', 'freeBlocks', 'totalBlocks', 'atUs'],
  'session-wait': ['session', 'agent', 'kind', 'tool', 'expectedUs', 'hinted', 'atUs'],
  handoff: ['session', 'fromAgent', 'toAgent', 'atUs'],
  'engine-capacity': ['capacityTokens', 'residentTokens', 'residentSessions', 'heldSessions', 'prefillUsPerKtoken',
    'decodeStepUs', 'atUs'],
};

function render(name, record) {
  const value = (v) => (v === undefined ? 'none' : typeof v === 'object' ? `${v.sharedTokens}/${v.previousTokens}` : String(v));
  assert.deepEqual(Object.keys(record).sort(), [...FIELDS[name]].sort(), `${name}: its fields`);
  return [name, ...FIELDS[name].map((f) => `${kebab(f)}=${value(record[f])}`)].join(' ');
}

/** sdk/conformance/packed.txt's cases: [export, words, the line's decoded text]. */
function packedCases() {
  return readFileSync(new URL('packed.txt', CONFORMANCE), 'utf8').split('\n')
    .filter((l) => !l.startsWith('#') && l.includes('->'))
    .map((l) => {
      const [left, want] = l.split('->').map((s) => s.trim());
      const [exported, ...words] = left.split(/\s+/);
      return [exported, BigUint64Array.from(words.map(BigInt)), want];
    });
}

const DECODE = {
  events: (w) => decodeEvents(w).map((e) => render(e.tag, e.val)),
  blocks: (w) => decodeBlocks(w).map((b) => render('block', b)),
  items: (w) => decodeItems(w).map((i) => render('item', i)),
};

test('packed words decode as in every SDK (sdk/conformance/packed.txt)', () => {
  const cases = packedCases();
  for (const [exported, words, want] of cases) {
    assert.equal(DECODE[exported](words).join(' ; ') || 'nothing', want);
  }
  assert.ok(cases.length >= 25);
});

test('the encoders write the words the host sends', () => {
  for (const [exported, words] of packedCases()) {
    if (exported === 'events') {
      const events = decodeEvents(words);
      assert.deepEqual(decodeEvents(BigUint64Array.from(events.flatMap(encodeEvent))), events);
    } else if (exported === 'blocks') {
      const blocks = decodeBlocks(words);
      assert.deepEqual(decodeBlocks(encodeBlocks(blocks)), blocks);
    } else {
      const items = decodeItems(words);
      assert.deepEqual(decodeItems(encodeItems(items)), items);
    }
  }
});

test('configuration getters name the bad key and unknown keys are listed', () => {
  const c = new Config([['k', '3'], ['w', 'x'], ['big', '99']]);
  assert.equal(c.integer('k', 1, 0, 10), 3);
  assert.equal(c.integer('missing', 7, 0, 10), 7);
  assert.throws(() => c.integer('w', 1, 0, 10), /config key w: "x" is not a whole number/);
  assert.throws(() => c.integer('big', 1, 0, 10), /config key big: 99 is outside 0..=10/);
  assert.throws(() => c.number('w', 1), /config key w/);
  assert.throws(() => c.expectOnly(['k']), /unknown config key\(s\) big, w/);
});

test('snapshots round-trip in the Rust layout and damage is named', () => {
  const bytes = new StateWriter('TEST', 2).u8(1).u16(2).u32(3).u64(U64_MAX).f32(0.5).finish();
  assert.deepEqual([...bytes.subarray(0, 8)], [84, 69, 83, 84, 2, 0, 1, 2]);
  const [r, version] = StateReader.open(bytes, 'TEST');
  assert.deepEqual([version, r.u8(), r.u16(), r.u32(), r.u64(), r.f32()], [2, 1, 2, 3, U64_MAX, 0.5]);
  r.finish();
  assert.throws(() => StateReader.open(bytes, 'OTHR'), /not from this policy/);
  const [short] = StateReader.open(bytes.subarray(0, 10), 'TEST');
  short.u8();
  short.u16();
  assert.throws(() => short.u32(), /truncated/);
});

class Recorder extends Policy {
  static NAME = 'recorder';
  constructor() {
    super();
    this.events = [];
    this.blocks = [];
  }
  init(config) { config.expectOnly(['a']); }
  observe(e) { this.events.push(e); }
  observeBlock(b) { this.blocks.push(b); }
  score(items) { return recencyScores(items); }
  restore(state) { if (state.length) throw new Error('no thanks'); }
}

/** One event of every kind: agent-registered, and the conformance file's. */
function everyKind() {
  const registered = { tag: 'agent-registered', val: { agent: 2, name: 'coder', anchorHash: 5n, anchorTokens: 64 } };
  return [registered, ...packedCases().filter(([e]) => e === 'events').flatMap(([, w]) => decodeEvents(w))];
}

test('typed and packed events reach the policy alike, every kind of the contract', () => {
  const [typed, packed] = [new Harness(Recorder), new Harness(Recorder)];
  const events = everyKind();
  assert.equal(new Set(events.map((e) => e.tag)).size, 11);
  typed.guest.observe(events);
  packed.observe(events); // as the host sends them: registrations typed, the rest packed
  assert.deepEqual(packed.policy.events, typed.policy.events);
  assert.deepEqual(packed.policy.blocks, typed.policy.blocks);
  const reasons = packed.policy.events.filter((e) => e.tag === 'session-end').map((e) => e.val.reason);
  assert.deepEqual(reasons, ['closed', 'idle', 'evicted']);
});

test('the export decodes packed paths, skips what a policy ignores and turns refusals into messages', () => {
  const h = new Harness(Recorder, [['a', '1']]);
  const guest = h.guest;
  assert.throws(() => guest.init([['b', '1']]), (e) => e === 'unknown config key(s) b; known: a');
  guest.init([['a', '1']]);
  h.observeBlocks([gpuBlockEvent('stored', 1)]);
  guest.observe([{ tag: 'block', val: gpuBlockEvent('removed', 2) }, sessionEnd(3, 'closed')]);
  assert.deepEqual(h.policy.blocks.map((b) => b.op), ['stored', 'removed']);
  const items = [gpuBlock(1, 5), { ...gpuBlock(2, 9), tier: 'host' }];
  assert.deepEqual(h.score(items), [0, 4]);
  assert.deepEqual(h.score(items), h.scoreTyped(items));
  assert.deepEqual(rank(items, h.score(items)), [1, 0]);
  assert.throws(() => guest.restore(Uint8Array.of(1)), (e) => e === 'no thanks');
  assert.equal(guest.info().name, 'recorder');

  class Blind extends Policy {
    observeBlock() { throw new Error('decoded for a policy that ignores blocks'); }
    score(items) { return items.map(() => 0); }
  }
  class Ignoring extends Policy {
    score(items) { return items.map(() => 0); }
  }
  new Harness(Ignoring).observe([{ tag: 'block', val: gpuBlockEvent('stored', 1) }, sessionEnd(1)]);
  assert.throws(() => new Harness(Blind).observe([{ tag: 'block', val: gpuBlockEvent('stored', 1) }]));
});

test('recency scores: the cases every SDK gives (sdk/conformance/recency_scores.txt)', () => {
  const text = readFileSync(new URL('../../conformance/recency_scores.txt', import.meta.url), 'utf8');
  let cases = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line.includes('->')) continue;
    const [left, right] = line.split('->');
    const items = left.trim().split(/\s+/).filter(Boolean).map((w) => ({ lastAccess: BigInt(w) }));
    const want = right.trim().split(/\s+/).filter(Boolean).map(Number);
    // Compared as the f32 the contract carries.
    assert.deepEqual(recencyScores(items).map(Math.fround), want.map(Math.fround), line);
    cases++;
  }
  assert.ok(cases >= 8);
});
