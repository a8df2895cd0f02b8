/* closed-first in C, natively: the same cases as the Rust version's unit tests. */

#include "testing/harness.h"

static void closed(const uint64_t *sessions, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t w[3];
        arp_test_observe_packed(w, arp_test_session_end_words(sessions[i], AGENTRT_POLICY_TYPES_END_REASON_CLOSED, 0, w));
    }
}

static void ended(uint64_t session, uint8_t reason) {
    arp_event e = {.tag = AGENTRT_POLICY_TYPES_EVENT_SESSION_END};
    e.val.session_end = (agentrt_policy_types_session_end_t){session, reason, 0};
    arp_test_observe(&e, 1);
}

static void arrival(uint64_t session, bool warmup) {
    arp_event e = {.tag = AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL};
    e.val.request_arrival = (agentrt_policy_types_request_arrival_t){
        .request_id = 1, .agent = 1, .session = session, .prompt_tokens = 16, .warmup = warmup};
    arp_test_observe(&e, 1);
}

static arp_item block(uint64_t key, uint64_t session, uint64_t last_access) {
    return (arp_item){.kind = AGENTRT_POLICY_TYPES_ITEM_KIND_KV_BLOCK, .key = key, .agent = 1, .session = session,
                      .last_access = last_access, .tokens = 16, .tier = AGENTRT_POLICY_TYPES_TIER_GPU};
}

/* Indices keep-most first: higher score, then more recent (the host's rule). */
static void rank(const arp_item *items, const float *scores, size_t n, size_t *order) {
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            size_t a = order[j - 1], b = order[j];
            bool before = scores[b] > scores[a] || (scores[b] == scores[a] && items[b].last_access > items[a].last_access);
            if (!before) break;
            order[j - 1] = b, order[j] = a;
        }
}

static char *init_max(const char *pair) { return arp_test_init(pair ? (const char *[]){pair} : NULL, pair ? 1 : 0); }

int main(void) {
    ARP_TEST("a closed session's blocks go first, oldest first, then LRU") {
        free(init_max(NULL));
        arp_item items[] = {block(1, 7, 10), block(2, 9, 20), block(3, 7, 30), block(4, 9, 40), block(5, 0, 5)};
        float scores[5];
        size_t order[5];
        arp_test_score(items, 5, scores);
        rank(items, scores, 5, order);
        ARP_CHECK(order[0] == 3 && order[1] == 2 && order[2] == 1 && order[3] == 0 && order[4] == 4);
        closed((uint64_t[]){9}, 1);
        arp_test_score(items, 5, scores);
        rank(items, scores, 5, order);
        ARP_CHECK(order[0] == 2 && order[1] == 0 && order[2] == 4 && order[3] == 3 && order[4] == 1);
    }
    ARP_TEST("idle and evicted ends change nothing, and a call reopens") {
        free(init_max(NULL));
        arp_item items[] = {block(1, 7, 10), block(2, 9, 20)};
        float lru[2], scores[2];
        arp_test_score(items, 2, lru);
        ended(7, AGENTRT_POLICY_TYPES_END_REASON_IDLE);
        ended(7, AGENTRT_POLICY_TYPES_END_REASON_EVICTED);
        arp_test_score(items, 2, scores);
        ARP_CHECK(memcmp(scores, lru, sizeof lru) == 0);
        ended(7, AGENTRT_POLICY_TYPES_END_REASON_CLOSED);
        arrival(7, true);
        arp_test_score(items, 2, scores);
        ARP_CHECK(memcmp(scores, lru, sizeof lru) != 0);
        arrival(7, false);
        arp_test_score(items, 2, scores);
        ARP_CHECK(memcmp(scores, lru, sizeof lru) == 0);
    }
    ARP_TEST("the oldest closing is forgotten beyond max-sessions, and the snapshot keeps the order") {
        free(init_max("max-sessions=2"));
        closed((uint64_t[]){3, 1, 3, 2}, 4);
        size_t len;
        uint8_t *state = arp_test_snapshot(&len);
        static const uint8_t want[] = {'C', 'L', 'F', 'T', 1, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0};
        ARP_CHECK(len == sizeof want && memcmp(state, want, len) == 0);
        free(init_max("max-sessions=2"));
        ARP_CHECK(arp_test_restore(state, len) == NULL);
        size_t again_len;
        uint8_t *again = arp_test_snapshot(&again_len);
        ARP_CHECK(again_len == len && memcmp(again, state, len) == 0);
        free(again);
        uint8_t twice[26];
        memcpy(twice, want, 10);
        memset(twice + 10, 0, 16);
        twice[10] = 5, twice[18] = 5;
        char *err = arp_test_restore(twice, sizeof twice);
        ARP_CHECK(err && strstr(err, "twice"));
        free(err);
        again = arp_test_snapshot(&again_len);
        ARP_CHECK(again_len == len && memcmp(again, state, len) == 0);
        free(again);
        free(init_max("max-sessions=1"));
        err = arp_test_restore(state, len);
        ARP_CHECK(err && strstr(err, "max-sessions is 1"));
        free(err);
        free(state);
    }
    ARP_TEST("configuration is checked by key") {
        const char *bad[] = {"max-sessions=0", "max-sessions=x", "max-session=2"};
        for (size_t i = 0; i < 3; i++) {
            char *err = init_max(bad[i]);
            ARP_CHECK(err && strstr(err, i < 2 ? "max-sessions" : "max-session"));
            free(err);
        }
    }
    return ARP_TESTS_DONE();
}
