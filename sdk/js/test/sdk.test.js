// The JavaScript SDK natively (Node.js): packed decoding against the layouts the Rust SDK encodes,
// configuration errors, snapshots, and the export glue. `cargo xtask test` runs it.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

import {
  Config, Policy, StateReader, StateWriter, decodeBlocks, decodeItems, encodeBlocks, encodeItems, exportPolicy,
  recencyScores,
} from '../agentrt_policy.js';
import { rank } from '../testing/harness.js';

const U64_MAX = 2n ** 64n - 1n;

test('block events decode every field at its extremes, as the Rust SDK packs them', () => {
  // Words as sdk/src/packed.rs `words(op, agent, position, block, parent)` writes them.
  const words = [2n | (0xffffffn << 8n) | (0xffffffffn << 32n), U64_MAX, 1n, 1n | (16n << 8n) | (3n << 32n), 5n, 0n];
  assert.deepEqual(decodeBlocks(words), [
    { op: 'removed', agent: 0xffffffff, blockHash: U64_MAX, parentHash: 1n, position: 0xffffff },
    { op: 'touched', agent: 3, blockHash: 5n, parentHash: 0n, position: 16 },
  ]);
  const blocks = decodeBlocks(words);
  assert.deepEqual(decodeBlocks(encodeBlocks(blocks)), blocks);
});

test('unknown ops and trailing words are skipped', () => {
  const words = [9n, 1n, 2n, 3n, 4n, 0n, 7n];
  assert.deepEqual(decodeBlocks(words), [{ op: 'all-cleared', agent: 0, blockHash: 4n, parentHash: 0n, position: 0 }]);
});

test('items decode every field; unknown kinds are kv-block; a partial item is ignored', () => {
  const words = [U64_MAX, 2n, 3n, 16n | (0xffffffffn << 32n), 0xffffffffn | (2n << 32n), 1n, 0n, 9n, 0n, 7n << 32n, 1n];
  assert.deepEqual(decodeItems(words), [
    { kind: 'tool-result', key: U64_MAX, agent: 0xffffffff, session: 2n, lastAccess: 3n, tokens: 16, position: 0xffffffff },
    { kind: 'kv-block', key: 1n, agent: 0, session: 0n, lastAccess: 9n, tokens: 0, position: 0 },
  ]);
  const items = decodeItems(words);
  assert.deepEqual(decodeItems(encodeItems(items)), items);
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

test('the export decodes packed paths, skips blocks for a policy without observeBlock and turns refusals into messages', () => {
  const seen = [];
  class Recorder extends Policy {
    static NAME = 'recorder';
    init(config) { config.expectOnly(['a']); }
    observeBlock(b) { seen.push(b.op); }
    score(items) { return recencyScores(items); }
    restore(state) { if (state.length) throw new Error('no thanks'); }
  }
  const guest = exportPolicy(Recorder);
  assert.throws(() => guest.init([['b', '1']]), (e) => e === 'unknown config key(s) b; known: a');
  guest.init([['a', '1']]);
  guest.observeBlocks(encodeBlocks([{ op: 'stored', agent: 1, blockHash: 1n, parentHash: 0n, position: 0 }]));
  guest.observe([{ tag: 'block', val: { op: 'removed' } }, { tag: 'session-end', val: 3n }]);
  assert.deepEqual(seen, ['stored', 'removed']);
  const items = decodeItems([1n, 0n, 5n, 0n, 0n, 2n, 0n, 9n, 0n, 0n]);
  assert.deepEqual(guest.scorePacked(encodeItems(items)), [0, 4]);
  assert.deepEqual(rank(items, guest.score(items)), [1, 0]);
  assert.throws(() => guest.restore(Uint8Array.of(1)), (e) => e === 'no thanks');
  assert.equal(guest.info().name, 'recorder');
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
