/*
 * aiochronicle native core.  See cq.h for the contract and native/README.md
 * for the memory model.  Byte layouts follow Chronicle Queue v5 (Java).
 */
#define _GNU_SOURCE
#include "cq.h"
#include "atomic.h"
#include "notify.h"
#include "platform.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__linux__)
#include <sys/vfs.h>
#endif
#include <time.h>
#include <unistd.h>

#ifndef AIOCHRONICLE_VERSION
#define AIOCHRONICLE_VERSION "0+unknown"
#endif

#define LOCK_UNLOCKED ((int64_t)INT64_MIN)
#define MAX_META_SKIPS 4096u
#define INDEX_DOC_SLACK 64u
/* documents one locate() walks under the write lock before it lets go and
 * resumes from where it stopped (CQ_NOT_REACHED): bounds the lock hold time */
#define LOCATE_BUDGET 65536u

const char *cq_version(void) { return AIOCHRONICLE_VERSION; }

/* ------------------------------------------------------------------ */
/* small helpers                                                       */

/* The mapping of a store grows while other threads read it: Python publishes
 * the new base, then the new length (cq_store_remap), and keeps every older
 * mapping until the store closes.  Every access loads the length first
 * (acquire) and the base after it, never a base cached before a length
 * check: a base loaded after a length covers that length. */
static inline uint64_t map_len(const cq_store *s) {
    return __atomic_load_n(&s->map_len, __ATOMIC_ACQUIRE);
}

static inline uint8_t *map_base(const cq_store *s) {
    return __atomic_load_n(&((cq_store *)s)->base, __ATOMIC_ACQUIRE);
}

void cq_store_remap(cq_store *s, uint8_t *base, uint64_t len) {
    __atomic_store_n(&s->base, base, __ATOMIC_RELEASE);
    __atomic_store_n(&s->map_len, len, __ATOMIC_RELEASE);
}

/* The slow path of cq_backed.  Reading a page of a shared mapping that the
 * file does not back makes tmpfs allocate one, and on a full tmpfs the fault
 * is a SIGBUS: a Java writer, `cp --sparse` or a punched hole leaves such
 * pages after the data and in the unused tails of index arrays.  Only tmpfs
 * is asked (elsewhere a hole reads as zeros with no allocation): SEEK_DATA
 * says whether the bytes are backed, SEEK_HOLE how far the backed run goes,
 * which is cached (backed[]) so later loads in it cost compares.  Holes are
 * not cached: a writer may fill them.  A file system that cannot tell is
 * trusted.  Linux-only calls; elsewhere every file is trusted. */
int cq_backed_slow(const cq_store *s, uint64_t off, uint64_t n) {
    cq_store *m = (cq_store *)s;
    int holes = __atomic_load_n(&m->holes, __ATOMIC_ACQUIRE);
#if defined(__linux__) && defined(SEEK_DATA) && defined(SEEK_HOLE)
    if (holes == 1) {
        struct statfs fs;
        holes = fstatfs(m->fd, &fs) == 0 && (unsigned long)fs.f_type == 0x01021994ul ? 2 : 0;
        __atomic_store_n(&m->holes, holes, __ATOMIC_RELEASE);
    }
    if (holes != 2) return 1;
    /* pages in tmpfs's page cache are backed (written or reserved): one
     * mincore looks at up to 64 of them from here, and the run found is
     * cached; a page not there may still be swapped out, which SEEK_DATA
     * below tells from a hole */
    uint64_t len = map_len(m);
    const uint8_t *base = map_base(m);
    if (base != NULL && off + n <= len) {
        uint64_t first = off & ~(uint64_t)4095, span = len - first;
        unsigned char vec[64];
        if (span > sizeof vec * 4096) span = sizeof vec * 4096;
        if (mincore((void *)(base + first), (size_t)span, vec) == 0) {
            uint64_t k = 0, pages = (span + 4095) >> 12;
            while (k < pages && (vec[k] & 1)) k++;
            if (first + (k << 12) >= off + n) {
                cq_store_backed(m, first, first + (k << 12));
                return 1;
            }
        }
    }
    /* the first byte and the last: a packed header word may straddle pages */
    uint64_t ends[2] = {off, off + n - 1};
    for (int i = 0; i < 2; i++) {
        if (i && (ends[1] >> 12) == (ends[0] >> 12)) break;
        off_t d = lseek(m->fd, (off_t)ends[i], SEEK_DATA);
        if (d < 0 && errno == ENXIO) return 0; /* no data from here on */
        if (d < 0) return 1;                   /* cannot tell: trust the file */
        if ((uint64_t)d > ends[i]) return 0;   /* a hole */
    }
    off_t h = lseek(m->fd, (off_t)off, SEEK_HOLE);
    if (h > 0) cq_store_backed(m, off, (uint64_t)h);
    return 1;
#else
    (void)m; (void)holes; (void)off; (void)n;
    return 1;
#endif
}

void cq_store_backed(cq_store *s, uint64_t from, uint64_t to) {
    uint64_t lo = from >> 12, hi = (to + 4095) >> 12;
    if (hi > 0xffffffffu) hi = 0xffffffffu;
    if (lo >= hi) return; /* empty, or past 16 TiB: not cached */
    /* grow a run this one overlaps or touches (a writer's reservations
     * follow each other), else replace the oldest */
    for (int i = 0; i < 4; i++) {
        uint64_t w = __atomic_load_n(&s->backed[i], __ATOMIC_ACQUIRE);
        uint64_t wl = w >> 32, wh = w & 0xffffffffu;
        if (wl < wh && lo <= wh && wl <= hi) {
            uint64_t nl = wl < lo ? wl : lo, nh = wh > hi ? wh : hi;
            /* a lost race leaves a run that was true: it is only a cache */
            __atomic_compare_exchange_n(&s->backed[i], &w, (nl << 32) | nh, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            return;
        }
    }
    uint32_t slot = __atomic_fetch_add(&s->backed_next, 1, __ATOMIC_RELAXED) & 3u;
    __atomic_store_n(&s->backed[slot], (lo << 32) | hi, __ATOMIC_RELEASE);
}

/* The layout invariants the index arithmetic relies on, checked here as well
 * as where Python fills the struct: index count and spacing are powers of two
 * (0 for a headerless file, which has no index) matching their shifts, and the
 * shifts leave room in 64 bits. */
static int layout_ok(const cq_store *s) {
    if (s->file_shift < 0 || s->file_shift > 62) return 0;
    if (s->index_count == 0 && s->index_spacing == 0) return 1;
    if (s->count_bits < 0 || s->spacing_bits < 0 || s->count_bits + s->spacing_bits > 62)
        return 0;
    return s->index_count == (uint64_t)1 << s->count_bits
        && s->index_spacing == (uint64_t)1 << s->spacing_bits;
}

/* What an append or an EOF needs of the file: a sound layout, and 4-byte
 * aligned headers (a header CAS at an unaligned offset is undefined). */
static int writable_layout(const cq_store *s) {
    if (!layout_ok(s)) return CQ_CORRUPT;
    if (s->align != 4) return CQ_UNALIGNED;
    return CQ_OK;
}

static inline uint64_t align_up(const cq_store *s, uint64_t pos) {
    return s->align == 4 ? (pos + 3) & ~(uint64_t)3 : pos;
}

/* [off, off+n) lies inside the mapping; written so that file-supplied
 * offsets near 2^64 cannot wrap around */
static inline int fits(const cq_store *s, uint64_t off, uint64_t n) {
    uint64_t len = map_len(s);
    return len >= n && off <= len - n;
}

static inline uint32_t hdr_load(const cq_store *s, uint64_t pos) {
    if (!cq_backed(s, pos, 4)) return 0; /* a hole: never fault a page in for it */
    return cq_header_word(map_base(s), pos);
}

static inline int hdr_cas(cq_store *s, uint64_t pos, uint32_t expected, uint32_t value) {
    CQ_ALIGNED(map_base(s) + pos, 4);
    return __atomic_compare_exchange_n((uint32_t *)(map_base(s) + pos), &expected, value, 0,
                                       __ATOMIC_RELEASE, __ATOMIC_ACQUIRE);
}

static inline int64_t ld64(const cq_store *s, uint64_t off) {
    if (!cq_backed(s, off, 8)) return 0; /* a hole reads as zero */
    CQ_ALIGNED(map_base(s) + off, 8);
    return __atomic_load_n((const int64_t *)(map_base(s) + off), __ATOMIC_ACQUIRE);
}

static inline void st64(cq_store *s, uint64_t off, int64_t v) {
    CQ_ALIGNED(map_base(s) + off, 8);
    __atomic_store_n((int64_t *)(map_base(s) + off), v, __ATOMIC_RELEASE);
}

static int64_t max64(int64_t *p, int64_t v) {
    CQ_ALIGNED(p, 8);
    int64_t cur = __atomic_load_n(p, __ATOMIC_ACQUIRE);
    while (cur < v) {
        if (__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            return v;
    }
    return cur;
}

/* A header field the core writes (writePosition, lastIndex): 8-aligned and
 * inside the file's header document, never in the data (a damaged layout
 * must not turn an update into a write over an excerpt). */
static inline int field_ok(const cq_store *s, uint64_t off) {
    return off && !(off & 7) && off <= s->data_start && s->data_start - off >= 8 &&
           fits(s, off, 8);
}

static inline int is_eof(uint32_t h) { return h == CQ_HDR_EOF; }
static inline int not_ready(uint32_t h) { return h == 0 || (h & CQ_HDR_NOT_COMPLETE); }

/* Slot claims (see native/README.md, "Claiming a slot").  An appender owns the
 * bytes of the excerpt it writes before it copies anything: under the write
 * lock it CASes the header 0 -> NOT_COMPLETE|META|len (len >= 1, so never the
 * EOF word), copies, then commits with CAS claim -> len.  Readers (ours and
 * Java's) see a claim as "not ready", as they see 0.  A writer that finds a
 * claim at the end of the data while it holds the lock knows the claimant died
 * or lost the lock: it turns the claim into a metadata padding document of the
 * same length (skipped by every reader) and writes after it.  The claimant's
 * late copy then lands only inside its own slot, and its commit CAS fails
 * (CQ_LOCK_LOST): two writers never write the same bytes. */
static inline uint32_t claim_hdr(uint64_t len) { return CQ_HDR_EOF | (uint32_t)len; }
static inline int is_claim(uint32_t h) {
    return (h & CQ_HDR_EOF) == CQ_HDR_EOF && (h & CQ_HDR_LENGTH_MASK) != 0;
}

/* Clear a non-zero word where the next header goes: bytes a writer of the
 * zero-header protocol (Java's) left behind when it died mid-excerpt.  A CAS,
 * so a header published there meanwhile is never erased. */
static inline void clear_next(cq_store *s, uint64_t off) {
    uint32_t w = hdr_load(s, off);
    if (w != 0) hdr_cas(s, off, w, 0);
}

/* Turn the unfinished claim `h` at `pos` into padding.  CQ_OK with *next the
 * position after it; CQ_NONE when the header changed meanwhile (read it
 * again); CQ_NEED_MAP with *need. */
static int abandon_claim(cq_store *s, uint64_t pos, uint32_t h, uint64_t *next, uint64_t *need) {
    uint64_t len = h & CQ_HDR_LENGTH_MASK;
    uint64_t nxt = align_up(s, pos + 4 + len);
    if (!fits(s, nxt, 4)) { *need = nxt + 4; return CQ_NEED_MAP; }
    clear_next(s, nxt);
    if (!hdr_cas(s, pos, h, CQ_HDR_META | (uint32_t)len)) return CQ_NONE;
    *next = nxt;
    return CQ_OK;
}

/* ------------------------------------------------------------------ */
/* mapping                                                             */

int cq_map(int fd, uint64_t len, int writable, uint8_t **out) {
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    void *p = mmap(NULL, (size_t)len, prot, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return cq_fail(CQ_ERRNO);
    *out = (uint8_t *)p;
    return CQ_OK;
}

int cq_unmap(uint8_t *base, uint64_t len) {
    return munmap(base, (size_t)len) == 0 ? CQ_OK : cq_fail(CQ_ERRNO);
}

int cq_release_pages(uint8_t *base, uint64_t from, uint64_t to) {
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t a = (from + (uint64_t)pg - 1) & ~((uint64_t)pg - 1);
    uint64_t b = to & ~((uint64_t)pg - 1);
    if (b <= a) return CQ_OK;
    return madvise(base + a, (size_t)(b - a), MADV_DONTNEED) == 0 ? CQ_OK : cq_fail(CQ_ERRNO);
}

int cq_reserve(int fd, uint64_t off, uint64_t len) {
    if (len == 0) return CQ_OK;
    int e = cq_plat_reserve(fd, off, len);
    if (e == 0) return CQ_OK;
    errno = e;
    return cq_fail(e == ENOSPC || e == EDQUOT ? CQ_NO_SPACE : CQ_ERRNO);
}

/* Fault in (writably) the pages of [from, to): pretouching ahead of a writer. */
int cq_populate(uint8_t *base, uint64_t from, uint64_t to) {
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t a = from & ~((uint64_t)pg - 1);
    if (to <= a) return CQ_OK;
#ifdef MADV_POPULATE_WRITE
    if (madvise(base + a, (size_t)(to - a), MADV_POPULATE_WRITE) == 0) return CQ_OK;
    if (errno == EFAULT) return cq_fail(CQ_NO_SPACE); /* a SIGBUS would have been raised */
    return cq_fail(CQ_ERRNO);
#else
    errno = EINVAL;
    return cq_fail(CQ_ERRNO);
#endif
}

int cq_sync(uint8_t *base, uint64_t from, uint64_t to, int async_) {
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t a = from & ~((uint64_t)pg - 1);
    if (to <= a) return CQ_OK;
    return msync(base + a, (size_t)(to - a), async_ ? MS_ASYNC : MS_SYNC) == 0 ? CQ_OK : cq_fail(CQ_ERRNO);
}

/* ------------------------------------------------------------------ */
/* atomics for Python                                                  */

int64_t cq_load64(const uint8_t *p) { return __atomic_load_n((const int64_t *)p, __ATOMIC_SEQ_CST); }
void cq_store64(uint8_t *p, int64_t v) { __atomic_store_n((int64_t *)p, v, __ATOMIC_SEQ_CST); }
int cq_cas64(uint8_t *p, int64_t expected, int64_t value) {
    return __atomic_compare_exchange_n((int64_t *)p, &expected, value, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}
int64_t cq_max64(uint8_t *p, int64_t v) { return max64((int64_t *)p, v); }
int64_t cq_min64(uint8_t *p, int64_t v) {
    int64_t *q = (int64_t *)p;
    int64_t cur = __atomic_load_n(q, __ATOMIC_ACQUIRE);
    while (cur > v) {
        if (__atomic_compare_exchange_n(q, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            return v;
    }
    return cur;
}
int64_t cq_add64(uint8_t *p, int64_t delta) {
    return __atomic_add_fetch((int64_t *)p, delta, __ATOMIC_SEQ_CST);
}
uint32_t cq_load32(const uint8_t *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_SEQ_CST); }
int cq_cas32(uint8_t *p, uint32_t expected, uint32_t value) {
    return __atomic_compare_exchange_n((uint32_t *)p, &expected, value, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------ */
/* write lock                                                          */

int cq_lock(int64_t *lock, int64_t pid, uint64_t spin_ns) {
    int64_t expected = LOCK_UNLOCKED;
    if (__atomic_compare_exchange_n(lock, &expected, pid, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return CQ_OK;
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        cq_relax();
        expected = LOCK_UNLOCKED;
        if (__atomic_load_n(lock, __ATOMIC_RELAXED) == LOCK_UNLOCKED &&
            __atomic_compare_exchange_n(lock, &expected, pid, 0, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return CQ_OK;
        if ((i & 63) == 0) {
            uint64_t now = cq_now_ns();
            if (deadline == 0) deadline = now + spin_ns;
            else if (now >= deadline) return CQ_LOCKED;
        }
    }
}

int cq_unlock(int64_t *lock, int64_t pid) {
    int64_t expected = pid;
    if (__atomic_compare_exchange_n(lock, &expected, LOCK_UNLOCKED, 0, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED))
        return CQ_OK;
    return CQ_BAD_STATE;
}

/* ------------------------------------------------------------------ */
/* index arrays: "<event name>" + padding + 0x8D cap used values[cap]   */

/* Locate the values of the I64 array in the metadata document at doc_pos.
 * Returns CQ_OK and the offsets, or CQ_CORRUPT. */
static int array_at(const cq_store *s, uint64_t doc_pos, uint64_t *vals, uint64_t *used_off,
                    uint64_t *cap_out) {
    if (doc_pos < 4 || !fits(s, doc_pos, 4)) return CQ_CORRUPT;
    uint32_t h = hdr_load(s, doc_pos);
    if (not_ready(h) || !(h & CQ_HDR_META)) return CQ_CORRUPT;
    uint64_t end = doc_pos + 4 + (h & CQ_HDR_LENGTH_MASK);
    if (end > map_len(s)) return CQ_CORRUPT;
    uint64_t p = doc_pos + 4;
    const uint8_t *b = map_base(s);
    if (p + 2 > end || b[p] != 0xB9) return CQ_CORRUPT;
    uint8_t nlen = b[p + 1];
    if (nlen & 0x80) return CQ_CORRUPT;
    p += 2 + nlen;
    for (int guard = 0; p < end && guard < 64; guard++) {
        if (b[p] == 0x8F) { p++; continue; }
        if (b[p] == 0x8E) {
            if (p + 5 > end) return CQ_CORRUPT;
            uint32_t n;
            memcpy(&n, b + p + 1, 4);
            p += 5 + (uint64_t)n;
            continue;
        }
        break;
    }
    if (p + 17 > end || b[p] != 0x8D || ((p + 1) & 7)) return CQ_CORRUPT;
    int64_t cap;
    memcpy(&cap, b + p + 1, 8);
    if (cap <= 0 || (uint64_t)cap > (end - p - 17) / 8) return CQ_CORRUPT;
    *cap_out = (uint64_t)cap;
    *used_off = p + 9;
    *vals = p + 17;
    return CQ_OK;
}

/* Whether the index of this file is no longer used (disown_index). */
static inline int index_disowned(const cq_store *s) {
    return __atomic_load_n(&s->index_bad, __ATOMIC_RELAXED) != 0;
}

/* The greatest indexed (position, sequence) with sequence <= target.
 * Falls back to (0, 0): a walk from the file start. */
static void index_floor(const cq_store *s, uint64_t target, uint64_t *pos, uint64_t *seq) {
    *pos = 0;
    *seq = 0;
    if (!s->i2i_off || s->index_count == 0 || index_disowned(s)) return;
    if (!fits(s, s->i2i_off, 8) || (s->i2i_off & 7)) return;
    uint64_t i2i = (uint64_t)ld64(s, s->i2i_off);
    uint64_t vals, used_off, cap;
    if (!i2i || array_at(s, i2i, &vals, &used_off, &cap) != CQ_OK) return;
    unsigned bits = (unsigned)(s->count_bits + s->spacing_bits);
    uint64_t n2 = bits >= 64 ? 0 : target >> bits;
    int64_t used = ld64(s, used_off);
    if (used <= 0) return;
    if ((uint64_t)used > cap) used = (int64_t)cap;
    if ((uint64_t)used > s->index_count) used = (int64_t)s->index_count;
    int whole = 0;
    /* a damaged index must not turn a lookup into a scan of millions of
     * slots: past this budget, walk from the file start instead */
    uint64_t budget = 4u * s->index_count + 64;
    if (n2 >= (uint64_t)used) { n2 = (uint64_t)used - 1; whole = 1; }
    for (int64_t i = (int64_t)n2; i >= 0; i--) {
        if (budget-- == 0) { *pos = 0; *seq = 0; return; }
        uint64_t page = (uint64_t)ld64(s, vals + 8 * (uint64_t)i);
        uint64_t pv, pu, pc;
        if (!page || array_at(s, page, &pv, &pu, &pc) != CQ_OK) continue;
        if (pc > s->index_count) pc = s->index_count;
        uint64_t k = (i == (int64_t)n2 && !whole)
                         ? (target >> s->spacing_bits) & (s->index_count - 1)
                         : pc - 1;
        if (k >= pc) k = pc - 1;
        for (int64_t j = (int64_t)k; j >= 0; j--) {
            if (budget-- == 0) { *pos = 0; *seq = 0; return; }
            uint64_t p = (uint64_t)ld64(s, pv + 8 * (uint64_t)j);
            if (!p || !fits(s, p, 4)) continue;
            uint32_t h = hdr_load(s, p);
            if (not_ready(h) || (h & CQ_HDR_META)) continue; /* hole or stale entry */
            *pos = p;
            *seq = ((uint64_t)i << bits) | ((uint64_t)j << s->spacing_bits);
            return;
        }
    }
}

/* The (position, sequence) of the last excerpt recorded in writePosition,
 * validated against its packed second long.  Returns 0 when unusable. */
static int write_position(const cq_store *s, uint64_t *pos, uint64_t *seq) {
    /* offsets from the file: in the mapping and 8-aligned before the atomic loads */
    if (!s->wp_off || !s->wp_seq_off || !fits(s, s->wp_off, 8) || !fits(s, s->wp_seq_off, 8) ||
        (s->wp_off & 7) || (s->wp_seq_off & 7))
        return 0;
    uint64_t wp = (uint64_t)ld64(s, s->wp_off);
    uint64_t v = (uint64_t)ld64(s, s->wp_seq_off);
    if (wp == 0 || !fits(s, wp, 4)) return 0;
    unsigned sh = (unsigned)s->file_shift;
    if (sh == 0 || sh >= 64) return 0;
    uint64_t hi_mask = (1ull << (64 - sh)) - 1;
    if ((v >> sh) != (wp & hi_mask)) return 0;
    uint32_t h = hdr_load(s, wp);
    if (not_ready(h) || (h & CQ_HDR_META)) return 0;
    *pos = wp;
    *seq = v & ((1ull << sh) - 1);
    return 1;
}

/* Whether the alignment padding [from, to) after an excerpt is zero, as
 * every writer leaves it (a length shortened by a flipped bit ends inside
 * the payload, which then reads as padding). */
static int pad_zero(const cq_store *s, uint64_t from, uint64_t to) {
    if (to > map_len(s)) return 1;
    const uint8_t *b = map_base(s);
    for (uint64_t i = from; i < to; i++)
        if (b[i]) return 0;
    return 1;
}

/* pad_zero for the data document whose header is at `pos` */
static int own_pad_zero(const cq_store *s, uint64_t pos) {
    uint64_t end = pos + 4 + (hdr_load(s, pos) & CQ_HDR_LENGTH_MASK);
    return pad_zero(s, end, align_up(s, end));
}

/* Walk forward over complete documents from (pos, seq) until either
 * `target` data excerpts have been passed (seq == target and the header at
 * pos is data or not yet written) or the end of written data.  `strict`:
 * an excerpt whose alignment padding is not zero is damage (CQ_CORRUPT).
 * Returns CQ_OK (data header at pos), CQ_NONE (unwritten header at pos),
 * CQ_EOF, CQ_NEED_MAP or CQ_CORRUPT. */
static int walk_docs(const cq_store *s, uint64_t *pos_io, uint64_t *seq_io, uint64_t target,
                     uint64_t *need, uint64_t *err, int strict) {
    uint64_t pos = *pos_io, seq = *seq_io;
    int rc;
    for (;;) {
        if (pos + 4 > map_len(s)) { *need = pos + 4; *err = pos; rc = CQ_NEED_MAP; break; }
        uint32_t h = hdr_load(s, pos);
        if (is_eof(h)) { rc = CQ_EOF; break; }
        if (not_ready(h)) { rc = CQ_NONE; break; }
        uint64_t len = h & CQ_HDR_LENGTH_MASK;
        if (!(h & CQ_HDR_META)) {
            if (seq == target) { rc = CQ_OK; break; }
            seq++;
        } else if (pos == 0 && len == 0) {
            *err = pos; rc = CQ_CORRUPT; break;
        }
        uint64_t end = pos + 4 + len;
        if (end > map_len(s)) { *need = end; *err = pos; rc = CQ_NEED_MAP; break; }
        uint64_t nxt = align_up(s, end);
        if (strict && !(h & CQ_HDR_META) && !pad_zero(s, end, nxt)) {
            *err = pos; rc = CQ_CORRUPT; break;
        }
        pos = nxt;
    }
    *pos_io = pos;
    *seq_io = seq;
    return rc;
}

/* Walk as readers do (see walk_docs). */
static int walk(const cq_store *s, uint64_t *pos_io, uint64_t *seq_io, uint64_t target,
                uint64_t *need, uint64_t *err) {
    return walk_docs(s, pos_io, seq_io, target, need, err, 0);
}

/* ------------------------------------------------------------------ */
/* redundancy: what the index and writePosition say of the chain        */

/* The index entry of sequence `seq` (a multiple of the spacing): the header
 * position it records, or 0 when there is none (no page, an empty slot) or
 * it points at no written data header (a stale or damaged entry, which
 * lookups skip as index_floor does). */
static uint64_t index_slot(const cq_store *s, uint64_t seq) {
    if (!s->i2i_off || !s->index_count || !fits(s, s->i2i_off, 8) || (s->i2i_off & 7) ||
        index_disowned(s))
        return 0;
    uint64_t vals, used_off, cap, pv, pu, pc;
    uint64_t i2i = (uint64_t)ld64(s, s->i2i_off);
    if (!i2i || array_at(s, i2i, &vals, &used_off, &cap) != CQ_OK) return 0;
    unsigned bits = (unsigned)(s->count_bits + s->spacing_bits);
    uint64_t n2 = bits >= 64 ? 0 : seq >> bits;
    if (n2 >= cap) return 0;
    uint64_t page = (uint64_t)ld64(s, vals + 8 * n2);
    if (!page || array_at(s, page, &pv, &pu, &pc) != CQ_OK) return 0;
    uint64_t n3 = (seq >> s->spacing_bits) & (s->index_count - 1);
    uint64_t p = n3 < pc ? (uint64_t)ld64(s, pv + 8 * n3) : 0;
    if (!p || !fits(s, p, 4)) return 0;
    uint32_t h = hdr_load(s, p);
    return not_ready(h) || (h & CQ_HDR_META) ? 0 : p;
}

/* CQ_CORRUPT with the offset to report: where the walk stopped (an
 * unwritten header, an EOF, an excerpt with a damaged length: walk_docs set
 * it), else the excerpt being confirmed (the walk went past its anchor). */
static int chain_broken(int rc, uint64_t stopped, uint64_t pos, uint64_t *err) {
    if (rc == CQ_NONE || rc == CQ_EOF) *err = stopped;
    else if (rc != CQ_CORRUPT) *err = pos;
    return CQ_CORRUPT;
}

/* Chronicle's format has no checksums, but its index and writePosition say
 * where excerpts are: an index entry every `index_spacing` excerpts, and the
 * last excerpt's (position, sequence).  One flipped bit in a header word, an
 * index entry or the writePosition's sequence breaks that agreement.
 *
 * Confirm that data excerpt `seq` has its header at `pos`, walking from the
 * index entry at or before it (or from the confirmed point (from_pos,
 * from_seq) when that is nearer), and that the headers from there reach the
 * next anchor: the index entry of the next multiple of the spacing, else the
 * writePosition.  With no index there is nothing to confirm against.  CQ_OK
 * with the anchor reached (*apos, *aseq) and *vend (every data excerpt below
 * it is where the walk says); CQ_CORRUPT with *err; CQ_NEED_MAP with *need.
 * Walks a spacing of headers plus the distance from the confirmed point
 * (where the index has no entry, up to the writePosition, once). */
static int verify_span(const cq_store *s, uint64_t pos, uint64_t seq, uint64_t from_pos,
                       uint64_t from_seq, uint64_t *apos, uint64_t *aseq, uint64_t *vend,
                       uint64_t *need, uint64_t *err) {
    *apos = pos;
    *aseq = seq;
    *vend = UINT64_MAX;
    if (!s->i2i_off || !s->index_count || !layout_ok(s)) return CQ_OK;
    uint64_t p, q;
    index_floor(s, seq, &p, &q);
    if (from_pos && from_seq <= seq && from_seq >= q && from_pos >= p) {
        p = from_pos;
        q = from_seq;
    }
    int rc = walk_docs(s, &p, &q, seq, need, err, 1);
    if (rc == CQ_NEED_MAP) return rc;
    if (rc != CQ_OK || p != pos) return chain_broken(rc, p, pos, err);
    uint64_t next = (seq | (s->index_spacing - 1)) + 1;
    uint64_t tpos = next ? index_slot(s, next) : 0, tseq = next;
    uint64_t wp, wq;
    if (!tpos) {
        /* no index entry there (the last stretch, a hole, a damaged index):
         * the writePosition, however far */
        if (!write_position(s, &wp, &wq) || wq < seq) {
            /* nothing written yet to confirm it against but its padding */
            if (!own_pad_zero(s, pos)) { *err = pos; return CQ_CORRUPT; }
            *vend = seq + 1;
            return CQ_OK;
        }
        tpos = wp;
        tseq = wq;
    }
    rc = walk_docs(s, &p, &q, tseq, need, err, 1);
    if (rc == CQ_NEED_MAP) return rc;
    if (rc != CQ_OK || p != tpos) return chain_broken(rc, p, pos, err);
    if (tseq != next && !own_pad_zero(s, p)) { *err = p; return CQ_CORRUPT; }
    *apos = p;
    *aseq = q;
    *vend = tseq == next ? next : tseq + 1;
    return CQ_OK;
}

/* Whether the writePosition (wp, wq) is where the walk from the index entry
 * before it puts data excerpt wq. */
static int wp_agrees(const cq_store *s, uint64_t wp, uint64_t wq) {
    uint64_t p, q, need, err;
    index_floor(s, wq, &p, &q);
    return walk_docs(s, &p, &q, wq, &need, &err, 1) == CQ_OK && p == wp;
}

/* Whether committed data lies beyond the unwritten header at `pos`: a
 * writePosition or an index entry past it, and the header still unwritten
 * after they were loaded (they are published after it). */
static int data_beyond(const cq_store *s, uint64_t pos) {
    uint64_t p, q;
    if (!write_position(s, &p, &q) || p <= pos) index_floor(s, UINT64_MAX, &p, &q);
    return p > pos && fits(s, pos, 4) && not_ready(hdr_load(s, pos));
}

/* Whether the writePosition or the index records data excerpt `seq` (or a
 * later one) of this file. */
static int recorded_from(const cq_store *s, uint64_t seq) {
    uint64_t p, q;
    if (write_position(s, &p, &q) && q >= seq) return 1;
    index_floor(s, UINT64_MAX, &p, &q);
    return p && q >= seq;
}

/* An index entry disagrees with a chain of headers: whether the chain from
 * the file start reaches the excerpt the writePosition records, where it
 * records it.  Then the data is intact and the index is what is damaged: it
 * is not used for this file any more (lookups walk from the start, reads are
 * confirmed against the writePosition) and 1 is returned; else 0 (the data
 * is damaged, or nothing tells which).  Walks the whole chain, so only
 * after a disagreement. */
static int disown_index(cq_store *s) {
    uint64_t wp, wq, p = 0, q = 0, need = 0, err = 0;
    if (index_disowned(s) || !s->i2i_off || !write_position(s, &wp, &wq)) return 0;
    if (walk(s, &p, &q, wq, &need, &err) != CQ_OK || p != wp) return 0;
    __atomic_store_n(&s->index_bad, 1, __ATOMIC_RELAXED);
    return 1;
}

/* Whether the unwritten header at `pos`, reached with `seq` data excerpts
 * before it, stands before committed data: the writePosition lies beyond it
 * or records excerpt `seq` or later, and the header is still unwritten once
 * the writePosition was loaded (it is published after every header before). */
static int hides_committed(const cq_store *s, uint64_t pos, uint64_t seq) {
    uint64_t wp, wq;
    return write_position(s, &wp, &wq) && (wp > pos || wq >= seq) &&
           fits(s, pos, 4) && not_ready(hdr_load(s, pos));
}

int cq_find_end(cq_store *s, uint64_t *pos, uint64_t *seq, int *eof) {
    uint64_t p, q, need = 0, err = 0;
    if (!write_position(s, &p, &q)) index_floor(s, UINT64_MAX, &p, &q);
    else if (s->i2i_off && !index_disowned(s) && !wp_agrees(s, p, q)) {
        /* the writePosition, an index entry or a header between them is
         * damaged: the index is, if the chain alone agrees with it */
        if (!disown_index(s)) {
            *pos = p;
            *seq = q;
            *eof = 0;
            return CQ_CORRUPT;
        }
    }
    int rc = walk(s, &p, &q, UINT64_MAX, &need, &err);
    *pos = p;
    *seq = q;
    *eof = rc == CQ_EOF;
    /* an end before excerpts the writePosition or the index records is
     * damage (as cq_read sees it) */
    if (rc == CQ_EOF) return recorded_from(s, q) ? CQ_CORRUPT : CQ_OK;
    if (rc == CQ_NONE) return hides_committed(s, p, q) ? CQ_CORRUPT : CQ_OK;
    return rc;
}

/* walk from (p, q) to data excerpt `seq`; the result codes of cq_seek */
static int seek_walk(const cq_store *s, uint64_t p, uint64_t q, uint64_t seq, uint64_t *pos) {
    uint64_t need = 0, err = 0;
    int rc = walk(s, &p, &q, seq, &need, &err);
    *pos = p;
    if (rc == CQ_OK) {
        uint64_t ap, aq, vend;
        rc = verify_span(s, p, seq, 0, 0, &ap, &aq, &vend, &need, &err);
        if (rc == CQ_NEED_MAP) *pos = need;
        else if (rc == CQ_CORRUPT) *pos = err;
        return rc;
    }
    /* an unwritten header with committed data after it, or reached with
     * fewer excerpts passed than the writePosition records (a damaged length
     * jumped over them): damage, not the end */
    if (rc == CQ_NONE && (data_beyond(s, p) || hides_committed(s, p, q))) return CQ_CORRUPT;
    if (rc == CQ_NONE) return q == seq ? CQ_NOT_REACHED : CQ_NOT_FOUND;
    if (rc == CQ_EOF) return recorded_from(s, q) ? CQ_CORRUPT : CQ_NOT_FOUND;
    if (rc == CQ_NEED_MAP) *pos = need;
    return rc;
}

static int seek_once(const cq_store *s, uint64_t seq, uint64_t *pos) {
    uint64_t p, q;
    uint64_t wp, wq;
    index_floor(s, seq, &p, &q);
    /* the writePosition only where the index lags (its sequence is checked
     * by nothing else here) */
    if (write_position(s, &wp, &wq) && wq <= seq && wq >= q + s->index_spacing) {
        p = wp;
        q = wq;
    }
    return seek_walk(s, p, q, seq, pos);
}

/* A seek that found the index at odds with the headers: when the chain from
 * the start agrees with the writePosition, the index is disowned and the
 * seek is made again without it (a damaged index entry is skipped). */
int cq_seek(cq_store *s, uint64_t seq, uint64_t *pos) {
    if (!layout_ok(s)) return CQ_CORRUPT;
    uint64_t wp, wq;
    /* an index shifted as a whole agrees with itself: the writePosition tells */
    if (s->i2i_off && !index_disowned(s) && write_position(s, &wp, &wq) && !wp_agrees(s, wp, wq))
        disown_index(s);
    int rc = seek_once(s, seq, pos);
    if (rc == CQ_CORRUPT && disown_index(s)) rc = seek_once(s, seq, pos);
    return rc;
}

int cq_seek_from(cq_store *s, uint64_t seq, uint64_t from_pos, uint64_t from_seq,
                 uint64_t *pos) {
    if (from_seq > seq || from_pos > map_len(s)) return cq_seek(s, seq, pos);
    int rc = seek_walk(s, from_pos, from_seq, seq, pos);
    if (rc == CQ_CORRUPT && disown_index(s)) rc = seek_walk(s, from_pos, from_seq, seq, pos);
    return rc;
}

int cq_scan(cq_store *s, uint64_t pos, uint64_t *hdr_out, uint64_t *next_out) {
    if (!fits(s, pos, 4)) return CQ_NEED_MAP;
    uint32_t h = hdr_load(s, pos);
    *hdr_out = h;
    *next_out = align_up(s, pos + 4 + (h & CQ_HDR_LENGTH_MASK));
    return CQ_OK;
}

int cq_write_eof(cq_store *s, uint64_t hint, uint64_t *need_out) {
    uint64_t p, q, need = 0, err = 0;
    *need_out = 0;
    int bad = writable_layout(s);
    if (bad != CQ_OK) return bad;
    if (!write_position(s, &p, &q)) index_floor(s, UINT64_MAX, &p, &q);
    if (hint > p && fits(s, hint, 8)) {
        /* the hint is a committed boundary known to the caller; walking
         * from the furthest known point is shortest */
        uint32_t h = hdr_load(s, hint);
        if (h == 0 || is_eof(h) || !(h & CQ_HDR_NOT_COMPLETE)) { p = hint; q = 0; }
    }
    for (unsigned rounds = 0; rounds < LOCATE_BUDGET; rounds++) {
        int rc = walk(s, &p, &q, UINT64_MAX, &need, &err);
        if (rc == CQ_EOF) return CQ_OK;
        if (rc == CQ_NEED_MAP) { *need_out = need; return rc; }
        if (rc != CQ_NONE) return rc;
        if (p + 8 > map_len(s)) { *need_out = p + 8; return CQ_NOT_REACHED; }
        uint32_t h = hdr_load(s, p);
        if (is_claim(h)) {
            /* a claim whose writer died or lost the lock: padding, then on */
            uint64_t nxt;
            int arc = abandon_claim(s, p, h, &nxt, &need);
            if (arc == CQ_NEED_MAP) { *need_out = need; return CQ_NOT_REACHED; }
            if (arc == CQ_OK) p = nxt;
            continue;
        }
        if (h != 0) {
            /* an old-protocol incomplete header of a writer that died
             * mid-excerpt: the lock is held, so nobody is writing it any more */
            if (!hdr_cas(s, p, h, 0)) continue;
        }
        /* claimed like an excerpt, so a late writer cannot tear the marker */
        if (!hdr_cas(s, p, 0, claim_hdr(4))) continue;
        static const uint8_t trailer[4] = {0xC3, 'E', 'O', 'F'};
        memcpy(map_base(s) + p + 4, trailer, 4);
        if (hdr_cas(s, p, claim_hdr(4), CQ_HDR_EOF)) return CQ_OK;
        return CQ_LOCK_LOST;
    }
    return CQ_CORRUPT;
}

/* ------------------------------------------------------------------ */
/* appending                                                           */

static inline int64_t now_ms(const cq_appender *a) {
    if (a->clock_cell) return __atomic_load_n(a->clock_cell, __ATOMIC_ACQUIRE);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How far (ms) the coarse real-time clock may lag the precise one: it moves
 * once a tick (its resolution), and a busy CPU keeps the ticks coming; a wide
 * margin only means reading the precise clock a little longer before a roll. */
#define COARSE_MARGIN_MS 100

static int check_cycle(cq_appender *a) {
    if (!a->check_cycle) return CQ_OK;
    if (!a->clock_cell) {
        /* Most appends are far from the end of their cycle: the coarse clock
         * (no TSC read, a few ns) shows that without the precise one.  The
         * precise clock decides within COARSE_MARGIN_MS of the end. */
        struct timespec ts;
        int64_t cyc = a->store->cycle;
        if (a->length_ms > 0 && cyc >= 0 && cyc < (INT64_MAX - a->epoch) / a->length_ms - 1 &&
            clock_gettime(CLOCK_REALTIME_COARSE, &ts) == 0) {
            int64_t coarse = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
            int64_t end = a->epoch + (cyc + 1) * a->length_ms;
            if (coarse + COARSE_MARGIN_MS < end) return CQ_OK;
        }
    }
    int64_t c = (now_ms(a) - a->epoch) / a->length_ms;
    /* a clock behind the current cycle never rolls back: the newest cycle
     * keeps taking writes (older cycles may already be closed by EOF) */
    if (c > a->store->cycle) {
        a->want_cycle = c;
        return CQ_ROLL;
    }
    return CQ_OK;
}

static int check_append_lock(const cq_appender *a, int meta) {
    if (meta || !a->append_lock) return CQ_OK;
    int64_t v = __atomic_load_n(a->append_lock, __ATOMIC_ACQUIRE);
    if (v != LOCK_UNLOCKED && (int32_t)v != (int32_t)a->pid) return CQ_APPEND_LOCKED;
    return CQ_OK;
}

/* Find where the next document goes.  The write lock is held. */
static int locate(cq_appender *a, uint64_t *pos_out, uint64_t *seq_out) {
    cq_store *s = a->store;
    uint64_t pos = a->pos, seq = a->seq;
    uint64_t wp, wq;
    if (write_position(s, &wp, &wq) && wp > pos) {
        /* another writer's writePosition: its sequence is checked before it
         * is adopted (a damaged one would number every later excerpt wrong),
         * as cq_find_end checks it: walking from this appender's own hint
         * when that is at most a spacing of excerpts before it, else from
         * the index entry before it (a walk of at most a spacing: this runs
         * under the write lock).  A writePosition that disagrees is not used:
         * the walk below numbers by the chain from the last index entry. */
        uint64_t p = pos, q = seq, need = 0, err = 0;
        if (!(seq <= wq && wq - seq <= s->index_spacing)) index_floor(s, wq, &p, &q);
        int agrees = !s->i2i_off ||
                     (q <= wq && wq - q <= s->index_spacing &&
                      walk_docs(s, &p, &q, wq, &need, &err, 1) == CQ_OK && p == wp);
        if (agrees) {
            pos = wp;
            seq = wq;
        } else {
            /* number by the chain, as readers do: from the last index entry
             * (racing writers whose lock was forced away can leave a hint
             * or a writePosition one behind the chain) */
            index_floor(s, UINT64_MAX, &p, &q);
            if (p) { pos = p; seq = q; }
        }
    }
    if (pos < 4 && pos != 0) pos = 0;
    for (unsigned steps = 0;; steps++) {
        if (steps >= LOCATE_BUDGET) {
            /* a long walk (no usable writePosition): keep the progress as the
             * hint and let the lock go; the caller calls again */
            a->pos = pos;
            a->seq = seq;
            return CQ_NOT_REACHED;
        }
        if (pos + 4 > map_len(s)) { a->need = pos + 4; return CQ_NEED_MAP; }
        uint32_t h = hdr_load(s, pos);
        if (h == 0) break;
        if (is_eof(h)) return CQ_EOF;
        if (is_claim(h)) {
            uint64_t nxt;
            int rc = abandon_claim(s, pos, h, &nxt, &a->need);
            if (rc == CQ_NEED_MAP) return rc;
            if (rc == CQ_OK) pos = nxt;
            continue;
        }
        if (h & CQ_HDR_NOT_COMPLETE) {
            /* a header marked in-progress by an old-protocol writer that
             * died: we hold the lock, so take the slot over */
            if (!hdr_cas(s, pos, h, 0)) continue;
            break;
        }
        uint64_t end = pos + 4 + (h & CQ_HDR_LENGTH_MASK);
        if (end > map_len(s)) { a->need = end; return CQ_NEED_MAP; }
        if (!(h & CQ_HDR_META)) seq++;
        pos = align_up(s, end);
    }
    *pos_out = pos;
    *seq_out = seq;
    return CQ_OK;
}

/* Space a data excerpt at (pos, seq) of plen payload bytes needs, with
 * room for a new index page if this sequence opens one. */
static uint64_t space_needed(const cq_appender *a, uint64_t pos, uint64_t seq, uint64_t plen,
                             int meta) {
    const cq_store *s = a->store;
    uint64_t need = pos + 4 + plen + 8;
    if (!meta && s->i2i_off && s->index_count) {
        uint64_t per_page = (uint64_t)1 << (s->count_bits + s->spacing_bits);
        if ((seq & (per_page - 1)) == 0)
            need = align_up(s, pos + 4 + plen) + 4 + 8 * s->index_count + INDEX_DOC_SLACK;
    }
    return need;
}

/* Append a new secondary index page at *next, store it in index2index. */
static int new_index_page(cq_appender *a, uint64_t n2, uint64_t i2i_vals, uint64_t i2i_used,
                          uint64_t *next) {
    cq_store *s = a->store;
    uint64_t p = *next;
    uint64_t body = p + 4;
    uint64_t count = s->index_count;
    uint64_t q = body + 7;
    uint64_t pad = (8 - ((q + 1) & 7)) & 7;
    uint64_t arr = q + pad;
    uint64_t end = arr + 17 + 8 * count;
    if (end + 8 > map_len(s)) return CQ_NEED_MAP;
    uint8_t *b = map_base(s);
    uint32_t claim = claim_hdr(end - body);
    if (!hdr_cas(s, p, 0, claim)) return CQ_LOCK_LOST; /* another writer is here */
    static const uint8_t name[7] = {0xB9, 5, 'i', 'n', 'd', 'e', 'x'};
    memcpy(b + body, name, 7);
    if (pad >= 5) {
        uint32_t n = (uint32_t)(pad - 5);
        b[q] = 0x8E;
        memcpy(b + q + 1, &n, 4);
        memset(b + q + 5, 0, n);
    } else {
        memset(b + q, 0x8F, pad);
    }
    int64_t cap = (int64_t)count, used = 0;
    b[arr] = 0x8D;
    memcpy(b + arr + 1, &cap, 8);
    memcpy(b + arr + 9, &used, 8);
    memset(b + arr + 17, 0, 8 * count);
    clear_next(s, align_up(s, end));
    if (!hdr_cas(s, p, claim, CQ_HDR_META | (uint32_t)(end - body))) return CQ_LOCK_LOST;
    *next = align_up(s, end);
    /* a page linked first by another writer wins; ours stays a metadata
     * document nobody points at */
    int64_t none = 0;
    CQ_ALIGNED(b + i2i_vals + 8 * n2, 8);
    if (__atomic_compare_exchange_n((int64_t *)(b + i2i_vals + 8 * n2), &none, (int64_t)p, 0,
                                    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
        max64((int64_t *)(b + i2i_used), (int64_t)(n2 + 1));
    return CQ_OK;
}

static int index_entry(cq_appender *a, uint64_t seq, uint64_t pos, uint64_t *next) {
    cq_store *s = a->store;
    if (!s->i2i_off || !s->index_count) return CQ_OK;
    if (!fits(s, s->i2i_off, 8) || (s->i2i_off & 7)) return CQ_OK;
    if (seq & (s->index_spacing - 1)) return CQ_OK;
    unsigned bits = (unsigned)(s->count_bits + s->spacing_bits);
    uint64_t n2 = seq >> bits;
    uint64_t n3 = (seq >> s->spacing_bits) & (s->index_count - 1);
    if (n2 >= s->index_count) return CQ_INDEX_FULL;
    uint64_t i2i = (uint64_t)ld64(s, s->i2i_off);
    uint64_t vals, used_off, cap;
    if (!i2i) return CQ_OK; /* a file created without an index */
    /* the index documents this writes into lie before the excerpt it indexes
     * (a damaged pointer to the data ahead must not turn into writes there) */
    if (array_at(s, i2i, &vals, &used_off, &cap) != CQ_OK || n2 >= cap ||
        i2i + 4 + (hdr_load(s, i2i) & CQ_HDR_LENGTH_MASK) > pos) {
        a->err_pos = i2i;
        return CQ_CORRUPT;
    }
    uint64_t page = (uint64_t)ld64(s, vals + 8 * n2);
    if (!page) {
        int rc = new_index_page(a, n2, vals, used_off, next);
        if (rc != CQ_OK) return rc;
        page = (uint64_t)ld64(s, vals + 8 * n2);
        if (!page) return CQ_OK;
    } else if (!fits(s, page, 4) || page + 4 + (hdr_load(s, page) & CQ_HDR_LENGTH_MASK) > pos) {
        a->err_pos = page;
        return CQ_CORRUPT;
    }
    uint64_t pv, pu, pc;
    if (array_at(s, page, &pv, &pu, &pc) != CQ_OK || n3 >= pc) { a->err_pos = page; return CQ_CORRUPT; }
    int64_t *slot = (int64_t *)(map_base(s) + pv + 8 * n3);
    int64_t empty = 0;
    CQ_ALIGNED(slot, 8);
    if (__atomic_compare_exchange_n(slot, &empty, (int64_t)pos, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
        max64((int64_t *)(map_base(s) + pu), (int64_t)(n3 + 1));
        if (field_ok(s, s->last_index_off))
            max64((int64_t *)(map_base(s) + s->last_index_off), (int64_t)(seq + s->index_spacing));
    }
    return CQ_OK;
}

/* Publish a document whose payload is already in place in the slot claimed
 * with length `claim`.  Lock held (or lost: then CQ_LOCK_LOST, nothing
 * published and the slot left as padding). */
static int commit(cq_appender *a, uint64_t pos, uint64_t seq, uint64_t plen, int meta,
                  uint64_t claim) {
    cq_store *s = a->store;
    uint8_t *b = map_base(s);
    uint32_t held = claim_hdr(claim);
    if (__atomic_load_n(a->write_lock, __ATOMIC_ACQUIRE) != a->pid) {
        /* the lock was forced away from us: never publish */
        hdr_cas(s, pos, held, CQ_HDR_META | (uint32_t)claim);
        return CQ_LOCK_LOST;
    }
    if (plen == 0) { b[pos + 4] = 0x8F; plen = 1; }
    uint64_t next = align_up(s, pos + 4 + plen);
    /* the padding up to the next header is dead space of this slot (a taker
     * starts after the claimed length, aligned): plain stores are safe */
    memset(b + pos + 4 + plen, 0, next - (pos + 4 + plen));
    clear_next(s, next);
    uint32_t h = (uint32_t)plen | (meta ? CQ_HDR_META : 0);
    if (!hdr_cas(s, pos, held, h)) return CQ_LOCK_LOST;
    if (!meta) {
        if (field_ok(s, s->wp_off)) max64((int64_t *)(b + s->wp_off), (int64_t)pos);
        if (field_ok(s, s->wp_seq_off))
            st64(s, s->wp_seq_off, (int64_t)((pos << s->file_shift) | seq));
        /* the excerpt is published: from here on nothing may report failure.
         * A damaged index only leaves a hole, which lookups tolerate. */
        (void)index_entry(a, seq, pos, &next);
        a->last_index = (int64_t)(((uint64_t)s->cycle << a->queue_shift) | seq);
        a->appended++;
        a->seq = seq + 1;
        a->pos = next;
    } else {
        a->seq = seq;
        a->pos = next;
    }
    return CQ_OK;
}

static void populate(cq_appender *a) {
    cq_store *s = a->store;
    if (s->chunk && a->pos >= a->dropped + 2 * s->chunk) {
        /* keep resident memory flat: what is written stays in the page
         * cache, only this process's mapping of it is dropped */
        uint64_t to = a->pos - s->chunk;
        cq_release_pages(map_base(s), a->dropped, to);
        a->dropped = to;
    }
    if (!a->populate_step || a->pos + a->populate_step <= a->populated) return;
    uint64_t from = a->populated > a->pos ? a->populated : a->pos;
    uint64_t to = a->pos + 2 * a->populate_step;
    if (to > map_len(s)) to = map_len(s);
    if (to > a->allocated) to = a->allocated; /* never fault unreserved blocks */
    long pg = sysconf(_SC_PAGESIZE);
    from &= ~((uint64_t)pg - 1);
    if (to > from) {
#ifdef MADV_POPULATE_WRITE
        if (madvise(map_base(s) + from, (size_t)(to - from), MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
            a->populate_step = 0; /* kernel without MADV_POPULATE_WRITE */
#else
        a->populate_step = 0;
#endif
    }
    a->populated = to;
}

/* Outside the lock, after a publish: pre-fault ahead, wake parked readers. */
static void after_publish(cq_appender *a) {
    populate(a);
    if (a->notify) cq_notify_commit((cq_notify_watch *)a->notify);
}

static inline int is_closed(const int32_t *flag) {
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

static int begin(cq_appender *a, uint64_t len, int meta, uint64_t *pos, uint64_t *seq) {
    if (is_closed(&a->closed)) return CQ_BAD_STATE;
    if (!a->store || !map_base(a->store) || !a->write_lock) return CQ_BAD_STATE;
    if (len > CQ_HDR_LENGTH_MASK) return CQ_TOO_LARGE;
    int rc = writable_layout(a->store);
    if (rc != CQ_OK) return rc;
    rc = check_append_lock(a, meta);
    if (rc != CQ_OK) return rc;
    rc = check_cycle(a);
    if (rc != CQ_OK) return rc;
    if (cq_lock(a->write_lock, a->pid, a->lock_spin_ns) != CQ_OK) return CQ_LOCKED;
    rc = locate(a, pos, seq);
    if (rc == CQ_OK) {
        cq_store *s = a->store;
        if (!meta && s->index_count && (*seq >> (s->count_bits + s->spacing_bits)) >= s->index_count)
            rc = CQ_INDEX_FULL;
        else {
            uint64_t need = space_needed(a, *pos, *seq, len ? len : 1, meta);
            if (need > map_len(s)) { a->need = need; rc = CQ_NEED_MAP; }
            else if (need > a->allocated) { a->need = need; rc = CQ_NO_SPACE; }
            /* the slot is ours before a byte is copied; a failed claim means
             * a writer that does not take the lock wrote here: look again */
            else if (!hdr_cas(s, *pos, 0, claim_hdr(len ? len : 1))) rc = CQ_NOT_REACHED;
        }
    }
    if (rc != CQ_OK) cq_unlock(a->write_lock, a->pid);
    return rc;
}

/* Let the lock go after a commit, unless it was lost (then it is not ours). */
static inline void finish(cq_appender *a, int rc) {
    if (rc != CQ_LOCK_LOST) cq_unlock(a->write_lock, a->pid);
}

/* Returns the index of the excerpt (>= 0; 0 for metadata) or a CQ_ code. */
int64_t cq_append(cq_appender *a, const uint8_t *data, uint64_t len, int meta) {
    if (a->doc_open) return CQ_BAD_STATE;
    uint64_t pos, seq;
    int rc = begin(a, len, meta, &pos, &seq);
    if (rc != CQ_OK) return rc;
    if (len) memcpy(map_base(a->store) + pos + 4, data, len);
    rc = commit(a, pos, seq, len, meta, len ? len : 1);
    finish(a, rc);
    if (rc != CQ_OK) return rc;
    after_publish(a);
    return meta ? 0 : a->last_index;
}

int64_t cq_append_at(cq_appender *a, const uint8_t *data, uint64_t len, uint64_t want) {
    if (a->doc_open) return CQ_BAD_STATE;
    uint64_t pos, seq;
    int check = a->check_cycle;
    a->check_cycle = 0;
    int rc = begin(a, len, 0, &pos, &seq);
    a->check_cycle = check;
    if (rc != CQ_OK) return rc;
    if (seq != want) {
        /* give the claimed slot back */
        hdr_cas(a->store, pos, claim_hdr(len ? len : 1), 0);
        cq_unlock(a->write_lock, a->pid);
        return seq > want ? CQ_DUPLICATE : CQ_GAP;
    }
    if (len) memcpy(map_base(a->store) + pos + 4, data, len);
    rc = commit(a, pos, seq, len, 0, len ? len : 1);
    finish(a, rc);
    if (rc != CQ_OK) return rc;
    after_publish(a);
    return a->last_index;
}

int cq_append_batch(cq_appender *a, const uint8_t *data, const int64_t *offsets, uint64_t n,
                    uint64_t *done) {
    *done = 0;
    if (a->doc_open) return CQ_BAD_STATE;
    if (n == 0) return CQ_OK;
    uint64_t pos, seq;
    uint64_t len0 = (uint64_t)(offsets[1] - offsets[0]);
    int rc = begin(a, len0, 0, &pos, &seq);
    if (rc != CQ_OK) return rc;
    cq_store *s = a->store;
    uint64_t i = 0;
    for (; i < n; i++) {
        int64_t o0 = offsets[i], o1 = offsets[i + 1];
        if (o1 < o0) { rc = CQ_BAD_STATE; break; }
        uint64_t len = (uint64_t)(o1 - o0);
        if (len > CQ_HDR_LENGTH_MASK) { rc = CQ_TOO_LARGE; break; }
        if (i > 0) {
            pos = a->pos;
            seq = a->seq;
            if (s->index_count && (seq >> (s->count_bits + s->spacing_bits)) >= s->index_count) {
                rc = CQ_INDEX_FULL;
                break;
            }
            uint64_t need = space_needed(a, pos, seq, len ? len : 1, 0);
            if (need > map_len(s)) { a->need = need; rc = CQ_NEED_MAP; break; }
            if (need > a->allocated) { a->need = need; rc = CQ_NO_SPACE; break; }
            /* the word after the last commit was cleared by it: a failed claim
             * means another writer is here.  If the lock was forced away it is
             * no longer ours; else (a writer that ignores the lock) let go and
             * let the caller locate the end again */
            if (!hdr_cas(s, pos, 0, claim_hdr(len ? len : 1))) {
                rc = __atomic_load_n(a->write_lock, __ATOMIC_ACQUIRE) == a->pid
                         ? CQ_NOT_REACHED : CQ_LOCK_LOST;
                break;
            }
        } else if (len != len0) {
            /* claimed for len0 by begin(): offsets changed under us */
            hdr_cas(s, pos, claim_hdr(len0 ? len0 : 1), 0);
            rc = CQ_BAD_STATE;
            break;
        }
        if (len) memcpy(map_base(s) + pos + 4, data + o0, len);
        rc = commit(a, pos, seq, len, 0, len ? len : 1);
        if (rc != CQ_OK) break;
    }
    finish(a, rc);
    *done = i;
    if (i) after_publish(a);
    else populate(a);
    return rc;
}

int cq_doc_begin(cq_appender *a, uint64_t reserve, int meta) {
    if (a->doc_open) return CQ_BAD_STATE;
    uint64_t pos, seq;
    int rc = begin(a, reserve, meta, &pos, &seq);
    if (rc != CQ_OK) return rc;
    a->doc_meta = meta;
    a->doc_pos = pos;
    a->doc_claim = reserve ? reserve : 1;
    a->seq = seq;
    __atomic_store_n(&a->doc_open, 1, __ATOMIC_RELEASE);
    return CQ_OK;
}

int cq_doc_ensure(cq_appender *a, uint64_t len) {
    if (!__atomic_load_n(&a->doc_open, __ATOMIC_ACQUIRE)) return CQ_BAD_STATE;
    if (len > CQ_HDR_LENGTH_MASK) return CQ_TOO_LARGE;
    uint64_t need = space_needed(a, a->doc_pos, a->seq, len ? len : 1, a->doc_meta);
    if (need > map_len(a->store)) { a->need = need; return CQ_NEED_MAP; }
    if (need > a->allocated) { a->need = need; return CQ_NO_SPACE; }
    if (len > a->doc_claim) {
        /* grow the claim before the bytes are written; it fails only when
         * another writer took the lock and made the slot padding */
        if (!hdr_cas(a->store, a->doc_pos, claim_hdr(a->doc_claim), claim_hdr(len)))
            return CQ_LOCK_LOST;
        a->doc_claim = len;
    }
    return CQ_OK;
}

/* Ends the open document; exactly one caller wins (the owner committing or
 * rolling back, or another thread closing the appender), so the write lock is
 * released once. */
static inline int take_doc(cq_appender *a) {
    return __atomic_exchange_n(&a->doc_open, 0, __ATOMIC_ACQ_REL) != 0;
}

int cq_doc_commit(cq_appender *a, uint64_t len) {
    if (!__atomic_load_n(&a->doc_open, __ATOMIC_ACQUIRE)) return CQ_BAD_STATE;
    if (is_closed(&a->closed)) {
        /* closed while the document was open: nothing is published */
        cq_doc_rollback(a, len);
        return CQ_BAD_STATE;
    }
    int rc = cq_doc_ensure(a, len);
    if (rc == CQ_LOCK_LOST) {
        if (take_doc(a)) return CQ_LOCK_LOST;
        return CQ_BAD_STATE;
    }
    if (rc != CQ_OK) return rc;
    if (!take_doc(a)) return CQ_BAD_STATE;
    rc = commit(a, a->doc_pos, a->seq, len, a->doc_meta, a->doc_claim);
    finish(a, rc);
    if (rc == CQ_OK) after_publish(a);
    return rc;
}

int cq_doc_rollback(cq_appender *a, uint64_t len) {
    if (!take_doc(a)) return CQ_BAD_STATE;
    cq_store *s = a->store;
    /* zero only what the claim covers (never the next header), then give
     * the slot back; a claim made padding meanwhile stays padding */
    uint64_t n = a->doc_claim;
    if (a->doc_pos + 4 + n > map_len(s)) n = map_len(s) - a->doc_pos - 4;
    memset(map_base(s) + a->doc_pos + 4, 0, n);
    if (hdr_cas(s, a->doc_pos, claim_hdr(a->doc_claim), 0)) {
        a->pos = a->doc_pos;
        cq_unlock(a->write_lock, a->pid);
    }
    (void)len;
    return CQ_OK;
}

int cq_doc_abandon(cq_appender *a) {
    if (!take_doc(a)) return CQ_BAD_STATE;
    /* the owner may still be copying into the slot: it becomes padding (its
     * bytes land in dead space) and the next excerpt goes after it.  The
     * owner may also be growing its claim right now (cq_doc_ensure CASes the
     * header before it records the new length in doc_claim): go by the claim
     * the header holds, or the CAS below fails and the write lock stays held
     * for good.  Bounded: once doc_open is 0 the owner grows it at most once. */
    cq_store *s = a->store;
    for (int tries = 0; tries < 8; tries++) {
        uint32_t h = hdr_load(s, a->doc_pos);
        if (!is_claim(h)) return CQ_OK; /* made padding by a writer that took the lock over */
        uint64_t claim = h & CQ_HDR_LENGTH_MASK;
        uint64_t nxt = align_up(s, a->doc_pos + 4 + claim);
        if (fits(s, nxt, 4)) clear_next(s, nxt);
        if (hdr_cas(s, a->doc_pos, h, CQ_HDR_META | (uint32_t)claim)) {
            cq_unlock(a->write_lock, a->pid);
            return CQ_OK;
        }
    }
    return CQ_OK;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

static void drop_behind(cq_tailer *t) {
    cq_store *s = t->store;
    if (!s->chunk || t->pos < t->dropped + 2 * s->chunk) return;
    uint64_t to = t->pos - s->chunk;
    cq_release_pages(map_base(s), t->dropped, to);
    t->dropped = to;
}

/* Confirm the data excerpt about to be read at (pos, t->seq) against the
 * index and writePosition (verify_span), from the tailer's last anchor when
 * it is in the same file; a read moved elsewhere (a seek, a new cycle)
 * confirms its span again.  Once per index spacing on a sequential read. */
static int confirm(cq_tailer *t, const cq_store *s, uint64_t pos) {
    int same = t->vstore == s && t->vcycle == s->cycle;
    uint64_t ap, aq, vend;
    int rc = verify_span(s, pos, t->seq, same ? t->vpos : 0, same ? t->vseq : 0, &ap, &aq,
                         &vend, &t->need, &t->err_pos);
    if (rc == CQ_CORRUPT && disown_index(t->store))  /* a damaged index entry: skipped */
        rc = verify_span(s, pos, t->seq, same ? t->vpos : 0, same ? t->vseq : 0, &ap, &aq,
                         &vend, &t->need, &t->err_pos);
    if (rc != CQ_OK) return rc;
    t->vstore = s;
    t->vcycle = s->cycle;
    t->vpos = ap;
    t->vseq = aq;
    t->vend = vend;
    return CQ_OK;
}

/* Whether a read stopped at the not-ready header at `pos` asks Python if the
 * cycle ended there (a later cycle is listed): at a new place at once, then
 * every 256th time (the writer may be gone or the timeout past since). */
static inline int unmarked_due(cq_tailer *t, const cq_store *s, uint64_t pos) {
    if (t->stall_cycle != (int64_t)s->cycle || t->stall_pos != pos) return 1;
    return (++t->stall_polls & 255) == 0;
}

int64_t cq_read(cq_tailer *t) {
    if (is_closed(&t->closed)) return CQ_BAD_STATE;
    cq_store *s = t->store;
    if (!s || !map_base(s)) return CQ_BAD_STATE;
    uint64_t pos = t->pos;
    /* the cursor stands where the last confirmed read left it */
    int cont = t->vstore == s && t->vcycle == s->cycle && pos == t->vnext &&
               t->seq == t->vnext_seq;
    for (unsigned skips = 0; skips < MAX_META_SKIPS; skips++) {
        if (pos + 4 > map_len(s)) { t->need = pos + 4; t->err_pos = pos; t->pos = pos; return CQ_NEED_MAP; }
        uint32_t h = hdr_load(s, pos);
        if (is_eof(h)) {
            t->pos = pos;
            if (!recorded_from(s, t->seq)) return CQ_EOF;
            t->err_pos = pos; /* the end of the cycle before excerpts it records */
            return CQ_CORRUPT;
        }
        if (not_ready(h)) {
            t->pos = pos;
            /* every header before the last committed excerpt is written: an
             * unwritten one there (or after it while that excerpt was never
             * read) means a damaged length led the walk astray, which must
             * not read as "nothing more yet" */
            uint64_t wp, wq;
            if (write_position(s, &wp, &wq) && (wp > pos || wq >= t->seq)) {
                if (hides_committed(s, pos, t->seq)) { t->err_pos = pos; return CQ_CORRUPT; }
                continue; /* committed meanwhile: read it */
            }
            if (t->last_cycle && __atomic_load_n(t->last_cycle, __ATOMIC_ACQUIRE) > s->cycle && unmarked_due(t, s, pos)) {
                t->err_pos = pos;
                return CQ_UNMARKED_END;
            }
            return CQ_NONE;
        }
        uint64_t len = h & CQ_HDR_LENGTH_MASK;
        uint64_t end = pos + 4 + len;
        if (end > map_len(s)) { t->need = end; t->err_pos = pos; t->pos = pos; return CQ_NEED_MAP; }
        if (h & CQ_HDR_META) {
            if (pos == 0 && len == 0) { t->err_pos = pos; return CQ_CORRUPT; }
            if (t->include_meta) {
                t->data = (const char *)(map_base(s) + pos + 4);
                t->len = len;
                t->is_meta = 1;
                if (len && len <= t->scratch_cap && t->scratch) memcpy(t->scratch, t->data, (size_t)len);
                t->index = (int64_t)(((uint64_t)s->cycle << t->queue_shift) | t->seq);
                t->pos = align_up(s, end);
                if (cont) t->vnext = t->pos;
                return (int64_t)len;
            }
            pos = align_up(s, end);
            continue;
        }
        if (!(cont && t->seq < t->vend)) {
            int vrc = confirm(t, s, pos);
            if (vrc != CQ_OK) { t->pos = pos; return vrc; }
        }
        t->data = (const char *)(map_base(s) + pos + 4);
        t->len = len;
        t->is_meta = 0;
        if (len && len <= t->scratch_cap && t->scratch) memcpy(t->scratch, t->data, (size_t)len);
        t->index = (int64_t)(((uint64_t)s->cycle << t->queue_shift) | t->seq);
        t->seq++;
        t->pos = align_up(s, end);
        t->vnext = t->pos;
        t->vnext_seq = t->seq;
        drop_behind(t);
        return (int64_t)len;
    }
    t->pos = pos;
    return CQ_NONE; /* bounded: a long run of metadata continues on the next call */
}

int cq_read_batch(cq_tailer *t, uint8_t *out, uint64_t out_cap, int64_t *offsets,
                  int64_t *indices, uint64_t max_n, uint64_t *n_out) {
    uint64_t n = 0, used = 0;
    int saved_meta = t->include_meta;
    t->include_meta = 0;
    int rc = CQ_OK;
    offsets[0] = 0;
    while (n < max_n) {
        uint64_t pos0 = t->pos, seq0 = t->seq;
        int64_t index0 = t->index;
        int64_t r = cq_read(t);
        if (r < 0) { rc = (int)r; break; }
        if ((uint64_t)r > out_cap - used) {
            t->pos = pos0;
            t->seq = seq0;
            t->index = index0; /* not taken: the last read index stays */
            if (n == 0) { t->need = (uint64_t)r; rc = CQ_TOO_LARGE; }
            break;
        }
        memcpy(out + used, t->data, (size_t)r);
        used += (uint64_t)r;
        indices[n] = t->index;
        offsets[++n] = (int64_t)used;
    }
    t->include_meta = saved_meta;
    *n_out = n;
    return n ? CQ_OK : rc;
}

