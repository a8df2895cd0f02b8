// __NAME__ natively (Node.js), through the SDK's harness, which drives the policy as the host does:
// `agentrt policy build --test` runs it (`cargo xtask test` in an agentrt checkout).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness, gpuBlock, rank } from '__SDK__/js/testing/harness.js';
import { Policy__TYPE__ } from './policy.js';

test('newest first until you change it', () => {
  const policy = new Harness(Policy__TYPE__);
  const items = [gpuBlock(1, 5), gpuBlock(2, 9)];
  assert.deepEqual(rank(items, policy.score(items)), [1, 0]);
});
