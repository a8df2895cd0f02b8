/* callrate in C: the reference policy of the language SDKs (policies/callrate/SPEC.md).
 *
 * Per-agent decayed call counts + recency, one warm-up in `act`. All arithmetic is uint64_t until
 * the one conversion to float, so this ranks, acts and snapshots exactly like the Rust, Python and
 * JavaScript versions (tests/languages.rs). The table is an array kept in ascending agent
 * order: the snapshot's order and the tie rule's. */

#include <string.h>

#include "agentrt_policy.h"

#define CALL ((uint64_t)1 << 16)
#define HIT ((uint64_t)1 << 10)
#define COUNT_CAP ((uint64_t)1 << 36)
#define MAX_AGENTS 4096
#define FORMAT 1

const arp_info arp_policy = {
    "callrate", "0.1.0",
    "keeps blocks of agents called often recently (decayed call counts + recency), warms the hottest other agent; C"};

typedef struct {
    uint32_t agent;
    uint64_t count, at, anchor;
} agent_t;

static struct {
    uint64_t half_life, recency, max_agents;
    uint64_t requests;
    uint32_t last;
    bool pending;
    size_t n;
    agent_t agents[MAX_AGENTS + 1];
} s;

/* `c` decayed over `d` requests: whole half-lives shift, the rest follows the chord to 1/2. */
uint64_t callrate_decay(uint64_t c, uint64_t d, uint64_t h) {
    uint64_t q = d / h;
    if (q >= 64) return 0;
    uint64_t b = c >> q;
    return b - b * (d % h) / (2 * h);
}

/* Index of `agent`, or where it would go (`*found` false). */
static size_t find(uint32_t agent, bool *found) {
    size_t lo = 0, hi = s.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s.agents[mid].agent < agent) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < s.n && s.agents[lo].agent == agent;
    return lo;
}

static uint64_t rate_at(size_t i) {
    return callrate_decay(s.agents[i].count, s.requests - s.agents[i].at, s.half_life);
}

static uint64_t rate(uint32_t agent) {
    bool found;
    size_t i = find(agent, &found);
    return found ? rate_at(i) : 0;
}

static void credit(size_t i, uint64_t amount) {
    uint64_t c = rate_at(i) + amount;
    s.agents[i].count = c < COUNT_CAP ? c : COUNT_CAP;
    s.agents[i].at = s.requests;
}

const char *arp_init(const arp_config *config) {
    static const char *const known[] = {"half-life", "recency", "max-agents"};
    memset(&s, 0, sizeof s);
    s.half_life = 64, s.recency = 256, s.max_agents = 256;
    const char *err = arp_config_expect_only(config, known, 3);
    if (!err) err = arp_config_u64(config, "half-life", 64, 1, 65536, &s.half_life);
    if (!err) err = arp_config_u64(config, "recency", 256, 0, 1 << 20, &s.recency);
    if (!err) err = arp_config_u64(config, "max-agents", 256, 1, MAX_AGENTS, &s.max_agents);
    return err;
}

void arp_observe(const arp_event *event) {
    if (event->tag != AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL) return;
    const agentrt_policy_types_request_arrival_t *a = &event->val.request_arrival;
    if (a->warmup || a->agent == 0) return;
    s.requests++;
    bool found;
    size_t i = find(a->agent, &found);
    if (!found) {
        memmove(&s.agents[i + 1], &s.agents[i], (s.n - i) * sizeof s.agents[0]);
        s.agents[i] = (agent_t){a->agent, 0, s.requests, 0};
        s.n++;
    }
    s.agents[i].anchor = a->anchor_hash;
    credit(i, CALL);
    s.last = a->agent;
    s.pending = true;
    while (s.n > s.max_agents) {
        size_t coldest = 0;
        for (size_t k = 1; k < s.n; k++) {
            if (rate_at(k) < rate_at(coldest)) coldest = k; /* ascending: ties keep the smaller handle */
        }
        memmove(&s.agents[coldest], &s.agents[coldest + 1], (s.n - coldest - 1) * sizeof s.agents[0]);
        s.n--;
    }
}

void arp_observe_block(const arp_block_event *block) {
    if (block->op != AGENTRT_POLICY_TYPES_BLOCK_OP_TOUCHED) return;
    bool found;
    size_t i = find(block->agent, &found);
    if (found) credit(i, HIT);
}

void arp_score(const arp_item *items, size_t n, float *scores) {
    uint64_t newest = 0;
    for (size_t i = 0; i < n; i++) {
        if (items[i].last_access > newest) newest = items[i].last_access;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t age = newest - items[i].last_access;
        uint64_t fresh = age < s.recency ? s.recency - age : 0;
        scores[i] = (float)((rate(items[i].agent) >> 8) * (s.recency + 1) + fresh);
    }
}

void arp_act(arp_effects *out) {
    if (!s.pending) return;
    s.pending = false;
    uint64_t total = 0, best_rate = 0;
    size_t best = s.n;
    for (size_t i = 0; i < s.n; i++) {
        uint64_t r = rate_at(i);
        total += r;
        if (s.agents[i].agent == s.last || s.agents[i].anchor == 0) continue;
        if (best == s.n || r > best_rate) best = i, best_rate = r; /* ascending: ties keep the first */
    }
    if (best == s.n || best_rate == 0) return;
    float probability = (float)(best_rate * 65536 / total) / 65536.0f;
    arp_warm_prefix(out, s.agents[best].agent, s.agents[best].anchor, probability);
}

void arp_snapshot(arp_writer *w) {
    arp_w_header(w, "CALR", FORMAT);
    arp_w_u64(w, s.requests);
    arp_w_u32(w, s.last);
    arp_w_u8(w, s.pending);
    arp_w_u32(w, (uint32_t)s.n);
    for (size_t i = 0; i < s.n; i++) {
        arp_w_u32(w, s.agents[i].agent);
        arp_w_u64(w, s.agents[i].count);
        arp_w_u64(w, s.agents[i].at);
        arp_w_u64(w, s.agents[i].anchor);
    }
}

const char *arp_restore(const uint8_t *state, size_t len) {
    static agent_t agents[MAX_AGENTS];
    uint16_t version;
    arp_reader r = arp_reader_open(state, len, "CALR", &version);
    if (r.error) return r.error;
    if (version != FORMAT) {
        arp_message_start("snapshot format ");
        arp_message_add_u64(version);
        return arp_message_add("; this policy reads 1");
    }
    uint64_t requests = arp_r_u64(&r);
    uint32_t last = arp_r_u32(&r);
    bool pending = arp_r_u8(&r) != 0;
    uint32_t n = arp_r_u32(&r);
    if (!r.error && n > s.max_agents) {
        arp_message_start("snapshot holds ");
        arp_message_add_u64(n);
        arp_message_add(" agents; max-agents is ");
        return arp_message_add_u64(s.max_agents);
    }
    for (uint32_t i = 0; i < n && !r.error; i++) {
        agents[i].agent = arp_r_u32(&r);
        if (i > 0 && !r.error && agents[i].agent <= agents[i - 1].agent) {
            arp_message_start("snapshot agents are not in ascending order at ");
            return arp_message_add_u64(agents[i].agent);
        }
        agents[i].count = arp_r_u64(&r);
        agents[i].at = arp_r_u64(&r);
        agents[i].anchor = arp_r_u64(&r);
    }
    const char *err = arp_reader_finish(&r);
    if (err) return err;
    s.requests = requests, s.last = last, s.pending = pending, s.n = n;
    memcpy(s.agents, agents, n * sizeof agents[0]);
    return NULL;
}
