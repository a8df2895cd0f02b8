/* __NAME__ — an agentrt policy in C (skeleton from `agentrt policy new`).
 * sdk/c/README.md has the whole workflow; policies/callrate-c is a worked example. No stdio, no
 * strtod: they import WASI, which the host refuses (docs/zero-wasi.md). */

#include "agentrt_policy.h"

const arp_info arp_policy = {"__NAME__", "0.1.0", "WHAT IT KEEPS AND WHY"};

/* YOUR STATE HERE: what the policy learns from events (statics: one instance per component). */

const char *arp_init(const arp_config *config) {
    /* YOUR CONFIG KEYS HERE: arp_config_u64(config, "key", fallback, low, high, &value) */
    return arp_config_expect_only(config, NULL, 0);
}

void arp_observe(const arp_event *event) {
    (void)event; /* YOUR LOGIC HERE: learn from request, tool and engine events. */
}

void arp_score(const arp_item *items, size_t n, float *scores) {
    /* YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline. */
    uint64_t newest = 0;
    for (size_t i = 0; i < n; i++) newest = items[i].last_access > newest ? items[i].last_access : newest;
    for (size_t i = 0; i < n; i++) scores[i] = -(float)(newest - items[i].last_access);
}

/* Also available: arp_observe_block, arp_predict, arp_act (side effects such as warm-ups), and
 * arp_snapshot/arp_restore (state across hot swaps; arp_w_* / arp_r_* have the encoding). */
