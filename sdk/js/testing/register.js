// Run a policy natively: `node --import ./sdk/js/testing/register.js --test DIR` resolves the
// component import `agentrt:policy/host@…` (contract.js) to `native_host.js`, so the SDK and a policy's
// logic run in plain Node.js, through the same `guest` object the component exports.

import { register } from 'node:module';

register('./loader.js', import.meta.url);
