// Module resolution hook (see register.js): the host interface, natively, whichever contract
// version the SDK imports it under (contract.js).

const HOST = 'agentrt:policy/host@';

export async function resolve(specifier, context, next) {
  if (specifier.startsWith(HOST)) {
    return { url: new URL('./native_host.js', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
