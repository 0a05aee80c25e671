/*
 * Fuzz harness of the BinaryWire method-call reader (native/wire.c, which
 * aiochronicle._core._hot.WireDecoder runs over every BinaryWire excerpt a method
 * reader takes): whatever the bytes, wire_read_args must stay inside them,
 * terminate, and either decline (WIRE_OTHER: the Python reader then reads
 * the call, and names what is wrong) or give values that lie inside the
 * input; and what it gives, written again with the writer (wire_put_*),
 * must read back to the same values.
 *
 * Input = 2 parameter bytes + the bytes after the event key:
 *   p[0]  the plan (PLANS below)     p[1]  where the arguments start (mod len + 1)
 *
 * Builds:
 *   clang -fsanitize=fuzzer,address,undefined            -> libFuzzer target
 *   cc -DFUZZ_SMOKE_MAIN -fsanitize=address,undefined    -> a standalone driver that
 *       feeds seeded random values written with the writer, then mutated, for N
 *       iterations (-n N -s SEED); -w DIR writes seed inputs; FILE... replays.
 */
#define _GNU_SOURCE
#include "../wire.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_assert.h"

#define K(s) (const uint8_t *)(s), sizeof(s) - 1

/* A Quote (symbol, bid, ask, size, ts) as one argument. */
static const wire_node PLAN_QUOTE[] = {
    {WK_ARGS, 0, 1, 1, NULL, 0},
    {WK_STRUCT, 0, 5, 2, NULL, 0},
    {WK_STR, 0, 0, 0, K("symbol")},
    {WK_FLOAT, 0, 0, 0, K("bid")},
    {WK_FLOAT, 0, 0, 0, K("ask")},
    {WK_INT, 0, 0, 0, K("size")},
    {WK_INT, 0, 0, 0, K("ts")},
};

/* An Order with every kind, Optional ones and a nested Struct. */
static const wire_node PLAN_ORDER[] = {
    {WK_ARGS, 0, 1, 1, NULL, 0},
    {WK_STRUCT, 0, 9, 2, NULL, 0},
    {WK_STR, 0, 0, 0, K("symbol")},
    {WK_INT, 0, 0, 0, K("qty")},
    {WK_FLOAT, 0, 0, 0, K("px")},
    {WK_STR, 1, 0, 0, K("note")},
    {WK_BYTES, 0, 0, 0, K("blob")},
    {WK_STRUCT, 0, 3, 11, K("leg")},
    {WK_INT, 1, 0, 0, K("tag")},
    {WK_FLOAT, 1, 0, 0, K("ratio")},
    {WK_BOOL, 1, 0, 0, K("flag")},
    {WK_STR, 0, 0, 0, K("venue")},
    {WK_FLOAT, 0, 0, 0, K("px")},
    {WK_BOOL, 0, 0, 0, K("live")},
};

/* Six arguments of each scalar kind, and none, and one. */
static const wire_node PLAN_MANY[] = {
    {WK_ARGS, 0, 6, 1, NULL, 0},   {WK_INT, 0, 0, 0, NULL, 0},  {WK_FLOAT, 0, 0, 0, NULL, 0},
    {WK_STR, 0, 0, 0, NULL, 0},    {WK_BOOL, 0, 0, 0, NULL, 0}, {WK_BYTES, 0, 0, 0, NULL, 0},
    {WK_STR, 1, 0, 0, NULL, 0},
};
static const wire_node PLAN_NONE[] = {{WK_ARGS, 0, 0, 1, NULL, 0}};
static const wire_node PLAN_FLOAT[] = {{WK_ARGS, 0, 1, 1, NULL, 0}, {WK_FLOAT, 1, 0, 0, NULL, 0}};
static const wire_node PLAN_INT[] = {{WK_ARGS, 0, 1, 1, NULL, 0}, {WK_INT, 0, 0, 0, NULL, 0}};

static const struct {
    const wire_node *nodes;
    uint32_t n;
} PLANS[] = {
    {PLAN_QUOTE, sizeof PLAN_QUOTE / sizeof *PLAN_QUOTE},
    {PLAN_ORDER, sizeof PLAN_ORDER / sizeof *PLAN_ORDER},
    {PLAN_MANY, sizeof PLAN_MANY / sizeof *PLAN_MANY},
    {PLAN_NONE, 1},
    {PLAN_FLOAT, 2},
    {PLAN_INT, 2},
};
#define NPLANS (sizeof PLANS / sizeof *PLANS)
#define MAX_OUT 1024

static unsigned long st_inputs, st_read, st_declined;
/* set when a value was written in a form the reader leaves to Python: a long
 * compacted to FLOAT32 where an Optional[int] is declared */
static int g_left_to_python;

/* ------------------------------------------------------------------ */
/* writing values back (the shape Java's method writer gives them)     */

typedef struct {
    uint8_t *p;
    size_t len, cap;
} wbuf;

static void put(wbuf *b, const void *d, size_t n) {
    FUZZ_ASSERT(b->len + n <= b->cap);
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

static void write_node(const wire_node *nodes, uint32_t idx, const uint8_t *src,
                       const wire_val *v, wbuf *b) {
    const wire_node *n = &nodes[idx];
    uint8_t tmp[16];
    const wire_val *x = &v[idx];
    switch (x->tag) {
    case WV_NULL: put(b, "\xbb", 1); return;
    case WV_INT: {
        size_t k = wire_put_long(tmp, x->i);
        if (n->nullable && tmp[0] == 0x90) g_left_to_python = 1;
        put(b, tmp, k);
        return;
    }
    case WV_FLOAT: put(b, tmp, wire_put_double(tmp, x->d)); return;
    case WV_BOOL: put(b, x->i ? "\xb1" : "\xb0", 1); return;
    case WV_STR:
        if (x->len < 32) {
            tmp[0] = (uint8_t)(0xE0 + x->len);
            put(b, tmp, 1);
        } else {
            tmp[0] = 0xB8;
            put(b, tmp, 1 + wire_put_stop_bit(tmp + 1, (int64_t)x->len));
        }
        put(b, src + x->off, x->len);
        return;
    case WV_BYTES: {
        size_t k = wire_put_length(tmp, x->len + 1);
        FUZZ_ASSERT(k > 0);
        tmp[k++] = 0x8A;
        put(b, tmp, k);
        put(b, src + x->off, x->len);
        return;
    }
    case WV_STRUCT: {
        put(b, "\x82\0\0\0\0", 5);
        size_t start = b->len;
        for (uint32_t f = 0; f < n->nfields; f++) {
            const wire_node *fn = &nodes[n->first + f];
            tmp[0] = (uint8_t)(0xC0 + fn->key_len);
            put(b, tmp, 1);
            put(b, fn->key, fn->key_len);
            write_node(nodes, n->first + f, src, v, b);
        }
        uint32_t len = (uint32_t)(b->len - start);
        memcpy(b->p + start - 4, &len, 4);
        return;
    }
    default: FUZZ_ASSERT(0);
    }
}

static void write_args(const wire_node *nodes, const uint8_t *src, const wire_val *v, wbuf *b) {
    const wire_node *a = &nodes[0];
    if (a->nfields == 0) {
        put(b, "\xe0", 1);
    } else if (a->nfields == 1) {
        write_node(nodes, a->first, src, v, b);
    } else {
        put(b, "\x82\0\0\0\0", 5);
        size_t start = b->len;
        for (uint32_t i = 0; i < a->nfields; i++) write_node(nodes, a->first + i, src, v, b);
        uint32_t len = (uint32_t)(b->len - start);
        memcpy(b->p + start - 4, &len, 4);
    }
}

static int same_value(const wire_node *nodes, uint32_t idx, const uint8_t *s1, const wire_val *a,
                      const uint8_t *s2, const wire_val *b) {
    const wire_val *x = &a[idx], *y = &b[idx];
    if (x->tag != y->tag) return 0;
    switch (x->tag) {
    case WV_INT:
    case WV_BOOL: return x->i == y->i;
    case WV_FLOAT: return x->d == y->d || (isnan(x->d) && isnan(y->d));
    case WV_STR:
    case WV_BYTES: return x->len == y->len && memcmp(s1 + x->off, s2 + y->off, x->len) == 0;
    case WV_STRUCT:
        for (uint32_t f = 0; f < nodes[idx].nfields; f++)
            if (!same_value(nodes, nodes[idx].first + f, s1, a, s2, b)) return 0;
        return 1;
    default: return 1;
    }
}

/* the values lie inside the input, every node of the plan was read */
static void check_values(const wire_node *nodes, uint32_t idx, const wire_val *v, size_t len) {
    const wire_val *x = &v[idx];
    FUZZ_ASSERT(x->tag >= WV_NULL && x->tag <= WV_STRUCT);
    if (x->tag == WV_STR || x->tag == WV_BYTES) FUZZ_ASSERT(x->off <= len && x->len <= len - x->off);
    if (x->tag == WV_NULL) FUZZ_ASSERT(nodes[idx].nullable);
    if (x->tag == WV_STRUCT)
        for (uint32_t f = 0; f < nodes[idx].nfields; f++)
            check_values(nodes, nodes[idx].first + f, v, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    st_inputs++;
    const wire_node *nodes = PLANS[data[0] % NPLANS].nodes;
    uint32_t nn = PLANS[data[0] % NPLANS].n;
    FUZZ_ASSERT(wire_plan_ok(nodes, nn) == WIRE_OK);
    size_t len = size - 2;
    /* a copy of exactly the input, so any read past it is a sanitizer report */
    uint8_t *buf = malloc(len ? len : 1);
    FUZZ_ASSERT(buf);
    memcpy(buf, data + 2, len);
    size_t pos = len ? data[1] % (len + 1) : 0;
    wire_val out[16];
    memset(out, 0xA5, sizeof out);
    int r = wire_read_args(nodes, nn, buf, pos, len, out);
    FUZZ_ASSERT(r == WIRE_OK || r == WIRE_OTHER);
    if (r == WIRE_OTHER) {
        st_declined++;
        free(buf);
        return 0;
    }
    st_read++;
    FUZZ_ASSERT(out[0].tag == WV_STRUCT);
    for (uint32_t i = 0; i < nodes[0].nfields; i++) check_values(nodes, nodes[0].first + i, out, len);
    /* written again, it reads back the same */
    size_t cap = 2 * len + 256;
    wbuf w = {malloc(cap), 0, cap};
    FUZZ_ASSERT(w.p);
    g_left_to_python = 0;
    write_args(nodes, buf, out, &w);
    wire_val again[16];
    r = wire_read_args(nodes, nn, w.p, 0, w.len, again);
    FUZZ_ASSERT(r == WIRE_OK || g_left_to_python);
    for (uint32_t i = 0; r == WIRE_OK && i < nodes[0].nfields; i++)
        FUZZ_ASSERT(same_value(nodes, nodes[0].first + i, buf, out, w.p, again));
    free(w.p);
    free(buf);
    return 0;
}

/* ------------------------------------------------------------------ */
/* the smoke driver                                                    */

#ifdef FUZZ_SMOKE_MAIN
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz-wire"
#include "fuzz_smoke.h"

static int64_t random_long(void) {
    switch (below(4)) {
    case 0: return (int64_t)below(600) - 300;
    case 1: return (int64_t)rnd();
    case 2: return (int64_t)below(1ull << 34) - (1ll << 33);
    default: return (int64_t)1 << below(63);
    }
}

static double random_double(void) {
    switch (below(5)) {
    case 0: return (double)((int64_t)below(2000000) - 1000000) / (double)(1 + below(1000000));
    case 1: {
        uint64_t bits = rnd();
        double d;
        memcpy(&d, &bits, 8);
        return d;
    }
    case 2: return (double)random_long();
    case 3: return round((double)below(1u << 30) * 1e-6 * 1e6) / 1e6;
    default: {
        static const double special[] = {0.0, -0.0, NAN, INFINITY, -INFINITY, 1e300, 5e-324,
                                         3.5e38, 1.08421, 65536.0, -2147483649.0};
        return special[below(sizeof special / sizeof *special)];
    }
    }
}

/* random values for a plan, written as Java's writer would */
static size_t make_seed(uint8_t *out, size_t cap, int plan) {
    const wire_node *nodes = PLANS[plan].nodes;
    uint32_t nn = PLANS[plan].n;
    static uint8_t text[4096];
    size_t tl = 0;
    wire_val v[16];
    memset(v, 0, sizeof v);
    for (uint32_t i = 0; i < nn; i++) {
        const wire_node *n = &nodes[i];
        if (n->nullable && below(3) == 0) {
            v[i].tag = WV_NULL;
            continue;
        }
        switch (n->kind) {
        case WK_ARGS:
        case WK_STRUCT: v[i].tag = WV_STRUCT; break;
        case WK_INT: v[i].tag = WV_INT; v[i].i = random_long(); break;
        case WK_FLOAT: v[i].tag = WV_FLOAT; v[i].d = random_double(); break;
        case WK_BOOL: v[i].tag = WV_BOOL; v[i].i = (int64_t)below(2); break;
        case WK_STR:
        case WK_BYTES: {
            size_t len = below(4) == 0 ? below(300) : below(12);
            if (tl + len > sizeof text) len = 0;
            for (size_t k = 0; k < len; k++) text[tl + k] = (uint8_t)(n->kind == WK_STR ? 'a' + below(26) : rnd());
            v[i].tag = n->kind == WK_STR ? WV_STR : WV_BYTES;
            v[i].off = tl;
            v[i].len = len;
            tl += len;
            break;
        }
        }
    }
    out[0] = (uint8_t)plan;
    out[1] = 0;
    wbuf w = {out + 2, 0, cap - 2};
    write_args(nodes, text, v, &w);
    return w.len + 2;
}

static size_t mutate(uint8_t *buf, size_t len, size_t cap) {
    int rounds = 1 + (int)below(4);
    for (int r = 0; r < rounds && len > 2; r++) {
        size_t at = 2 + below(len - 2);
        switch (below(6)) {
        case 0: buf[at] = (uint8_t)rnd(); break;
        case 1: buf[at] ^= (uint8_t)(1u << below(8)); break;
        case 2: len = at; break; /* truncate */
        case 3: /* insert padding */
            if (len < cap) {
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = below(2) ? 0x8F : 0xBE;
                len++;
            }
            break;
        case 4: { /* a length byte near its limits */
            static const uint8_t edge[] = {0x00, 0x7F, 0x80, 0xFF, 0xE0, 0xB8, 0x82, 0xBB};
            buf[at] = edge[below(sizeof edge)];
            break;
        }
        default: buf[1] = (uint8_t)rnd(); break; /* another start */
        }
    }
    if (below(8) == 0) buf[0] = (uint8_t)rnd(); /* another plan */
    return len;
}

/* the seeds of the corpus (-w): every plan in turn */
static size_t seed_input(uint8_t *buf, size_t cap, int i) {
    return make_seed(buf, cap, i % (int)NPLANS);
}

/* one input of the smoke run: noise now and then, else a call, mostly damaged */
static size_t next_input(uint8_t *buf, size_t cap) {
    if (below(16) == 0) {
        size_t len = below(512) + 2;
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rnd();
        return len;
    }
    size_t len = make_seed(buf, cap, (int)below(NPLANS));
    return below(4) ? mutate(buf, len, cap) : len;
}

int main(int argc, char **argv) {
    unsigned long iters = 20000, seed = 1;
    const char *seed_dir = NULL;
    int rc = fuzz_smoke_args(argc, argv, &iters, &seed, &seed_dir);
    if (rc >= 0) return rc;
    fuzz_seed(seed);
    static uint8_t buf[16384];
    if (seed_dir) return fuzz_write_seeds(seed_dir, 32, buf, sizeof buf, seed_input);
    double secs = fuzz_run(iters, buf, sizeof buf, next_input);
    printf("fuzz-wire: %lu inputs (seed %lu) in %.1f s, no crash, hang or sanitizer report\n"
           "fuzz-wire: %lu read, %lu declined\n",
           iters, seed, secs, st_read, st_declined);
    return 0;
}
#endif
