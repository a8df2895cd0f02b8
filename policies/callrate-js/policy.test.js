// callrate in JavaScript, natively (Node.js): the same cases as the Rust version's unit tests.
// Run by `cargo xtask test` as `node --import sdk/js/testing/register.js --test`.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, rank } from '../../sdk/js/testing/harness.js';
import { CallRate, decay } from './policy.js';

const arrival = (agent, warmup = false) => ({
  tag: 'request-arrival',
  val: { requestId: 0n, agent, session: 1n, anchorHash: BigInt(agent * 100), promptTokens: 64, continues: undefined, warmup, atUs: 0n },
});
const calls = (...agents) => agents.map((a) => arrival(a));
const block = (agent, lastAccess) => ({
  kind: 'kv-block', key: (BigInt(agent) << 32n) | BigInt(lastAccess), agent, session: 1n,
  lastAccess: BigInt(lastAccess), tokens: 16, position: 0,
});

test('decay halves per half-life and follows the chord between', () => {
  assert.equal(decay(2 ** 20, 0, 64), 2 ** 20);
  assert.equal(decay(2 ** 20, 64, 64), 2 ** 19);
  assert.equal(decay(2 ** 20, 32, 64), 3 * 2 ** 18);
  assert.equal(decay(2 ** 20, 64 * 64, 64), 0);
});

test("a busy agent's older block outranks a rare agent's newer one", () => {
  const p = new Harness(CallRate);
  p.observe(calls(1, 1, 1, 2));
  const items = [block(1, 10), block(2, 20), block(1, 12)];
  assert.deepEqual(rank(items, p.score(items)), [2, 0, 1]);
});

test('act warms the hottest other agent once per arrival', () => {
  const p = new Harness(CallRate);
  p.observe(calls(1, 1, 2));
  const [warm] = p.act();
  assert.equal(warm.tag, 'warm-prefix');
  assert.deepEqual([warm.val.agent, warm.val.anchorHash], [1, 100n]);
  assert.ok(warm.val.probability > 0.6 && warm.val.probability < 0.7);
  assert.deepEqual(p.act(), []);
  p.observe([arrival(1, true)]);
  assert.deepEqual(p.act(), []);
});

test('hits credit known agents through the packed path', () => {
  const p = new Harness(CallRate);
  p.observe(calls(1, 2));
  const touched = (agent) => ({ op: 'touched', agent, blockHash: 7n, parentHash: 0n, position: 0 });
  p.observeBlocks([touched(1), touched(9)]);
  const scores = p.score([block(1, 1), block(2, 1)]);
  assert.ok(scores[0] > scores[1]);
  assert.equal(p.snapshot().length, 6 + 8 + 4 + 1 + 4 + 2 * 28);
});

test('snapshots round-trip and damage is refused by name', () => {
  const learned = new Harness(CallRate);
  learned.observe(calls(1, 2, 1, 3));
  const state = learned.snapshot();
  const fresh = new Harness(CallRate);
  fresh.restore(state);
  assert.deepEqual(fresh.snapshot(), state);
  const grown = new Uint8Array(state.length + 1);
  grown.set(state);
  for (const [bad, words] of [
    [Uint8Array.from([88, 88, 88, 88, 1, 0]), 'not from this policy'],
    [state.subarray(0, state.length - 1), 'truncated'],
    [grown, 'trailing'],
  ]) {
    assert.throws(() => fresh.restore(bad), (e) => typeof e === 'string' && e.includes(words));
  }
  assert.throws(() => new Harness(CallRate, [['max-agents', '2']]).restore(state), /max-agents/);
});

test('configuration is checked by key', () => {
  for (const [config, words] of [[['half-life', '0'], 'half-life'], [['recency', '-1'], 'recency'], [['max-agent', '3'], 'max-agent']]) {
    assert.throws(() => new Harness(CallRate, [config]), (e) => e.includes(words));
  }
});
