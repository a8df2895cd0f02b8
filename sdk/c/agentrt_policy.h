/* agentrt's policy SDK for C: write a policy as a handful of functions, build it with
 * `cargo xtask build-policies` (wit-bindgen's C bindings + zig cc for wasm32-wasi + wit-component).
 *
 * The SDK implements every export of `agentrt:policy/guest` (the generated `exports_*` functions)
 * and calls the hooks below. A policy defines `arp_policy` and `arp_score`; every other hook has a
 * weak default that does nothing (accepts no config, keeps no state), so it defines only what it
 * uses. Types are the generated bindings' (`policy.h`, from wit/policy.wit): an item is an
 * `arp_item`, a block event an `arp_block_event`, an event an `arp_event` (a tagged union).
 *
 * Zero WASI imports: the component may import only `agentrt:policy/host`. The SDK uses nothing of
 * libc but malloc/realloc/free and memcpy/memmove/memset/memcmp/strlen, which import nothing;
 * printf, snprintf, strtod and anything else that reaches stdio or errno pull in WASI's fd_write
 * and the build fails naming it (docs/zero-wasi.md). Format messages with `arp_message`.
 */
#ifndef AGENTRT_POLICY_H
#define AGENTRT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

typedef agentrt_policy_types_event_t arp_event;
typedef agentrt_policy_types_block_event_t arp_block_event;
typedef agentrt_policy_types_item_t arp_item;
typedef agentrt_policy_types_forecast_t arp_forecast;
typedef agentrt_policy_types_side_effect_t arp_side_effect;

/* ---- what a policy defines ---------------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *version;
    const char *description;
} arp_info;

/* The policy's name, version and description (required). */
extern const arp_info arp_policy;

typedef struct arp_config arp_config;
typedef struct arp_writer arp_writer;
typedef struct arp_reader arp_reader;
typedef struct arp_effects arp_effects;
typedef struct arp_forecasts arp_forecasts;

/* Configure a fresh instance: reset state, read `config`. Return NULL to accept or a message to
 * refuse (e.g. from arp_config_expect_only / arp_config_u64). Default: accepts no keys. */
const char *arp_init(const arp_config *config);
/* One event that is not a block event, in arrival order, whether it arrived typed or packed:
 * switch on `event->tag` (AGENTRT_POLICY_TYPES_EVENT_SESSION_END, …) and read `event->val.<case>`,
 * e.g. `event->val.session_end.reason == AGENTRT_POLICY_TYPES_END_REASON_CLOSED` (README). */
void arp_observe(const arp_event *event);
/* One KV-block event, whether it arrived typed or packed. */
void arp_observe_block(const arp_block_event *block);
/* One priority per item into `scores` (n of them); higher = keep. Ties go to the most recent.
 * Required. */
void arp_score(const arp_item *items, size_t n, float *scores);
/* Forecasts within `horizon` steps, with arp_forecast_push. */
void arp_predict(uint32_t horizon, arp_forecasts *out);
/* Side effects for the host, with arp_warm_prefix / arp_effect_push. */
void arp_act(arp_effects *out);
/* Learned state, written with the arp_w_* functions. Default: nothing. */
void arp_snapshot(arp_writer *w);
/* Continue from a non-empty snapshot; NULL to accept, a message to refuse (state unchanged).
 * Default: refuses any state. */
const char *arp_restore(const uint8_t *state, size_t len);

/* ---- configuration ------------------------------------------------------------------------ */

struct arp_config {
    const policy_tuple2_string_string_t *pairs;
    size_t len;
};

/* NULL when every key is in `known` (`n` names), else a message listing the unknown ones. */
const char *arp_config_expect_only(const arp_config *config, const char *const *known, size_t n);
/* The raw value of `key` (last one wins), or NULL when absent; `*len` gets its length. */
const uint8_t *arp_config_get(const arp_config *config, const char *key, size_t *len);
/* `key` as decimal digits in low..=high into `*out` (`fallback` when absent): NULL, or a
 * message naming the key. */
const char *arp_config_u64(const arp_config *config, const char *key, uint64_t fallback, uint64_t low,
                           uint64_t high, uint64_t *out);

/* ---- helpers ------------------------------------------------------------------------------ */

/* Recency as a score, as in every agentrt SDK (sdk/conformance/recency_scores.txt): the batch's
 * least recently used item scores 0, newer ones the engine ticks since it — LRU's order under the
 * host's ranking rule (higher = keep), and never negative (a negative host-tier score means "not
 * worth storing", which recency alone never says). */
void arp_recency_scores(const arp_item *items, size_t n, float *scores);

/* ---- messages without stdio --------------------------------------------------------------- */

/* A message built in a static buffer (valid until the next arp_message_start): the SDK copies
 * what a hook returns before calling another. */
const char *arp_message_start(const char *text);
const char *arp_message_add(const char *text);
const char *arp_message_add_n(const uint8_t *text, size_t len);
const char *arp_message_add_u64(uint64_t value);

/* ---- the contract line and its packed forms ------------------------------------------------
 * What is particular to `agentrt:policy@0.5.0` (with the decoders in agentrt_policy.c): a new
 * contract line changes this section and those functions. Layouts in wit/policy.wit; the Rust
 * SDK's packed module is the reference, sdk/conformance/packed.txt the cases every SDK decodes. */

#define ARP_CONTRACT_VERSION "0.5.0"
#define ARP_WORDS_PER_EVENT 3
#define ARP_ITEM_WORDS 5
/* Decode one packed block event (3 words); false for an op or tier this SDK does not know (skip
 * it). */
bool arp_decode_block(const uint64_t *words, arp_block_event *out);
/* Decode one packed item (5 words); unknown kinds decode as kv-block, unknown tiers as host. */
void arp_decode_item(const uint64_t *words, arp_item *out);
/* Decode the `observe-packed` event at the start of `words` (`len` left): `*used` gets how many
 * words it took (all of them when it is cut short). False for an event to skip: a kind, reason or
 * wait kind this SDK does not know, a payload shorter than it reads, a truncated event. */
bool arp_decode_event(const uint64_t *words, size_t len, size_t *used, arp_event *out);

/* ---- snapshots: the Rust SDK's state layout (tag, u16 version, little-endian fields) -------- */

struct arp_writer {
    uint8_t *bytes;
    size_t len, cap;
};
void arp_w_bytes(arp_writer *w, const void *bytes, size_t len);
void arp_w_header(arp_writer *w, const char magic[4], uint16_t version);
void arp_w_u8(arp_writer *w, uint8_t v);
void arp_w_u16(arp_writer *w, uint16_t v);
void arp_w_u32(arp_writer *w, uint32_t v);
void arp_w_u64(arp_writer *w, uint64_t v);

struct arp_reader {
    const uint8_t *at;
    size_t left;
    /* The first failure, or NULL: reads after one return 0 and keep it. */
    const char *error;
};
/* Check the tag; the reader past the header and the version found. */
arp_reader arp_reader_open(const uint8_t *state, size_t len, const char magic[4], uint16_t *version);
uint8_t arp_r_u8(arp_reader *r);
uint16_t arp_r_u16(arp_reader *r);
uint32_t arp_r_u32(arp_reader *r);
uint64_t arp_r_u64(arp_reader *r);
/* NULL when every byte was read without error, else the message. */
const char *arp_reader_finish(arp_reader *r);

/* ---- side effects and forecasts ----------------------------------------------------------- */

struct arp_effects {
    arp_side_effect *ptr;
    size_t len, cap;
};
struct arp_forecasts {
    arp_forecast *ptr;
    size_t len, cap;
};
void arp_effect_push(arp_effects *out, arp_side_effect effect);
void arp_warm_prefix(arp_effects *out, uint32_t agent, uint64_t anchor_hash, float probability);
void arp_forecast_push(arp_forecasts *out, arp_forecast forecast);

/* ---- host capabilities -------------------------------------------------------------------- */

uint64_t arp_now_us(void);
uint64_t arp_random_seed(void);
/* level: AGENTRT_POLICY_TYPES_LOG_LEVEL_* */
void arp_log(uint8_t level, const char *message);

#endif
