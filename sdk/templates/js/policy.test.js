// __NAME__ natively (Node.js), through the SDK's harness: `cargo xtask test` runs it.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, rank } from '__SDK__/js/testing/harness.js';
import { Policy__TYPE__ } from './policy.js';

test('newest first until you change it', () => {
  const policy = new Harness(Policy__TYPE__);
  const item = (key, lastAccess) => ({ kind: 'kv-block', key, agent: 1, session: 0n, lastAccess, tokens: 16, position: 0 });
  const items = [item(1n, 5n), item(2n, 9n)];
  assert.deepEqual(rank(items, policy.score(items)), [1, 0]);
});
