/* The C SDK natively: packed decoding against the layouts the Rust SDK encodes, configuration
 * messages, snapshots, and the weak defaults. A stand-in policy defines only what is required. */

#include "testing/harness.h"

const arp_info arp_policy = {"sdk-test", "0.0.0", "the C SDK's own tests"};
void arp_score(const arp_item *items, size_t n, float *scores) {
    for (size_t i = 0; i < n; i++) scores[i] = (float)items[i].last_access;
}

/* What reaches the policy's hooks, rendered as sdk/conformance/packed.txt writes it. */
static char heard[8192];

/* ---- rendering as sdk/conformance/packed.txt does --------------------------------------------- */

static char text[8192];
static size_t text_len;

#define U(x) ((unsigned long long)(x))
static const char *yes(bool b) { return b ? "true" : "false"; }
static const char *const OPS[] = {"stored", "touched", "removed", "all-cleared"};
static const char *const TIERS[] = {"gpu", "host"};

static void render_block(const arp_block_event *b) {
    if (text_len) text_len += (size_t)snprintf(text + text_len, sizeof text - text_len, " ; ");
    text_len += (size_t)snprintf(text + text_len, sizeof text - text_len,
                                 "block op=%s agent=%u block-hash=%llu parent-hash=%llu position=%u tier=%s",
                                 OPS[b->op], b->agent, U(b->block_hash), U(b->parent_hash), b->position, TIERS[b->tier]);
}

static void render_item(const arp_item *i) {
    static const char *const kinds[] = {"kv-block", "request", "tool-result", "session"};
    if (text_len) text_len += (size_t)snprintf(text + text_len, sizeof text - text_len, " ; ");
    text_len += (size_t)snprintf(
        text + text_len, sizeof text - text_len,
        "item kind=%s key=%llu agent=%u session=%llu last-access=%llu tokens=%u position=%u tier=%s", kinds[i->kind],
        U(i->key), i->agent, U(i->session), U(i->last_access), i->tokens, i->position, TIERS[i->tier]);
}

static void render_event(const arp_event *e) {
    char more[512];
    const char *prefix = text_len ? " ; " : "";
    switch (e->tag) {
    case AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL: {
        const agentrt_policy_types_request_arrival_t *r = &e->val.request_arrival;
        char continues[64] = "none";
        if (r->continues.is_some)
            snprintf(continues, sizeof continues, "%u/%u", r->continues.val.shared_tokens, r->continues.val.previous_tokens);
        snprintf(more, sizeof more,
                 "request-arrival request-id=%llu agent=%u session=%llu anchor-hash=%llu prompt-tokens=%u "
                 "continues=%s warmup=%s at-us=%llu",
                 U(r->request_id), r->agent, U(r->session), U(r->anchor_hash), r->prompt_tokens, continues,
                 yes(r->warmup), U(r->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_REQUEST_FINISH: {
        const agentrt_policy_types_request_finish_t *r = &e->val.request_finish;
        snprintf(more, sizeof more,
                 "request-finish request-id=%llu agent=%u session=%llu prompt-tokens=%u cached-tokens=%u "
                 "output-tokens=%u warmup=%s ok=%s at-us=%llu",
                 U(r->request_id), r->agent, U(r->session), r->prompt_tokens, r->cached_tokens, r->output_tokens,
                 yes(r->warmup), yes(r->ok), U(r->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_TOOL_CALL: {
        const agentrt_policy_types_tool_call_t *t = &e->val.tool_call;
        snprintf(more, sizeof more, "tool-call session=%llu agent=%u tool=%llu args-hash=%llu at-us=%llu",
                 U(t->session), t->agent, U(t->tool), U(t->args_hash), U(t->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_TOOL_RETURN: {
        const agentrt_policy_types_tool_return_t *t = &e->val.tool_return;
        snprintf(more, sizeof more,
                 "tool-return session=%llu agent=%u tool=%llu args-hash=%llu result-tokens=%u latency-us=%llu ok=%s",
                 U(t->session), t->agent, U(t->tool), U(t->args_hash), t->result_tokens, U(t->latency_us), yes(t->ok));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_SESSION_END: {
        static const char *const reasons[] = {"closed", "idle", "evicted"};
        const agentrt_policy_types_session_end_t *s = &e->val.session_end;
        snprintf(more, sizeof more, "session-end session=%llu reason=%s at-us=%llu", U(s->session),
                 reasons[s->reason], U(s->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_ENGINE_LOAD: {
        const agentrt_policy_types_engine_load_t *l = &e->val.engine_load;
        snprintf(more, sizeof more,
                 "engine-load queue-depth=%u running=%u free-blocks=%u total-blocks=%u at-us=%llu", l->queue_depth,
                 l->running, l->free_blocks, l->total_blocks, U(l->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_BLOCK:
        render_block(&e->val.block);
        return;
    case AGENTRT_POLICY_TYPES_EVENT_SESSION_WAIT: {
        const agentrt_policy_types_session_wait_t *w = &e->val.session_wait;
        snprintf(more, sizeof more,
                 "session-wait session=%llu agent=%u kind=%s tool=%llu expected-us=%llu hinted=%s at-us=%llu",
                 U(w->session), w->agent, w->kind == AGENTRT_POLICY_TYPES_WAIT_KIND_TOOL ? "tool" : "user",
                 U(w->tool), U(w->expected_us), yes(w->hinted), U(w->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_HANDOFF: {
        const agentrt_policy_types_handoff_t *h = &e->val.handoff;
        snprintf(more, sizeof more, "handoff session=%llu from-agent=%u to-agent=%u at-us=%llu", U(h->session),
                 h->from_agent, h->to_agent, U(h->at_us));
        break;
    }
    case AGENTRT_POLICY_TYPES_EVENT_ENGINE_CAPACITY: {
        const agentrt_policy_types_engine_capacity_t *c = &e->val.engine_capacity;
        snprintf(more, sizeof more,
                 "engine-capacity capacity-tokens=%llu resident-tokens=%llu resident-sessions=%u held-sessions=%u "
                 "prefill-us-per-ktoken=%u decode-step-us=%u at-us=%llu",
                 U(c->capacity_tokens), U(c->resident_tokens), c->resident_sessions, c->held_sessions,
                 c->prefill_us_per_ktoken, c->decode_step_us, U(c->at_us));
        break;
    }
    default:
        snprintf(more, sizeof more, "unexpected kind %d", e->tag);
    }
    text_len += (size_t)snprintf(text + text_len, sizeof text - text_len, "%s%s", prefix, more);
}

/* The policy's hooks record what reaches them, rendered. */
void arp_observe(const arp_event *event) {
    text_len = strlen(heard);
    memcpy(text, heard, text_len + 1);
    render_event(event);
    memcpy(heard, text, text_len + 1);
}
void arp_observe_block(const arp_block_event *block) {
    text_len = strlen(heard);
    memcpy(text, heard, text_len + 1);
    render_block(block);
    memcpy(heard, text, text_len + 1);
}

/* sdk/conformance/packed.txt, found from this file's own path so the test runs from any folder. */
static FILE *conformance(const char *file) {
    char path[4096];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof path, "%.*s/../../conformance/%s", slash ? (int)(slash - __FILE__) : 1,
             slash ? __FILE__ : ".", file);
    return fopen(path, "r");
}

int main(void) {
    ARP_TEST("packed words decode as in every SDK (sdk/conformance/packed.txt), and reach the policy") {
        FILE *f = conformance("packed.txt");
        ARP_CHECK(f != NULL);
        static char line[16384];
        static uint64_t words[256];
        int cases = 0;
        while (f && fgets(line, sizeof line, f)) {
            char *arrow = strstr(line, "->");
            if (line[0] == '#' || !arrow) continue;
            char *want = arrow + 3;
            want[strcspn(want, "\n")] = 0;
            char *p = strchr(line, ' '), *end;
            size_t n = 0;
            for (; p < arrow && n < 256; p = end) {
                unsigned long long v = strtoull(p, &end, 10);
                if (end == p || end > arrow) break;
                words[n++] = v;
            }
            text_len = 0;
            text[0] = 0;
            if (strncmp(line, "events ", 7) == 0) {
                arp_event e;
                for (size_t i = 0, used; i < n; i += used)
                    if (arp_decode_event(words + i, n - i, &used, &e)) render_event(&e);
                /* The same words through the export reach the policy's hooks alike. */
                char decoded[8192];
                memcpy(decoded, text, text_len + 1);
                heard[0] = 0;
                arp_test_observe_packed(words, n);
                ARP_CHECK(strcmp(heard, decoded) == 0);
                memcpy(text, decoded, strlen(decoded) + 1);
            } else if (strncmp(line, "blocks ", 7) == 0) {
                arp_block_event b;
                for (size_t i = 0; i + ARP_WORDS_PER_EVENT <= n; i += ARP_WORDS_PER_EVENT)
                    if (arp_decode_block(words + i, &b)) render_block(&b);
            } else {
                arp_item it;
                for (size_t i = 0; i + ARP_ITEM_WORDS <= n; i += ARP_ITEM_WORDS) {
                    arp_decode_item(words + i, &it);
                    render_item(&it);
                }
            }
            const char *got = text_len ? text : "nothing";
            if (strcmp(got, want) != 0) fprintf(stderr, "want %s\n got  %s\n", want, got);
            ARP_CHECK(strcmp(got, want) == 0);
            cases++;
        }
        if (f) fclose(f);
        ARP_CHECK(cases >= 25);
    }
    ARP_TEST("a typed session end and a packed one reach the policy alike") {
        uint64_t w[3];
        heard[0] = 0;
        arp_test_observe_packed(w, arp_test_session_end_words(8, AGENTRT_POLICY_TYPES_END_REASON_CLOSED, 9, w));
        char packed[512];
        memcpy(packed, heard, strlen(heard) + 1);
        heard[0] = 0;
        arp_event e = {.tag = AGENTRT_POLICY_TYPES_EVENT_SESSION_END};
        e.val.session_end = (agentrt_policy_types_session_end_t){8, AGENTRT_POLICY_TYPES_END_REASON_CLOSED, 9};
        arp_test_observe(&e, 1);
        ARP_CHECK(strcmp(heard, packed) == 0 && strcmp(heard, "session-end session=8 reason=closed at-us=9") == 0);
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
    ARP_TEST("packed scoring returns one score per whole item, as typed scoring does") {
        arp_item items[] = {{.key = 1, .agent = 1, .last_access = 5, .tokens = 16},
                            {.key = 2, .agent = 1, .last_access = 9, .tokens = 16,
                             .tier = AGENTRT_POLICY_TYPES_TIER_HOST}};
        float scores[2], typed[2];
        arp_test_score(items, 2, scores);
        arp_test_score_typed(items, 2, typed);
        ARP_CHECK(scores[0] == 5.0f && scores[1] == 9.0f && memcmp(scores, typed, sizeof scores) == 0);
    }
    ARP_TEST("recency scores: the shared cases every SDK gives (sdk/conformance/recency_scores.txt)") {
        FILE *f = conformance("recency_scores.txt");
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
