/*
 * aiochronicle native pausers.  See pause.h for the contract and notify.h for
 * the wake-up protocol.
 */
#define _GNU_SOURCE
#include "pause.h"
#include "atomic.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* how many pause instructions between two reads of the clock */
#define CLOCK_EVERY 16u

static inline int stopped(const uint32_t *stop, uint32_t seen) {
    return stop != NULL && __atomic_load_n(stop, __ATOMIC_RELAXED) != seen;
}

int cq_spin(uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen) {
    if (budget_ns == 0) return CQ_SPIN_TIMEOUT;
    uint64_t deadline = cq_now_ns() + budget_ns;
    for (unsigned i = 1;; i++) {
        if (stopped(stop, stop_seen)) return CQ_SPIN_STOPPED;
        cq_relax();
        if (i % CLOCK_EVERY == 0 && cq_now_ns() >= deadline) return CQ_SPIN_TIMEOUT;
    }
}

int cq_yield(void) { return sched_yield(); }

/* A header a read would act on: a complete document or the EOF marker. */
static inline int header_ready(uint32_t h) {
    return h == CQ_HDR_EOF || (h != 0 && !(h & CQ_HDR_NOT_COMPLETE));
}

/* Poll the tailer's next header until it is ready.  CQ_SPIN_DATA when it is
 * (or when the position is outside the mapping: cq_read will say why),
 * CQ_SPIN_TIMEOUT at the deadline, CQ_SPIN_STOPPED when asked to stop. */
static int spin_header(const cq_tailer *t, uint64_t deadline, const uint32_t *stop,
                       uint32_t stop_seen) {
    const cq_store *s = t->store;
    if (s == NULL) return CQ_SPIN_DATA;
    /* Python grows a mapping by storing the new base before the new length and
     * keeps the old mapping until the file closes, so (length, then base)
     * always describes mapped bytes, and both show the same page cache. */
    uint64_t len = __atomic_load_n(&s->map_len, __ATOMIC_ACQUIRE);
    const uint8_t *base = __atomic_load_n(&s->base, __ATOMIC_ACQUIRE);
    uint64_t pos = t->pos;
    if (base == NULL || pos > len || len - pos < 4) return CQ_SPIN_DATA;
    for (unsigned i = 1;; i++) {
        /* a page the file does not back (yet) is not touched: it reads as 0 */
        if (cq_backed(s, pos, 4) && header_ready(cq_header_word(base, pos)))
            return CQ_SPIN_DATA;
        if (stopped(stop, stop_seen)) return CQ_SPIN_STOPPED;
        cq_relax();
        if (i % CLOCK_EVERY == 0 && cq_now_ns() >= deadline) return CQ_SPIN_TIMEOUT;
    }
}

/* Codes after which a waiter has nothing to watch and Python has to look
 * (no file yet, or the end of a cycle whose successor may not exist yet). */
static inline int wait_blind(int64_t r) { return r == CQ_BAD_STATE || r == CQ_EOF; }

int64_t cq_spin_read(cq_tailer *t, uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen) {
    int64_t r = cq_read(t);
    if (wait_blind(r)) {
        /* nothing to poll: spend the budget, then let Python look again */
        if (budget_ns) cq_spin(budget_ns, stop, stop_seen);
        return r;
    }
    if (r != CQ_NONE || budget_ns == 0) return r;
    uint64_t deadline = cq_now_ns() + budget_ns;
    for (;;) {
        if (spin_header(t, deadline, stop, stop_seen) != CQ_SPIN_DATA) return CQ_NONE;
        r = cq_read(t);
        /* CQ_NONE again: a run of skipped metadata, or a header that is being
         * rewritten; keep polling until the deadline */
        if (r != CQ_NONE || cq_now_ns() >= deadline) return r;
    }
}

int64_t cq_park_read(cq_tailer *t, uint64_t park_ns, int64_t *cell, uint64_t horizon_ns,
                     const uint32_t *stop, uint32_t stop_seen) {
    if (cell != NULL) {
        /* announced for the whole park (plus the margin) */
        uint32_t snap = cq_notify_arm(cell, park_ns + horizon_ns);
        if (t != NULL) {
            int64_t r = cq_read(t);
            if (r != CQ_NONE && !wait_blind(r)) return r;
        }
        if (stopped(stop, stop_seen)) return t != NULL ? CQ_NONE : CQ_BAD_STATE;
        cq_futex_wait(cq_notify_word(cell), snap, park_ns);
    } else if (stop != NULL) {
        cq_futex_wait(stop, stop_seen, park_ns);
    } else {
        struct timespec ts;
        ts.tv_sec = (time_t)(park_ns / 1000000000ull);
        ts.tv_nsec = (long)(park_ns % 1000000000ull);
        nanosleep(&ts, NULL);
    }
    return t != NULL ? cq_read(t) : CQ_BAD_STATE;
}
