/* __NAME__ — an agentrt policy in C (skeleton from `agentrt policy new`).
 * README.md (in a project made outside an agentrt checkout) lists the events and how to build,
 * test and table it. No stdio, no strtod: they import WASI, which the host refuses. */

#include "agentrt_policy.h"

const arp_info arp_policy = {"__NAME__", "0.1.0", "WHAT IT KEEPS AND WHY"};

/* YOUR STATE HERE: what the policy learns from events (statics: one instance per component). */

const char *arp_init(const arp_config *config) {
    /* YOUR CONFIG KEYS HERE: arp_config_u64(config, "key", fallback, low, high, &value) */
    return arp_config_expect_only(config, NULL, 0);
}

void arp_observe(const arp_event *event) {
    /* YOUR LOGIC HERE: learn from events, e.g. a session the framework closed:
     * event->tag == AGENTRT_POLICY_TYPES_EVENT_SESSION_END and
     * event->val.session_end.reason == AGENTRT_POLICY_TYPES_END_REASON_CLOSED. */
    (void)event;
}

void arp_score(const arp_item *items, size_t n, float *scores) {
    /* YOUR LOGIC HERE: one score per item, higher = keep. Recency = LRU, the baseline. */
    arp_recency_scores(items, n, scores);
}

/* Also available: arp_observe_block, arp_predict, arp_act (side effects such as warm-ups), and
 * arp_snapshot/arp_restore (state across hot swaps; arp_w_* / arp_r_* have the encoding). */
