/*
 * Fuzz harness of the appender side of the notify protocol (native/notify.c).
 * cq_notify_commit walks the key records of metadata.cq4t, bytes any process
 * may have written (or damaged), to find the notify values, then wakes the
 * parked owners by datagram.  Whatever the bytes, the walk must stay inside
 * the mapping, end, and find only 8-aligned values of our keys; a commit must
 * write nothing but those values, clear exactly the parked bits of the known
 * slots, send one datagram a taken bit to a bound owner, free the slot of an
 * owner nobody bound, and leave the rest alone.
 *
 * Input = PARAMS parameter bytes + the metadata.cq4t image:
 *   p[0]      flags: 1 the mapping is shorter than the image | 2 the bytes from
 *             the hide offset on appear only after the first commit (keys
 *             added later) | 4 the probe as given (else clamped into the
 *             mapping, as the Python layer gives it) | 8 claim a slot for this
 *             process's bound socket once it is found | 16 close the watch
 *             before the last commit
 *   p[1..2]   the probe offset (rounded down to 4)
 *   p[3..4]   bytes cut off the mapping       p[5..6]  parked bits set before each commit
 *   p[7]      commits - 1 (mod 8)             p[8..9]  the hide offset (rounded down to 4)
 *   p[10]     the slot to claim (mod 16)
 * OWN_MARK in the image names this process's owner socket (inputs name no pid).
 * Datagrams go only to names cq_notify_sockname makes ("\0aiochronicle.notify."
 * + hex): a random ident names a socket nobody bound, so its send is refused.
 *
 * Builds:
 *   clang -fsanitize=fuzzer,address,undefined            -> libFuzzer target
 *   cc -DFUZZ_SMOKE_MAIN -fsanitize=address,undefined    -> a standalone driver that
 *       feeds valid table-store images with random keys, then mutated, for N
 *       iterations (-n N -s SEED); -w DIR writes seed inputs; FILE... replays.
 */
#define _GNU_SOURCE
#include "../notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PARAMS 11
#define MAX_COMMITS 8
#define ALL_SLOTS ((1ull << CQ_NOTIFY_SLOTS) - 1)
#define NPTR (2 + CQ_NOTIFY_SLOTS) /* cell, parked, slots */

#include "fuzz_assert.h"

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* coverage counters, printed by the smoke driver */
static unsigned long st_inputs, st_cells, st_parked, st_slots, st_all_found, st_woke, st_sent,
    st_freed;

/* ------------------------------------------------------------------ */
/* this process's owner socket                                          */

static int g_rx = -2;    /* the bound socket; -1 when none could be bound */
static int64_t g_ident;  /* the ident it is bound under */
/* A slot value standing for g_ident in inputs (which then do not depend on
 * the pid): the harness puts g_ident in its place once the slot is found. */
#define OWN_MARK ((int64_t)0x5E1F5E1F5E1F5E1Fll)

static void rx_setup(void) {
    if (g_rx != -2) return;
    g_rx = -1;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    for (uint32_t token = 0xF0220001u; token < 0xF0220011u; token++) {
        int64_t ident = (int64_t)(((uint64_t)token << 32) | (uint32_t)getpid());
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        int len = cq_notify_sockname(ident, a.sun_path);
        if (bind(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
                                                        (size_t)len)) == 0) {
            g_rx = fd;
            g_ident = ident;
            return;
        }
    }
    close(fd);
}

/* OWN_MARK at 8-aligned offsets of mem[from, to) becomes g_ident. */
static void own_marks(uint8_t *mem, uint64_t from, uint64_t to) {
    static const int64_t mark = OWN_MARK;
    if (g_rx < 0) return;
    for (uint64_t o = (from + 7) & ~(uint64_t)7; o + 8 <= to; o += 8)
        if (memcmp(mem + o, &mark, 8) == 0) memcpy(mem + o, &g_ident, 8);
}

/* Datagrams waiting on the owner socket (each one byte, 1). */
static unsigned drain(void) {
    unsigned got = 0;
    char b[8];
    ssize_t r;
    while (g_rx >= 0 && (r = recv(g_rx, b, sizeof b, MSG_DONTWAIT)) >= 0) {
        FUZZ_ASSERT(r == 1 && b[0] == 1);
        got++;
    }
    return got;
}

/* ------------------------------------------------------------------ */
/* the harness                                                          */

static int64_t **ptr_at(cq_notify_watch *n, int k) {
    return k == 0 ? &n->cell : k == 1 ? &n->parked : &n->slots[k - 2];
}

/* What the watch says must hold whatever the bytes. */
static void check_watch(cq_notify_watch *n, const uint8_t *mem, uint64_t meta_len) {
    for (int k = 0; k < NPTR; k++) {
        const uint8_t *q = (const uint8_t *)*ptr_at(n, k);
        if (q == NULL) continue;
        FUZZ_ASSERT(meta_len >= 8 && q >= mem && q <= mem + meta_len - 8);
        FUZZ_ASSERT(((uintptr_t)q & 7) == 0);
        for (int j = 0; j < k; j++) FUZZ_ASSERT((const uint8_t *)*ptr_at(n, j) != q);
    }
    FUZZ_ASSERT((n->known & ~ALL_SLOTS) == 0);
    for (int i = 0; i < CQ_NOTIFY_SLOTS; i++)
        FUZZ_ASSERT(((n->known >> i) & 1) == (n->slots[i] != NULL));
    if (n->meta != NULL) {
        FUZZ_ASSERT(n->meta == mem && n->meta_len == meta_len);
        FUZZ_ASSERT(n->probe <= meta_len && (n->probe & 3) == 0);
    }
    if (n->cell != NULL && n->parked != NULL && n->known == ALL_SLOTS)
        FUZZ_ASSERT(n->meta == NULL); /* everything found: no more probing */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < PARAMS) return 0;
    st_inputs++;
    rx_setup();
    const uint8_t *p = data;
    uint8_t flags = p[0];
    uint64_t ilen = size - PARAMS;
    uint64_t meta_len = ilen;
    if (flags & 1) meta_len = ilen - ld16(p + 3) % (ilen + 1);
    /* exactly meta_len bytes: any read past the mapping is an ASan report */
    uint8_t *mem = malloc(meta_len ? meta_len : 1);
    uint8_t *shadow = malloc(meta_len ? meta_len : 1);
    FUZZ_ASSERT(mem && shadow);
    memcpy(mem, data + PARAMS, meta_len);
    uint64_t hide = meta_len;
    if (flags & 2) {
        hide = ld16(p + 8) & ~3u;
        if (hide > meta_len) hide = meta_len;
        memset(mem + hide, 0, meta_len - hide);
    }
    own_marks(mem, 0, hide);
    cq_notify_watch n;
    memset(&n, 0, sizeof n);
    n.meta = mem;
    n.meta_len = meta_len;
    n.probe = ld16(p + 1) & ~3u;
    if (!(flags & 4) && n.probe > meta_len) n.probe = meta_len & ~(uint64_t)3;
    int commits = 1 + p[7] % MAX_COMMITS;
    uint16_t bits = ld16(p + 5);
    int claim = (flags & 8) && g_rx >= 0, claim_slot = p[10] % CQ_NOTIFY_SLOTS;
    int closed = 0;
    drain();
    for (int k = 0; k < commits; k++) {
        if (k == 1 && (flags & 2)) { /* records appended since the watch was set up */
            memcpy(mem + hide, data + PARAMS + hide, meta_len - hide);
            own_marks(mem, hide, meta_len);
        }
        if (k == commits - 1 && k > 0 && (flags & 16)) {
            cq_notify_watch_close(&n);
            closed = 1;
        }
        /* owners park: bits of known and unknown slots, and above them */
        if (n.parked != NULL) {
            uint64_t m = (uint64_t)(uint16_t)((bits << (k & 15)) | (bits >> (16 - (k & 15))));
            if (k == 3) m |= 1ull << 40;
            __atomic_fetch_or(n.parked, (int64_t)m, __ATOMIC_SEQ_CST);
        }
        /* owners of this process take their slots */
        if (claim && n.slots[claim_slot] != NULL)
            __atomic_store_n(n.slots[claim_slot], g_ident, __ATOMIC_SEQ_CST);

        cq_notify_watch was = n;
        memcpy(shadow, mem, meta_len);
        int rc = cq_notify_commit(&n);

        FUZZ_ASSERT(rc == CQ_NOTIFY_IDLE || rc == CQ_NOTIFY_WOKE || rc == CQ_NOTIFY_MOVED);
        check_watch(&n, mem, meta_len);
        int found_new = 0;
        for (int j = 0; j < NPTR; j++) {
            int64_t *before = *ptr_at(&was, j), *after = *ptr_at(&n, j);
            if (before != NULL) FUZZ_ASSERT(after == before); /* found once, for good */
            if (before == NULL && after != NULL) found_new = 1;
        }
        if (found_new) FUZZ_ASSERT(was.meta != NULL && rc != CQ_NOTIFY_IDLE);
        if (rc == CQ_NOTIFY_MOVED) FUZZ_ASSERT(was.meta != NULL);
        if (was.meta == NULL) FUZZ_ASSERT(n.meta == NULL);
        if (n.meta != NULL) FUZZ_ASSERT(n.probe >= was.probe);
        if (closed) FUZZ_ASSERT(n.sock == -1);

        /* the parked bits: exactly those of known slots are taken, when the
         * watch has a socket to send from */
        uint64_t taken = 0;
        if (n.parked != NULL) {
            uint64_t off = (uint64_t)((uint8_t *)n.parked - mem);
            uint64_t before = ld64(shadow + off);
            uint64_t after = (uint64_t)__atomic_load_n(n.parked, __ATOMIC_SEQ_CST);
            if (n.sock > 0) taken = before & n.known;
            FUZZ_ASSERT(after == (before & ~taken));
            if (taken) FUZZ_ASSERT(rc == CQ_NOTIFY_WOKE);
            memcpy(shadow + off, &after, 8);
        }
        /* the slots: one datagram a taken bit to a bound owner; an owner
         * nobody bound loses its slot; nothing else changes */
        unsigned expect = 0;
        for (int i = 0; i < CQ_NOTIFY_SLOTS; i++) {
            if (n.slots[i] == NULL) continue;
            uint64_t off = (uint64_t)((uint8_t *)n.slots[i] - mem);
            int64_t before = (int64_t)ld64(shadow + off);
            int64_t after = __atomic_load_n(n.slots[i], __ATOMIC_SEQ_CST);
            if (!((taken >> i) & 1) || before == 0) {
                FUZZ_ASSERT(after == before);
            } else if (g_rx >= 0 && before == g_ident) {
                FUZZ_ASSERT(after == before); /* delivered: the slot stays */
                expect++;
            } else {
                FUZZ_ASSERT(after == 0); /* refused: freed */
                st_freed++;
            }
            memcpy(shadow + off, &after, 8);
        }
        /* the cell: unchanged, its counter bumped (a wake) or `until` cleared */
        if (n.cell != NULL) {
            uint64_t off = (uint64_t)((uint8_t *)n.cell - mem);
            uint64_t before = ld64(shadow + off);
            uint64_t after = (uint64_t)__atomic_load_n(n.cell, __ATOMIC_SEQ_CST);
            uint64_t bumped = (before & 0xFFFFFFFF00000000ull) | (uint32_t)(before + 1);
            FUZZ_ASSERT(after == before || after == bumped || after == (before & 0xFFFFFFFFull));
            if (after == bumped && after != before) FUZZ_ASSERT(rc == CQ_NOTIFY_WOKE);
            if (rc == CQ_NOTIFY_WOKE && !taken) FUZZ_ASSERT(after == bumped);
            memcpy(shadow + off, &after, 8);
        } else if (rc == CQ_NOTIFY_WOKE) {
            FUZZ_ASSERT(taken != 0);
        }
        /* and not one byte elsewhere */
        FUZZ_ASSERT(memcmp(shadow, mem, meta_len) == 0);
        unsigned got = drain();
        FUZZ_ASSERT(got <= expect);
        /* a full queue (EAGAIN) drops the rest: a wake-up is pending anyway */
        FUZZ_ASSERT(got == expect || got >= 8);
        st_sent += got;
        if (rc == CQ_NOTIFY_WOKE) st_woke++;
    }
    if (n.cell) st_cells++;
    if (n.parked) st_parked++;
    st_slots += (unsigned long)__builtin_popcountll(n.known);
    if (n.cell && n.parked && n.known == ALL_SLOTS) st_all_found++;
    cq_notify_watch_close(&n);
    FUZZ_ASSERT(n.sock == -1);
    free(shadow);
    free(mem);
    return 0;
}

/* ------------------------------------------------------------------ */
/* the smoke driver                                                    */

#ifdef FUZZ_SMOKE_MAIN
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#define FUZZ_NAME "fuzz-notify"
#include "fuzz_smoke.h"

static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

/* ---- valid table-store images ------------------------------------ */

#define MAX_KEYS 48

static const char *const OTHER_KEYS[] = {
    "chronicle.write.lock", "chronicle.append.lock", "chronicle.lastIndexReplicated",
    "chronicle.lastAcknowledgedIndexReplicated", "chronicle.lastIndexMSynced", "index.svc",
    /* near misses of ours, each declined */
    "aiochronicle.notify.16", "aiochronicle.notify.07", "aiochronicle.notify.", "aiochronicle.notifyx",
    "aiochronicle.notify.parked2", "aiochronicle.notif", "AIOCHRONICLE.NOTIFY", "aiochronicle.notify.1a",
    "aiochronicle.notify.100", "aiochronicle.notify.-1", "aiochronicle.notify..",
};
#define NOTHER (sizeof OTHER_KEYS / sizeof *OTHER_KEYS)

static size_t our_key(int k, char *out) { /* k: 0 cell, 1 parked, 2.. slots */
    if (k == 0) return (size_t)sprintf(out, "aiochronicle.notify");
    if (k == 1) return (size_t)sprintf(out, "aiochronicle.notify.parked");
    return (size_t)sprintf(out, "aiochronicle.notify.%d", k - 2);
}

/* A key record at pos (value 8-aligned, padded one of the ways Java and we
 * pad); returns the next record's offset, or 0 when it does not fit. */
static uint64_t put_record(uint8_t *b, uint64_t cap, uint64_t pos, const char *key, size_t klen,
                           int64_t value) {
    if (pos + 4 + 2 + klen + 2 * 8 + 5 + 9 + 16 > cap) return 0;
    uint64_t body = pos + 4, q = body;
    b[q++] = 0xB9;
    if (klen < 0x80) {
        b[q++] = (uint8_t)klen;
    } else { /* a stop-bit length: declined by the walk, skipped by its header */
        b[q++] = (uint8_t)(0x80 | (klen & 0x7F));
        b[q++] = (uint8_t)(klen >> 7);
    }
    memcpy(b + q, key, klen);
    q += klen;
    uint64_t pad = (8 - ((q + 1) & 7)) & 7;
    switch (below(4)) {
    case 0: /* single bytes */
        memset(b + q, 0x8F, pad);
        q += pad;
        break;
    case 1: /* single bytes, then one 8E run */
    case 2: {
        uint64_t singles = below(pad + 1);
        memset(b + q, 0x8F, singles);
        q += singles;
        uint64_t rest = pad - singles;
        if (rest < 5) rest += 8;
        b[q] = 0x8E;
        uint32_t skip = (uint32_t)(rest - 5);
        memcpy(b + q + 1, &skip, 4);
        memset(b + q + 5, (int)below(2) * 0x5A, skip); /* skipped bytes: anything */
        q += rest;
        break;
    }
    default: /* a word more than needed */
        memset(b + q, 0x8F, pad + 8);
        q += pad + 8;
        break;
    }
    b[q] = 0xA7;
    memcpy(b + q + 1, &value, 8);
    uint64_t end = q + 9;
    if (below(8) == 0) { /* bytes after the value the record still covers */
        uint64_t extra = 1 + below(7);
        memset(b + end, 0x8F, extra);
        end += extra;
    }
    uint32_t h = (uint32_t)(end - body);
    memcpy(b + pos, &h, 4);
    return (end + 3) & ~(uint64_t)3;
}

static uint64_t put_meta(uint8_t *b, uint64_t cap, uint64_t pos, uint32_t len) {
    if (pos + 4 + len > cap) return 0;
    uint32_t h = CQ_HDR_META | len;
    memcpy(b + pos, &h, 4);
    for (uint32_t i = 0; i < len; i++) b[pos + 4 + i] = (uint8_t)rnd();
    return (pos + 4 + len + 3) & ~(uint64_t)3;
}

static int64_t slot_value(void) {
    switch (below(4)) {
    case 0: return 0;
    case 1: return OWN_MARK; /* this process's bound socket */
    default: return (int64_t)rnd(); /* nobody bound it */
    }
}

/* params + a metadata.cq4t image with a random subset of our keys among others */
static size_t make_seed(uint8_t *out, size_t cap) {
    uint8_t *p = out, *b = out + PARAMS;
    uint64_t bcap = cap - PARAMS;
    if (bcap > 8192) bcap = 8192;
    memset(out, 0, PARAMS + bcap);
    uint64_t pos = put_meta(b, bcap, 0, 40 + (uint32_t)below(200)); /* header: !STStore */
    uint64_t header_end = pos, bounds[MAX_KEYS + 1];
    int nb = 0;
    int order[NPTR];
    for (int k = 0; k < NPTR; k++) order[k] = k;
    for (int k = NPTR - 1; k > 0; k--) {
        int j = (int)below((uint64_t)k + 1), t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    int ours = (int)below(NPTR + 1), next_ours = 0;
    int nrec = ours + (int)below(8);
    char key[160];
    for (int r = 0; r < nrec && pos; r++) {
        bounds[nb++] = pos;
        uint64_t left = (uint64_t)(nrec - r);
        if (below(10) == 0) {
            pos = put_meta(b, bcap, pos, (uint32_t)below(40));
            continue;
        }
        if (next_ours < ours && below(left) < (uint64_t)(ours - next_ours)) {
            int k = order[next_ours++];
            size_t klen = our_key(k, key);
            int64_t v = k == 0   ? (below(2) ? 0 : (int64_t)((uint64_t)(cq_mono_ns() / 1000000 + 5000) << 32))
                        : k == 1 ? (int64_t)(below(2) ? rnd() : below(1u << 16))
                                 : slot_value();
            pos = put_record(b, bcap, pos, key, klen, v);
        } else if (below(12) == 0) {
            size_t klen = 128 + below(20);
            memset(key, 'k', klen);
            pos = put_record(b, bcap, pos, key, klen, 0);
        } else {
            const char *k = OTHER_KEYS[below(NOTHER)];
            pos = put_record(b, bcap, pos, k, strlen(k), (int64_t)rnd());
        }
    }
    if (pos == 0) pos = bounds[nb - 1];
    bounds[nb++] = pos;
    if (below(8) == 0 && pos + 16 <= bcap) { /* one being written */
        uint32_t h = CQ_HDR_NOT_COMPLETE | (uint32_t)below(64);
        memcpy(b + pos, &h, 4);
    }
    uint64_t len = pos + (below(2) ? below(300) : 0);
    if (below(6) == 0) len = 4096;
    if (len > bcap) len = bcap;
    p[0] = (uint8_t)(below(4) ? rnd() & 8 : rnd());
    uint64_t probe = below(3) ? header_end : below(4) ? bounds[below((uint64_t)nb)] : below(len + 8);
    uint16_t v16 = (uint16_t)probe;
    memcpy(p + 1, &v16, 2);
    v16 = (uint16_t)below(64);
    memcpy(p + 3, &v16, 2);
    v16 = (uint16_t)(below(2) ? rnd() : 1u << below(16));
    memcpy(p + 5, &v16, 2);
    p[7] = (uint8_t)rnd();
    v16 = (uint16_t)bounds[below((uint64_t)nb)];
    memcpy(p + 8, &v16, 2);
    p[10] = (uint8_t)rnd();
    return PARAMS + len;
}

/* ---- mutations ---------------------------------------------------- */

static uint32_t interesting32(uint64_t ilen) {
    uint32_t len = (uint32_t)(below(3) ? below(ilen + 64) : rnd()) & 0x3FFFFFFFu;
    switch (below(7)) {
    case 0: return 0;
    case 1: return CQ_HDR_META | len;
    case 2: return len;
    case 3: return CQ_HDR_NOT_COMPLETE | len;
    case 4: return CQ_HDR_EOF;
    case 5: return 0x3FFFFFFFu;
    default: return (uint32_t)rnd();
    }
}

/* the offset of a byte equal to `code` in the image, or 0 */
static size_t find_code(const uint8_t *buf, size_t len, uint8_t code) {
    for (int tries = 0; tries < 16 && len > PARAMS + 8; tries++) {
        size_t at = PARAMS + below(len - PARAMS - 8);
        if (buf[at] == code) return at;
    }
    return 0;
}

static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
    int nmut = 1 + (int)below(4);
    for (int m = 0; m < nmut; m++) {
        size_t ilen = len > PARAMS ? len - PARAMS : 0, at;
        switch (below(11)) {
        case 0: /* bit flip */
            if (ilen) buf[PARAMS + below(ilen)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* random byte */
            if (ilen) buf[PARAMS + below(ilen)] = (uint8_t)rnd();
            break;
        case 2: /* a header word at a 4-aligned offset */
            if (ilen >= 4) {
                at = PARAMS + (below(ilen - 3) & ~(size_t)3);
                uint32_t v = interesting32(ilen);
                memcpy(buf + at, &v, 4);
            }
            break;
        case 3: /* the length of an 8E run */
            if ((at = find_code(buf, len, 0x8E)) != 0) {
                static const uint32_t edge[] = {0, 1, 3, 7, 8, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFB};
                uint32_t v = below(2) ? edge[below(8)] : (uint32_t)below(ilen + 16);
                memcpy(buf + at + 1, &v, 4);
            }
            break;
        case 4: /* the length of an event name */
            if ((at = find_code(buf, len, 0xB9)) != 0) {
                static const uint8_t edge[] = {0, 1, 19, 20, 26, 0x7F, 0x80, 0xFF};
                buf[at + 1] = below(2) ? edge[below(8)] : (uint8_t)(buf[at + 1] + below(5) - 2);
            }
            break;
        case 5: /* a value's marker */
            if ((at = find_code(buf, len, 0xA7)) != 0) buf[at] = below(2) ? 0x8F : (uint8_t)rnd();
            break;
        case 6: /* truncate */
            if (ilen) len = PARAMS + below(ilen + 1);
            break;
        case 7: /* extend with zeros or noise */
            if (len < cap) {
                size_t add = below(cap - len < 256 ? cap - len : 256) + 1;
                int noise = (int)below(2);
                for (size_t i = 0; i < add; i++) buf[len + i] = noise ? (uint8_t)rnd() : 0;
                len += add;
            }
            break;
        case 8: /* copy a block (duplicate keys, records over records) */
            if (ilen > 8) {
                size_t n = 1 + below(ilen / 2);
                size_t from = PARAMS + below(ilen - n + 1), to = PARAMS + below(ilen - n + 1);
                if (below(2)) to &= ~(size_t)3;
                memmove(buf + to, buf + from, n);
            }
            break;
        case 9: /* a parameter byte */
            buf[below(PARAMS)] = (uint8_t)rnd();
            break;
        default: /* zero a range */
            if (ilen) {
                at = PARAMS + below(ilen);
                memset(buf + at, 0, below(len - at < 64 ? len - at : 64) + 1);
            }
            break;
        }
    }
    return len;
}

/* the seeds of the corpus (-w) */
static size_t seed_input(uint8_t *buf, size_t cap, int i) {
    (void)i;
    return make_seed(buf, cap - 512);
}

/* one input of the smoke run: noise now and then, else a state, mostly damaged
 * (cap: the buffer, 512 bytes past the longest seed) */
static size_t next_input(uint8_t *buf, size_t cap) {
    if (below(32) == 0) {
        size_t len = below(600) + PARAMS;
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rnd();
        return len;
    }
    size_t len = make_seed(buf, cap - 512);
    return below(4) ? mutate(buf, len, cap) : len;
}

int main(int argc, char **argv) {
    unsigned long iters = 20000, seed = 1;
    const char *seed_dir = NULL;
    int rc = fuzz_smoke_args(argc, argv, &iters, &seed, &seed_dir);
    if (rc >= 0) return rc;
    fuzz_seed(seed);
    rx_setup();
    static uint8_t buf[PARAMS + 8192 + 512];
    if (seed_dir) return fuzz_write_seeds(seed_dir, 32, buf, sizeof buf, seed_input);
    int fds0 = open_fds();
    double secs = fuzz_run(iters, buf, sizeof buf, next_input);
    /* every watch closed its socket */
    int fds1 = open_fds();
    FUZZ_ASSERT(fds0 == fds1);
    printf("fuzz-notify: %lu inputs (seed %lu) in %.1f s, no crash, hang or sanitizer report\n"
           "fuzz-notify: %lu cells, %lu parked values, %lu slots found, %lu watches complete; "
           "%lu commits woke, %lu datagrams delivered, %lu slots freed; %d descriptors before "
           "and after\n",
           iters, seed, secs, st_cells, st_parked, st_slots, st_all_found, st_woke, st_sent,
           st_freed, fds0);
    return 0;
}
#endif
