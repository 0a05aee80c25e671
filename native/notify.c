/*
 * aiochronicle native wake-up: futexes and the notify protocol.  See notify.h.
 */
#define _GNU_SOURCE
#include "notify.h"
#include "atomic.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t cq_mono_ns(void) { return cq_now_ns(); }

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

static inline uint32_t now_ms32(void) { return (uint32_t)(cq_now_ns() / 1000000ull); }

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

