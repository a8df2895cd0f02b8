/* callrate in C, natively: the same cases as the Rust version's unit tests. */

#include "testing/harness.h"

uint64_t callrate_decay(uint64_t c, uint64_t d, uint64_t h);

static arp_event arrival(uint32_t agent, bool warmup) {
    arp_event e = {.tag = AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL};
    e.val.request_arrival = (agentrt_policy_types_request_arrival_t){
        .agent = agent, .session = 1, .anchor_hash = agent * 100ull, .prompt_tokens = 64, .warmup = warmup};
    return e;
}

static void calls(const uint32_t *agents, size_t n) {
    for (size_t i = 0; i < n; i++) {
        arp_event e = arrival(agents[i], false);
        arp_test_observe(&e, 1);
    }
}

static arp_item block(uint32_t agent, uint64_t last_access) {
    return (arp_item){AGENTRT_POLICY_TYPES_ITEM_KIND_KV_BLOCK, (uint64_t)agent << 32 | last_access, agent, 1,
                      last_access, 16, 0, AGENTRT_POLICY_TYPES_TIER_GPU};
}

static void fresh(void) { free(arp_test_init(NULL, 0)); }

int main(void) {
    ARP_TEST("decay halves per half-life and follows the chord between") {
        ARP_CHECK(callrate_decay(1 << 20, 0, 64) == 1 << 20);
        ARP_CHECK(callrate_decay(1 << 20, 64, 64) == 1 << 19);
        ARP_CHECK(callrate_decay(1 << 20, 32, 64) == 3 << 18);
        ARP_CHECK(callrate_decay(1 << 20, 64 * 64, 64) == 0);
    }
    ARP_TEST("a busy agent's older block outranks a rare agent's newer one") {
        fresh();
        calls((uint32_t[]){1, 1, 1, 2}, 4);
        arp_item items[] = {block(1, 10), block(2, 20), block(1, 12)};
        float scores[3];
        arp_test_score(items, 3, scores);
        ARP_CHECK(scores[2] > scores[0] && scores[0] > scores[1]);
    }
    ARP_TEST("act warms the hottest other agent once per arrival") {
        fresh();
        calls((uint32_t[]){1, 1, 2}, 3);
        exports_agentrt_policy_guest_list_side_effect_t effects;
        exports_agentrt_policy_guest_act(&effects);
        ARP_CHECK(effects.len == 1 && effects.ptr[0].tag == AGENTRT_POLICY_TYPES_SIDE_EFFECT_WARM_PREFIX);
        ARP_CHECK(effects.ptr[0].val.warm_prefix.agent == 1 && effects.ptr[0].val.warm_prefix.anchor_hash == 100);
        float p = effects.ptr[0].val.warm_prefix.probability;
        ARP_CHECK(p > 0.6f && p < 0.7f);
        exports_agentrt_policy_guest_list_side_effect_free(&effects);
        exports_agentrt_policy_guest_act(&effects);
        ARP_CHECK(effects.len == 0);
        arp_event warm = arrival(1, true);
        arp_test_observe(&warm, 1);
        exports_agentrt_policy_guest_act(&effects);
        ARP_CHECK(effects.len == 0);
    }
    ARP_TEST("hits credit known agents through the packed path") {
        fresh();
        calls((uint32_t[]){1, 2}, 2);
        uint64_t words[] = {1 | 1ull << 32, 7, 0, 1 | 9ull << 32, 7, 0};
        arp_test_observe_blocks(words, 6);
        arp_item items[] = {block(1, 1), block(2, 1)};
        float scores[2];
        arp_test_score(items, 2, scores);
        ARP_CHECK(scores[0] > scores[1]);
        size_t len;
        free(arp_test_snapshot(&len));
        ARP_CHECK(len == 6 + 8 + 4 + 1 + 4 + 2 * 28);
    }
    ARP_TEST("snapshots round-trip and damage is refused by name") {
        fresh();
        calls((uint32_t[]){1, 2, 1, 3}, 4);
        size_t len, len2;
        uint8_t *state = arp_test_snapshot(&len);
        fresh();
        ARP_CHECK(arp_test_restore(state, len) == NULL);
        uint8_t *again = arp_test_snapshot(&len2);
        ARP_CHECK(len == len2 && memcmp(state, again, len) == 0);
        char *err = arp_test_restore((const uint8_t *)"XXXX\1\0", 6);
        ARP_CHECK(err && strstr(err, "not from this policy"));
        free(err);
        err = arp_test_restore(state, len - 1);
        ARP_CHECK(err && strstr(err, "truncated"));
        free(err);
        uint8_t *longer = calloc(len + 1, 1);
        memcpy(longer, state, len);
        err = arp_test_restore(longer, len + 1);
        ARP_CHECK(err && strstr(err, "trailing"));
        free(err);
        free(arp_test_init((const char *[]){"max-agents=2"}, 1));
        err = arp_test_restore(state, len);
        ARP_CHECK(err && strstr(err, "max-agents"));
        free(err);
        free(longer), free(state), free(again);
    }
    ARP_TEST("configuration is checked by key") {
        const char *cases[][2] = {{"half-life=0", "half-life"}, {"recency=-1", "recency"}, {"max-agent=3", "max-agent"}};
        for (int i = 0; i < 3; i++) {
            char *err = arp_test_init(&cases[i][0], 1);
            ARP_CHECK(err && strstr(err, cases[i][1]));
            free(err);
        }
    }
    return ARP_TESTS_DONE();
}
