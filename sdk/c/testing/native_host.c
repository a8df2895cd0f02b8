/* `agentrt:policy/host` for native tests: the imports the generated bindings declare, defined in
 * plain C so the SDK and a policy's logic run as an ordinary program (stdio is fine here: this
 * file is never part of a component). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static int64_t ticks;

int64_t __wasm_import_agentrt_policy_host_now_us(void) { return ++ticks; }
int64_t __wasm_import_agentrt_policy_host_random_seed(void) { return 7; }
void __wasm_import_agentrt_policy_host_log(int32_t level, uint8_t *ptr, size_t len) {
    fprintf(stderr, "[policy %d] %.*s\n", (int)level, (int)len, (const char *)ptr);
}

/* The generated bindings reference the component-type object to keep it linked; natively there is
 * no component type to keep. */
void __component_type_object_force_link_policy(void) {}
