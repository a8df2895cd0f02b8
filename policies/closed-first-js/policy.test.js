// closed-first in JavaScript, natively (Node.js): the same cases as the Rust version's unit tests.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, gpuBlock, rank, sessionEnd } from '../../sdk/js/testing/harness.js';
import { ClosedFirst } from './policy.js';

const closed = (...sessions) => sessions.map((s) => sessionEnd(s, 'closed'));
const arrival = (session, warmup = false) => ({
  tag: 'request-arrival',
  val: { requestId: 1n, agent: 1, session: BigInt(session), anchorHash: 0n, promptTokens: 16, continues: undefined, warmup, atUs: 0n },
});
const le = (value, bytes) => Array.from({ length: bytes }, (_, i) => Number((BigInt(value) >> BigInt(8 * i)) & 0xffn));

test("a closed session's blocks go first, oldest first, then LRU", () => {
  const p = new Harness(ClosedFirst);
  const items = [[1, 7, 10], [2, 9, 20], [3, 7, 30], [4, 9, 40], [5, 0, 5]].map(([k, s, t]) => gpuBlock(k, t, { session: s }));
  assert.deepEqual(rank(items, p.score(items)), [3, 2, 1, 0, 4], 'nothing closed: LRU');
  p.observe(closed(9));
  assert.deepEqual(rank(items, p.score(items)), [2, 0, 4, 3, 1], "9's blocks last, oldest last");
});

test('idle and evicted ends change nothing, and a call reopens', () => {
  const p = new Harness(ClosedFirst);
  const items = [gpuBlock(1, 10, { session: 7 }), gpuBlock(2, 20, { session: 9 })];
  const lru = p.score(items);
  p.observe([sessionEnd(7, 'idle'), sessionEnd(7, 'evicted')]);
  assert.deepEqual(p.score(items), lru);
  p.observe([...closed(7), arrival(7, true)]);
  assert.notDeepEqual(p.score(items), lru, 'a warm-up does not reopen');
  p.observe([arrival(7)]);
  assert.deepEqual(p.score(items), lru, 'its own call does');
});

test('the oldest closing is forgotten beyond max-sessions, and the snapshot keeps the order', () => {
  const p = new Harness(ClosedFirst, [['max-sessions', '2']]);
  p.observe(closed(3, 1, 3, 2));
  const state = p.snapshot();
  assert.deepEqual([...state], [...Buffer.from('CLFT'), 1, 0, ...le(2, 4), ...le(1, 8), ...le(2, 8)]);
  const fresh = new Harness(ClosedFirst, [['max-sessions', '2']]);
  fresh.restore(state);
  assert.deepEqual(fresh.snapshot(), state);
  assert.throws(() => new Harness(ClosedFirst, [['max-sessions', '1']]).restore(state), /max-sessions is 1/);
  const twice = Uint8Array.from([...Buffer.from('CLFT'), 1, 0, ...le(2, 4), ...le(5, 8), ...le(5, 8)]);
  assert.throws(() => fresh.restore(twice), /twice/);
  assert.deepEqual(fresh.snapshot(), state, 'a refused snapshot changes nothing');
});

test('configuration is checked by key', () => {
  for (const [key, value] of [['max-sessions', '0'], ['max-sessions', 'x'], ['max-session', '2']]) {
    assert.throws(() => new Harness(ClosedFirst, [[key, value]]), (e) => String(e).includes(key));
  }
});
