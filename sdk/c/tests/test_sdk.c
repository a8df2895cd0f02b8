/* The C SDK natively: packed decoding against the layouts the Rust SDK encodes, configuration
 * messages, snapshots, and the weak defaults. A stand-in policy defines only what is required. */

#include "testing/harness.h"

const arp_info arp_policy = {"sdk-test", "0.0.0", "the C SDK's own tests"};
void arp_score(const arp_item *items, size_t n, float *scores) {
    for (size_t i = 0; i < n; i++) scores[i] = (float)items[i].last_access;
}

int main(void) {
    ARP_TEST("block events decode every field at its extremes; unknown ops are refused") {
        uint64_t w[] = {2 | 0xffffffull << 8 | 0xffffffffull << 32, UINT64_MAX, 1, 9, 0, 0};
        arp_block_event b;
        ARP_CHECK(arp_decode_block(w, &b));
        ARP_CHECK(b.op == AGENTRT_POLICY_TYPES_BLOCK_OP_REMOVED && b.agent == 0xffffffffu && b.position == 0xffffff);
        ARP_CHECK(b.block_hash == UINT64_MAX && b.parent_hash == 1);
        ARP_CHECK(!arp_decode_block(w + 3, &b));
    }
    ARP_TEST("items decode every field; unknown kinds are kv-block") {
        uint64_t w[] = {UINT64_MAX, 2, 3, 16 | 0xffffffffull << 32, 0xffffffffull | 2ull << 32,
                        1, 0, 9, 0, 7ull << 32};
        arp_item it;
        arp_decode_item(w, &it);
        ARP_CHECK(it.kind == AGENTRT_POLICY_TYPES_ITEM_KIND_TOOL_RESULT && it.key == UINT64_MAX);
        ARP_CHECK(it.session == 2 && it.last_access == 3 && it.tokens == 16 && it.agent == 0xffffffffu);
        ARP_CHECK(it.position == 0xffffffffu);
        arp_decode_item(w + 5, &it);
        ARP_CHECK(it.kind == AGENTRT_POLICY_TYPES_ITEM_KIND_KV_BLOCK && it.last_access == 9);
    }
    ARP_TEST("the default init refuses every key, naming it") {
        char *err = arp_test_init((const char *[]){"weight=2"}, 1);
        ARP_CHECK(err && strcmp(err, "unknown config key(s) weight; known: none") == 0);
        free(err);
        ARP_CHECK(arp_test_init(NULL, 0) == NULL);
    }
    ARP_TEST("typed getters name the key, the value and the range") {
        policy_tuple2_string_string_t pairs[] = {
            {{(uint8_t *)"k", 1}, {(uint8_t *)"12", 2}}, {{(uint8_t *)"w", 1}, {(uint8_t *)"1x", 2}}};
        arp_config c = {pairs, 2};
        uint64_t v;
        ARP_CHECK(arp_config_u64(&c, "k", 0, 0, 20, &v) == NULL && v == 12);
        ARP_CHECK(arp_config_u64(&c, "absent", 5, 0, 20, &v) == NULL && v == 5);
        const char *err = arp_config_u64(&c, "w", 0, 0, 20, &v);
        ARP_CHECK(err && strcmp(err, "config key w: \"1x\" is not a whole number") == 0);
        err = arp_config_u64(&c, "k", 0, 0, 10, &v);
        ARP_CHECK(err && strcmp(err, "config key k: 12 is outside 0..=10") == 0);
    }
    ARP_TEST("snapshots round-trip in the Rust layout and damage is named") {
        arp_writer w = {0};
        arp_w_header(&w, "TEST", 2);
        arp_w_u8(&w, 1), arp_w_u16(&w, 2), arp_w_u32(&w, 3), arp_w_u64(&w, UINT64_MAX);
        ARP_CHECK(w.len == 6 + 15 && memcmp(w.bytes, "TEST\2\0\1\2\0", 9) == 0);
        uint16_t version;
        arp_reader r = arp_reader_open(w.bytes, w.len, "TEST", &version);
        ARP_CHECK(version == 2 && arp_r_u8(&r) == 1 && arp_r_u16(&r) == 2 && arp_r_u32(&r) == 3);
        ARP_CHECK(arp_r_u64(&r) == UINT64_MAX && arp_reader_finish(&r) == NULL);
        r = arp_reader_open(w.bytes, w.len, "OTHR", &version);
        ARP_CHECK(r.error && strstr(r.error, "not from this policy"));
        r = arp_reader_open(w.bytes, 10, "TEST", &version);
        arp_r_u8(&r), arp_r_u16(&r), arp_r_u32(&r);
        ARP_CHECK(r.error && strcmp(r.error, "snapshot is truncated") == 0);
        free(w.bytes);
    }
    ARP_TEST("a stateless policy snapshots nothing and refuses state") {
        size_t len;
        free(arp_test_snapshot(&len));
        ARP_CHECK(len == 0);
        ARP_CHECK(arp_test_restore(NULL, 0) == NULL);
        char *err = arp_test_restore((const uint8_t *)"abc", 3);
        ARP_CHECK(err && strstr(err, "3 bytes"));
        free(err);
    }
    ARP_TEST("packed scoring returns one score per whole item") {
        arp_item items[] = {{0, 1, 1, 0, 5, 16, 0}, {0, 2, 1, 0, 9, 16, 0}};
        float scores[2];
        arp_test_score(items, 2, scores);
        ARP_CHECK(scores[0] == 5.0f && scores[1] == 9.0f);
    }
    ARP_TEST("recency scores: the shared cases every SDK gives (sdk/conformance/recency_scores.txt)") {
        /* Found from this file's own path, so the test runs from any folder. */
        char path[4096];
        const char *slash = strrchr(__FILE__, '/');
        snprintf(path, sizeof path, "%.*s/../../conformance/recency_scores.txt", slash ? (int)(slash - __FILE__) : 1,
                 slash ? __FILE__ : ".");
        FILE *f = fopen(path, "r");
        ARP_CHECK(f != NULL);
        char line[1024];
        int cases = 0;
        while (f && fgets(line, sizeof line, f)) {
            char *arrow = strstr(line, "->");
            if (line[0] == '#' || !arrow) continue;
            arp_item items[16];
            float want[16], got[16];
            size_t n = 0, m = 0;
            for (char *p = line, *end; p < arrow && n < 16; p = end) {
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p || end > arrow) break;
                items[n++] = (arp_item){.last_access = v};
            }
            for (char *p = arrow + 2, *end; m < 16; p = end) {
                double v = strtod(p, &end);
                if (end == p) break;
                want[m++] = (float)v;
            }
            ARP_CHECK(n == m);
            arp_recency_scores(items, n, got);
            for (size_t i = 0; i < n; i++) ARP_CHECK(got[i] == want[i]);
            cases++;
        }
        if (f) fclose(f);
        ARP_CHECK(cases >= 8);
    }
    return ARP_TESTS_DONE();
}
