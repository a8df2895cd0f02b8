/* Test a C policy natively, through the same exports its component has and the packed paths the
 * host uses. Link the test with agentrt_policy.c, the generated policy.c and native_host.c
 * (`cargo xtask test` does). Each test file defines main with ARP_TEST / ARP_CHECK and ends with
 * ARP_TESTS_DONE, which prints "N passed, N failed". */
#ifndef AGENTRT_POLICY_HARNESS_H
#define AGENTRT_POLICY_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentrt_policy.h"

static int arp_passed, arp_failed, arp_case_failed;
static const char *arp_case;

#define ARP_TEST(name) for (arp_case = (name), arp_case_failed = 0; arp_case; \
    arp_case_failed ? arp_failed++ : arp_passed++, arp_case = NULL)
#define ARP_CHECK(cond) do { if (!(cond)) { arp_case_failed = 1; \
    fprintf(stderr, "FAIL %s: %s (%s:%d)\n", arp_case, #cond, __FILE__, __LINE__); } } while (0)
#define ARP_TESTS_DONE() (printf("%d passed, %d failed\n", arp_passed, arp_failed), arp_failed ? 1 : 0)

static inline void *arp_copy(const void *data, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    memcpy(p, data, bytes);
    return p;
}

/* `init` with "key=value" strings; returns NULL or the refusal (to free). */
static inline char *arp_test_init(const char *const *pairs, size_t n) {
    policy_tuple2_string_string_t *list = malloc((n ? n : 1) * sizeof *list);
    for (size_t i = 0; i < n; i++) {
        const char *eq = strchr(pairs[i], '=');
        size_t klen = (size_t)(eq - pairs[i]), vlen = strlen(eq + 1);
        list[i].f0 = (policy_string_t){arp_copy(pairs[i], klen), klen};
        list[i].f1 = (policy_string_t){arp_copy(eq + 1, vlen), vlen};
    }
    policy_list_tuple2_string_string_t config = {list, n};
    policy_string_t err;
    if (exports_agentrt_policy_guest_init(&config, &err)) return NULL;
    char *msg = malloc(err.len + 1);
    memcpy(msg, err.ptr, err.len);
    msg[err.len] = 0;
    policy_string_free(&err);
    return msg;
}

static inline void arp_test_observe(const arp_event *events, size_t n) {
    exports_agentrt_policy_guest_list_event_t list = {arp_copy(events, n * sizeof *events), n};
    exports_agentrt_policy_guest_observe(&list);
}

/* Events through `observe-packed` (words as the host packs them; sdk/conformance/packed.txt has
 * examples of every kind). */
static inline void arp_test_observe_packed(const uint64_t *words, size_t n_words) {
    policy_list_u64_t list = {arp_copy(words, n_words * 8), n_words};
    exports_agentrt_policy_guest_observe_packed(&list);
}

static inline void arp_test_observe_blocks(const uint64_t *words, size_t n_words) {
    policy_list_u64_t list = {arp_copy(words, n_words * 8), n_words};
    exports_agentrt_policy_guest_observe_blocks(&list);
}

/* The `observe-packed` words of a session's end (3 words into `out`), as the host packs them. */
static inline size_t arp_test_session_end_words(uint64_t session, uint8_t reason, uint64_t at_us, uint64_t *out) {
    out[0] = AGENTRT_POLICY_TYPES_EVENT_SESSION_END | 2ull << 8 | (uint64_t)reason << 16;
    out[1] = session;
    out[2] = at_us;
    return 3;
}

/* The `observe-blocks` words of a block event (3 words into `out`), as the host packs them. */
static inline void arp_test_block_words(const arp_block_event *b, uint64_t *out) {
    uint64_t position = b->position < 0xffffff ? b->position : 0xffffff;
    out[0] = b->op | (uint64_t)b->tier << 4 | position << 8 | (uint64_t)b->agent << 32;
    out[1] = b->block_hash;
    out[2] = b->parent_hash;
}

/* Score through the typed `score` (the contract asks for what `score-packed` gives). */
static inline void arp_test_score_typed(const arp_item *items, size_t n, float *scores) {
    exports_agentrt_policy_guest_list_item_t list = {arp_copy(items, n * sizeof *items), n};
    policy_list_f32_t ret;
    exports_agentrt_policy_guest_score(&list, &ret);
    memcpy(scores, ret.ptr, n * sizeof(float));
    policy_list_f32_free(&ret);
}

/* Score through the packed path, as the host does; `scores` gets n floats. */
static inline void arp_test_score(const arp_item *items, size_t n, float *scores) {
    uint64_t *w = malloc((n ? n : 1) * ARP_ITEM_WORDS * 8);
    for (size_t i = 0; i < n; i++) {
        uint64_t *o = w + i * ARP_ITEM_WORDS;
        o[0] = items[i].key;
        o[1] = items[i].session;
        o[2] = items[i].last_access;
        o[3] = items[i].tokens | (uint64_t)items[i].agent << 32;
        o[4] = items[i].position | (uint64_t)items[i].kind << 32 | (uint64_t)items[i].tier << 40;
    }
    policy_list_u64_t list = {w, n * ARP_ITEM_WORDS};
    policy_list_f32_t ret;
    exports_agentrt_policy_guest_score_packed(&list, &ret);
    memcpy(scores, ret.ptr, n * sizeof(float));
    policy_list_f32_free(&ret);
}

/* The snapshot's bytes (to free) and length. */
static inline uint8_t *arp_test_snapshot(size_t *len) {
    policy_list_u8_t ret;
    exports_agentrt_policy_guest_snapshot(&ret);
    *len = ret.len;
    return ret.ptr;
}

/* `restore`; NULL or the refusal (to free). */
static inline char *arp_test_restore(const uint8_t *state, size_t len) {
    policy_list_u8_t list = {arp_copy(state, len), len};
    policy_string_t err;
    if (exports_agentrt_policy_guest_restore(&list, &err)) return NULL;
    char *msg = malloc(err.len + 1);
    memcpy(msg, err.ptr, err.len);
    msg[err.len] = 0;
    policy_string_free(&err);
    return msg;
}

#endif
