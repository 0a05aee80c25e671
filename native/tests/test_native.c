/*
 * Plain C unit tests of the native core (native/cq.c), meant to run under
 * AddressSanitizer and UndefinedBehaviorSanitizer (`make -C native test`).
 *
 * Every test builds a small cycle-file image in a page-aligned heap buffer of
 * exactly `map_len` bytes (so any read past the mapping is an ASan report),
 * sets a cq_store up by hand and checks the core against the format reference
 * (shared/reference/chronicle-queue-format.md §3-§4).
 *
 * Each test runs in a forked child with an alarm, so a crash, a sanitizer
 * abort or a hang fails that test alone and the run goes on.
 *
 * The tests under "damaged files" are regressions of core bugs found by
 * fuzzing (bounds checks that wrapped for positions near 2^64, unbounded
 * index lookups, an append reporting failure after publishing, ...).
 *
 * Usage: test_native [--list] [substring-of-test-name]
 */
#define _GNU_SOURCE
#include "../cq.h"
static uint64_t wneed; /* cq_write_eof's need output */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* tiny test framework                                                 */

static int g_checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        g_checks++;                                                                  \
        if (!(cond)) {                                                               \
            fprintf(stderr, "  %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                               \
    do {                                                                             \
        g_checks++;                                                                  \
        long long va_ = (long long)(a), vb_ = (long long)(b);                        \
        if (va_ != vb_) {                                                            \
            fprintf(stderr, "  %s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld, %#llx vs %#llx)\n", \
                    __FILE__, __LINE__, #a, #b, va_, vb_, (unsigned long long)va_,   \
                    (unsigned long long)vb_);                                        \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

typedef void (*test_fn)(void);
typedef struct {
    const char *name;
    test_fn fn;
    unsigned timeout_s;
} test_case;

/* ------------------------------------------------------------------ */
/* image helpers                                                       */

#define META CQ_HDR_META
#define PID_A 4242
#define PID_B 777
#define UNLOCKED INT64_MIN

/* header-document field offsets used by these tests (inside the header doc) */
#define WP_OFF 8
#define WP_SEQ_OFF 16
#define I2I_OFF 24
#define LAST_OFF 32
#define HDR_LEN 60 /* payload of the header document at 0 */
#define DATA_START 64

static uint8_t *new_buf(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) abort();
    memset(p, 0, n);
    return p;
}

static void w32(uint8_t *b, uint64_t off, uint32_t v) { memcpy(b + off, &v, 4); }
static void w64(uint8_t *b, uint64_t off, uint64_t v) { memcpy(b + off, &v, 8); }
static uint32_t r32(const uint8_t *b, uint64_t off) { uint32_t v; memcpy(&v, b + off, 4); return v; }
static uint64_t r64(const uint8_t *b, uint64_t off) { uint64_t v; memcpy(&v, b + off, 8); return v; }
static uint64_t al4(uint64_t p) { return (p + 3) & ~(uint64_t)3; }

/* The file header document: META | HDR_LEN at 0, a BinaryWire-looking body
 * whose binding fields (wp, wp_seq, i2i, last) are zero. */
static uint64_t put_file_header(uint8_t *b) {
    w32(b, 0, META | HDR_LEN);
    static const uint8_t ev[8] = {0xB9, 6, 'h', 'e', 'a', 'd', 'e', 'r'};
    memcpy(b + 4, ev, 4); /* only 4 bytes: the fields start at 8 */
    memset(b + 40, 0x8F, HDR_LEN + 4 - 40);
    return DATA_START;
}

/* A document at pos; returns the next header position (aligned as `align`). */
static uint64_t put_doc(uint8_t *b, uint64_t pos, const void *payload, uint32_t len, int meta,
                        int align) {
    memcpy(b + pos + 4, payload, len);
    w32(b, pos, len | (meta ? META : 0));
    uint64_t end = pos + 4 + len;
    return align == 4 ? al4(end) : end;
}

/* An index document ("index2index" or "index") as the reference describes:
 * EVENT_NAME, padding so that the capacity long is 8-aligned, 0x8D, cap, used,
 * values[cap].  Returns the next header position (4-aligned). */
static uint64_t put_index_doc(uint8_t *b, uint64_t pos, const char *name, uint64_t cap,
                              uint64_t used, const uint64_t *values, uint64_t nvalues) {
    uint64_t body = pos + 4;
    size_t nlen = strlen(name);
    b[body] = 0xB9;
    b[body + 1] = (uint8_t)nlen;
    memcpy(b + body + 2, name, nlen);
    uint64_t q = body + 2 + nlen;
    uint64_t pad = (8 - ((q + 1) & 7)) & 7;
    if (pad >= 5) {
        b[q] = 0x8E;
        w32(b, q + 1, (uint32_t)(pad - 5));
        memset(b + q + 5, 0, pad - 5);
    } else {
        memset(b + q, 0x8F, pad);
    }
    uint64_t arr = q + pad;
    b[arr] = 0x8D;
    w64(b, arr + 1, cap);
    w64(b, arr + 9, used);
    for (uint64_t i = 0; i < cap; i++) w64(b, arr + 17 + 8 * i, i < nvalues ? values[i] : 0);
    uint64_t end = arr + 17 + 8 * cap;
    w32(b, pos, META | (uint32_t)(end - body));
    return al4(end);
}

static void store_init(cq_store *s, uint8_t *base, uint64_t map_len, int align) {
    memset(s, 0, sizeof *s);
    s->base = base;
    s->map_len = map_len;
    s->cycle = 7;
    s->align = align;
    s->file_shift = 32;
    s->data_start = DATA_START;
}

static void store_index(cq_store *s, uint64_t count, uint64_t spacing) {
    s->index_count = count;
    s->index_spacing = spacing;
    s->count_bits = __builtin_ctzll(count);
    s->spacing_bits = __builtin_ctzll(spacing);
    int fs = 2 * s->count_bits + s->spacing_bits;
    s->file_shift = fs > 32 ? fs : 32;
}

static void tailer_init(cq_tailer *t, cq_store *s) {
    memset(t, 0, sizeof *t);
    t->store = s;
    t->queue_shift = 32;
}

static void appender_init(cq_appender *a, cq_store *s, int64_t *lock) {
    memset(a, 0, sizeof *a);
    a->store = s;
    a->write_lock = lock;
    a->pid = PID_A;
    a->check_cycle = 0;
    a->lock_spin_ns = 1000000;
    a->queue_shift = 32;
    a->last_index = -1;
    a->allocated = UINT64_MAX; /* disk blocks reserved: everywhere */
}

static int64_t idx(int64_t cycle, uint64_t seq) { return (int64_t)(((uint64_t)cycle << 32) | seq); }

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* cq_append, normalised: CQ_OK on success (the core returns CQ_OK or, for a
 * data excerpt, its index), the CQ_ code otherwise. */
static int app(cq_appender *a, const void *data, uint64_t len, int meta) {
    int64_t r = cq_append(a, (const uint8_t *)data, len, meta);
    if (r >= 0) {
        if (!meta && r != CQ_OK && r != a->last_index) {
            fprintf(stderr, "  cq_append returned %lld, last_index is %lld\n", (long long)r,
                    (long long)a->last_index);
            exit(1);
        }
        return CQ_OK;
    }
    return (int)r;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

/* header, "hello" (data), "m" (meta), "world!" (data), then zeros */
static uint64_t build_basic(uint8_t *b, uint64_t *positions) {
    uint64_t p = put_file_header(b);
    positions[0] = p;
    p = put_doc(b, p, "hello", 5, 0, 4);
    positions[1] = p;
    p = put_doc(b, p, "m", 1, 1, 4);
    positions[2] = p;
    p = put_doc(b, p, "world!", 6, 0, 4);
    positions[3] = p;
    return p;
}

static void t_read_data_and_meta(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    build_basic(b, pos);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);

    CHECK_EQ(cq_read(&t), 5);
    CHECK(memcmp(t.data, "hello", 5) == 0);
    CHECK_EQ(t.len, 5);
    CHECK_EQ(t.is_meta, 0);
    CHECK_EQ(t.index, idx(7, 0));
    CHECK_EQ(t.seq, 1);
    CHECK_EQ(t.pos, pos[1]);
    CHECK(t.data == (const char *)b + pos[0] + 4);

    /* the metadata document is skipped */
    CHECK_EQ(cq_read(&t), 6);
    CHECK(memcmp(t.data, "world!", 6) == 0);
    CHECK_EQ(t.index, idx(7, 1));
    CHECK_EQ(t.pos, pos[3]);
    CHECK_EQ(t.seq, 2);

    /* nothing more: a 0 header word is "not yet written" */
    CHECK_EQ(cq_read(&t), CQ_NONE);
    CHECK_EQ(t.pos, pos[3]);
    CHECK_EQ(t.seq, 2);
    CHECK_EQ(cq_read(&t), CQ_NONE);

    /* the writer publishes one more; the same tailer sees it */
    put_doc(b, pos[3], "x", 1, 0, 4);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ(t.index, idx(7, 2));
    free(b);
}

static void t_read_scratch_copy(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    uint64_t end = build_basic(b, pos);
    static char big[40];
    memset(big, 'B', sizeof big);
    put_doc(b, end, big, sizeof big, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    char scratch[8];
    memset(scratch, '-', sizeof scratch);
    t.scratch = scratch;
    t.scratch_cap = sizeof scratch;
    CHECK_EQ(cq_read(&t), 5);
    CHECK(memcmp(scratch, "hello", 5) == 0);
    CHECK_EQ(cq_read(&t), 6);
    CHECK(memcmp(scratch, "world!", 6) == 0);
    CHECK_EQ(cq_read(&t), sizeof big); /* too large for the scratch: left alone */
    CHECK(memcmp(scratch, "world!", 6) == 0);
    CHECK(t.data == (const char *)b + end + 4);
    free(b);
}

static void t_read_include_meta(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    build_basic(b, pos);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    t.include_meta = 1;

    CHECK_EQ(cq_read(&t), HDR_LEN); /* the file header itself */
    CHECK_EQ(t.is_meta, 1);
    CHECK(t.data == (const char *)b + 4);
    CHECK_EQ(t.seq, 0);
    CHECK_EQ(t.pos, DATA_START);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(t.is_meta, 0);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ(t.is_meta, 1);
    CHECK(t.data[0] == 'm');
    CHECK_EQ(t.index, idx(7, 1)); /* a metadata doc carries the next data index */
    CHECK_EQ(t.seq, 1);
    CHECK_EQ(cq_read(&t), 6);
    CHECK_EQ(t.is_meta, 0);
    CHECK_EQ(t.index, idx(7, 1));
    CHECK_EQ(cq_read(&t), CQ_NONE);
    free(b);
}

static void t_read_eof(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    uint64_t end = build_basic(b, pos);
    w32(b, end, CQ_HDR_EOF);
    static const uint8_t tr[4] = {0xC3, 'E', 'O', 'F'};
    memcpy(b + end + 4, tr, 4);
    put_doc(b, end + 8, "after", 5, 0, 4); /* never read: EOF closes the cycle */
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(cq_read(&t), 6);
    CHECK_EQ(cq_read(&t), CQ_EOF);
    CHECK_EQ(t.pos, end);
    CHECK_EQ(cq_read(&t), CQ_EOF);
    CHECK_EQ(t.seq, 2);

    uint64_t p, q;
    int eof = 0;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, end);
    CHECK_EQ(q, 2);
    CHECK_EQ(eof, 1);
    CHECK_EQ(cq_seek(&s, 2, &p), CQ_NOT_FOUND);
    CHECK_EQ(cq_seek(&s, 1, &p), CQ_OK);
    CHECK_EQ(p, pos[2]);

    /* an old-style bare EOF word (no trailer) is also EOF */
    memset(b + end + 4, 0, 4);
    tailer_init(&t, &s);
    t.pos = end;
    CHECK_EQ(cq_read(&t), CQ_EOF);
    free(b);
}

static void t_read_not_ready(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    uint64_t end = build_basic(b, pos);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    /* a header being written by an old-protocol writer: NOT_COMPLETE | len */
    w32(b, pos[0], CQ_HDR_NOT_COMPLETE | 5);
    CHECK_EQ(cq_read(&t), CQ_NONE);
    CHECK_EQ(t.pos, pos[0]);
    CHECK_EQ(t.seq, 0);
    w32(b, pos[0], CQ_HDR_NOT_COMPLETE | META | 5);
    CHECK_EQ(cq_read(&t), CQ_NONE);
    w32(b, pos[0], 5);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(cq_read(&t), 6);
    CHECK_EQ(t.pos, end);
    CHECK_EQ(cq_read(&t), CQ_NONE);

    uint64_t p, q;
    w32(b, pos[0], 0); /* a hole in the middle ends the written data */
    CHECK_EQ(cq_seek(&s, 0, &p), CQ_NOT_REACHED);
    CHECK_EQ(p, pos[0]);
    CHECK_EQ(cq_seek(&s, 1, &p), CQ_NOT_FOUND);
    int eof = 1;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, pos[0]);
    CHECK_EQ(q, 0);
    CHECK_EQ(eof, 0);
    free(b);
}

static void t_read_need_map(void) {
    const uint64_t L = 4096;
    uint8_t *full = new_buf(L);
    uint64_t pos[4];
    build_basic(full, pos);
    cq_tailer t;
    cq_store s;

    /* the header word of "world!" crosses the mapping */
    uint64_t ml = pos[2] + 2;
    uint8_t *b = new_buf(ml);
    memcpy(b, full, ml);
    store_init(&s, b, ml, 4);
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(cq_read(&t), CQ_NEED_MAP);
    CHECK_EQ(t.need, pos[2] + 4);
    CHECK_EQ(t.err_pos, pos[2]);
    CHECK_EQ(t.pos, pos[2]);
    CHECK_EQ(t.seq, 1);
    /* map more: the read carries on where it stopped */
    s.base = full;
    s.map_len = L;
    CHECK_EQ(cq_read(&t), 6);
    CHECK_EQ(t.index, idx(7, 1));
    free(b);

    /* header fits exactly, payload crosses */
    ml = pos[2] + 4 + 3;
    b = new_buf(ml);
    memcpy(b, full, ml);
    store_init(&s, b, ml, 4);
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(cq_read(&t), CQ_NEED_MAP);
    CHECK_EQ(t.need, pos[2] + 4 + 6);
    CHECK_EQ(t.err_pos, pos[2]);
    CHECK_EQ(t.pos, pos[2]);
    uint64_t p, q;
    int eof;
    CHECK_EQ(cq_seek(&s, 1, &p), CQ_OK); /* the header is enough to locate it */
    CHECK_EQ(p, pos[2]);
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_NEED_MAP);
    free(b);

    /* the mapping ends exactly at the end of a payload: the next header needs mapping */
    ml = pos[3];
    b = new_buf(ml);
    memcpy(b, full, ml);
    store_init(&s, b, ml, 4);
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(cq_read(&t), 6);
    CHECK_EQ(cq_read(&t), CQ_NEED_MAP);
    CHECK_EQ(t.need, pos[3] + 4);
    CHECK_EQ(cq_seek(&s, 2, &p), CQ_NEED_MAP);
    CHECK_EQ(p, pos[3] + 4);
    free(b);

    /* a mapping shorter than the first header word */
    b = new_buf(3);
    memcpy(b, full, 3);
    store_init(&s, b, 3, 4);
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), CQ_NEED_MAP);
    CHECK_EQ(t.need, 4);
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_NEED_MAP);
    CHECK_EQ(cq_seek(&s, 0, &p), CQ_NEED_MAP);
    free(b);
    free(full);
}

static void t_read_corrupt_first_header(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    w32(b, 0, META); /* zero-length metadata at 0 */
    put_doc(b, 4, "abc", 3, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), CQ_CORRUPT);
    CHECK_EQ(t.err_pos, 0);
    CHECK_EQ(cq_read(&t), CQ_CORRUPT); /* stays corrupt, never loops or crashes */
    t.include_meta = 1;
    CHECK_EQ(cq_read(&t), CQ_CORRUPT);
    uint64_t p, q;
    int eof;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_CORRUPT);
    CHECK_EQ(cq_seek(&s, 0, &p), CQ_CORRUPT);
    uint8_t out[64];
    int64_t offs[5], ids[4];
    uint64_t n = 99;
    CHECK_EQ(cq_read_batch(&t, out, sizeof out, offs, ids, 4, &n), CQ_CORRUPT);
    CHECK_EQ(n, 0);
    CHECK_EQ(t.include_meta, 1);
    /* a zero-length metadata doc later in the file is just skipped */
    w32(b, 0, META | 0);
    put_file_header(b);
    w32(b, DATA_START, META | 0);
    put_doc(b, DATA_START + 4, "abc", 3, 0, 4);
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 3);
    free(b);
}

static void t_read_unaligned_format(void) {
    /* dataFormat absent: headers are not padded (Chronicle 4 style) */
    const uint64_t L = 512;
    uint8_t *b = new_buf(L);
    uint64_t p = 0;
    p = put_doc(b, p, "hdr", 3, 1, 1); /* 7 */
    uint64_t p0 = p;
    p = put_doc(b, p, "one", 3, 0, 1); /* 14 */
    p = put_doc(b, p, "three", 5, 0, 1);
    uint64_t p2 = p;
    p = put_doc(b, p, "x", 1, 1, 1);
    p = put_doc(b, p, "z", 1, 0, 1);
    cq_store s;
    store_init(&s, b, L, 1);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 3);
    CHECK(memcmp(t.data, "one", 3) == 0);
    CHECK_EQ(cq_read(&t), 5);
    CHECK_EQ(t.pos, p2);
    CHECK_EQ(cq_read(&t), 1);
    CHECK(t.data[0] == 'z');
    CHECK_EQ(t.pos, p);
    CHECK_EQ(cq_read(&t), CQ_NONE);
    uint64_t q, sp;
    int eof;
    CHECK_EQ(cq_seek(&s, 0, &sp), CQ_OK);
    CHECK_EQ(sp, p0);
    CHECK_EQ(cq_find_end(&s, &sp, &q, &eof), CQ_OK);
    CHECK_EQ(sp, p);
    CHECK_EQ(q, 3);
    free(b);
}

static void t_read_batch(void) {
    const uint64_t L = 8192;
    uint8_t *b = new_buf(L);
    uint64_t p = put_file_header(b);
    char msg[64];
    for (int i = 0; i < 10; i++) {
        int n = snprintf(msg, sizeof msg, "message-%d", i); /* 9 bytes each */
        p = put_doc(b, p, msg, (uint32_t)n, 0, 4);
        if (i == 3) p = put_doc(b, p, "meta", 4, 1, 4);
    }
    uint64_t big_pos = p;
    static char big[100];
    memset(big, 'B', sizeof big);
    p = put_doc(b, p, big, sizeof big, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    t.include_meta = 1;

    /* the header doc is metadata: batches skip it even with include_meta */
    uint8_t out[40];
    int64_t offs[9], ids[8];
    uint64_t n = 0;
    CHECK_EQ(cq_read_batch(&t, out, sizeof out, offs, ids, 8, &n), CQ_OK);
    CHECK_EQ(n, 4); /* 4 * 9 = 36 <= 40; a fifth does not fit */
    CHECK_EQ(t.include_meta, 1);
    for (uint64_t i = 0; i < n; i++) {
        CHECK_EQ(offs[i], 9 * (int64_t)i);
        CHECK_EQ(ids[i], idx(7, i));
    }
    CHECK_EQ(offs[4], 36);
    CHECK(memcmp(out, "message-0message-1", 18) == 0);
    CHECK_EQ(t.seq, 4);

    /* max_n bounds the batch */
    CHECK_EQ(cq_read_batch(&t, out, sizeof out, offs, ids, 2, &n), CQ_OK);
    CHECK_EQ(n, 2);
    CHECK_EQ(ids[0], idx(7, 4));
    CHECK(memcmp(out + 9, "message-5", 9) == 0);
    CHECK_EQ(cq_read_batch(&t, out, sizeof out, offs, ids, 8, &n), CQ_OK);
    CHECK_EQ(n, 4);
    CHECK_EQ(ids[3], idx(7, 9));
    /* the big one does not fit at all: TOO_LARGE, cursor untouched */
    uint64_t before = t.pos;
    CHECK_EQ(before, big_pos);
    CHECK_EQ(cq_read_batch(&t, out, sizeof out, offs, ids, 8, &n), CQ_TOO_LARGE);
    CHECK_EQ(n, 0);
    CHECK_EQ(t.need, sizeof big);
    CHECK_EQ(t.pos, before);
    CHECK_EQ(t.seq, 10);
    /* with room for it */
    uint8_t out2[128];
    CHECK_EQ(cq_read_batch(&t, out2, sizeof out2, offs, ids, 8, &n), CQ_OK);
    CHECK_EQ(n, 1);
    CHECK_EQ(offs[1], sizeof big);
    CHECK_EQ(cq_read_batch(&t, out2, sizeof out2, offs, ids, 8, &n), CQ_NONE);
    CHECK_EQ(n, 0);
    /* max_n == 0 reads nothing */
    tailer_init(&t, &s);
    CHECK_EQ(cq_read_batch(&t, out2, sizeof out2, offs, ids, 0, &n), CQ_OK);
    CHECK_EQ(n, 0);
    CHECK_EQ(t.seq, 0);
    free(b);
}

static void t_read_many_meta_bounded(void) {
    /* more than MAX_META_SKIPS metadata docs in a row: cq_read returns NONE
     * (bounded work per call) and the next calls carry on to the data */
    const uint64_t L = 5000 * 8 + 4096;
    uint8_t *b = new_buf(L);
    uint64_t p = put_file_header(b);
    for (int i = 0; i < 5000; i++) p = put_doc(b, p, "mm", 2, 1, 4);
    put_doc(b, p, "data", 4, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    int64_t r = CQ_NONE;
    int calls = 0;
    while (calls < 10 && (r = cq_read(&t)) == CQ_NONE) calls++;
    CHECK_EQ(r, 4);
    CHECK(calls >= 1);
    CHECK_EQ(t.index, idx(7, 0));
    uint64_t sp;
    CHECK_EQ(cq_seek(&s, 0, &sp), CQ_OK);
    CHECK_EQ(sp, p);
    free(b);
}

static void t_scan(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    build_basic(b, pos);
    cq_store s;
    store_init(&s, b, L, 4);
    uint64_t h = 0, nx = 0;
    CHECK_EQ(cq_scan(&s, 0, &h, &nx), CQ_OK);
    CHECK_EQ(h, META | HDR_LEN);
    CHECK_EQ(nx, DATA_START);
    CHECK_EQ(cq_scan(&s, pos[0], &h, &nx), CQ_OK);
    CHECK_EQ(h, 5);
    CHECK_EQ(nx, pos[1]);
    CHECK_EQ(cq_scan(&s, L - 3, &h, &nx), CQ_NEED_MAP);
    CHECK_EQ(cq_scan(&s, L - 4, &h, &nx), CQ_OK);
    free(b);
}

/* ------------------------------------------------------------------ */
/* appending                                                           */

static void t_append_basic(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    /* garbage beyond the written data: the writer zeroes 8 bytes after each payload */
    memset(b + DATA_START + 4, 0xEE, 200);
    memset(b + DATA_START, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    s.wp_off = WP_OFF;
    s.wp_seq_off = WP_SEQ_OFF;
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);

    CHECK_EQ(app(&a, (const uint8_t *)"abc", 3, 0), CQ_OK);
    uint64_t p0 = DATA_START;
    CHECK_EQ(r32(b, p0), 3);
    CHECK(memcmp(b + p0 + 4, "abc", 3) == 0);
    CHECK_EQ(b[p0 + 7], 0);            /* the padding ... */
    CHECK_EQ(r32(b, al4(p0 + 7)), 0);  /* ... and the next header are zeroed */
    CHECK_EQ(a.last_index, idx(7, 0));
    CHECK_EQ(a.pos, al4(p0 + 7));
    CHECK_EQ(a.seq, 1);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r64(b, WP_OFF), p0);
    CHECK_EQ(r64(b, WP_SEQ_OFF), (p0 << 32) | 0);

    /* a zero-length payload becomes one 0x8F padding byte */
    uint64_t p1 = a.pos;
    CHECK_EQ(p1, DATA_START + 8);
    CHECK_EQ(app(&a, NULL, 0, 0), CQ_OK);
    CHECK_EQ(r32(b, p1), 1);
    CHECK_EQ(b[p1 + 4], 0x8F);
    CHECK_EQ(a.last_index, idx(7, 1));
    CHECK_EQ(a.pos, p1 + 8);

    /* metadata: META bit, no sequence, no writePosition update */
    uint64_t p2 = a.pos;
    CHECK_EQ(app(&a, (const uint8_t *)"meta!", 5, 1), CQ_OK);
    CHECK_EQ(r32(b, p2), META | 5);
    CHECK_EQ(a.seq, 2);
    CHECK_EQ(a.last_index, idx(7, 1));
    CHECK_EQ(r64(b, WP_OFF), p1);
    CHECK_EQ(r64(b, WP_SEQ_OFF), (p1 << 32) | 1);
    uint64_t p3 = a.pos;
    CHECK_EQ(p3, al4(p2 + 9));
    CHECK_EQ(b[p2 + 9], 0);
    CHECK_EQ(r32(b, p3), 0);

    /* a second appender (no hints) finds the end by itself */
    cq_appender a2;
    appender_init(&a2, &s, &lock);
    a2.pid = PID_B;
    CHECK_EQ(app(&a2, (const uint8_t *)"0123456789", 10, 0), CQ_OK);
    CHECK_EQ(r32(b, p3), 10);
    CHECK_EQ(a2.last_index, idx(7, 2));
    CHECK_EQ(a2.pos, al4(p3 + 14));
    CHECK_EQ(a2.pos % 4, 0);
    /* and the first one (stale hint) skips over it */
    CHECK_EQ(app(&a, (const uint8_t *)"z", 1, 0), CQ_OK);
    CHECK_EQ(a.last_index, idx(7, 3));
    CHECK_EQ(r32(b, a2.pos), 1);
    CHECK_EQ(lock, UNLOCKED);

    /* everything reads back in order */
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 3);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ((uint8_t)t.data[0], 0x8F);
    CHECK_EQ(cq_read(&t), 10);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ(t.index, idx(7, 3));
    CHECK_EQ(cq_read(&t), CQ_NONE);
    uint64_t p, q;
    int eof;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, a.pos);
    CHECK_EQ(q, 4);
    free(b);
}

static void t_append_unaligned_format(void) {
    const uint64_t L = 1024;
    uint8_t *b = new_buf(L);
    uint64_t start = put_doc(b, 0, "hdr", 3, 1, 1); /* 7: odd */
    cq_store s;
    store_init(&s, b, L, 1);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    /* packed headers sit at any offset: an append (a header CAS) is refused
     * and leaves the file as it was; the write lock is not taken */
    CHECK_EQ(app(&a, (const uint8_t *)"ab", 2, 0), CQ_UNALIGNED);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_UNALIGNED);
    uint64_t need = 0;
    CHECK_EQ(cq_write_eof(&s, 0, &need), CQ_UNALIGNED);
    for (uint64_t i = start; i < L; i++) CHECK_EQ(b[i], 0);
    /* what is there reads as ever */
    put_doc(b, start, "ab", 2, 0, 1);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 2);
    CHECK_EQ(t.pos, start + 6);
    free(b);
}

static void t_append_need_map(void) {
    uint64_t L = DATA_START + 20;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    uint8_t payload[16];
    memset(payload, 'p', sizeof payload);
    /* 4 + 16 + 8 zeroed bytes do not fit in 20 */
    CHECK_EQ(app(&a, payload, 16, 0), CQ_NEED_MAP);
    CHECK_EQ(a.need, DATA_START + 4 + 16 + 8);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r32(b, DATA_START), 0);
    /* 8 bytes fit exactly: 4 + 8 + 8 = 20 */
    CHECK_EQ(app(&a, payload, 8, 0), CQ_OK);
    CHECK_EQ(r32(b, DATA_START), 8);
    /* the next header word lies outside the mapping */
    CHECK_EQ(app(&a, payload, 1, 0), CQ_NEED_MAP);
    CHECK_EQ(lock, UNLOCKED);

    uint8_t *b2 = new_buf(4096);
    memcpy(b2, b, L);
    s.base = b2;
    s.map_len = 4096;
    /* mapped, but the disk blocks are not reserved that far */
    uint64_t at = a.pos;
    a.allocated = at + 4 + 16 + 8 - 1;
    CHECK_EQ(app(&a, payload, 16, 0), CQ_NO_SPACE);
    CHECK_EQ(a.need, at + 4 + 16 + 8);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r32(b2, at), 0);
    CHECK_EQ(cq_doc_begin(&a, 16, 0), CQ_NO_SPACE);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(a.doc_open, 0);
    a.allocated = at + 4 + 16 + 8;
    CHECK_EQ(app(&a, payload, 16, 0), CQ_OK);
    CHECK_EQ(a.last_index, idx(7, 1));
    free(b);
    free(b2);
}

static void t_append_errors(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);

    CHECK_EQ(app(&a, (const uint8_t *)"x", (uint64_t)CQ_HDR_LENGTH_MASK + 1, 0),
             CQ_TOO_LARGE);
    CHECK_EQ(lock, UNLOCKED);

    /* no store / no lock */
    cq_appender bad;
    appender_init(&bad, NULL, &lock);
    CHECK_EQ(app(&bad, (const uint8_t *)"x", 1, 0), CQ_BAD_STATE);
    appender_init(&bad, &s, NULL);
    CHECK_EQ(app(&bad, (const uint8_t *)"x", 1, 0), CQ_BAD_STATE);

    /* the write lock held by another process: bounded spin, then LOCKED */
    lock = PID_B;
    a.lock_spin_ns = 2000000;
    uint64_t t0 = now_ns();
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_LOCKED);
    CHECK(now_ns() - t0 < 2000000000ull);
    CHECK_EQ(lock, PID_B);
    CHECK_EQ(r32(b, DATA_START), 0);
    lock = UNLOCKED;

    /* chronicle.append.lock held by another pid refuses data, not metadata */
    int64_t alock = PID_B;
    a.append_lock = &alock;
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_APPEND_LOCKED);
    CHECK_EQ(app(&a, (const uint8_t *)"m", 1, 1), CQ_OK);
    alock = ((int64_t)1 << 32) | PID_A; /* held by us (low 32 bits) */
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_OK);
    alock = UNLOCKED;
    CHECK_EQ(app(&a, (const uint8_t *)"y", 1, 0), CQ_OK);
    a.append_lock = NULL;

    /* the roll check */
    int64_t clock_ms = 1000 * 7 + 5;
    a.clock_cell = &clock_ms;
    a.epoch = 0;
    a.length_ms = 1000;
    a.check_cycle = 1;
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_OK); /* cycle 7 == store */
    clock_ms = 1000 * 8;
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_ROLL);
    CHECK_EQ(a.want_cycle, 8);
    CHECK_EQ(lock, UNLOCKED);
    a.check_cycle = 0;

    /* a closed cycle */
    CHECK_EQ(cq_write_eof(&s, 0, &wneed), CQ_OK);
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_EOF);
    CHECK_EQ(lock, UNLOCKED);
    cq_appender a3;
    appender_init(&a3, &s, &lock);
    CHECK_EQ(app(&a3, (const uint8_t *)"x", 1, 0), CQ_EOF);
    free(b);
}

static void t_append_takes_over_incomplete(void) {
    /* a header marked NOT_COMPLETE by a writer that died: the lock holder reuses it */
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    w32(b, DATA_START, CQ_HDR_NOT_COMPLETE | 100);
    memset(b + DATA_START + 4, 0xAB, 100);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    CHECK_EQ(app(&a, (const uint8_t *)"new", 3, 0), CQ_OK);
    CHECK_EQ(r32(b, DATA_START), 3);
    CHECK_EQ(b[DATA_START + 7], 0);
    CHECK_EQ(r32(b, DATA_START + 8), 0);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 3);
    CHECK(memcmp(t.data, "new", 3) == 0);
    CHECK_EQ(cq_read(&t), CQ_NONE);
    free(b);
}

/* Forced unlock (UnlockMode.ALWAYS): a writer stalled with its slot claimed
 * loses the lock to another.  The taker turns the claim into padding and
 * writes after it; the stalled writer's late bytes stay inside its own slot and
 * its commit fails with CQ_LOCK_LOST; readers see only the taker's excerpt. */
static void t_lock_lost_claim(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a, bb;
    appender_init(&a, &s, &lock);
    appender_init(&bb, &s, &lock);
    bb.pid = PID_B;

    /* A opens a document and claims 16 bytes, then stalls */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    CHECK_EQ(cq_doc_ensure(&a, 16), CQ_OK);
    uint64_t dp = a.doc_pos;
    CHECK_EQ(r32(b, dp), CQ_HDR_EOF | 16);
    memcpy(b + dp + 4, "AAAAAAAA", 8);
    /* the lock is forced away from A and B appends */
    lock = UNLOCKED;
    CHECK_EQ(app(&bb, (const uint8_t *)"BBBBBBBBBB", 10, 0), CQ_OK);
    CHECK_EQ(r32(b, dp), META | 16);            /* A's slot is padding now */
    uint64_t bp = al4(dp + 4 + 16);
    CHECK_EQ(r32(b, bp), 10);
    CHECK(memcmp(b + bp + 4, "BBBBBBBBBB", 10) == 0);
    CHECK_EQ(lock, UNLOCKED);
    /* A resumes: it writes inside its own slot only, then learns it lost */
    memcpy(b + dp + 4 + 8, "AAAAAAAA", 8);
    CHECK_EQ(cq_doc_ensure(&a, 20), CQ_LOCK_LOST); /* growing the claim fails */
    CHECK_EQ(cq_doc_commit(&a, 16), CQ_LOCK_LOST);
    CHECK_EQ(r32(b, dp), META | 16);
    CHECK(memcmp(b + bp + 4, "BBBBBBBBBB", 10) == 0);
    CHECK_EQ(lock, UNLOCKED); /* A never releases a lock that is not its own */

    /* commit with a lock that belongs to someone else: never published */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    uint64_t dp2 = a.doc_pos;
    CHECK_EQ(dp2, al4(bp + 4 + 10));
    CHECK_EQ(cq_doc_ensure(&a, 4), CQ_OK);
    memcpy(b + dp2 + 4, "late", 4);
    lock = PID_B;
    CHECK_EQ(cq_doc_commit(&a, 4), CQ_LOCK_LOST);
    CHECK_EQ(r32(b, dp2), META | 4);
    CHECK_EQ(lock, PID_B);
    lock = UNLOCKED;

    /* a claim left by a writer that died: the EOF goes after it */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    CHECK_EQ(cq_doc_ensure(&a, 8), CQ_OK);
    uint64_t dp3 = a.doc_pos;
    lock = UNLOCKED;
    CHECK_EQ(cq_write_eof(&s, 0, &wneed), CQ_OK);
    CHECK_EQ(r32(b, dp3), META | 8);
    CHECK_EQ(r32(b, al4(dp3 + 12)), CQ_HDR_EOF);

    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 10);
    CHECK(memcmp(t.data, "BBBBBBBBBB", 10) == 0);
    CHECK_EQ(cq_read(&t), CQ_EOF);
    free(b);
}

/* A document closed from another thread while its owner still copies: the
 * slot becomes padding, the lock is released once, the next excerpt goes
 * after the slot. */
static void t_doc_abandon(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a, bb;
    appender_init(&a, &s, &lock);
    appender_init(&bb, &s, &lock);
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    CHECK_EQ(cq_doc_ensure(&a, 12), CQ_OK);
    uint64_t dp = a.doc_pos;
    CHECK_EQ(cq_doc_abandon(&a), CQ_OK);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(cq_doc_abandon(&a), CQ_BAD_STATE);
    memcpy(b + dp + 4, "still-copyin", 12); /* the owner's late copy */
    CHECK_EQ(cq_doc_commit(&a, 12), CQ_BAD_STATE);
    CHECK_EQ(app(&bb, (const uint8_t *)"next", 4, 0), CQ_OK);
    CHECK_EQ(r32(b, dp), META | 12);
    CHECK_EQ(r32(b, al4(dp + 16)), 4);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 4);
    CHECK(memcmp(t.data, "next", 4) == 0);
    free(b);
}

static void t_append_batch(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    const char *data = "aabbbc";
    int64_t offs[5] = {0, 2, 5, 5, 6}; /* "aa", "bbb", "", "c" */
    uint64_t done = 99;
    CHECK_EQ(cq_append_batch(&a, (const uint8_t *)data, offs, 4, &done), CQ_OK);
    CHECK_EQ(done, 4);
    CHECK_EQ(a.last_index, idx(7, 3));
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(cq_append_batch(&a, (const uint8_t *)data, offs, 0, &done), CQ_OK);
    CHECK_EQ(done, 0);
    /* offsets going backwards stop the batch */
    int64_t bad[3] = {0, 2, 1};
    CHECK_EQ(cq_append_batch(&a, (const uint8_t *)data, bad, 2, &done), CQ_BAD_STATE);
    CHECK_EQ(done, 1);
    CHECK_EQ(lock, UNLOCKED);
    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 2);
    CHECK_EQ(cq_read(&t), 3);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ((uint8_t)t.data[0], 0x8F);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ(cq_read(&t), 2);
    CHECK_EQ(t.index, idx(7, 4));
    CHECK_EQ(cq_read(&t), CQ_NONE);

    /* a batch that runs out of mapping part-way reports how many were written */
    uint64_t L2 = DATA_START + 36; /* room for three 4-byte excerpts (+8 zeroed) */
    uint8_t *b2 = new_buf(L2);
    put_file_header(b2);
    cq_store s2;
    store_init(&s2, b2, L2, 4);
    cq_appender a2;
    appender_init(&a2, &s2, &lock);
    const char *d2 = "0123456789abcdef";
    int64_t o2[5] = {0, 4, 8, 12, 16};
    CHECK_EQ(cq_append_batch(&a2, (const uint8_t *)d2, o2, 4, &done), CQ_NEED_MAP);
    CHECK_EQ(done, 3); /* the 4th needs DATA_START + 24 + 4 + 4 + 8 */
    CHECK_EQ(a2.need, DATA_START + 40);
    CHECK_EQ(a2.last_index, idx(7, 2));
    CHECK_EQ(lock, UNLOCKED);
    free(b);
    free(b2);
}

static void t_doc_context(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);

    CHECK_EQ(cq_doc_commit(&a, 1), CQ_BAD_STATE);
    CHECK_EQ(cq_doc_rollback(&a, 1), CQ_BAD_STATE);
    CHECK_EQ(cq_doc_ensure(&a, 1), CQ_BAD_STATE);

    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    CHECK_EQ(lock, PID_A); /* held while the document is open */
    CHECK_EQ(a.doc_pos, DATA_START);
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_BAD_STATE);
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_BAD_STATE);
    memcpy(b + a.doc_pos + 4, "inplace", 7);
    CHECK_EQ(cq_doc_ensure(&a, 7), CQ_OK);
    CHECK_EQ(cq_doc_ensure(&a, L), CQ_NEED_MAP);
    CHECK_EQ(cq_doc_ensure(&a, (uint64_t)CQ_HDR_LENGTH_MASK + 1), CQ_TOO_LARGE);
    /* claimed (NOT_COMPLETE|META|len): not visible before commit */
    CHECK_EQ(r32(b, DATA_START), CQ_HDR_EOF | 7);
    CHECK_EQ(cq_doc_commit(&a, 7), CQ_OK);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r32(b, DATA_START), 7);
    CHECK_EQ(a.last_index, idx(7, 0));

    /* rollback zeroes what was written and leaves the slot free */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    uint64_t dp = a.doc_pos;
    CHECK_EQ(cq_doc_ensure(&a, 20), CQ_OK);
    memset(b + dp + 4, 0x55, 20);
    CHECK_EQ(cq_doc_rollback(&a, 20), CQ_OK);
    CHECK_EQ(lock, UNLOCKED);
    for (int i = 0; i < 32; i++) CHECK_EQ(b[dp + i], 0);
    CHECK_EQ(a.pos, dp);

    /* a metadata document in place */
    CHECK_EQ(cq_doc_begin(&a, 0, 1), CQ_OK);
    memcpy(b + a.doc_pos + 4, "mm", 2);
    CHECK_EQ(cq_doc_commit(&a, 2), CQ_OK);
    CHECK_EQ(r32(b, dp), META | 2);
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    CHECK_EQ(cq_doc_commit(&a, 0), CQ_OK); /* empty: one padding byte */
    CHECK_EQ(a.last_index, idx(7, 1));

    cq_tailer t;
    tailer_init(&t, &s);
    CHECK_EQ(cq_read(&t), 7);
    CHECK(memcmp(t.data, "inplace", 7) == 0);
    CHECK_EQ(cq_read(&t), 1);
    CHECK_EQ(cq_read(&t), CQ_NONE);

    /* a document ends once: a rollback by a closer, then the owner's commit */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    uint64_t dp2 = a.doc_pos;
    memcpy(b + dp2 + 4, "late", 4);
    CHECK_EQ(cq_doc_rollback(&a, 0), CQ_OK);
    CHECK_EQ(lock, UNLOCKED);
    lock = PID_A + 1; /* someone else's lock now: a second release would steal it */
    CHECK_EQ(cq_doc_commit(&a, 4), CQ_BAD_STATE);
    CHECK_EQ(cq_doc_rollback(&a, 4), CQ_BAD_STATE);
    CHECK_EQ(lock, PID_A + 1);
    CHECK_EQ(r32(b, dp2), 0);
    lock = UNLOCKED;

    /* closed while a document is open: the commit publishes nothing and
     * releases the lock */
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_OK);
    memcpy(b + a.doc_pos + 4, "gone", 4);
    a.closed = 1;
    CHECK_EQ(cq_doc_commit(&a, 4), CQ_BAD_STATE);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r32(b, dp2), 0);
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_BAD_STATE);
    CHECK_EQ(cq_doc_begin(&a, 0, 0), CQ_BAD_STATE);
    CHECK_EQ(cq_read(&t), CQ_NONE);
    t.closed = 1;
    CHECK_EQ(cq_read(&t), CQ_BAD_STATE);
    t.closed = 0;
    t.pos = DATA_START;
    t.seq = 0;
    CHECK_EQ(cq_read(&t), 7); /* the store itself is untouched */
    free(b);
}

static void t_write_eof(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t pos[4];
    uint64_t end = build_basic(b, pos);
    cq_store s;
    store_init(&s, b, L, 4);
    CHECK_EQ(cq_write_eof(&s, 0, &wneed), CQ_OK);
    CHECK_EQ(r32(b, end), CQ_HDR_EOF);
    CHECK_EQ(b[end + 4], 0xC3);
    CHECK(memcmp(b + end + 5, "EOF", 3) == 0);
    CHECK_EQ(cq_write_eof(&s, 0, &wneed), CQ_OK); /* idempotent */
    CHECK_EQ(r32(b, end + 8), 0);
    /* a hint past the start is used */
    CHECK_EQ(cq_write_eof(&s, pos[2], &wneed), CQ_OK);

    /* an abandoned NOT_COMPLETE header is replaced by the EOF */
    uint8_t *b2 = new_buf(L);
    uint64_t e2 = build_basic(b2, pos);
    w32(b2, e2, CQ_HDR_NOT_COMPLETE | 33);
    cq_store s2;
    store_init(&s2, b2, L, 4);
    CHECK_EQ(cq_write_eof(&s2, 0, &wneed), CQ_OK);
    CHECK_EQ(r32(b2, e2), CQ_HDR_EOF);

    /* no room for the EOF marker */
    uint64_t ml = end + 6;
    uint8_t *b3 = new_buf(ml);
    memcpy(b3, b2, ml);
    memset(b3 + end, 0, 6);
    cq_store s3;
    store_init(&s3, b3, ml, 4);
    CHECK_EQ(cq_write_eof(&s3, 0, &wneed), CQ_NOT_REACHED);
    CHECK_EQ(r32(b3, end), 0);
    free(b);
    free(b2);
    free(b3);
}

/* ------------------------------------------------------------------ */
/* write lock                                                          */

static void t_lock_unlock(void) {
    int64_t lock = UNLOCKED;
    CHECK_EQ(cq_lock(&lock, PID_A, 0), CQ_OK);
    CHECK_EQ(lock, PID_A);
    uint64_t t0 = now_ns();
    CHECK_EQ(cq_lock(&lock, PID_B, 1000), CQ_LOCKED);
    CHECK(now_ns() - t0 < 1000000000ull);
    CHECK_EQ(lock, PID_A);
    /* re-entry is not supported: the holder also gets LOCKED */
    CHECK_EQ(cq_lock(&lock, PID_A, 0), CQ_LOCKED);
    CHECK_EQ(cq_unlock(&lock, PID_B), CQ_BAD_STATE);
    CHECK_EQ(lock, PID_A);
    CHECK_EQ(cq_unlock(&lock, PID_A), CQ_OK);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(cq_unlock(&lock, PID_A), CQ_BAD_STATE);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(cq_lock(&lock, PID_B, 0), CQ_OK);
    CHECK_EQ(lock, PID_B);
    CHECK_EQ(cq_unlock(&lock, PID_B), CQ_OK);
}

static int64_t g_lock;
static void *unlock_later(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (cq_unlock(&g_lock, PID_B) != CQ_OK) abort();
    return NULL;
}

static void t_lock_contended(void) {
    g_lock = PID_B;
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, unlock_later, NULL), 0);
    /* a budget larger than the holder's 20 ms: the spin wins the lock */
    CHECK_EQ(cq_lock(&g_lock, PID_A, 3000000000ull), CQ_OK);
    pthread_join(th, NULL);
    CHECK_EQ(g_lock, PID_A);
    CHECK_EQ(cq_unlock(&g_lock, PID_A), CQ_OK);
}

static void t_atomics(void) {
    uint8_t *b = new_buf(64);
    cq_store64(b + 8, 5);
    CHECK_EQ(cq_load64(b + 8), 5);
    CHECK_EQ(cq_max64(b + 8, 3), 5);
    CHECK_EQ(cq_max64(b + 8, 9), 9);
    CHECK_EQ(cq_min64(b + 8, 12), 9);
    CHECK_EQ(cq_min64(b + 8, -4), -4);
    CHECK_EQ(cq_add64(b + 8, 10), 6);
    CHECK_EQ(cq_cas64(b + 8, 5, 1), 0);
    CHECK_EQ(cq_cas64(b + 8, 6, 1), 1);
    CHECK_EQ(cq_load64(b + 8), 1);
    w32(b, 16, 0);
    CHECK_EQ(cq_cas32(b + 16, 0, CQ_HDR_NOT_COMPLETE), 1);
    CHECK_EQ(cq_load32(b + 16), CQ_HDR_NOT_COMPLETE);
    CHECK_EQ(cq_cas32(b + 16, 0, 1), 0);
    free(b);
}

/* ------------------------------------------------------------------ */
/* index                                                               */

#define IX_COUNT 4
#define IX_SPACING 2
#define IX_PER_PAGE (IX_COUNT * IX_SPACING)
#define IX_MAX (IX_COUNT * IX_PER_PAGE) /* 32 excerpts fill the cycle */

typedef struct {
    uint8_t *b;
    uint64_t len;
    cq_store s;
    uint64_t i2i_pos;
    uint64_t pos[IX_MAX + 1]; /* header positions of data seq 0..n-1, then the end */
    uint64_t n;
} ix_file;

/* A file with a header doc, an index2index doc (no pages yet) and IX_MAX
 * excerpts appended by cq_append, which creates the index pages. */
static void build_indexed(ix_file *f, uint64_t n, int with_meta) {
    f->len = 16384;
    f->b = new_buf(f->len);
    uint8_t *b = f->b;
    uint64_t p = put_file_header(b);
    f->i2i_pos = p;
    p = put_index_doc(b, p, "index2index", IX_COUNT, 0, NULL, 0);
    w64(b, I2I_OFF, f->i2i_pos);
    store_init(&f->s, b, f->len, 4);
    store_index(&f->s, IX_COUNT, IX_SPACING);
    f->s.i2i_off = I2I_OFF;
    f->s.last_index_off = LAST_OFF;
    f->s.wp_off = WP_OFF;
    f->s.wp_seq_off = WP_SEQ_OFF;
    f->s.data_start = p;
    static int64_t lock;
    lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &f->s, &lock);
    a.pos = p;
    char msg[32];
    for (uint64_t i = 0; i < n; i++) {
        if (with_meta && i % 5 == 3) CHECK_EQ(app(&a, (const uint8_t *)"meta", 4, 1), CQ_OK);
        int len = snprintf(msg, sizeof msg, "msg %" PRIu64 "%.*s", i, (int)(i % 7), "xxxxxxx");
        CHECK_EQ(app(&a, (const uint8_t *)msg, (uint64_t)len, 0), CQ_OK);
        CHECK_EQ(a.last_index, idx(7, i));
    }
    /* record positions by reading back */
    cq_tailer t;
    tailer_init(&t, &f->s);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t before = t.pos;
        int64_t r = cq_read(&t);
        CHECK(r > 0);
        CHECK_EQ(t.index, idx(7, i));
        f->pos[i] = (uint64_t)(t.data - (const char *)b) - 4;
        CHECK(f->pos[i] >= before);
    }
    CHECK_EQ(cq_read(&t), CQ_NONE);
    f->pos[n] = t.pos;
    f->n = n;
}

/* the array inside an index doc: offset of its 0x8D code (checked as the reference says) */
static uint64_t array_code(const uint8_t *b, uint64_t doc, const char *name) {
    uint32_t h = r32(b, doc);
    CHECK((h & META) && !(h & CQ_HDR_NOT_COMPLETE));
    CHECK_EQ(b[doc + 4], 0xB9);
    size_t nlen = strlen(name);
    CHECK_EQ(b[doc + 5], nlen);
    CHECK(memcmp(b + doc + 6, name, nlen) == 0);
    uint64_t p = doc + 6 + nlen;
    while (b[p] == 0x8F) p++;
    if (b[p] == 0x8E) p += 5 + r32(b, p + 1);
    CHECK_EQ(b[p], 0x8D);
    CHECK_EQ((p + 1) % 8, 0); /* the capacity long is 8-aligned */
    CHECK_EQ(doc + 4 + (h & CQ_HDR_LENGTH_MASK), p + 17 + 8 * r64(b, p + 1));
    return p;
}

static void t_index_written(void) {
    ix_file f;
    build_indexed(&f, IX_MAX, 1);
    uint8_t *b = f.b;
    uint64_t i2i = array_code(b, f.i2i_pos, "index2index");
    CHECK_EQ(r64(b, i2i + 1), IX_COUNT);
    CHECK_EQ(r64(b, i2i + 9), IX_COUNT); /* used: every page was created */
    for (uint64_t page = 0; page < IX_COUNT; page++) {
        uint64_t doc = r64(b, i2i + 17 + 8 * page);
        CHECK(doc > f.pos[page * IX_PER_PAGE]); /* written after its first excerpt */
        CHECK(doc < f.pos[f.n]);
        CHECK_EQ(doc % 4, 0);
        uint64_t arr = array_code(b, doc, "index");
        CHECK_EQ(r64(b, arr + 1), IX_COUNT);
        CHECK_EQ(r64(b, arr + 9), IX_COUNT);
        for (uint64_t k = 0; k < IX_COUNT; k++) {
            uint64_t seq = page * IX_PER_PAGE + k * IX_SPACING;
            CHECK_EQ(r64(b, arr + 17 + 8 * k), f.pos[seq]);
        }
    }
    /* lastIndex = nextEntryToBeIndexed */
    CHECK_EQ(r64(b, LAST_OFF), IX_MAX - IX_SPACING + IX_SPACING);
    /* writePosition = last excerpt, with its packed sequence */
    CHECK_EQ(r64(b, WP_OFF), f.pos[IX_MAX - 1]);
    CHECK_EQ(r64(b, WP_SEQ_OFF), (f.pos[IX_MAX - 1] << 32) | (IX_MAX - 1));

    /* the cycle is full */
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &f.s, &lock);
    CHECK_EQ(app(&a, (const uint8_t *)"x", 1, 0), CQ_INDEX_FULL);
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(app(&a, (const uint8_t *)"m", 1, 1), CQ_OK); /* metadata still fits */
    free(f.b);
}

static void check_seek_all(ix_file *f, cq_store *s) {
    uint64_t p;
    for (uint64_t i = 0; i < f->n; i++) {
        p = 0;
        CHECK_EQ(cq_seek(s, i, &p), CQ_OK);
        CHECK_EQ(p, f->pos[i]);
    }
    CHECK_EQ(cq_seek(s, f->n, &p), CQ_NOT_REACHED);
    CHECK_EQ(p, f->pos[f->n]);
    CHECK_EQ(cq_seek(s, f->n + 1, &p), CQ_NOT_FOUND);
    CHECK_EQ(cq_seek(s, UINT64_MAX, &p), CQ_NOT_FOUND);
    uint64_t q;
    int eof = 1;
    CHECK_EQ(cq_find_end(s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, f->pos[f->n]);
    CHECK_EQ(q, f->n);
    CHECK_EQ(eof, 0);
}

static void t_index_seek(void) {
    ix_file f;
    build_indexed(&f, IX_MAX, 1);
    cq_store s = f.s;
    check_seek_all(&f, &s); /* with writePosition */
    s.wp_off = s.wp_seq_off = 0;
    check_seek_all(&f, &s); /* index only */
    s.i2i_off = 0;
    check_seek_all(&f, &s); /* walking only */
    free(f.b);

    /* a partly filled cycle (the last page partly used) */
    build_indexed(&f, 19, 0);
    s = f.s;
    check_seek_all(&f, &s);
    s.wp_off = s.wp_seq_off = 0;
    check_seek_all(&f, &s);
    free(f.b);
}

static void t_index_is_used(void) {
    ix_file f;
    build_indexed(&f, IX_MAX, 0);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    /* hide excerpt 1: a walk from the start stops there; the index jumps past it */
    uint32_t saved = r32(f.b, f.pos[1]);
    w32(f.b, f.pos[1], 0);
    uint64_t p;
    CHECK_EQ(cq_seek(&s, 20, &p), CQ_OK);
    CHECK_EQ(p, f.pos[20]);
    CHECK_EQ(cq_seek(&s, 21, &p), CQ_OK);
    CHECK_EQ(p, f.pos[21]);
    /* ... but the chain from excerpt 0 does not reach the next index entry,
     * and an unwritten header with indexed data after it is damage, not the end */
    CHECK_EQ(cq_seek(&s, 0, &p), CQ_CORRUPT);
    CHECK_EQ(cq_seek(&s, 1, &p), CQ_CORRUPT);
    uint64_t q;
    int eof;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, f.pos[f.n]);
    CHECK_EQ(q, f.n);
    cq_store w = s;
    w.i2i_off = 0;
    CHECK_EQ(cq_seek(&w, 20, &p), CQ_NOT_FOUND);

    /* writePosition alone also jumps to the end */
    w = f.s;
    w.i2i_off = 0;
    CHECK_EQ(cq_find_end(&w, &p, &q, &eof), CQ_OK);
    CHECK_EQ(p, f.pos[f.n]);
    CHECK_EQ(q, f.n);
    CHECK_EQ(cq_seek(&w, f.n - 1, &p), CQ_OK);
    CHECK_EQ(p, f.pos[f.n - 1]);
    w32(f.b, f.pos[1], saved);
    free(f.b);
}

/* Read every excerpt with a fresh tailer: the count read before the first
 * code other than a length, and that code (CQ_NONE at the end). */
static int64_t read_through(cq_store *s, uint64_t *n_out) {
    cq_tailer t;
    tailer_init(&t, s);
    *n_out = 0;
    for (;;) {
        int64_t r = cq_read(&t);
        if (r < 0) return r;
        (*n_out)++;
    }
}

/* One flipped bit in an excerpt header, an index entry or the
 * writePosition's sequence: a read or seek gives the right excerpt or
 * CQ_CORRUPT, never another excerpt, a wrong length or a short end. */
static void t_flips_are_caught(void) {
    ix_file f;
    build_indexed(&f, IX_MAX, 1);
    cq_store s = f.s;
    uint8_t *b = f.b;
    uint64_t n, p, q;
    int eof;
    CHECK_EQ(read_through(&s, &n), CQ_NONE);
    CHECK_EQ(n, IX_MAX);
    /* a length bit of excerpt 5 (grown and shrunk), its metadata bit, and the
     * metadata bit of an index page header: all caught before excerpt 5 is returned */
    uint32_t flips[] = {1u << 2, 1u << 4, 1u << 9, 1u << 30};
    for (unsigned k = 0; k < 4; k++) {
        uint32_t saved = r32(b, f.pos[5]);
        w32(b, f.pos[5], saved ^ flips[k]);
        CHECK_EQ(read_through(&s, &n), CQ_CORRUPT);
        CHECK(n <= 4);
        int rc = cq_seek(&s, 6, &p);
        CHECK(rc == CQ_CORRUPT || (rc == CQ_OK && p == f.pos[6]));
        w32(b, f.pos[5], saved);
    }
    /* excerpt 4's length shrunk by 4: the walk lands inside its payload */
    uint32_t saved = r32(b, f.pos[4]);
    w32(b, f.pos[4], saved - 4);
    CHECK_EQ(read_through(&s, &n), CQ_CORRUPT);
    CHECK_EQ(n, 4);
    w32(b, f.pos[4], saved);
    /* an index page header read as data: one excerpt too many before the next entry */
    uint64_t i2i = array_code(b, f.i2i_pos, "index2index");
    uint64_t page1 = r64(b, i2i + 17 + 8 * 1);
    saved = r32(b, page1);
    w32(b, page1, saved & ~META);
    CHECK_EQ(read_through(&s, &n), CQ_CORRUPT);
    w32(b, page1, saved);
    /* an index entry moved onto another excerpt's header: the headers from the
     * start reach the writePosition, so the data is intact and the entry is
     * skipped (the file's index is disowned: every excerpt read, at its place) */
    uint64_t arr1 = array_code(b, page1, "index");
    uint64_t entry = r64(b, arr1 + 17 + 8 * 1);
    w64(b, arr1 + 17 + 8 * 1, f.pos[IX_PER_PAGE + IX_SPACING + 1]);
    CHECK_EQ(read_through(&s, &n), CQ_NONE);
    CHECK_EQ(n, IX_MAX);
    CHECK_EQ(s.index_bad, 1);
    int rc = cq_seek(&s, IX_PER_PAGE + IX_SPACING, &p);
    CHECK(rc == CQ_OK && p == f.pos[IX_PER_PAGE + IX_SPACING]);
    w64(b, arr1 + 17 + 8 * 1, entry);
    s.index_bad = 0;
    /* the writePosition's sequence off by one bit: seeks come from the index
     * (right, or CQ_CORRUPT where the writePosition is the anchor), the end is
     * not taken from it */
    int64_t wseq = (int64_t)r64(b, WP_SEQ_OFF);
    for (unsigned bit = 0; bit < 5; bit++) {
        w64(b, WP_SEQ_OFF, (uint64_t)wseq ^ (1ull << bit));
        for (uint64_t i = 0; i < IX_MAX; i++) {
            rc = cq_seek(&s, i, &p);
            CHECK(rc == CQ_CORRUPT || (rc == CQ_OK && p == f.pos[i]));
        }
        CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_CORRUPT);
    }
    w64(b, WP_SEQ_OFF, (uint64_t)wseq);
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(q, IX_MAX);
    /* NOT_COMPLETE set on a middle header: the data after it is not "the end" */
    saved = r32(b, f.pos[9]);
    w32(b, f.pos[9], saved | CQ_HDR_NOT_COMPLETE);
    CHECK_EQ(read_through(&s, &n), CQ_CORRUPT);
    CHECK_EQ(cq_seek(&s, 9, &p), CQ_CORRUPT);
    CHECK_EQ(cq_seek(&s, 10, &p), CQ_OK); /* from its index entry, intact up to the next */
    CHECK_EQ(p, f.pos[10]);
    w32(b, f.pos[9], saved);
    CHECK_EQ(read_through(&s, &n), CQ_NONE);
    CHECK_EQ(n, IX_MAX);
    free(f.b);
}

static void t_index_holes_and_stale(void) {
    ix_file f;
    build_indexed(&f, IX_MAX, 1);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    uint8_t *b = f.b;
    uint64_t i2i = array_code(b, f.i2i_pos, "index2index");
    uint64_t page1 = r64(b, i2i + 17 + 8 * 1);
    uint64_t arr1 = array_code(b, page1, "index");
    /* a hole (writer died before indexing seq 10) */
    w64(b, arr1 + 17 + 8 * 1, 0);
    /* a stale entry pointing at a metadata doc (seq 12) */
    w64(b, arr1 + 17 + 8 * 2, page1);
    /* an entry pointing past the mapping (seq 14) */
    w64(b, arr1 + 17 + 8 * 3, f.len + 100);
    check_seek_all(&f, &s);
    /* a whole page missing from index2index */
    w64(b, i2i + 17 + 8 * 2, 0);
    check_seek_all(&f, &s);
    /* index2index slot pointing at a data doc or at garbage */
    w64(b, i2i + 17 + 8 * 2, f.pos[3]);
    check_seek_all(&f, &s);
    w64(b, i2i + 17 + 8 * 2, f.len - 2);
    check_seek_all(&f, &s);
    /* `used` larger than capacity, negative, zero */
    w64(b, i2i + 9, 1000);
    check_seek_all(&f, &s);
    w64(b, i2i + 9, (uint64_t)-5);
    check_seek_all(&f, &s);
    w64(b, i2i + 9, 0);
    check_seek_all(&f, &s);
    /* the index2index doc itself garbage, or the i2i field pointing anywhere */
    w64(b, I2I_OFF, 3);
    check_seek_all(&f, &s);
    w64(b, I2I_OFF, f.len - 4);
    check_seek_all(&f, &s);
    w64(b, I2I_OFF, f.len);
    check_seek_all(&f, &s);
    w64(b, I2I_OFF, f.pos[5]);
    check_seek_all(&f, &s);
    w64(b, I2I_OFF, f.i2i_pos);
    b[f.i2i_pos + 4] = 0x00; /* not an event name */
    check_seek_all(&f, &s);
    b[f.i2i_pos + 4] = 0xB9;
    w64(b, i2i + 1, 1u << 30); /* capacity larger than the doc */
    check_seek_all(&f, &s);
    w64(b, i2i + 1, 0);
    check_seek_all(&f, &s);
    free(f.b);
}

static void t_write_position_validation(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    uint8_t *b = f.b;
    uint64_t p, q;
    int eof;
    /* stale writePosition (an older excerpt, consistent pair): walked forward */
    w64(b, WP_OFF, f.pos[4]);
    w64(b, WP_SEQ_OFF, (f.pos[4] << 32) | 4);
    check_seek_all(&f, &s);
    /* inconsistent pair: ignored */
    w64(b, WP_SEQ_OFF, (f.pos[5] << 32) | 4);
    check_seek_all(&f, &s);
    /* pointing at metadata, at 0, past the mapping */
    w64(b, WP_OFF, f.i2i_pos);
    w64(b, WP_SEQ_OFF, (f.i2i_pos << 32) | 4);
    check_seek_all(&f, &s);
    w64(b, WP_OFF, 0);
    w64(b, WP_SEQ_OFF, 0);
    check_seek_all(&f, &s);
    w64(b, WP_OFF, f.len + 64);
    w64(b, WP_SEQ_OFF, ((f.len + 64) << 32) | 4);
    check_seek_all(&f, &s);
    /* consistent but lying about the sequence: the index and the chain say
     * otherwise, so the end is not taken from it */
    w64(b, WP_OFF, f.pos[4]);
    w64(b, WP_SEQ_OFF, (f.pos[4] << 32) | 9);
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_CORRUPT);
    free(f.b);
}

/* cq_write_eof and appends after it on an indexed file */
static void t_index_eof(void) {
    ix_file f;
    build_indexed(&f, 10, 0);
    CHECK_EQ(cq_write_eof(&f.s, 0, &wneed), CQ_OK);
    uint64_t p, q;
    int eof = 0;
    CHECK_EQ(cq_find_end(&f.s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(eof, 1);
    CHECK_EQ(q, 10);
    CHECK_EQ(p, f.pos[10]);
    CHECK_EQ(cq_seek(&f.s, 10, &p), CQ_NOT_FOUND);
    CHECK_EQ(cq_seek(&f.s, 9, &p), CQ_OK);
    free(f.b);
}

/* ------------------------------------------------------------------ */
/* damaged files: regressions of core bugs found by fuzzing             */

/* cq_write_eof must not read the header word at a hint whose 8 bytes (the
 * EOF marker) do not fit in the mapping; it walks from the known end instead. */
static void t_write_eof_hint_near_map_end(void) {
    const uint64_t L = 4096;
    uint8_t *full = new_buf(L);
    uint64_t pos[4];
    uint64_t end = build_basic(full, pos);
    uint64_t ml = end + 6;
    uint8_t *b = new_buf(ml);
    memcpy(b, full, ml);
    cq_store s;
    store_init(&s, b, ml, 4);
    const uint64_t hints[] = {ml - 1, ml - 2, ml - 3, ml - 4, ml - 7, ml, ml + 1,
                              UINT64_MAX, UINT64_MAX - 3, UINT64_MAX - 7};
    for (size_t i = 0; i < sizeof hints / sizeof hints[0]; i++) {
        CHECK_EQ(cq_write_eof(&s, hints[i], &wneed), CQ_NOT_REACHED);
        CHECK_EQ(r32(b, end), 0);
    }
    /* with room for the marker, a bad hint still ends the cycle at the real end */
    store_init(&s, full, L, 4);
    CHECK_EQ(cq_write_eof(&s, UINT64_MAX - 3, &wneed), CQ_OK);
    CHECK_EQ(r32(full, end), CQ_HDR_EOF);
    free(b);
    free(full);
}

/* cq_read never copies into a missing scratch buffer (memcpy(NULL, p, 0) is
 * undefined behaviour): a zero-length metadata document read with
 * include_meta, and a tailer whose scratch is NULL whatever its capacity. */
static void t_read_without_scratch(void) {
    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    uint64_t p = put_file_header(b);
    w32(b, p, META | 0);
    put_doc(b, p + 4, "d", 1, 0, 4);
    cq_store s;
    store_init(&s, b, L, 4);
    cq_tailer t;
    tailer_init(&t, &s);
    t.include_meta = 1;
    CHECK_EQ(cq_read(&t), HDR_LEN);
    CHECK_EQ(cq_read(&t), 0);
    CHECK_EQ(t.is_meta, 1);
    CHECK_EQ(cq_read(&t), 1);
    CHECK(t.data[0] == 'd');
    tailer_init(&t, &s);
    t.scratch_cap = 64; /* inconsistent, but no crash */
    CHECK_EQ(cq_read(&t), 1);
    CHECK(t.data == (const char *)b + p + 8);
    free(b);
}

/* 64-bit positions read from the file near 2^64 (or 2^63) must not wrap the
 * bounds checks: the index entry is ignored and the lookup falls back. */
static const uint64_t HUGE_POSITIONS[] = {UINT64_MAX, UINT64_MAX - 3, UINT64_MAX - 7,
                                          UINT64_MAX - 4095, 1ull << 63, INT64_MAX,
                                          (1ull << 63) - 3};
#define N_HUGE (sizeof HUGE_POSITIONS / sizeof HUGE_POSITIONS[0])

static void t_i2i_field_near_2_64(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    for (size_t i = 0; i < N_HUGE; i++) {
        w64(f.b, I2I_OFF, HUGE_POSITIONS[i]); /* the header's index2Index field */
        check_seek_all(&f, &s);
    }
    free(f.b);
}

static void t_i2i_slot_near_2_64(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    uint64_t i2i = array_code(f.b, f.i2i_pos, "index2index");
    for (size_t i = 0; i < N_HUGE; i++) {
        w64(f.b, i2i + 17, HUGE_POSITIONS[i]); /* index2index[0] */
        check_seek_all(&f, &s);
        w64(f.b, i2i + 17 + 8, HUGE_POSITIONS[i]); /* index2index[1] too */
        check_seek_all(&f, &s);
    }
    free(f.b);
}

static void t_index_entry_near_2_64(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    uint64_t i2i = array_code(f.b, f.i2i_pos, "index2index");
    uint64_t page0 = r64(f.b, i2i + 17);
    uint64_t arr = array_code(f.b, page0, "index");
    for (size_t i = 0; i < N_HUGE; i++) {
        w64(f.b, arr + 17 + 8 * 2, HUGE_POSITIONS[i]); /* the entry for seq 4 */
        check_seek_all(&f, &s);
        w64(f.b, arr + 17, HUGE_POSITIONS[i]); /* and the one for seq 0 */
        check_seek_all(&f, &s);
    }
    free(f.b);
}

static void t_write_position_near_2_64(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    for (size_t i = 0; i < N_HUGE; i++) {
        uint64_t wp = HUGE_POSITIONS[i];
        /* a consistent-looking pair: the second long's high bits are wp's low bits */
        w64(f.b, WP_OFF, wp);
        w64(f.b, WP_SEQ_OFF, (wp << 32) | 3);
        check_seek_all(&f, &s);
        w64(f.b, WP_SEQ_OFF, (wp << 32) | 11);
        check_seek_all(&f, &s);
        CHECK_EQ(cq_write_eof(&s, 0, &wneed), CQ_OK);
        uint64_t p, q;
        int eof = 0;
        CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
        CHECK_EQ(eof, 1);
        CHECK_EQ(p, f.pos[f.n]);
        CHECK_EQ(q, f.n);
        memset(f.b + f.pos[f.n], 0, 8); /* reopen the cycle */
    }
    free(f.b);
}

/* Field offsets that are not 8-aligned (the Python layer drops them) are
 * ignored by the lookups and by appends. */
static void t_misaligned_field_offsets(void) {
    ix_file f;
    build_indexed(&f, 12, 0);
    cq_store s = f.s;
    s.wp_off = s.wp_seq_off = 0;
    s.i2i_off = I2I_OFF + 4;
    check_seek_all(&f, &s);
    s.i2i_off = I2I_OFF;
    s.wp_off = WP_OFF + 4;
    s.wp_seq_off = WP_SEQ_OFF + 4;
    check_seek_all(&f, &s);
    /* an append with a misaligned index2Index offset writes no index entry */
    s = f.s;
    s.i2i_off = I2I_OFF + 4;
    uint8_t before[64];
    memcpy(before, f.b, sizeof before);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    CHECK_EQ(app(&a, (const uint8_t *)"twelve", 6, 0), CQ_OK); /* seq 12: would be indexed */
    CHECK_EQ(a.last_index, idx(7, 12));
    CHECK(memcmp(before + I2I_OFF, f.b + I2I_OFF, 16) == 0);
    free(f.b);
}

/* index_floor's work is bounded whatever the index holds: an index2index
 * whose slots all name one large page of empty entries used to make one
 * cq_seek / cq_find_end scan used(index2index) x cap(page) entries. */
static void t_index_floor_bounded(void) {
    const uint64_t N = 1 << 16; /* entries per array: 512 KiB each */
    const uint64_t L = DATA_START + 2 * (N * 8 + 64) + 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    uint64_t i2i_pos = DATA_START;
    uint64_t *vals = malloc(N * 8);
    /* first lay out to learn where the page goes */
    uint64_t page_pos = put_index_doc(b, i2i_pos, "index2index", N, N, NULL, 0);
    for (uint64_t i = 0; i < N; i++) vals[i] = page_pos;
    put_index_doc(b, i2i_pos, "index2index", N, N, vals, N);
    uint64_t end = put_index_doc(b, page_pos, "index", N, N, NULL, 0);
    uint64_t data_end = put_doc(b, end, "d", 1, 0, 4);
    w64(b, I2I_OFF, i2i_pos);
    cq_store s;
    store_init(&s, b, L, 4);
    s.i2i_off = I2I_OFF;
    const uint64_t shapes[][2] = {{1 << 16, 1 << 8}, {1 << 12, 1}, {1 << 8, 1 << 6}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        store_index(&s, shapes[k][0], shapes[k][1]); /* within what the Python layer accepts */
        uint64_t t0 = now_ns();
        uint64_t p, q;
        int eof;
        for (int rep = 0; rep < 4; rep++) {
            CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
            CHECK_EQ(q, 1);
            CHECK_EQ(p, data_end);
            CHECK_EQ(cq_seek(&s, 0, &p), CQ_OK);
            CHECK_EQ(p, end);
            CHECK_EQ(cq_seek(&s, 1u << 20, &p), CQ_NOT_FOUND);
        }
        uint64_t ms = (now_ns() - t0) / 1000000;
        fprintf(stderr, "  count %" PRIu64 ": 12 lookups took %" PRIu64 " ms on a %" PRIu64
                " KiB file\n", shapes[k][0], ms, L >> 10);
        CHECK(ms < 1000);
    }
    free(vals);
    free(b);
}

/* commit() publishes the excerpt, then indexes it: indexing is best effort.
 * When it fails (here: index page 0 was lost and the mapping has no room for
 * a new page) the append still succeeds, exactly once, and leaves a hole in
 * the index that lookups walk over.  (It used to return the error, and a
 * caller that mapped more and retried wrote the message twice.) */
static void t_append_with_lost_index_page(void) {
    ix_file f;
    build_indexed(&f, 3, 0); /* seqs 0..2 on page 0 */
    cq_store s = f.s;
    uint8_t *b = f.b;
    uint64_t i2i = array_code(b, f.i2i_pos, "index2index");
    /* index page 0 was lost (a writer died before storing it) */
    w64(b, i2i + 17, 0);
    /* the mapping has room for two small excerpts but not for a new index page */
    s.map_len = f.pos[3] + 8 + 4 + 4 + 8 + 8;
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    CHECK_EQ(app(&a, (const uint8_t *)"seq3", 4, 0), CQ_OK); /* odd: not indexed */
    uint64_t p4 = a.pos;
    CHECK_EQ(p4, f.pos[3] + 8);
    CHECK_EQ(app(&a, (const uint8_t *)"seq4", 4, 0), CQ_OK); /* indexed: page 0 missing */
    CHECK_EQ(a.last_index, idx(7, 4));
    CHECK_EQ(lock, UNLOCKED);
    CHECK_EQ(r32(b, p4), 4);
    CHECK(memcmp(b + p4 + 4, "seq4", 4) == 0);
    CHECK_EQ(r64(b, i2i + 17), 0); /* no page: a hole */
    CHECK_EQ(a.pos, p4 + 8);
    /* written exactly once, and found */
    uint64_t p, q;
    int eof;
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(q, 5);
    CHECK_EQ(p, p4 + 8);
    cq_store w = s;
    w.wp_off = w.wp_seq_off = 0;
    CHECK_EQ(cq_seek(&w, 4, &p), CQ_OK);
    CHECK_EQ(p, p4);
    cq_tailer t;
    tailer_init(&t, &s);
    for (int i = 0; i < 5; i++) CHECK(cq_read(&t) > 0);
    CHECK(memcmp(t.data, "seq4", 4) == 0);
    CHECK_EQ(cq_read(&t), CQ_NONE);

    /* with more room, the next indexed excerpt creates page 0 again */
    s.map_len = f.len;
    CHECK_EQ(app(&a, (const uint8_t *)"seq5", 4, 0), CQ_OK);
    CHECK_EQ(app(&a, (const uint8_t *)"seq6", 4, 0), CQ_OK);
    uint64_t page0 = r64(b, i2i + 17);
    CHECK(page0 != 0);
    uint64_t arr = array_code(b, page0, "index");
    CHECK_EQ(r64(b, arr + 17 + 8 * 2), 0);         /* seq 4: the hole */
    CHECK(r64(b, arr + 17 + 8 * 3) != 0);          /* seq 6 */
    for (uint64_t k = 0; k <= 6; k++) {
        CHECK_EQ(cq_seek(&w, k, &p), CQ_OK);
        if (k < 3) CHECK_EQ(p, f.pos[k]);
    }
    CHECK_EQ(cq_find_end(&s, &p, &q, &eof), CQ_OK);
    CHECK_EQ(q, 7);
    free(f.b);
}

/* ------------------------------------------------------------------ */
/* notify: the appender's watch over metadata.cq4t (notify.c)           */

#define NT_LEN 4096
#define NT_ALL ((1ull << CQ_NOTIFY_SLOTS) - 1)

/* metadata.cq4t's header document (META, skipped by the walk); the first key
 * record goes at DATA_START */
static uint8_t *nt_image(uint64_t len) {
    uint8_t *b = new_buf(len);
    w32(b, 0, META | HDR_LEN);
    memset(b + 4, 0x8F, HDR_LEN);
    return b;
}

/* A key record at pos as the table store writes it: EVENT_NAME key, padding
 * to an 8-aligned INT64 (0x8F bytes, or 0x8E and a skip length when 5 bytes
 * or more are needed), the value.  Stores the value's offset; returns the
 * next record's. */
static uint64_t nt_key(uint8_t *b, uint64_t pos, const char *key, int64_t value, uint64_t *voff) {
    size_t klen = strlen(key);
    uint64_t q = pos + 4;
    b[q++] = 0xB9;
    b[q++] = (uint8_t)klen;
    memcpy(b + q, key, klen);
    q += klen;
    uint64_t pad = (8 - ((q + 1) & 7)) & 7;
    if (pad >= 5) {
        b[q] = 0x8E;
        w32(b, q + 1, (uint32_t)(pad - 5));
    } else {
        memset(b + q, 0x8F, pad);
    }
    q += pad;
    b[q] = 0xA7;
    w64(b, q + 1, (uint64_t)value);
    if (voff) *voff = q + 1;
    w32(b, pos, (uint32_t)(q + 9 - pos - 4));
    return al4(q + 9);
}

static uint64_t nt_slot_key(uint8_t *b, uint64_t pos, int i, int64_t value, uint64_t *voff) {
    char key[32];
    snprintf(key, sizeof key, "aiochronicle.notify.%d", i);
    return nt_key(b, pos, key, value, voff);
}

static void nt_watch(cq_notify_watch *n, uint8_t *b, uint64_t len, uint64_t probe) {
    memset(n, 0, sizeof *n);
    n->meta = b;
    n->meta_len = len;
    n->probe = probe;
}

static int64_t nt_ident(uint32_t token) {
    return (int64_t)(((uint64_t)token << 32) | (uint32_t)getpid());
}

static socklen_t nt_addr(int64_t ident, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int len = cq_notify_sockname(ident, a->sun_path);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)len);
}

/* An owner's socket, bound under `ident` as _notify.py binds it. */
static int nt_bind(int64_t ident) {
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un a;
    socklen_t alen = nt_addr(ident, &a);
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, alen), 0);
    return fd;
}

/* Datagrams queued on an owner's socket (a send is queued when sendto
 * returns: no waiting needed). */
static int nt_pending(int fd) {
    int n = 0;
    char c[8];
    ssize_t r;
    while ((r = recv(fd, c, sizeof c, MSG_DONTWAIT)) >= 0) {
        CHECK_EQ(r, 1);
        CHECK_EQ(c[0], 1);
        n++;
    }
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
    return n;
}

static int64_t nt_load(const uint8_t *b, uint64_t off) { return (int64_t)r64(b, off); }

static void t_notify_watch_finds_all(void) {
    uint8_t *b = nt_image(NT_LEN);
    uint64_t cell, parked, slot[CQ_NOTIFY_SLOTS];
    uint64_t p = nt_key(b, DATA_START, "chronicle.write.lock", INT64_MIN, NULL);
    p = nt_key(b, p, "aiochronicle.notify", 0, &cell);
    w32(b, p, META | 12); /* a metadata document between records: skipped */
    p = al4(p + 16);
    p = nt_key(b, p, "index.svc", 7, NULL);
    p = nt_key(b, p, "aiochronicle.notify.parked", 0, &parked);
    for (int k = 0; k < CQ_NOTIFY_SLOTS - 1; k++) { /* 15 slots, out of order */
        int i = (k * 7) % (CQ_NOTIFY_SLOTS - 1);
        p = nt_slot_key(b, p, i, 1000 + i, &slot[i]);
    }
    /* near misses of our keys: declined */
    p = nt_key(b, p, "aiochronicle.notify.16", 1, NULL);
    p = nt_key(b, p, "aiochronicle.notify.07", 1, NULL);
    p = nt_key(b, p, "aiochronicle.notifyx", 1, NULL);
    p = nt_key(b, p, "aiochronicle.notify.parked2", 1, NULL);
    uint64_t end = p;

    cq_notify_watch n;
    nt_watch(&n, b, NT_LEN, DATA_START);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    CHECK(n.parked == (int64_t *)(b + parked));
    for (int i = 0; i < CQ_NOTIFY_SLOTS - 1; i++) {
        CHECK(n.slots[i] == (int64_t *)(b + slot[i]));
        CHECK_EQ(((uintptr_t)n.slots[i]) & 7, 0);
        CHECK_EQ(*n.slots[i], 1000 + i);
    }
    CHECK(n.slots[15] == NULL);
    CHECK_EQ(n.known, NT_ALL & ~(1ull << 15));
    /* slot 15 is missing: it keeps probing, from the end of the records */
    CHECK(n.meta == b);
    CHECK_EQ(n.probe, end);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    CHECK_EQ(n.probe, end);

    /* the last slot appears: everything is found, and probing stops */
    p = nt_slot_key(b, p, 15, 1015, &slot[15]);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.slots[15] == (int64_t *)(b + slot[15]));
    CHECK_EQ(n.known, NT_ALL);
    CHECK(n.meta == NULL);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    /* no socket was made: nobody was parked */
    CHECK_EQ(n.sock, 0);
    cq_notify_watch_close(&n);
    CHECK_EQ(n.sock, -1);
    free(b);
}

static void t_notify_watch_picks_up_new_keys(void) {
    uint8_t *b = nt_image(NT_LEN);
    uint64_t p = nt_key(b, DATA_START, "chronicle.write.lock", INT64_MIN, NULL);
    cq_notify_watch n;
    nt_watch(&n, b, NT_LEN, DATA_START);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    CHECK(n.cell == NULL && n.parked == NULL && n.known == 0);
    CHECK_EQ(n.probe, p);

    /* a record being written (not complete) is left for a later commit */
    uint64_t parked;
    uint64_t q = nt_key(b, p, "aiochronicle.notify.parked", 0, &parked);
    uint32_t h = r32(b, p);
    w32(b, p, h | CQ_HDR_NOT_COMPLETE);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    CHECK(n.parked == NULL);
    CHECK_EQ(n.probe, p);
    w32(b, p, h);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.parked == (int64_t *)(b + parked));
    CHECK_EQ(n.probe, q);

    uint64_t cell, s2;
    q = nt_key(b, q, "aiochronicle.notify", 0, &cell);
    q = nt_slot_key(b, q, 2, 0, &s2);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    CHECK(n.slots[2] == (int64_t *)(b + s2));
    CHECK_EQ(n.known, 1u << 2);
    CHECK_EQ(n.probe, q);

    /* a record past the end of this mapping: probing stops (the appender maps
     * the store once), what was found stays */
    uint64_t r = nt_slot_key(b, q, 4, 0, NULL);
    n.meta_len = r - 4;
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.meta == NULL);
    CHECK(n.slots[4] == NULL);
    CHECK(n.cell == (int64_t *)(b + cell) && n.parked == (int64_t *)(b + parked));
    CHECK_EQ(n.known, 1u << 2);
    cq_notify_watch_close(&n);
    free(b);
}

/* A later duplicate of a key (a damaged or copied file) does not move the
 * watch: the first record wins, as in TableStore._scan.  (Fuzzing found the
 * cell and the parked value taken from the last duplicate, so appenders
 * bumped a value no waiter armed.) */
static void t_notify_duplicate_keys_first_wins(void) {
    uint8_t *b = nt_image(NT_LEN);
    uint64_t cell, parked, s4;
    uint64_t p = nt_key(b, DATA_START, "aiochronicle.notify", 0, &cell);
    p = nt_key(b, p, "aiochronicle.notify.parked", 0, &parked);
    p = nt_slot_key(b, p, 4, 0, &s4);
    p = nt_key(b, p, "aiochronicle.notify", 0, NULL);
    p = nt_key(b, p, "aiochronicle.notify.parked", 0, NULL);
    p = nt_slot_key(b, p, 4, 0, NULL);
    cq_notify_watch n;
    nt_watch(&n, b, NT_LEN, DATA_START);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    CHECK(n.parked == (int64_t *)(b + parked));
    CHECK(n.slots[4] == (int64_t *)(b + s4));
    CHECK_EQ(n.probe, p);
    /* and when the duplicates come in a later walk */
    nt_watch(&n, b, NT_LEN, DATA_START);
    n.meta_len = NT_LEN;
    uint64_t first_end = nt_key(b, DATA_START, "aiochronicle.notify", 0, NULL);
    uint32_t h = r32(b, first_end);
    w32(b, first_end, 0); /* only the first record is there yet */
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    w32(b, first_end, h);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    CHECK(n.parked == (int64_t *)(b + parked));
    cq_notify_watch_close(&n);
    free(b);
}

/* A table store with every notify value, slot i owned by idents[i], and a
 * watch that found them all (and so stopped probing). */
typedef struct {
    uint8_t *b;
    uint64_t parked, slot[CQ_NOTIFY_SLOTS];
    cq_notify_watch n;
} nt_owners;

static void nt_owners_init(nt_owners *f, const int64_t *idents) {
    f->b = nt_image(NT_LEN);
    uint64_t p = nt_key(f->b, DATA_START, "aiochronicle.notify", 0, NULL);
    p = nt_key(f->b, p, "aiochronicle.notify.parked", 0, &f->parked);
    for (int i = 0; i < CQ_NOTIFY_SLOTS; i++) p = nt_slot_key(f->b, p, i, idents[i], &f->slot[i]);
    nt_watch(&f->n, f->b, NT_LEN, DATA_START);
    CHECK_EQ(cq_notify_commit(&f->n), CQ_NOTIFY_MOVED);
    CHECK_EQ(f->n.known, NT_ALL);
    CHECK(f->n.meta == NULL);
}

static void nt_owners_free(nt_owners *f) {
    cq_notify_watch_close(&f->n);
    free(f->b);
}

static void t_notify_wakes_bound_owner(void) {
    int64_t me = nt_ident(0xA1000003u);
    nt_owners f;
    nt_owners_init(&f, (const int64_t[CQ_NOTIFY_SLOTS]){[3] = me});
    int rx = nt_bind(me);
    cq_notify_watch *n = &f.n;
    uint8_t *b = f.b;

    /* slot 3 parks (and a bit above the slots is set: nobody's, left alone) */
    cq_notify_park(n->parked, 3);
    __atomic_fetch_or(n->parked, (int64_t)(1ull << 40), __ATOMIC_SEQ_CST);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_pending(rx), 1);
    CHECK_EQ(nt_load(b, f.parked), (int64_t)(1ull << 40)); /* bit 3 cleared */
    CHECK_EQ(nt_load(b, f.slot[3]), me);                   /* still its owner's */
    CHECK(n->sock > 0);
    /* nobody parked: nothing sent */
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_IDLE);
    CHECK_EQ(nt_pending(rx), 0);
    /* parks again: one more */
    cq_notify_park(n->parked, 3);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_pending(rx), 1);
    /* parked, then found data after all: nothing sent */
    cq_notify_park(n->parked, 3);
    cq_notify_unpark(n->parked, 3);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_IDLE);
    CHECK_EQ(nt_pending(rx), 0);
    /* slots out of range are ignored */
    cq_notify_park(n->parked, -1);
    cq_notify_park(n->parked, CQ_NOTIFY_SLOTS);
    CHECK_EQ(nt_load(b, f.parked), (int64_t)(1ull << 40));
    /* a closed watch sends nothing and leaves the bit for another appender */
    cq_notify_watch_close(n);
    CHECK_EQ(n->sock, -1);
    cq_notify_park(n->parked, 3);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_IDLE);
    CHECK_EQ(nt_pending(rx), 0);
    CHECK_EQ(nt_load(b, f.parked), (int64_t)((1ull << 40) | (1ull << 3)));
    close(rx);
    nt_owners_free(&f);
}

static void t_notify_frees_dead_owner_slot(void) {
    nt_owners f; /* slot 5's owner died: nobody binds its name */
    nt_owners_init(&f, (const int64_t[CQ_NOTIFY_SLOTS]){[5] = nt_ident(0xA2000005u)});
    cq_notify_watch *n = &f.n;
    /* bit 5: its owner died; bit 6: a slot nobody owns */
    cq_notify_park(n->parked, 5);
    cq_notify_park(n->parked, 6);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_load(f.b, f.slot[5]), 0); /* freed */
    CHECK_EQ(nt_load(f.b, f.slot[6]), 0);
    CHECK_EQ(nt_load(f.b, f.parked), 0);
    /* a new owner takes slot 5: its bit wakes it */
    int64_t next = nt_ident(0xA2000006u);
    int rx = nt_bind(next);
    __atomic_store_n(n->slots[5], next, __ATOMIC_SEQ_CST);
    cq_notify_park(n->parked, 5);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_pending(rx), 1);
    CHECK_EQ(nt_load(f.b, f.slot[5]), next);
    close(rx);
    nt_owners_free(&f);
}

/* A delivered wake-up keeps its owner's slot whatever errno held: sendto
 * returns the bytes sent (1), and notify.c took anything but 0 for a failure,
 * so after a refused send (errno ECONNREFUSED) in the same commit, or any
 * stale ENOENT, it freed the slot of a live owner.  (Found by fuzzing.) */
static void t_notify_delivered_wakeup_keeps_slot(void) {
    int64_t me = nt_ident(0xA3000003u);
    nt_owners f; /* slot 1 (woken first: lowest bit) is refused, slot 3 is bound */
    nt_owners_init(&f, (const int64_t[CQ_NOTIFY_SLOTS]){[1] = nt_ident(0xA3000001u), [3] = me});
    int rx = nt_bind(me);
    cq_notify_watch *n = &f.n;
    cq_notify_park(n->parked, 1);
    cq_notify_park(n->parked, 3);
    CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_load(f.b, f.slot[1]), 0);
    CHECK_EQ(nt_load(f.b, f.slot[3]), me);
    CHECK_EQ(nt_pending(rx), 1);
    /* a stale errno from anything else the thread did */
    static const int stale[] = {ENOENT, ECONNREFUSED};
    for (int k = 0; k < 2; k++) {
        cq_notify_park(n->parked, 3);
        errno = stale[k];
        CHECK_EQ(cq_notify_commit(n), CQ_NOTIFY_WOKE);
        CHECK_EQ(nt_load(f.b, f.slot[3]), me);
        CHECK_EQ(nt_pending(rx), 1);
    }
    close(rx);
    nt_owners_free(&f);
}

static void t_notify_leaves_unknown_slot_bits(void) {
    uint8_t *b = nt_image(NT_LEN);
    uint64_t parked;
    uint64_t p = nt_key(b, DATA_START, "aiochronicle.notify.parked", 0, &parked);
    for (int i = 0; i < 3; i++) p = nt_slot_key(b, p, i, 0, NULL);
    cq_notify_watch n;
    nt_watch(&n, b, NT_LEN, DATA_START);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK_EQ(n.known, 7);
    cq_notify_park(n.parked, 9); /* slot 9's key is not in this file (yet) */
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    CHECK_EQ(nt_load(b, parked), 1 << 9);
    CHECK_EQ(n.sock, 0); /* nothing to send: no socket */
    /* once its key appears, the bit is taken */
    p = nt_slot_key(b, p, 9, 0, NULL);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_WOKE);
    CHECK_EQ(nt_load(b, parked), 0);
    cq_notify_watch_close(&n);
    free(b);
}

static void t_notify_walk_bounded(void) {
    /* 5000 empty metadata records before the cell: one commit walks 4096 */
    const uint64_t L = DATA_START + 5000 * 4 + 64;
    uint8_t *b = nt_image(L);
    for (uint64_t k = 0; k < 5000; k++) w32(b, DATA_START + 4 * k, META);
    uint64_t cell;
    nt_key(b, DATA_START + 5000 * 4, "aiochronicle.notify", 0, &cell);
    cq_notify_watch n;
    nt_watch(&n, b, L, DATA_START);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_IDLE);
    CHECK(n.cell == NULL);
    CHECK_EQ(n.probe, DATA_START + 4096 * 4);
    CHECK_EQ(cq_notify_commit(&n), CQ_NOTIFY_MOVED);
    CHECK(n.cell == (int64_t *)(b + cell));
    cq_notify_watch_close(&n);
    free(b);
}

static void t_notify_sockname(void) {
    char out[40];
#ifdef CQ_PORTABLE
    /* a path where the abstract namespace is missing (platform.h) */
    CHECK_EQ(cq_notify_sockname(0x0123456789ABCDEFll, out), 36);
    CHECK(memcmp(out, "/tmp/aiochronicle.n.0123456789abcdef", 36) == 0);
    return;
#endif
    static const char want[] = "\0aiochronicle.notify.0123456789abcdef";
    CHECK_EQ(cq_notify_sockname(0x0123456789ABCDEFll, out), sizeof want - 1);
    CHECK(memcmp(out, want, sizeof want - 1) == 0);
    CHECK_EQ(cq_notify_sockname(-1, out), 37);
    CHECK(memcmp(out + 1, "aiochronicle.notify.ffffffffffffffff", 36) == 0);
    CHECK_EQ(cq_notify_sockname(0x2a, out), 37);
    CHECK(memcmp(out + 1, "aiochronicle.notify.000000000000002a", 36) == 0);
}

/* cq_append runs the watch after publishing: a parked owner gets one
 * datagram per append it parked for. */
static void t_notify_append_wakes_owner(void) {
    int64_t me = nt_ident(0xA4000000u);
    nt_owners f;
    nt_owners_init(&f, (const int64_t[CQ_NOTIFY_SLOTS]){[0] = me});
    int rx = nt_bind(me);

    const uint64_t L = 4096;
    uint8_t *b = new_buf(L);
    put_file_header(b);
    cq_store s;
    store_init(&s, b, L, 4);
    int64_t lock = UNLOCKED;
    cq_appender a;
    appender_init(&a, &s, &lock);
    a.notify = &f.n;
    CHECK_EQ(app(&a, "one", 3, 0), CQ_OK); /* nobody parked */
    CHECK_EQ(nt_pending(rx), 0);
    cq_notify_park(f.n.parked, 0);
    CHECK_EQ(app(&a, "two", 3, 0), CQ_OK);
    CHECK_EQ(nt_pending(rx), 1);
    CHECK_EQ(nt_load(f.b, f.parked), 0);
    CHECK_EQ(app(&a, "three", 5, 0), CQ_OK);
    CHECK_EQ(nt_pending(rx), 0);
    close(rx);
    free(b);
    nt_owners_free(&f);
}

/* ------------------------------------------------------------------ */

static const test_case TESTS[] = {
    {"read_data_and_meta", t_read_data_and_meta, 10},
    {"read_scratch_copy", t_read_scratch_copy, 10},
    {"read_include_meta", t_read_include_meta, 10},
    {"read_eof", t_read_eof, 10},
    {"read_not_ready", t_read_not_ready, 10},
    {"read_need_map", t_read_need_map, 10},
    {"read_corrupt_first_header", t_read_corrupt_first_header, 10},
    {"read_unaligned_format", t_read_unaligned_format, 10},
    {"read_batch", t_read_batch, 10},
    {"read_many_meta_bounded", t_read_many_meta_bounded, 10},
    {"scan", t_scan, 10},
    {"append_basic", t_append_basic, 10},
    {"append_unaligned_format", t_append_unaligned_format, 10},
    {"append_need_map", t_append_need_map, 10},
    {"append_errors", t_append_errors, 10},
    {"append_takes_over_incomplete", t_append_takes_over_incomplete, 10},
    {"append_batch", t_append_batch, 10},
    {"doc_context", t_doc_context, 10},
    {"lock_lost_claim", t_lock_lost_claim, 10},
    {"doc_abandon", t_doc_abandon, 10},
    {"write_eof", t_write_eof, 10},
    {"lock_unlock", t_lock_unlock, 10},
    {"lock_contended", t_lock_contended, 10},
    {"atomics", t_atomics, 10},
    {"index_written", t_index_written, 10},
    {"index_seek", t_index_seek, 10},
    {"index_is_used", t_index_is_used, 10},
    {"flips_are_caught", t_flips_are_caught, 10},
    {"index_holes_and_stale", t_index_holes_and_stale, 10},
    {"write_position_validation", t_write_position_validation, 10},
    {"index_eof", t_index_eof, 10},
    {"write_eof_hint_near_map_end", t_write_eof_hint_near_map_end, 10},
    {"read_without_scratch", t_read_without_scratch, 10},
    {"i2i_field_near_2_64", t_i2i_field_near_2_64, 10},
    {"i2i_slot_near_2_64", t_i2i_slot_near_2_64, 10},
    {"index_entry_near_2_64", t_index_entry_near_2_64, 10},
    {"write_position_near_2_64", t_write_position_near_2_64, 10},
    {"misaligned_field_offsets", t_misaligned_field_offsets, 10},
    {"index_floor_bounded", t_index_floor_bounded, 5},
    {"append_with_lost_index_page", t_append_with_lost_index_page, 10},
    {"notify_watch_finds_all", t_notify_watch_finds_all, 10},
    {"notify_watch_picks_up_new_keys", t_notify_watch_picks_up_new_keys, 10},
    {"notify_duplicate_keys_first_wins", t_notify_duplicate_keys_first_wins, 10},
    {"notify_wakes_bound_owner", t_notify_wakes_bound_owner, 10},
    {"notify_frees_dead_owner_slot", t_notify_frees_dead_owner_slot, 10},
    {"notify_delivered_wakeup_keeps_slot", t_notify_delivered_wakeup_keeps_slot, 10},
    {"notify_leaves_unknown_slot_bits", t_notify_leaves_unknown_slot_bits, 10},
    {"notify_walk_bounded", t_notify_walk_bounded, 10},
    {"notify_sockname", t_notify_sockname, 10},
    {"notify_append_wakes_owner", t_notify_append_wakes_owner, 10},
};

static void usage(void) {
    fprintf(stderr,
            "usage: test_native [FILTER]    run the tests whose name contains FILTER (all)\n"
            "       test_native --list      list test names\n");
}

int main(int argc, char **argv) {
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            for (size_t k = 0; k < sizeof TESTS / sizeof TESTS[0]; k++)
                printf("%s\n", TESTS[k].name);
            return 0;
        } else if (argv[i][0] == '-' || filter) {
            usage();
            return 2;
        } else {
            filter = argv[i];
        }
    }
    int passed = 0, failed = 0, run = 0;
    size_t n = sizeof TESTS / sizeof TESTS[0];
    setvbuf(stdout, NULL, _IONBF, 0);
    for (size_t i = 0; i < n; i++) {
        const test_case *tc = &TESTS[i];
        if (filter && !strstr(tc->name, filter)) continue;
        run++;
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 2; }
        if (pid == 0) {
            alarm(tc->timeout_s);
            tc->fn();
            fprintf(stderr, "  (%d checks)\n", g_checks);
            fflush(stderr);
            _exit(0);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0) {}
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            printf("ok   %s\n", tc->name);
            passed++;
            continue;
        }
        char why[64];
        if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
            snprintf(why, sizeof why, "timed out after %us", tc->timeout_s);
        else if (WIFSIGNALED(st))
            snprintf(why, sizeof why, "signal %d", WTERMSIG(st));
        else
            snprintf(why, sizeof why, "exit %d", WEXITSTATUS(st));
        printf("FAIL %s (%s)\n", tc->name, why);
        failed++;
    }
    if (run == 0) {
        fprintf(stderr, "no test matches\n");
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
