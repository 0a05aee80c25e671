/*
 * Fuzz harness of the native core's read paths (and of appending to a
 * corrupt file): whatever the bytes of a cycle file, no call may read or
 * write outside the mapping, hang, or hit undefined behaviour, and the
 * answers it gives must be self-consistent.
 *
 * Input = 16 parameter bytes + the file image:
 *   p[0]     flags: 1 align 4 | 2 include metadata | 4 use writePosition
 *                   | 8 use the index | 16 append phase | 32 map shorter than
 *                   the file | 64 offsets may be misaligned | 128 disk blocks
 *                   reserved only part-way (appender `allocated`)
 *   p[1]     log2(indexCount)  % 7      p[2]  log2(indexSpacing) % 7
 *   p[3..4]  index2Index field offset   p[5..6]  writePosition field offset
 *   p[7..8]  lastIndex field offset     p[9..10] bytes cut off the mapping
 *   p[11..14] sequences to seek         p[15] payload length for appends
 * Field offsets are reduced into the mapping (the Python layer takes them
 * from the parsed header, so they always lie inside it).
 *
 * Builds:
 *   clang -fsanitize=fuzzer,address,undefined            -> libFuzzer target
 *   cc -DFUZZ_SMOKE_MAIN -fsanitize=address,undefined    -> standalone driver that
 *       feeds seeded random and mutated inputs (valid images built with the core
 *       itself, then corrupted) for N iterations; see usage().
 * Nothing is steered clear of: 64-bit positions near 2^64 (bytes 0xFF) reach
 * the core, and an append that fails must not have published anything.
 */
#define _GNU_SOURCE
#include "../cq.h"
static uint64_t wneed; /* cq_write_eof's need output */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARAMS 16
#define MAX_READS 4096
#define MAX_BATCH_CALLS 256
#define NCHECK 64

#include "fuzz_assert.h"

static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* coverage counters, printed by the smoke driver */
static unsigned long st_inputs, st_excerpts, st_seek_ok, st_seek_index, st_end_ok, st_appended,
    st_corrupt;

/* every tailer gets a scratch buffer, as the Python layer gives them */
static char g_scratch[64];

static void tailer_setup(cq_tailer *t, cq_store *s) {
    memset(t, 0, sizeof *t);
    t->store = s;
    t->queue_shift = 32;
    t->scratch = g_scratch;
    t->scratch_cap = sizeof g_scratch;
}

static int complete_data(uint32_t h) {
    return h != 0 && !(h & CQ_HDR_NOT_COMPLETE) && !(h & CQ_HDR_META);
}

static uint64_t field_off(uint16_t raw, uint64_t map_len, int misaligned) {
    if (map_len < 24) return 0;
    uint64_t off = raw % (map_len - 15);
    if (!misaligned) off &= ~(uint64_t)7;
    return off;
}

/* Read sequentially: every excerpt lies inside the mapping, the cursor
 * always moves forward, the loop ends.  Records the first positions. */
static uint64_t read_all(cq_store *s, int include_meta, uint64_t *pos_out, uint64_t npos) {
    cq_tailer t;
    tailer_setup(&t, s);
    t.include_meta = include_meta;
    uint64_t n = 0;
    for (int i = 0; i < MAX_READS; i++) {
        uint64_t before = t.pos, seq_before = t.seq;
        int64_t r = cq_read(&t);
        if (r >= 0) {
            const uint8_t *d = (const uint8_t *)t.data;
            FUZZ_ASSERT(d >= s->base + 4 && d <= s->base + s->map_len);
            FUZZ_ASSERT((uint64_t)r == t.len);
            FUZZ_ASSERT(t.len <= s->map_len - (uint64_t)(d - s->base));
            FUZZ_ASSERT(t.pos > before);
            FUZZ_ASSERT(t.pos <= s->map_len + 3);
            if (t.len <= t.scratch_cap) FUZZ_ASSERT(memcmp(t.scratch, d, t.len) == 0);
            if (!t.is_meta) {
                FUZZ_ASSERT(t.seq == seq_before + 1);
                if (n < npos) pos_out[n] = (uint64_t)(d - s->base) - 4;
                n++;
                st_excerpts++;
            }
            continue;
        }
        if (r == CQ_NONE && t.pos > before) continue; /* a bounded run of metadata */
        if (r == CQ_NEED_MAP) FUZZ_ASSERT(t.need > s->map_len);
        if (r == CQ_CORRUPT) st_corrupt++;
        FUZZ_ASSERT(r == CQ_NONE || r == CQ_EOF || r == CQ_NEED_MAP || r == CQ_CORRUPT);
        break;
    }
    return n;
}

static void check_seek(cq_store *s, uint64_t seq) {
    uint64_t pos = 0;
    int rc = cq_seek(s, seq, &pos);
    FUZZ_ASSERT(rc == CQ_OK || rc == CQ_NOT_FOUND || rc == CQ_NOT_REACHED || rc == CQ_NEED_MAP ||
                rc == CQ_CORRUPT);
    if (rc == CQ_OK) {
        st_seek_ok++;
        if (s->i2i_off && seq > 0) st_seek_index++;
        FUZZ_ASSERT(pos + 4 <= s->map_len);
        FUZZ_ASSERT(complete_data(ld32(s->base + pos)));
        /* a tailer put there reads it (or needs more mapping for its payload) */
        cq_tailer t;
        tailer_setup(&t, s);
        t.pos = pos;
        t.seq = seq;
        int64_t r = cq_read(&t);
        FUZZ_ASSERT(r >= 0 || r == CQ_NEED_MAP);
        if (r >= 0) FUZZ_ASSERT((const uint8_t *)t.data == s->base + pos + 4);
    } else if (rc == CQ_NOT_REACHED) {
        FUZZ_ASSERT(pos + 4 <= s->map_len);
        uint32_t h = ld32(s->base + pos);
        FUZZ_ASSERT(h == 0 || (h & CQ_HDR_NOT_COMPLETE));
    }
}

static void check_find_end(cq_store *s) {
    uint64_t pos = 0, seq = 0;
    int eof = 0;
    int rc = cq_find_end(s, &pos, &seq, &eof);
    FUZZ_ASSERT(rc == CQ_OK || rc == CQ_NEED_MAP || rc == CQ_CORRUPT);
    if (rc == CQ_OK) {
        st_end_ok++;
        FUZZ_ASSERT(pos + 4 <= s->map_len);
        uint32_t h = ld32(s->base + pos);
        FUZZ_ASSERT(eof ? h == CQ_HDR_EOF : (h == 0 || (h & CQ_HDR_NOT_COMPLETE)));
        cq_tailer t;
        tailer_setup(&t, s);
        t.pos = pos;
        t.seq = seq;
        int64_t r = cq_read(&t);
        FUZZ_ASSERT(r == (eof ? CQ_EOF : CQ_NONE));
    }
}

static void check_batches(cq_store *s) {
    cq_tailer t;
    tailer_setup(&t, s);
    uint8_t out[256];
    int64_t offs[17], ids[16];
    for (int i = 0; i < MAX_BATCH_CALLS; i++) {
        uint64_t n = 99, before = t.pos;
        int rc = cq_read_batch(&t, out, sizeof out, offs, ids, 16, &n);
        FUZZ_ASSERT(n <= 16);
        if (rc != CQ_OK || n == 0) {
            FUZZ_ASSERT(n == 0);
            if (rc == CQ_NONE && t.pos > before) continue;
            break;
        }
        FUZZ_ASSERT(offs[0] == 0);
        for (uint64_t k = 0; k < n; k++) FUZZ_ASSERT(offs[k] <= offs[k + 1]);
        FUZZ_ASSERT((uint64_t)offs[n] <= sizeof out);
        FUZZ_ASSERT(t.pos > before);
    }
}

/* walk-only view: writePosition and index ignored */
static void plain(cq_store *w, const cq_store *s) {
    *w = *s;
    w->wp_off = w->wp_seq_off = 0;
    w->i2i_off = 0;
}

static int end_count(cq_store *s, uint64_t *q) {
    cq_store w;
    plain(&w, s);
    uint64_t pos;
    int eof;
    return cq_find_end(&w, &pos, q, &eof);
}

static void append_phase(cq_store *s, const uint8_t *p) {
    static int64_t lock;
    lock = INT64_MIN;
    cq_appender a;
    memset(&a, 0, sizeof a);
    a.store = s;
    a.write_lock = &lock;
    a.pid = 4242;
    a.lock_spin_ns = 1000;
    a.queue_shift = 32;
    a.last_index = -1;
    a.allocated = (p[0] & 128) ? s->map_len - (uint64_t)p[15] * 16 % (s->map_len + 1) : UINT64_MAX;
    uint8_t payload[256];
    uint64_t len = p[15];
    for (uint64_t i = 0; i < len; i++) payload[i] = (uint8_t)(p[11 + (i & 3)] + i);
    for (int k = 0; k < 4; k++) {
        uint64_t q0 = 0, q1 = 0;
        int before = end_count(s, &q0);
        int meta = k == 2;
        int64_t r = cq_append(&a, payload, k == 1 ? 0 : len, meta);
        FUZZ_ASSERT(lock == INT64_MIN);
        FUZZ_ASSERT(r >= 0 || r == CQ_NEED_MAP || r == CQ_NO_SPACE || r == CQ_EOF ||
                    r == CQ_CORRUPT || r == CQ_INDEX_FULL || r == CQ_NOT_REACHED ||
                    r == CQ_UNALIGNED);
        FUZZ_ASSERT(r != CQ_UNALIGNED || s->align != 4); /* only packed files refuse */
        int after = end_count(s, &q1);
        if (r >= 0) st_appended++;
        if (before == CQ_OK && after == CQ_OK && s->wp_off == 0) {
            if (r >= 0) {
                FUZZ_ASSERT(q1 == q0 + (meta ? 0 : 1)); /* exactly once */
            } else if (q1 != q0) {
                fprintf(stderr, "cq_append returned %lld yet published an excerpt\n",
                        (long long)r);
                FUZZ_ASSERT(q1 == q0); /* a failed append publishes nothing */
            }
        }
        if (r < 0 && r != CQ_NEED_MAP && r != CQ_NO_SPACE) break;
    }
    int64_t offs[4] = {0, 1, 1, (int64_t)len};
    uint64_t done = 0;
    int rc = cq_append_batch(&a, payload, offs, 3, &done);
    FUZZ_ASSERT(lock == INT64_MIN);
    FUZZ_ASSERT(done <= 3);
    (void)rc;
    if (cq_doc_begin(&a, 0, 0) == CQ_OK) {
        FUZZ_ASSERT(a.doc_open);
        if (cq_doc_ensure(&a, 3) == CQ_OK) {
            memcpy(s->base + a.doc_pos + 4, "doc", 3);
            cq_doc_commit(&a, 3);
        } else {
            cq_doc_rollback(&a, 0);
        }
        FUZZ_ASSERT(lock == INT64_MIN);
    }
    FUZZ_ASSERT(lock == INT64_MIN);
}

static void scan_some(cq_store *s, const uint8_t *p) {
    uint64_t h, nx;
    uint64_t at[4] = {0, ld16(p + 3), ld16(p + 9), s->map_len ? s->map_len - 1 : 0};
    for (int i = 0; i < 4; i++) {
        if (at[i] >= s->map_len) continue;
        int rc = cq_scan(s, at[i], &h, &nx);
        FUZZ_ASSERT(rc == CQ_OK || rc == CQ_NEED_MAP);
        if (rc == CQ_OK) FUZZ_ASSERT(at[i] + 4 <= s->map_len && nx >= at[i] + 4);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < PARAMS) return 0;
    st_inputs++;
    const uint8_t *p = data;
    uint8_t flags = p[0];
    uint64_t flen = size - PARAMS;
    uint64_t map_len = flen;
    if ((flags & 32) && flen) map_len = flen - ld16(p + 9) % (flen + 1);
    /* exactly map_len bytes: any access past the mapping is an ASan report */
    void *mem = NULL;
    if (posix_memalign(&mem, 4096, map_len ? map_len : 1) != 0) return 0;
    uint8_t *base = mem;
    memcpy(base, data + PARAMS, map_len);
    cq_store s;
    memset(&s, 0, sizeof s);
    s.base = base;
    s.map_len = map_len;
    s.cycle = 3;
    s.align = (flags & 1) ? 4 : 1;
    int misaligned = (flags & 64) != 0;
    s.count_bits = p[1] % 7;
    s.spacing_bits = p[2] % 7;
    s.index_count = 1ull << s.count_bits;
    s.index_spacing = 1ull << s.spacing_bits;
    int fs = 2 * s.count_bits + s.spacing_bits;
    s.file_shift = fs > 32 ? fs : 32;
    if (flags & 8) s.i2i_off = field_off(ld16(p + 3), map_len, misaligned);
    if (flags & 4) {
        s.wp_off = field_off(ld16(p + 5), map_len, misaligned);
        s.wp_seq_off = s.wp_off ? s.wp_off + 8 : 0;
    }
    s.last_index_off = field_off(ld16(p + 7), map_len, misaligned);
    /* where the header document ends, as the Python layer computes it */
    if (map_len >= 4) {
        uint32_t h0;
        memcpy(&h0, base, 4);
        uint64_t end0 = 4 + (uint64_t)(h0 & CQ_HDR_LENGTH_MASK);
        s.data_start = end0 <= map_len ? (s.align == 4 ? (end0 + 3) & ~3ull : end0) : 0;
    }
    int include_meta = (flags & 2) != 0;

    uint64_t positions[NCHECK];
    uint64_t n = read_all(&s, include_meta, positions, NCHECK);
    read_all(&s, !include_meta, NULL, 0);

    /* walking alone must agree with sequential reading */
    cq_store w;
    plain(&w, &s);
    for (uint64_t i = 0; i < n && i < NCHECK; i++) {
        uint64_t pos = 0;
        FUZZ_ASSERT(cq_seek(&w, i, &pos) == CQ_OK);
        FUZZ_ASSERT(pos == positions[i]);
    }

    uint64_t seqs[8] = {0, 1, p[11], p[12], (uint64_t)p[13] << 8 | p[14], n, n + 1, UINT64_MAX};
    for (int i = 0; i < 8; i++) check_seek(&s, seqs[i]);
    check_find_end(&s);
    check_batches(&s);
    scan_some(&s, p);

    if (flags & 16) {
        append_phase(&s, p);
        read_all(&s, include_meta, NULL, 0);
        for (int i = 0; i < 8; i++) check_seek(&s, seqs[i]);
        check_find_end(&s);
        check_batches(&s);
    }
    free(mem);
    return 0;
}

/* ------------------------------------------------------------------ */
/* seed images: valid files written by the core itself                 */

#if defined(FUZZ_SMOKE_MAIN) || defined(FUZZ_SEEDS_MAIN)

#include <errno.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WP_F 8
#define I2I_F 24
#define LAST_F 32
#define HLEN 60

#define FUZZ_NAME "fuzz-smoke"
#include "fuzz_smoke.h"

static uint64_t put_index_doc(uint8_t *b, uint64_t pos, const char *name, uint64_t cap) {
    uint64_t body = pos + 4;
    size_t nlen = strlen(name);
    b[body] = 0xB9;
    b[body + 1] = (uint8_t)nlen;
    memcpy(b + body + 2, name, nlen);
    uint64_t q = body + 2 + nlen;
    uint64_t pad = (8 - ((q + 1) & 7)) & 7;
    if (pad >= 5) {
        b[q] = 0x8E;
        uint32_t n = (uint32_t)(pad - 5);
        memcpy(b + q + 1, &n, 4);
    } else {
        memset(b + q, 0x8F, pad);
    }
    uint64_t arr = q + pad;
    b[arr] = 0x8D;
    memcpy(b + arr + 1, &cap, 8);
    uint64_t end = arr + 17 + 8 * cap;
    uint32_t h = CQ_HDR_META | (uint32_t)(end - body);
    memcpy(b + pos, &h, 4);
    return (end + 3) & ~(uint64_t)3;
}

/* A cycle file image (params + bytes) written with cq_append.  Returns its size. */
static size_t make_seed(uint8_t *out, size_t cap, int variant) {
    if (cap < PARAMS + 1024) return 0;
    uint8_t *p = out, *b = out + PARAMS;
    size_t blen = cap - PARAMS;
    if (blen > 12288) blen = 12288;
    memset(out, 0, PARAMS + blen);
    int align4 = variant % 5 != 4;
    int indexed = align4 && variant % 3 != 2;
    int cbits = 1 + variant % 3, sbits = variant % 2;
    int nmsg = (int)below(60);
    uint32_t h = CQ_HDR_META | HLEN;
    memcpy(b, &h, 4);
    static const uint8_t ev[4] = {0xB9, 6, 'h', 'e'};
    memcpy(b + 4, ev, 4);
    memset(b + 40, 0x8F, HLEN + 4 - 40);
    uint64_t pos = align4 ? 64 : 4 + HLEN;
    cq_store s;
    memset(&s, 0, sizeof s);
    s.base = b;
    s.map_len = blen;
    s.cycle = 3;
    s.align = align4 ? 4 : 1;
    s.file_shift = 32;
    s.wp_off = WP_F;
    s.wp_seq_off = WP_F + 8;
    s.data_start = pos;
    if (indexed) {
        s.count_bits = cbits;
        s.spacing_bits = sbits;
        s.index_count = 1ull << cbits;
        s.index_spacing = 1ull << sbits;
        s.i2i_off = I2I_F;
        s.last_index_off = LAST_F;
        memcpy(b + I2I_F, &pos, 8);
        pos = put_index_doc(b, pos, "index2index", s.index_count);
    }
    int64_t lock = INT64_MIN;
    cq_appender a;
    memset(&a, 0, sizeof a);
    a.store = &s;
    a.write_lock = &lock;
    a.pid = 1;
    a.lock_spin_ns = 1000;
    a.queue_shift = 32;
    a.allocated = UINT64_MAX;
    a.pos = pos;
    uint8_t msg[64];
    for (int i = 0; i < nmsg; i++) {
        int meta = below(6) == 0;
        uint64_t len = below(24);
        for (uint64_t k = 0; k < len; k++) msg[k] = (uint8_t)('a' + (i + k) % 26);
        int64_t r = cq_append(&a, msg, len, meta);
        if (r < 0) break;
    }
    if (below(4) == 0) cq_write_eof(&s, 0, &wneed);
    uint64_t used = a.pos + 8 + below(64);
    if (used > blen) used = blen;
    p[0] = (uint8_t)((align4 ? 1 : 0) | (below(2) ? 2 : 0) | 4 | (indexed ? 8 : 0) |
                     (below(3) == 0 ? 16 : 0));
    p[1] = (uint8_t)(indexed ? cbits : 0);
    p[2] = (uint8_t)(indexed ? sbits : 0);
    uint16_t v = I2I_F;
    memcpy(p + 3, &v, 2);
    v = WP_F;
    memcpy(p + 5, &v, 2);
    v = LAST_F;
    memcpy(p + 7, &v, 2);
    p[11] = (uint8_t)below(8);
    p[12] = (uint8_t)below(64);
    p[13] = 0;
    p[14] = (uint8_t)below(80);
    p[15] = (uint8_t)below(40);
    return PARAMS + used;
}

#endif

#ifdef FUZZ_SMOKE_MAIN

#define NSEEDS 48

static uint64_t interesting64(uint64_t flen) {
    static const uint64_t fixed[] = {0, 1, 3, 4, 7, 8, 16, 60, 64, 0x7FFFFFFFull, 0x80000000ull,
                                     0xFFFFFFFFull, 1ull << 32, 1ull << 62, 1ull << 63,
                                     INT64_MAX, UINT64_MAX, UINT64_MAX - 3, UINT64_MAX - 16};
    switch (below(4)) {
    case 0: return fixed[below(sizeof fixed / sizeof fixed[0])];
    case 1: return below(flen + 16);
    case 2: return (below(flen + 16)) & ~(uint64_t)3;
    default: return rnd();
    }
}

static uint32_t interesting32(uint64_t flen) {
    uint32_t len = (uint32_t)(below(3) ? below(flen + 64) : rnd()) & CQ_HDR_LENGTH_MASK;
    switch (below(8)) {
    case 0: return 0;
    case 1: return CQ_HDR_META;
    case 2: return CQ_HDR_META | len;
    case 3: return len;
    case 4: return CQ_HDR_NOT_COMPLETE | len;
    case 5: return CQ_HDR_EOF;
    case 6: return CQ_HDR_LENGTH_MASK | (uint32_t)(below(2) ? CQ_HDR_META : 0);
    default: return (uint32_t)rnd();
    }
}

static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
    int nmut = 1 + (int)below(6);
    for (int m = 0; m < nmut; m++) {
        size_t flen = len > PARAMS ? len - PARAMS : 0;
        switch (below(11)) {
        case 0: /* bit flip */
            if (len) buf[below(len)] ^= (uint8_t)(1u << below(8));
            break;
        case 1: /* random byte */
            if (len) buf[below(len)] = (uint8_t)rnd();
            break;
        case 2: /* a header word, often at a 4-aligned file offset */
            if (flen >= 4) {
                size_t at = PARAMS + (below(2) ? below(flen - 3) & ~(size_t)3 : below(flen - 3));
                uint32_t v = interesting32(flen);
                memcpy(buf + at, &v, 4);
            }
            break;
        case 3: /* a 64-bit position at the binding fields or anywhere */
            if (flen >= 8) {
                static const size_t fields[] = {WP_F, WP_F + 8, I2I_F, LAST_F};
                size_t at = below(2) ? PARAMS + fields[below(4)]
                                     : PARAMS + (below(flen - 7) & ~(size_t)(below(2) ? 7 : 0));
                if (at + 8 <= len) {
                    uint64_t v = interesting64(flen);
                    memcpy(buf + at, &v, 8);
                }
            }
            break;
        case 4: /* an index array entry / capacity / used (right after a 0x8D) */
            for (int tries = 0; tries < 8 && flen > 17; tries++) {
                size_t at = PARAMS + below(flen - 17);
                if (buf[at] == 0x8D) {
                    size_t slot = at + 1 + 8 * below(4 + below(8));
                    if (slot + 8 <= len) {
                        uint64_t v = interesting64(flen);
                        memcpy(buf + slot, &v, 8);
                    }
                    break;
                }
            }
            break;
        case 5: /* truncate */
            if (flen) len = PARAMS + below(flen + 1);
            break;
        case 6: /* extend with zeros or noise */
            if (len < cap) {
                size_t add = below(cap - len < 256 ? cap - len : 256) + 1;
                int noise = below(2);
                for (size_t i = 0; i < add; i++) buf[len + i] = noise ? (uint8_t)rnd() : 0;
                len += add;
            }
            break;
        case 7: /* copy a block within the file */
            if (flen > 8) {
                size_t n = 1 + below(flen / 2);
                size_t from = PARAMS + below(flen - n + 1), to = PARAMS + below(flen - n + 1);
                memmove(buf + to, buf + from, n);
            }
            break;
        case 8: /* a parameter byte */
            buf[below(PARAMS)] = (uint8_t)rnd();
            break;
        case 9: /* zero a range */
            if (flen) {
                size_t at = PARAMS + below(flen);
                size_t n = below(len - at < 64 ? len - at : 64) + 1;
                memset(buf + at, 0, n);
            }
            break;
        default: /* flags */
            buf[0] ^= (uint8_t)(1u << below(7));
            break;
        }
    }
    return len;
}

static void usage(void) {
    fprintf(stderr, "usage: fuzz_smoke [-n iterations] [-s seed] [-m max_len] [-o crash_dir]\n"
                    "       fuzz_smoke -w corpus_dir       (write seed inputs and exit)\n"
                    "       fuzz_smoke FILE...             (replay inputs)\n");
}

/* the seeds, made once (the smoke run copies one per input) */
static uint8_t seeds[NSEEDS][16384 + PARAMS];
static size_t seed_len[NSEEDS];

/* one input of the smoke run: pure noise now and then, else a seed, mostly
 * damaged (cap: the -m length) */
static size_t next_input(uint8_t *buf, size_t cap) {
    uint64_t kind = below(20);
    if (kind == 0) {
        size_t len = below(cap < 4096 ? cap : 4096) + 1;
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rnd();
        return len;
    }
    int k = (int)below(NSEEDS);
    size_t len = seed_len[k] < cap ? seed_len[k] : cap;
    memcpy(buf, seeds[k], len);
    return kind > 1 ? mutate(buf, len, cap) : len;
}

int main(int argc, char **argv) {
    unsigned long iters = 20000, seed = 1;
    size_t max_len = 16384;
    const char *seed_dir = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:m:o:w:h")) != -1) {
        switch (opt) {
        case 'n': iters = strtoul(optarg, NULL, 10); break;
        case 's': seed = strtoul(optarg, NULL, 10); break;
        case 'm': max_len = strtoul(optarg, NULL, 10); break;
        case 'o': g_outdir = optarg; break;
        case 'w': seed_dir = optarg; break;
        default: usage(); return 2;
        }
    }
    if (max_len < PARAMS + 2048) max_len = PARAMS + 2048;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (optind < argc) {
        int rc = 0;
        for (int i = optind; i < argc; i++) rc |= run_file(argv[i]);
        return rc;
    }
    fuzz_seed(seed);
    for (int i = 0; i < NSEEDS; i++)
        seed_len[i] = make_seed(seeds[i], sizeof seeds[i] < max_len ? sizeof seeds[i] : max_len, i);
    if (seed_dir) {
        for (int i = 0; i < NSEEDS; i++) {
            if (write_seed(seed_dir, i, seeds[i], seed_len[i])) return 1;
        }
        printf("fuzz-smoke: wrote %d seed inputs to %s\n", NSEEDS, seed_dir);
        return 0;
    }
    uint8_t *buf = malloc(max_len);
    double secs = fuzz_run(iters, buf, max_len, next_input);
    free(buf);
    printf("fuzz-smoke: %lu inputs (seed %lu) in %.1f s, no crash, hang or sanitizer report\n"
           "fuzz-smoke: %lu harness runs, %lu excerpts read, %lu seeks found (%lu with an index), "
           "%lu ends found, %lu appends, %lu corrupt reports\n",
           iters, seed, secs, st_inputs, st_excerpts, st_seek_ok, st_seek_index, st_end_ok,
           st_appended, st_corrupt);
    return 0;
}

#endif
