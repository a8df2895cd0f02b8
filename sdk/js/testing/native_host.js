// `agentrt:policy/host` for native tests in Node.js: what `testing/register.js` resolves the
// import to outside a component.

const started = process.hrtime.bigint();

export function nowUs() {
  return (process.hrtime.bigint() - started) / 1000n;
}

export function log(level, message) {
  process.stderr.write(`[policy ${level}] ${message}\n`);
}

export function randomSeed() {
  return 7n;
}
