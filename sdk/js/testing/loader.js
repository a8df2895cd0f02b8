// Module resolution hook (see register.js): the host interface, natively.

const HOST = 'agentrt:policy/host@0.2.0';

export async function resolve(specifier, context, next) {
  if (specifier === HOST) {
    return { url: new URL('./native_host.js', import.meta.url).href, shortCircuit: true };
  }
  return next(specifier, context);
}
