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

int64_t cq_spin_read(cq_tailer *t, uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen) {
    int64_t r = cq_read(t);
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

const uint32_t *cq_notify_word(const int64_t *seq) {
    const uint32_t *w = (const uint32_t *)seq;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w += 1; /* the low half of the 64-bit value */
#endif
    return w;
}

uint32_t cq_notify_arm(const int64_t *seq, int64_t *until, uint64_t horizon_ns) {
    int64_t want = (int64_t)(cq_mono_ns() + horizon_ns);
    int64_t cur = __atomic_load_n(until, __ATOMIC_ACQUIRE);
    while (cur < want &&
           !__atomic_compare_exchange_n(until, &cur, want, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE)) {
    }
    /* the raise of `until` must be visible before we look for data (pairs
     * with the fence in cq_notify) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return __atomic_load_n(cq_notify_word(seq), __ATOMIC_SEQ_CST);
}

int cq_notify(int64_t *seq, int64_t *until) {
    /* the commit must be visible before we look for waiters (pairs with the
     * fence in cq_notify_arm) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int64_t d = __atomic_load_n(until, __ATOMIC_RELAXED);
    if (d == 0) return 0;
    if ((int64_t)cq_mono_ns() > d) {
        /* every waiter's horizon has passed: stop waking (a waiter raising it
         * meanwhile makes the CAS fail, and it stays) */
        __atomic_compare_exchange_n(until, &d, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
        return 0;
    }
    __atomic_add_fetch(seq, 1, __ATOMIC_SEQ_CST);
    futex(cq_notify_word(seq), FUTEX_WAKE, INT_MAX, NULL);
    return 1;
}

int64_t cq_park_read(cq_tailer *t, uint64_t park_ns, int64_t *seq, int64_t *until,
                     uint64_t horizon_ns, const uint32_t *stop, uint32_t stop_seen) {
    if (seq != NULL && until != NULL) {
        uint32_t snap = cq_notify_arm(seq, until, horizon_ns);
        if (t != NULL) {
            int64_t r = cq_read(t);
            if (r != CQ_NONE) return r;
        }
        if (stopped(stop, stop_seen)) return t != NULL ? CQ_NONE : CQ_BAD_STATE;
        cq_futex_wait(cq_notify_word(seq), snap, park_ns);
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
