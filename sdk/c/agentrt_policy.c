/* The C SDK: the `agentrt:policy/guest` exports in terms of a policy's hooks (agentrt_policy.h),
 * packed decoding, configuration, snapshots and messages — with nothing of libc that imports
 * WASI (see the header). */

#include "agentrt_policy.h"

#include <stdlib.h>
#include <string.h>

/* ---- weak defaults: a policy defines only the hooks it uses ---------------------------------- */

__attribute__((weak)) const char *arp_init(const arp_config *config) {
    return arp_config_expect_only(config, NULL, 0);
}
__attribute__((weak)) void arp_observe(const arp_event *event) { (void)event; }
__attribute__((weak)) void arp_observe_block(const arp_block_event *block) { (void)block; }
__attribute__((weak)) void arp_predict(uint32_t horizon, arp_forecasts *out) { (void)horizon, (void)out; }
__attribute__((weak)) void arp_act(arp_effects *out) { (void)out; }
__attribute__((weak)) void arp_snapshot(arp_writer *w) { (void)w; }
__attribute__((weak)) const char *arp_restore(const uint8_t *state, size_t len) {
    (void)state;
    arp_message_start("this policy keeps no state but was given ");
    arp_message_add_u64(len);
    return arp_message_add(" bytes");
}

/* ---- memory ---------------------------------------------------------------------------------- */

static void *grow(void *ptr, size_t *cap, size_t need, size_t size) {
    if (need <= *cap) return ptr;
    size_t cap2 = *cap ? *cap * 2 : 16;
    while (cap2 < need) cap2 *= 2;
    void *grown = realloc(ptr, cap2 * size);
    if (!grown) abort();
    *cap = cap2;
    return grown;
}

static void copy_string(policy_string_t *out, const char *text) {
    size_t len = strlen(text);
    out->ptr = len ? malloc(len) : NULL;
    if (len && !out->ptr) abort();
    memcpy(out->ptr, text, len);
    out->len = len;
}

/* ---- messages -------------------------------------------------------------------------------- */

static char message[1024];
static size_t message_len;

const char *arp_message_add_n(const uint8_t *text, size_t len) {
    size_t room = sizeof message - 1 - message_len;
    if (len > room) len = room;
    memcpy(message + message_len, text, len);
    message_len += len;
    message[message_len] = 0;
    return message;
}
const char *arp_message_add(const char *text) { return arp_message_add_n((const uint8_t *)text, strlen(text)); }
const char *arp_message_start(const char *text) {
    message_len = 0;
    return arp_message_add(text);
}
const char *arp_message_add_u64(uint64_t value) {
    char digits[20];
    size_t n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    return arp_message_add_n((const uint8_t *)digits + sizeof digits - n, n);
}

/* ---- configuration --------------------------------------------------------------------------- */

static bool is_key(const policy_string_t *s, const char *key) {
    size_t len = strlen(key);
    return s->len == len && memcmp(s->ptr, key, len) == 0;
}

const char *arp_config_expect_only(const arp_config *config, const char *const *known, size_t n) {
    bool any = false;
    for (size_t i = 0; i < config->len; i++) {
        const policy_string_t *key = &config->pairs[i].f0;
        bool ok = false;
        for (size_t k = 0; k < n && !ok; k++) ok = is_key(key, known[k]);
        if (ok) continue;
        if (!any) arp_message_start("unknown config key(s) ");
        else arp_message_add(", ");
        arp_message_add_n(key->ptr, key->len);
        any = true;
    }
    if (!any) return NULL;
    arp_message_add("; known: ");
    for (size_t k = 0; k < n; k++) {
        if (k) arp_message_add(", ");
        arp_message_add(known[k]);
    }
    return n ? message : arp_message_add("none");
}

const uint8_t *arp_config_get(const arp_config *config, const char *key, size_t *len) {
    for (size_t i = config->len; i-- > 0;) {
        if (is_key(&config->pairs[i].f0, key)) {
            *len = config->pairs[i].f1.len;
            return config->pairs[i].f1.ptr;
        }
    }
    return NULL;
}

void arp_recency_scores(const arp_item *items, size_t n, float *scores) {
    uint64_t oldest = n ? items[0].last_access : 0;
    for (size_t i = 1; i < n; i++)
        if (items[i].last_access < oldest) oldest = items[i].last_access;
    for (size_t i = 0; i < n; i++) scores[i] = (float)(items[i].last_access - oldest);
}

const char *arp_config_u64(const arp_config *config, const char *key, uint64_t fallback, uint64_t low,
                           uint64_t high, uint64_t *out) {
    size_t len;
    const uint8_t *raw = arp_config_get(config, key, &len);
    if (!raw) {
        *out = fallback;
        return NULL;
    }
    uint64_t value = 0;
    bool digits = len > 0 && len <= 19;
    for (size_t i = 0; i < len && digits; i++) {
        digits = raw[i] >= '0' && raw[i] <= '9';
        value = value * 10 + (uint64_t)(raw[i] - '0');
    }
    if (!digits) {
        arp_message_start("config key ");
        arp_message_add(key);
        arp_message_add(": \"");
        arp_message_add_n(raw, len);
        return arp_message_add("\" is not a whole number");
    }
    if (value < low || value > high) {
        arp_message_start("config key ");
        arp_message_add(key);
        arp_message_add(": ");
        arp_message_add_u64(value);
        arp_message_add(" is outside ");
        arp_message_add_u64(low);
        arp_message_add("..=");
        return arp_message_add_u64(high);
    }
    *out = value;
    return NULL;
}

/* ---- packed forms ---------------------------------------------------------------------------- */

bool arp_decode_block(const uint64_t *w, arp_block_event *out) {
    uint64_t op = w[0] & 0xf, tier = (w[0] >> 4) & 0xf;
    if (op > AGENTRT_POLICY_TYPES_BLOCK_OP_ALL_CLEARED || tier > AGENTRT_POLICY_TYPES_TIER_HOST) return false;
    out->op = (uint8_t)op;
    out->tier = (uint8_t)tier;
    out->agent = (uint32_t)(w[0] >> 32);
    out->position = (uint32_t)((w[0] >> 8) & 0xffffff);
    out->block_hash = w[1];
    out->parent_hash = w[2];
    return true;
}

void arp_decode_item(const uint64_t *w, arp_item *out) {
    uint64_t kind = (w[4] >> 32) & 0xff, tier = (w[4] >> 40) & 0xff;
    out->kind = kind <= AGENTRT_POLICY_TYPES_ITEM_KIND_SESSION ? (uint8_t)kind : AGENTRT_POLICY_TYPES_ITEM_KIND_KV_BLOCK;
    out->tier = tier <= AGENTRT_POLICY_TYPES_TIER_HOST ? (uint8_t)tier : AGENTRT_POLICY_TYPES_TIER_HOST;
    out->key = w[0];
    out->session = w[1];
    out->last_access = w[2];
    out->tokens = (uint32_t)w[3];
    out->agent = (uint32_t)(w[3] >> 32);
    out->position = (uint32_t)w[4];
}

/* The words a kind's payload has at least (0: a kind this SDK does not know). */
static size_t payload_words(uint8_t kind) {
    static const uint8_t words[] = {0, 6, 5, 4, 5, 2, 3, ARP_WORDS_PER_EVENT, 4, 3, 5};
    return kind < sizeof words ? words[kind] : 0;
}

bool arp_decode_event(const uint64_t *w, size_t len, size_t *used, arp_event *out) {
    uint64_t head = w[0];
    size_t size = (size_t)((head >> 8) & 0xff);
    if (size + 1 > len) {
        *used = len;
        return false;
    }
    *used = size + 1;
    uint8_t kind = (uint8_t)head;
    size_t need = payload_words(kind);
    if (need == 0 || size < need) return false;
    uint16_t flags = (uint16_t)(head >> 16);
    uint32_t agent = (uint32_t)(head >> 32);
    const uint64_t *p = w + 1;
    out->tag = kind;
    switch (kind) {
    case AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL: {
        uint64_t continues = flags & 2 ? p[5] : 0;
        out->val.request_arrival = (agentrt_policy_types_request_arrival_t){
            .request_id = p[0], .agent = agent, .session = p[1], .anchor_hash = p[2], .prompt_tokens = (uint32_t)p[4],
            .continues = {(flags & 2) != 0, {(uint32_t)continues, (uint32_t)(continues >> 32)}},
            .warmup = (flags & 1) != 0, .at_us = p[3]};
        return true;
    }
    case AGENTRT_POLICY_TYPES_EVENT_REQUEST_FINISH:
        out->val.request_finish = (agentrt_policy_types_request_finish_t){
            .request_id = p[0], .agent = agent, .session = p[1], .prompt_tokens = (uint32_t)p[3],
            .cached_tokens = (uint32_t)(p[3] >> 32), .output_tokens = (uint32_t)p[4], .warmup = (flags & 1) != 0,
            .ok = (flags & 2) != 0, .at_us = p[2]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_TOOL_CALL:
        out->val.tool_call = (agentrt_policy_types_tool_call_t){p[0], agent, p[1], p[2], p[3]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_TOOL_RETURN:
        out->val.tool_return = (agentrt_policy_types_tool_return_t){
            .session = p[0], .agent = agent, .tool = p[1], .args_hash = p[2], .result_tokens = (uint32_t)p[4],
            .latency_us = p[3], .ok = (flags & 1) != 0};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_SESSION_END:
        if ((flags & 0xff) > AGENTRT_POLICY_TYPES_END_REASON_EVICTED) return false;
        out->val.session_end = (agentrt_policy_types_session_end_t){p[0], (uint8_t)flags, p[1]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_ENGINE_LOAD:
        out->val.engine_load = (agentrt_policy_types_engine_load_t){
            (uint32_t)p[0], (uint32_t)(p[0] >> 32), (uint32_t)p[1], (uint32_t)(p[1] >> 32), p[2]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_BLOCK:
        return arp_decode_block(p, &out->val.block);
    case AGENTRT_POLICY_TYPES_EVENT_SESSION_WAIT:
        if ((flags & 0xff) > AGENTRT_POLICY_TYPES_WAIT_KIND_USER) return false;
        out->val.session_wait = (agentrt_policy_types_session_wait_t){
            .session = p[0], .agent = agent, .kind = (uint8_t)flags, .tool = p[1], .expected_us = p[2],
            .hinted = (flags & 0x100) != 0, .at_us = p[3]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_HANDOFF:
        out->val.handoff = (agentrt_policy_types_handoff_t){p[0], agent, (uint32_t)p[1], p[2]};
        return true;
    case AGENTRT_POLICY_TYPES_EVENT_ENGINE_CAPACITY:
        out->val.engine_capacity = (agentrt_policy_types_engine_capacity_t){
            .capacity_tokens = p[0], .resident_tokens = p[1], .resident_sessions = (uint32_t)p[2],
            .held_sessions = (uint32_t)(p[2] >> 32), .prefill_us_per_ktoken = (uint32_t)p[3],
            .decode_step_us = (uint32_t)(p[3] >> 32), .at_us = p[4]};
        return true;
    default:
        return false;
    }
}

/* ---- snapshots ------------------------------------------------------------------------------- */

void arp_w_bytes(arp_writer *w, const void *bytes, size_t len) {
    w->bytes = grow(w->bytes, &w->cap, w->len + len, 1);
    memcpy(w->bytes + w->len, bytes, len);
    w->len += len;
}
static void put_le(arp_writer *w, uint64_t v, size_t size) {
    uint8_t b[8];
    for (size_t i = 0; i < size; i++) b[i] = (uint8_t)(v >> (8 * i));
    arp_w_bytes(w, b, size);
}
void arp_w_header(arp_writer *w, const char magic[4], uint16_t version) {
    arp_w_bytes(w, magic, 4);
    arp_w_u16(w, version);
}
void arp_w_u8(arp_writer *w, uint8_t v) { put_le(w, v, 1); }
void arp_w_u16(arp_writer *w, uint16_t v) { put_le(w, v, 2); }
void arp_w_u32(arp_writer *w, uint32_t v) { put_le(w, v, 4); }
void arp_w_u64(arp_writer *w, uint64_t v) { put_le(w, v, 8); }

arp_reader arp_reader_open(const uint8_t *state, size_t len, const char magic[4], uint16_t *version) {
    arp_reader r = {state, len, NULL};
    if (len < 6 || memcmp(state, magic, 4) != 0) {
        arp_message_start("snapshot is not from this policy (expected tag \"");
        arp_message_add_n((const uint8_t *)magic, 4);
        r.error = arp_message_add("\")");
        *version = 0;
        return r;
    }
    r.at += 4;
    r.left -= 4;
    *version = arp_r_u16(&r);
    return r;
}
static uint64_t take_le(arp_reader *r, size_t size) {
    if (r->error) return 0;
    if (r->left < size) {
        r->error = "snapshot is truncated";
        return 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < size; i++) v |= (uint64_t)r->at[i] << (8 * i);
    r->at += size;
    r->left -= size;
    return v;
}
uint8_t arp_r_u8(arp_reader *r) { return (uint8_t)take_le(r, 1); }
uint16_t arp_r_u16(arp_reader *r) { return (uint16_t)take_le(r, 2); }
uint32_t arp_r_u32(arp_reader *r) { return (uint32_t)take_le(r, 4); }
uint64_t arp_r_u64(arp_reader *r) { return take_le(r, 8); }
const char *arp_reader_finish(arp_reader *r) {
    if (r->error || r->left == 0) return r->error;
    arp_message_start("snapshot has ");
    arp_message_add_u64(r->left);
    return arp_message_add(" unexpected trailing bytes");
}

/* ---- side effects and forecasts -------------------------------------------------------------- */

void arp_effect_push(arp_effects *out, arp_side_effect effect) {
    out->ptr = grow(out->ptr, &out->cap, out->len + 1, sizeof *out->ptr);
    out->ptr[out->len++] = effect;
}
void arp_warm_prefix(arp_effects *out, uint32_t agent, uint64_t anchor_hash, float probability) {
    arp_side_effect e = {.tag = AGENTRT_POLICY_TYPES_SIDE_EFFECT_WARM_PREFIX};
    e.val.warm_prefix = (agentrt_policy_types_warm_prefix_t){agent, anchor_hash, probability};
    arp_effect_push(out, e);
}
void arp_forecast_push(arp_forecasts *out, arp_forecast forecast) {
    out->ptr = grow(out->ptr, &out->cap, out->len + 1, sizeof *out->ptr);
    out->ptr[out->len++] = forecast;
}

/* ---- host ------------------------------------------------------------------------------------ */

uint64_t arp_now_us(void) { return agentrt_policy_host_now_us(); }
uint64_t arp_random_seed(void) { return agentrt_policy_host_random_seed(); }
void arp_log(uint8_t level, const char *text) {
    policy_string_t s = {(uint8_t *)text, strlen(text)};
    agentrt_policy_host_log(level, &s);
}

/* ---- the exports ------------------------------------------------------------------------------
 * Arguments are the callee's to free; results are freed by the generated post-return functions,
 * so every result is malloc'd. */

static bool refuse(const char *why, policy_string_t *err) {
    if (!why) return true;
    copy_string(err, why);
    return false;
}

void exports_agentrt_policy_guest_info(exports_agentrt_policy_guest_policy_info_t *ret) {
    copy_string(&ret->name, arp_policy.name);
    copy_string(&ret->version, arp_policy.version);
    copy_string(&ret->description, arp_policy.description);
}

bool exports_agentrt_policy_guest_init(policy_list_tuple2_string_string_t *config, policy_string_t *err) {
    arp_config c = {config->ptr, config->len};
    bool ok = refuse(arp_init(&c), err);
    policy_list_tuple2_string_string_free(config);
    return ok;
}

void exports_agentrt_policy_guest_observe(exports_agentrt_policy_guest_list_event_t *events) {
    for (size_t i = 0; i < events->len; i++) {
        const arp_event *e = &events->ptr[i];
        if (e->tag == AGENTRT_POLICY_TYPES_EVENT_BLOCK) arp_observe_block(&e->val.block);
        else arp_observe(e);
    }
    exports_agentrt_policy_guest_list_event_free(events);
}

void exports_agentrt_policy_guest_observe_packed(policy_list_u64_t *packed) {
    arp_event event;
    for (size_t i = 0, used; i < packed->len; i += used) {
        if (!arp_decode_event(packed->ptr + i, packed->len - i, &used, &event)) continue;
        if (event.tag == AGENTRT_POLICY_TYPES_EVENT_BLOCK) arp_observe_block(&event.val.block);
        else arp_observe(&event);
    }
    policy_list_u64_free(packed);
}

void exports_agentrt_policy_guest_observe_blocks(policy_list_u64_t *packed) {
    arp_block_event block;
    for (size_t i = 0; i + ARP_WORDS_PER_EVENT <= packed->len; i += ARP_WORDS_PER_EVENT) {
        if (arp_decode_block(packed->ptr + i, &block)) arp_observe_block(&block);
    }
    policy_list_u64_free(packed);
}

static void score_into(const arp_item *items, size_t n, policy_list_f32_t *ret) {
    ret->ptr = n ? malloc(n * sizeof(float)) : NULL;
    if (n && !ret->ptr) abort();
    ret->len = n;
    if (n) arp_score(items, n, ret->ptr);
}

void exports_agentrt_policy_guest_score(exports_agentrt_policy_guest_list_item_t *items, policy_list_f32_t *ret) {
    score_into(items->ptr, items->len, ret);
    exports_agentrt_policy_guest_list_item_free(items);
}

void exports_agentrt_policy_guest_score_packed(policy_list_u64_t *packed, policy_list_f32_t *ret) {
    size_t n = packed->len / ARP_ITEM_WORDS;
    arp_item *items = n ? malloc(n * sizeof *items) : NULL;
    if (n && !items) abort();
    for (size_t i = 0; i < n; i++) arp_decode_item(packed->ptr + i * ARP_ITEM_WORDS, &items[i]);
    policy_list_u64_free(packed);
    score_into(items, n, ret);
    free(items);
}

void exports_agentrt_policy_guest_predict(uint32_t horizon, exports_agentrt_policy_guest_list_forecast_t *ret) {
    arp_forecasts out = {0};
    arp_predict(horizon, &out);
    ret->ptr = out.ptr;
    ret->len = out.len;
}

void exports_agentrt_policy_guest_act(exports_agentrt_policy_guest_list_side_effect_t *ret) {
    arp_effects out = {0};
    arp_act(&out);
    ret->ptr = out.ptr;
    ret->len = out.len;
}

void exports_agentrt_policy_guest_snapshot(policy_list_u8_t *ret) {
    arp_writer w = {0};
    arp_snapshot(&w);
    ret->ptr = w.bytes;
    ret->len = w.len;
}

bool exports_agentrt_policy_guest_restore(policy_list_u8_t *state, policy_string_t *err) {
    bool ok = state->len == 0 || refuse(arp_restore(state->ptr, state->len), err);
    policy_list_u8_free(state);
    return ok;
}
