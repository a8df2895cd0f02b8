/* closed-first in C: the blocks of sessions the framework closed go first, LRU otherwise.
 *
 * The rule of policies/closed-first-rust/SPEC.md; scores and snapshots are the Rust version's to
 * the bit (tests/closed_first.rs). The closed sessions are kept twice: in closing order (a ring,
 * for the snapshot and for forgetting the oldest) and sorted (for lookups while scoring). */

#include <stdlib.h>
#include <string.h>

#include "agentrt_policy.h"

#define MAGIC "CLFT"
#define FORMAT 1
#define DEFAULT_MAX_SESSIONS 16384
#define MAX_SESSIONS_LIMIT (1 << 20)

const arp_info arp_policy = {
    "closed-first", "0.1.0",
    "the blocks of sessions the framework closed go first, LRU otherwise; C (SPEC.md)"};

typedef struct {
    uint64_t max;
    size_t n, head;
    uint64_t *order;  /* a ring of `max`: the i-th oldest closing at order[(head + i) % max] */
    uint64_t *sorted; /* the same n sessions, ascending */
} closed_t;

static closed_t s;

/* Where `session` is in `sorted`, or where it would go (`*found` false). */
static size_t find(const closed_t *c, uint64_t session, bool *found) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->sorted[mid] < session) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < c->n && c->sorted[lo] == session;
    return lo;
}

static bool is_closed(uint64_t session) {
    bool found;
    find(&s, session, &found);
    return found;
}

static void unsort(closed_t *c, uint64_t session) {
    bool found;
    size_t at = find(c, session, &found);
    if (found) memmove(c->sorted + at, c->sorted + at + 1, (c->n - at - 1) * sizeof *c->sorted);
}

/* Add a session not yet closed, forgetting the oldest closing beyond `max`. */
static void add(closed_t *c, uint64_t session) {
    if (c->n == c->max) {
        unsort(c, c->order[c->head]);
        c->head = (c->head + 1) % c->max;
        c->n--;
    }
    bool found;
    size_t at = find(c, session, &found);
    memmove(c->sorted + at + 1, c->sorted + at, (c->n - at) * sizeof *c->sorted);
    c->sorted[at] = session;
    c->order[(c->head + c->n) % c->max] = session;
    c->n++;
}

static void reopen(uint64_t session) {
    if (!is_closed(session)) return;
    unsort(&s, session);
    /* A wrong closing is rare: find it in the ring and close the gap. */
    size_t i = 0;
    while (s.order[(s.head + i) % s.max] != session) i++;
    for (; i + 1 < s.n; i++) s.order[(s.head + i) % s.max] = s.order[(s.head + i + 1) % s.max];
    s.n--;
}

static bool alloc_closed(closed_t *c, uint64_t max) {
    c->max = max, c->n = 0, c->head = 0;
    c->order = malloc(max * sizeof *c->order);
    c->sorted = malloc(max * sizeof *c->sorted);
    return c->order && c->sorted;
}

static void free_closed(closed_t *c) {
    free(c->order);
    free(c->sorted);
}

const char *arp_init(const arp_config *config) {
    static const char *const known[] = {"max-sessions"};
    uint64_t max;
    const char *err = arp_config_expect_only(config, known, 1);
    if (!err) err = arp_config_u64(config, "max-sessions", DEFAULT_MAX_SESSIONS, 1, MAX_SESSIONS_LIMIT, &max);
    if (err) return err;
    free_closed(&s);
    if (!alloc_closed(&s, max)) return "out of memory for max-sessions";
    return NULL;
}

void arp_observe(const arp_event *event) {
    if (event->tag == AGENTRT_POLICY_TYPES_EVENT_SESSION_END) {
        const agentrt_policy_types_session_end_t *end = &event->val.session_end;
        if (end->reason == AGENTRT_POLICY_TYPES_END_REASON_CLOSED && end->session != 0 && !is_closed(end->session))
            add(&s, end->session);
    } else if (event->tag == AGENTRT_POLICY_TYPES_EVENT_REQUEST_ARRIVAL && !event->val.request_arrival.warmup) {
        reopen(event->val.request_arrival.session);
    }
}

void arp_score(const arp_item *items, size_t n, float *scores) {
    uint64_t oldest = items[0].last_access, newest = items[0].last_access;
    for (size_t i = 1; i < n; i++) {
        if (items[i].last_access < oldest) oldest = items[i].last_access;
        if (items[i].last_access > newest) newest = items[i].last_access;
    }
    uint64_t open_bonus = newest - oldest + 1;
    for (size_t i = 0; i < n; i++) {
        bool closed = items[i].session != 0 && is_closed(items[i].session);
        scores[i] = (float)(items[i].last_access - oldest + (closed ? 0 : open_bonus));
    }
}

void arp_snapshot(arp_writer *w) {
    arp_w_header(w, MAGIC, FORMAT);
    arp_w_u32(w, (uint32_t)s.n);
    for (size_t i = 0; i < s.n; i++) arp_w_u64(w, s.order[(s.head + i) % s.max]);
}

const char *arp_restore(const uint8_t *state, size_t len) {
    uint16_t version;
    arp_reader r = arp_reader_open(state, len, MAGIC, &version);
    if (r.error) return r.error;
    if (version != FORMAT) {
        arp_message_start("unknown closed-first snapshot format ");
        arp_message_add_u64(version);
        return arp_message_add(" (this version reads 1)");
    }
    uint32_t count = arp_r_u32(&r);
    if (r.error) return r.error;
    if (count > s.max) {
        arp_message_start("snapshot holds ");
        arp_message_add_u64(count);
        arp_message_add(" closed sessions; max-sessions is ");
        return arp_message_add_u64(s.max);
    }
    closed_t restored;
    if (!alloc_closed(&restored, s.max)) return "out of memory for the snapshot";
    for (uint32_t i = 0; i < count && !r.error; i++) {
        uint64_t session = arp_r_u64(&r);
        bool found;
        find(&restored, session, &found);
        if (!r.error && (session == 0 || found)) {
            free_closed(&restored);
            arp_message_start("snapshot lists session ");
            arp_message_add_u64(session);
            return arp_message_add(" twice or as 0");
        }
        if (!r.error) add(&restored, session);
    }
    const char *err = arp_reader_finish(&r);
    if (err) {
        free_closed(&restored);
        return err;
    }
    free_closed(&s);
    s = restored;
    return NULL;
}
