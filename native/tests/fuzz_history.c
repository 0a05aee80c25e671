/*
 * Fuzz harness of message history in its compact form (native/history.c,
 * which aiochronicle._core._hot runs over the history of every msgpack call
 * a method reader tracking history dispatches in C, and which builds the
 * history of every call a method writer writes meanwhile).  Whatever the
 * bytes:
 *   - hist_msgpack_ext and hist_check stay inside them and either decline or
 *     describe bytes that lie inside the input;
 *   - for a history they accept, hist_forward writes exactly one source and
 *     two timings more (or says it is full), the sources and timings read
 *     first, unchanged, and what it writes is accepted by hist_check;
 *   - the msgpack and BinaryWire heads it writes read back (hist_msgpack_ext)
 *     to the length and type written.
 *
 * Input = a msgpack Ext (the history as a method writer puts it in a call),
 * then anything.
 *
 * Builds:
 *   clang -fsanitize=fuzzer,address,undefined            -> libFuzzer target
 *   cc -DFUZZ_SMOKE_MAIN -fsanitize=address,undefined    -> a standalone driver that
 *       feeds seeded random histories written with the builders, then mutated,
 *       for N iterations (-n N -s SEED); -w DIR writes seed inputs; FILE... replays.
 */
#define _GNU_SOURCE
#include "../history.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_assert.h"

static unsigned long st_read, st_declined, st_full;

static int64_t get_i64(const uint8_t *p) {
    uint64_t u = 0;
    for (int k = 7; k >= 0; k--) u = (u << 8) | p[k];
    return (int64_t)u;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int8_t type;
    size_t start, len;
    if (hist_msgpack_ext(data, size, &type, &start, &len) != HIST_OK) {
        st_declined++;
        return 0;
    }
    FUZZ_ASSERT(start <= size && len <= size - start);
    const uint8_t *raw = data + start;
    hist_view v;
    if (hist_check(raw, len, &v) != HIST_OK) {
        st_declined++;
        return 0;
    }
    st_read++;
    FUZZ_ASSERT(v.used == 2 + 12 * (size_t)v.sources + 8 * (size_t)v.timings && v.used <= len);
    FUZZ_ASSERT(v.sources <= 255 && v.timings <= 255);
    static uint8_t out[HIST_MAX_RAW];
    int32_t sid = (int32_t)(len * 31 + 7);
    int64_t index = (int64_t)len * 977, read_ns = 123456789, now = 987654321;
    int64_t n = hist_forward(raw, &v, sid, index, read_ns, now, out, sizeof out);
    if (v.sources + 1 > HIST_MAX_SOURCES || v.timings + 2 > HIST_MAX_TIMINGS) {
        FUZZ_ASSERT(n == HIST_FULL);
        st_full++;
        return 0;
    }
    FUZZ_ASSERT(n == (int64_t)(v.used + 12 + 16));
    hist_view w;
    FUZZ_ASSERT(hist_check(out, (size_t)n, &w) == HIST_OK && w.used == (size_t)n);
    FUZZ_ASSERT(w.sources == v.sources + 1 && w.timings == v.timings + 2);
    size_t ns = v.sources, nt = v.timings;
    /* the sources read, then this one; the indices likewise; the timings, then two */
    FUZZ_ASSERT(memcmp(out + 1, raw + 1, 4 * ns) == 0);
    FUZZ_ASSERT(memcmp(out + 1 + 4 * (ns + 1), raw + 1 + 4 * ns, 8 * ns) == 0);
    FUZZ_ASSERT(get_i64(out + 1 + 4 * (ns + 1) + 8 * ns) == index);
    FUZZ_ASSERT(memcmp(out + 2 + 12 * (ns + 1), raw + 2 + 12 * ns, 8 * nt) == 0);
    FUZZ_ASSERT(get_i64(out + 2 + 12 * (ns + 1) + 8 * nt) == read_ns);
    FUZZ_ASSERT(get_i64(out + 2 + 12 * (ns + 1) + 8 * (nt + 1)) == now);
    /* too small a buffer: refused, nothing written past it */
    FUZZ_ASSERT(hist_forward(raw, &v, sid, index, read_ns, now, out, (size_t)n - 1) ==
                HIST_ROOM);
    /* the heads read back */
    uint8_t head[HIST_HEAD_MAX + 8];
    memset(head, 0, sizeof head);
    int h = hist_msgpack_head((size_t)n, 72, head);
    FUZZ_ASSERT(h > 0 && h <= HIST_HEAD_MAX);
    int8_t t2;
    size_t s2, l2;
    static uint8_t whole[HIST_HEAD_MAX + HIST_MAX_RAW];
    memcpy(whole, head, (size_t)h);
    memcpy(whole + h, out, (size_t)n);
    FUZZ_ASSERT(hist_msgpack_ext(whole, (size_t)h + (size_t)n, &t2, &s2, &l2) == HIST_OK);
    FUZZ_ASSERT(t2 == 72 && s2 == (size_t)h && l2 == (size_t)n);
    h = hist_wire_head((size_t)n, head);
    FUZZ_ASSERT(h == 7 && head[0] == 0xBA && head[3] == 0x81 && head[6] == 0x86);
    FUZZ_ASSERT((size_t)(head[4] | head[5] << 8) == (size_t)n + 1);
    /* a history with no source yet */
    n = hist_forward(NULL, NULL, sid, index, read_ns, now, out, sizeof out);
    FUZZ_ASSERT(n == 30 && hist_check(out, 30, &w) == HIST_OK && w.sources == 1);
    FUZZ_ASSERT(hist_first(now, out, sizeof out) == 10 && hist_check(out, 10, &w) == HIST_OK);
    FUZZ_ASSERT(w.sources == 0 && w.timings == 1 && get_i64(out + 2) == now);
    return 0;
}

#ifdef FUZZ_SMOKE_MAIN
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FUZZ_NAME "fuzz-history"
#include "fuzz_smoke.h"

/* a history of random sources and timings (up to and past the limits),
 * as an Ext of type 72 */
static size_t make_seed(uint8_t *buf, size_t cap) {
    static uint8_t raw[1 + 12 * 255 + 1 + 8 * 255];
    size_t ns = below(8) == 0 ? HIST_MAX_SOURCES - 1 + below(3) : below(6);
    size_t nt = below(8) == 0 ? HIST_MAX_TIMINGS - 2 + below(3) : below(12);
    if (ns > 255) ns = 255;
    if (nt > 255) nt = 255;
    size_t p = 0;
    raw[p++] = (uint8_t)ns;
    for (size_t k = 0; k < 4 * ns + 8 * ns; k++) raw[p++] = (uint8_t)rnd();
    raw[p++] = (uint8_t)nt;
    for (size_t k = 0; k < 8 * nt; k++) raw[p++] = (uint8_t)rnd();
    size_t extra = below(4) == 0 ? below(16) : 0; /* bytes after it (ignored) */
    for (size_t k = 0; k < extra; k++) raw[p++] = (uint8_t)rnd();
    int h = hist_msgpack_head(p, 72, buf);
    if (h < 0 || (size_t)h + p > cap) return 0;
    memcpy(buf + h, raw, p);
    return (size_t)h + p;
}

static size_t mutate(uint8_t *buf, size_t len) {
    int rounds = 1 + (int)below(3);
    for (int r = 0; r < rounds && len > 1; r++) {
        size_t at = below(len);
        switch (below(5)) {
        case 0: buf[at] = (uint8_t)rnd(); break;
        case 1: buf[at] ^= (uint8_t)(1u << below(8)); break;
        case 2: len = at; break; /* truncate */
        case 3: { /* a count or length byte near its limits */
            static const uint8_t edge[] = {0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF, 0xC7, 0xC8, 0xC9};
            buf[at] = edge[below(sizeof edge)];
            break;
        }
        default: buf[0] = (uint8_t)(0xC7 + below(3)); break; /* another Ext form */
        }
    }
    return len;
}

/* the seeds of the corpus (-w) */
static size_t seed_input(uint8_t *buf, size_t cap, int i) {
    (void)i;
    return make_seed(buf, cap);
}

/* one input of the smoke run: noise now and then, else a history, often damaged */
static size_t next_input(uint8_t *buf, size_t cap) {
    if (below(16) == 0) {
        size_t len = below(256);
        for (size_t i = 0; i < len; i++) buf[i] = (uint8_t)rnd();
        return len;
    }
    size_t len = make_seed(buf, cap);
    return below(3) == 0 ? mutate(buf, len) : len;
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
    printf("fuzz-history: %lu inputs (seed %lu) in %.1f s, no crash, hang or sanitizer report\n"
           "fuzz-history: %lu read, %lu declined, %lu full\n",
           iters, seed, secs, st_read, st_declined, st_full);
    return 0;
}
#endif
