/*
 * aiochronicle native wake-up: futexes and the notify protocol.  See notify.h.
 */
#define _GNU_SOURCE
#include "notify.h"
#include "atomic.h"
#include "platform.h"

#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <limits.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* the last errno (codes.h)                                            */

static _Thread_local int last_errno;

int cq_last_errno(void) { return last_errno; }

int cq_fail(int rc) {
    last_errno = errno;
    return rc;
}

uint64_t cq_mono_ns(void) { return cq_now_ns(); }

/* ------------------------------------------------------------------ */
/* futex                                                               */

int cq_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
    int e = cq_plat_wait(word, expected, timeout_ns);
    if (e == 0) return CQ_WAIT_WOKEN;
    errno = e;
    switch (e) {
    case ETIMEDOUT: return CQ_WAIT_TIMEOUT;
    case EAGAIN: return CQ_WAIT_CHANGED;
    case EINTR: return CQ_WAIT_INTERRUPTED;
    default: return cq_fail(CQ_ERRNO);
    }
}

int cq_futex_wake(const uint32_t *word, int n) {
    int r = cq_plat_wake(word, n);
    if (r >= 0) return r;
    errno = -r;
    return cq_fail(CQ_ERRNO);
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

/* cq_notify after its fence. */
static int notify_cell(int64_t *cell) {
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
    cq_plat_wake(word, INT_MAX);
    return CQ_NOTIFY_WOKE;
}

int cq_notify(int64_t *cell) {
    /* the commit must be visible before we look for waiters (pairs with the
     * fence in cq_notify_arm) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return notify_cell(cell);
}

/* ------------------------------------------------------------------ */
/* event-loop owners: parked bits and datagrams                        */

#define SOCK_PREFIX "aiochronicle.notify."
/* where the abstract namespace is missing (platform.h) */
#define SOCK_PATH_PREFIX "/tmp/aiochronicle.n."

int cq_notify_sockname(int64_t ident, char *out) {
    return cq_plat_sockname(SOCK_PREFIX, SOCK_PATH_PREFIX, (uint64_t)ident, out);
}

void cq_notify_park(int64_t *parked, int slot) {
    if (slot < 0 || slot >= CQ_NOTIFY_SLOTS) return;
    __atomic_fetch_or(parked, (int64_t)(1ull << slot), __ATOMIC_SEQ_CST);
    /* the bit must be visible before the owner looks for data again (an
     * acquire load of a header, not a seq_cst one): C11 orders that store and
     * that load only through a seq_cst fence, which pairs with the one in
     * cq_notify_commit.  x86's locked RMW is such a fence already; arm64's
     * LDSETAL/LDAXR-STLXR is not one by the C11 model */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

void cq_notify_unpark(int64_t *parked, int slot) {
    if (slot < 0 || slot >= CQ_NOTIFY_SLOTS) return;
    __atomic_fetch_and(parked, (int64_t)~(1ull << slot), __ATOMIC_RELAXED);
}

void cq_notify_watch_close(cq_notify_watch *n) {
    int32_t s = __atomic_exchange_n(&n->sock, -1, __ATOMIC_ACQ_REL);
    if (s > 0) close(s - 1);
}

/* The socket wake-ups are sent from, made on first use; -1 when none can be. */
static int watch_socket(cq_notify_watch *n) {
    int32_t s = __atomic_load_n(&n->sock, __ATOMIC_ACQUIRE);
    if (s != 0) return s > 0 ? s - 1 : -1;
    int fd = cq_plat_dgram_socket();
    if (fd < 0) return -1; /* out of descriptors: the owners' parks end on their timers */
    int32_t expected = 0;
    if (!__atomic_compare_exchange_n(&n->sock, &expected, fd + 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        close(fd); /* another thread made one first (or the watch was closed) */
        return expected > 0 ? expected - 1 : -1;
    }
    return fd;
}

/* One byte to the owner of slot i (whose bit this appender cleared). */
static void wake_owner(cq_notify_watch *n, int fd, int i) {
    int64_t ident = __atomic_load_n(n->slots[i], __ATOMIC_ACQUIRE);
    if (ident == 0) return;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    int len = cq_notify_sockname(ident, addr.sun_path);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len);
    static const char one = 1;
    /* sendto gives the bytes sent (1), not 0: testing `== 0` took every
     * delivered wake-up for a failure, and a stale errno of ECONNREFUSED (from
     * an earlier refused send) then freed the slot of a live owner */
    if (sendto(fd, &one, 1, MSG_DONTWAIT | CQ_MSG_NOSIGNAL, (struct sockaddr *)&addr, alen) >= 0)
        return;
    /* EAGAIN: its queue is full, so a wake-up is pending anyway.  Refused or
     * no such name: the owner is gone; free its slot unless it changed */
    if (errno == ECONNREFUSED || errno == ENOENT) {
        int64_t expected = ident;
        /* a name that is a path (the portable build) outlives its dead owner:
         * whoever frees the slot removes it (nobody binds that name again:
         * an owner binds a fresh random name before it takes a slot) */
        if (__atomic_compare_exchange_n(n->slots[i], &expected, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED) && addr.sun_path[0] != '\0')
            (void)unlink(addr.sun_path);
    }
}

/* After the fence: wake the owners whose bits are set. */
static int notify_parked(cq_notify_watch *n) {
    uint64_t m = (uint64_t)__atomic_load_n(n->parked, __ATOMIC_RELAXED);
    uint64_t take = m & n->known;
    if (take == 0) return CQ_NOTIFY_IDLE;
    int fd = watch_socket(n);
    if (fd < 0) return CQ_NOTIFY_IDLE;
    take &= (uint64_t)__atomic_fetch_and(n->parked, (int64_t)~take, __ATOMIC_SEQ_CST);
    if (take == 0) return CQ_NOTIFY_IDLE; /* another appender took them */
    while (take) {
        int i = __builtin_ctzll(take);
        take &= take - 1;
        wake_owner(n, fd, i);
    }
    return CQ_NOTIFY_WOKE;
}

/* The key and the value of the table store record at `pos` (header `h`); the
 * value is NULL when the record is not a well-formed 8-aligned INT64. */
static int64_t *record_value(const cq_notify_watch *n, uint64_t pos, uint32_t h,
                             const uint8_t **key, size_t *klen) {
    uint64_t len = h & HDR_LEN_MASK;
    uint64_t end = pos + 4 + len;
    if ((h & CQ_HDR_META) || end > n->meta_len) return NULL;
    const uint8_t *b = n->meta;
    uint64_t p = pos + 4;
    if (len < 2 || b[p] != 0xB9 || b[p + 1] >= 0x80 || p + 2 + b[p + 1] > end) return NULL;
    *key = b + p + 2;
    *klen = b[p + 1];
    p += 2 + *klen;
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

/* Note the record if it is one of ours; 1 when it was. */
static int take_record(cq_notify_watch *n, uint64_t pos, uint32_t h) {
    const uint8_t *key;
    size_t klen;
    int64_t *v = record_value(n, pos, h, &key, &klen);
    if (v == NULL) return 0;
    size_t base = sizeof(NOTIFY_KEY) - 1;
    if (klen < base || memcmp(key, NOTIFY_KEY, base) != 0) return 0;
    /* the first record of a key wins, as in TableStore._scan (and Java's
     * lookup): a later duplicate (a damaged or copied file) must not move an
     * appender off the value the waiters arm */
    if (klen == base) {
        if (n->cell == NULL) n->cell = v;
        return 1;
    }
    if (key[base] != '.') return 0;
    const uint8_t *rest = key + base + 1;
    size_t rlen = klen - base - 1;
    if (rlen == 6 && memcmp(rest, "parked", 6) == 0) {
        if (n->parked == NULL) n->parked = v;
        return 1;
    }
    if (rlen == 0 || rlen > 2) return 0;
    int i = 0;
    for (size_t k = 0; k < rlen; k++) {
        if (rest[k] < '0' || rest[k] > '9') return 0;
        i = i * 10 + (rest[k] - '0');
    }
    if (i >= CQ_NOTIFY_SLOTS || (rlen == 2 && rest[0] == '0')) return 0;
    if (n->slots[i] == NULL) {
        n->slots[i] = v;
        __atomic_store_n(&n->known, n->known | (1ull << i), __ATOMIC_RELEASE);
    }
    return 1;
}

_Static_assert(CQ_NOTIFY_SLOTS == 16, "cq_notify_watch.slots has 16 entries");
#define ALL_SLOTS ((1ull << CQ_NOTIFY_SLOTS) - 1)

/* Walk the records added since the probe (a few, rarely; at most 4096). */
static int walk(cq_notify_watch *n) {
    uint64_t pos = n->probe;
    int found = 0;
    for (unsigned guard = 0; guard < 4096; guard++) {
        if ((pos & 3) != 0 || pos > n->meta_len || n->meta_len - pos < 4) {
            /* grew past this mapping (or a probe off the 4-byte grid of the
             * records, which no table store has): what was found stays */
            n->meta = NULL;
            return CQ_NOTIFY_MOVED;
        }
        uint32_t h = __atomic_load_n((const uint32_t *)(n->meta + pos), __ATOMIC_ACQUIRE);
        if (h == 0 || (h & CQ_HDR_NOT_COMPLETE)) break; /* the end, or one being written */
        found |= take_record(n, pos, h);
        pos = (pos + 4 + (h & HDR_LEN_MASK) + 3) & ~(uint64_t)3;
    }
    n->probe = pos;
    if (n->cell != NULL && n->parked != NULL && n->known == ALL_SLOTS)
        n->meta = NULL; /* everything found: no more probing */
    return found ? CQ_NOTIFY_MOVED : CQ_NOTIFY_IDLE;
}

int cq_notify_commit(cq_notify_watch *n) {
    int moved = CQ_NOTIFY_IDLE;
    if (n->meta != NULL) {
        uint64_t pos = n->probe;
        if ((pos & 3) != 0 || pos > n->meta_len || n->meta_len - pos < 4) {
            n->meta = NULL; /* as walk() does: nothing more to find here */
            moved = CQ_NOTIFY_MOVED;
        } else if (__atomic_load_n((const uint32_t *)(n->meta + pos), __ATOMIC_ACQUIRE) != 0) {
            moved = walk(n); /* keys were added */
        }
    }
    if (n->cell == NULL && n->parked == NULL) return moved;
    /* the commit must be visible before we look for waiters (pairs with the
     * fence in cq_notify_arm and the one in cq_notify_park) */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int rc = CQ_NOTIFY_IDLE;
    if (n->parked != NULL && notify_parked(n) == CQ_NOTIFY_WOKE) rc = CQ_NOTIFY_WOKE;
    if (n->cell != NULL && notify_cell(n->cell) == CQ_NOTIFY_WOKE) rc = CQ_NOTIFY_WOKE;
    return rc == CQ_NOTIFY_WOKE ? rc : moved;
}
