// What is particular to the contract line the SDK builds, `agentrt:policy@0.5.0` (with the packed
// layouts in packed.js): the host interface's import (componentize-js names it by version) and
// the version itself. A new contract line changes these two files.

import * as host from 'agentrt:policy/host@0.5.0';

export { host };

/** The contract line this SDK builds (`agentrt policy test` prints the one a component speaks). */
export const CONTRACT_VERSION = '0.5.0';
