/*
 * aiochronicle native pausers.  See pause.h for the contract and the notify
 * protocol.
 */
#define _GNU_SOURCE
#include "pause.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* how many pause instructions between two reads of the clock */
#define CLOCK_EVERY 16u

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

uint64_t cq_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline int stopped(const uint32_t *stop, uint32_t seen) {
    return stop != NULL && __atomic_load_n(stop, __ATOMIC_RELAXED) != seen;
}

int cq_spin(uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen) {
    if (budget_ns == 0) return CQ_SPIN_TIMEOUT;
    uint64_t deadline = cq_mono_ns() + budget_ns;
    for (unsigned i = 1;; i++) {
        if (stopped(stop, stop_seen)) return CQ_SPIN_STOPPED;
        relax();
        if (i % CLOCK_EVERY == 0 && cq_mono_ns() >= deadline) return CQ_SPIN_TIMEOUT;
    }
}

int cq_yield(void) { return sched_yield(); }

/* The header word at base + pos (acquire); pos may be unaligned in files of
 * dataFormat 0. */
static inline uint32_t header_at(const uint8_t *base, uint64_t pos) {
    const uint8_t *p = base + pos;
    if ((pos & 3) == 0) return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
    uint32_t v;
    memcpy(&v, p, 4);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return v;
}

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
        if (header_ready(header_at(base, pos))) return CQ_SPIN_DATA;
        if (stopped(stop, stop_seen)) return CQ_SPIN_STOPPED;
        relax();
        if (i % CLOCK_EVERY == 0 && cq_mono_ns() >= deadline) return CQ_SPIN_TIMEOUT;
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
    uint64_t deadline = cq_mono_ns() + budget_ns;
    for (;;) {
        if (spin_header(t, deadline, stop, stop_seen) != CQ_SPIN_DATA) return CQ_NONE;
        r = cq_read(t);
        /* CQ_NONE again: a run of skipped metadata, or a header that is being
         * rewritten; keep polling until the deadline */
        if (r != CQ_NONE || cq_mono_ns() >= deadline) return r;
    }
}

/* ------------------------------------------------------------------ */
/* futex                                                               */

static long futex(const uint32_t *word, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, word, op, val, ts, NULL, 0);
}

int cq_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
    struct timespec ts;
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    if (futex(word, FUTEX_WAIT, expected, &ts) == 0) return CQ_WAIT_WOKEN;
    switch (errno) {
    case ETIMEDOUT: return CQ_WAIT_TIMEOUT;
    case EAGAIN: return CQ_WAIT_CHANGED;
    case EINTR: return CQ_WAIT_INTERRUPTED;
    default: return CQ_ERRNO;
    }
}

int cq_futex_wake(const uint32_t *word, int n) {
    long r = futex(word, FUTEX_WAKE, (uint32_t)n, NULL);
    return r < 0 ? CQ_ERRNO : (int)r;
}

/* ------------------------------------------------------------------ */
/* notify                                                              */

#define NOTIFY_KEY "aiochronicle.notify"
#define HDR_LEN_MASK 0x3FFFFFFFu

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LOW_HALF 1
#else
#define LOW_HALF 0
#endif

const uint32_t *cq_notify_word(const int64_t *cell) { return (const uint32_t *)cell + LOW_HALF; }
const uint32_t *cq_notify_until(const int64_t *cell) { return (const uint32_t *)cell + 1 - LOW_HALF; }

static inline uint32_t now_ms32(void) { return (uint32_t)(cq_mono_ns() / 1000000ull); }

uint32_t cq_notify_arm(int64_t *cell, uint64_t horizon_ns) {
    if (horizon_ns > 3600000000000ull) horizon_ns = 3600000000000ull; /* `until` is ms mod 2^32 */
    uint32_t want = now_ms32() + (uint32_t)((horizon_ns + 999999ull) / 1000000ull);
    if (want == 0) want = 1;
    uint64_t v = (uint64_t)__atomic_load_n(cell, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t until = (uint32_t)(v >> 32);
        if (until != 0 && (int32_t)(until - want) >= 0) break; /* already far enough */
        uint64_t nv = ((uint64_t)want << 32) | (v & 0xFFFFFFFFull);
        if (__atomic_compare_exchange_n(cell, (int64_t *)&v, (int64_t)nv, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_ACQUIRE))
            break;
    }
    /* the raise of `until` must be visible before we look for data (pairs
     * with the fence in cq_notify) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* the counter is the low half of the value: every atomic on the word is
     * 64 bits wide (only the kernel's futex compares the low half) */
    return (uint32_t)((uint64_t)__atomic_load_n(cell, __ATOMIC_SEQ_CST) & 0xFFFFFFFFull);
}

int cq_notify(int64_t *cell) {
    /* the commit must be visible before we look for waiters (pairs with the
     * fence in cq_notify_arm) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    uint64_t v = (uint64_t)__atomic_load_n(cell, __ATOMIC_RELAXED);
    uint32_t until = (uint32_t)(v >> 32);
    if (until == 0) return CQ_NOTIFY_IDLE;
    if ((int32_t)(until - now_ms32()) < 0) {
        /* every waiter's horizon has passed: stop waking (a waiter raising it
         * or a bump meanwhile makes the CAS fail; the next commit looks again) */
        int64_t expected = (int64_t)v;
        __atomic_compare_exchange_n(cell, &expected, (int64_t)(v & 0xFFFFFFFFull), 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        return CQ_NOTIFY_IDLE;
    }
    /* bump the counter (the low half) with a 64-bit CAS, keeping `until`:
     * the same width as every other atomic on the value */
    uint64_t cur = v;
    for (;;) {
        uint64_t nv = (cur & 0xFFFFFFFF00000000ull) | (uint64_t)(uint32_t)(cur + 1);
        if (__atomic_compare_exchange_n(cell, (int64_t *)&cur, (int64_t)nv, 0,
                                        __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
            break;
    }
    uint32_t *word = (uint32_t *)cq_notify_word(cell);
    futex(word, FUTEX_WAKE, INT_MAX, NULL);
    return CQ_NOTIFY_WOKE;
}

/* The value of the notify key if the table store record at `pos` holds it. */
static int64_t *notify_record(const cq_notify_watch *n, uint64_t pos, uint32_t h) {
    uint64_t len = h & HDR_LEN_MASK;
    uint64_t end = pos + 4 + len;
    if ((h & CQ_HDR_META) || end > n->meta_len) return NULL;
    const uint8_t *b = n->meta;
    uint64_t p = pos + 4;
    size_t klen = sizeof(NOTIFY_KEY) - 1;
    if (len < 2 + klen || b[p] != 0xB9 || b[p + 1] != klen ||
        memcmp(b + p + 2, NOTIFY_KEY, klen) != 0)
        return NULL;
    p += 2 + klen;
    while (p < end && (b[p] == 0x8F || b[p] == 0x8E)) {
        if (b[p] == 0x8F) { p++; continue; }
        uint32_t skip;
        if (p + 5 > end) return NULL;
        memcpy(&skip, b + p + 1, 4);
        p += 5 + (uint64_t)skip;
    }
    if (p + 9 > end || b[p] != 0xA7 || ((p + 1) & 7) != 0) return NULL;
    return (int64_t *)(b + p + 1);
}

int cq_notify_commit(cq_notify_watch *n) {
    if (n->cell != NULL) return cq_notify(n->cell);
    if (n->meta == NULL) return CQ_NOTIFY_IDLE;
    uint64_t pos = n->probe;
    if (pos > n->meta_len || n->meta_len - pos < 4) { n->meta = NULL; return CQ_NOTIFY_MOVED; }
    uint32_t h = __atomic_load_n((const uint32_t *)(n->meta + pos), __ATOMIC_ACQUIRE);
    if (h == 0) return CQ_NOTIFY_IDLE;
    /* keys were added: walk them (a few records, rarely) */
    for (unsigned guard = 0; guard < 4096; guard++) {
        if (h == 0 || (h & CQ_HDR_NOT_COMPLETE)) break; /* the end, or one being written */
        int64_t *cell = notify_record(n, pos, h);
        if (cell != NULL) {
            n->cell = cell;
            n->probe = pos;
            cq_notify(cell); /* the waiter that created it may be parked already */
            return CQ_NOTIFY_MOVED;
        }
        pos = (pos + 4 + (h & HDR_LEN_MASK) + 3) & ~(uint64_t)3;
        if (pos > n->meta_len || n->meta_len - pos < 4) {
            n->meta = NULL; /* grew past this mapping: Python looks again */
            return CQ_NOTIFY_MOVED;
        }
        h = __atomic_load_n((const uint32_t *)(n->meta + pos), __ATOMIC_ACQUIRE);
    }
    n->probe = pos;
    return CQ_NOTIFY_MOVED;
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
