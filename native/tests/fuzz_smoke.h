/*
 * What the standalone smoke drivers of the fuzz harnesses share (fuzz_read.c,
 * fuzz_wire.c, fuzz_notify.c, built with -DFUZZ_SMOKE_MAIN): a seeded
 * generator, the input being run (saved to <dir>/FUZZ_NAME-crash-<iteration>.bin
 * when it crashes, hangs or draws a sanitizer report) and the replay of saved
 * inputs.  Define FUZZ_NAME (the prefix of messages and saved inputs) first.
 */
#ifndef AIOCHRONICLE_FUZZ_SMOKE_H
#define AIOCHRONICLE_FUZZ_SMOKE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng_state;
static inline uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static inline void fuzz_seed(unsigned long seed) { rng_state = seed * 0x2545F4914F6CDD1Dull + 1; }

static const uint8_t *g_cur; /* the input being run */
static size_t g_cur_len;
static const char *g_outdir = "."; /* where it is saved */
static unsigned long g_iter;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void __sanitizer_set_death_callback(void (*callback)(void));

static inline void dump_current(const char *why) {
    char path[512];
    snprintf(path, sizeof path, "%s/" FUZZ_NAME "-crash-%lu.bin", g_outdir, g_iter);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(g_cur, 1, g_cur_len, f);
        fclose(f);
    }
    fprintf(stderr, FUZZ_NAME ": %s at iteration %lu; input saved to %s\n", why, g_iter, path);
}
static inline void on_death(void) { dump_current("sanitizer report"); }
static inline void on_signal(int sig) {
    dump_current(sig == SIGALRM ? "hang (alarm)" : sig == SIGABRT ? "abort" : "fatal signal");
    signal(sig, SIG_DFL);
    raise(sig == SIGALRM ? SIGABRT : sig);
}

/* From here on a crash, an abort, a sanitizer report or a hang (arm it with
 * alarm()) saves the input being run. */
static inline void fuzz_catch_crashes(void) {
    __sanitizer_set_death_callback(on_death);
    signal(SIGALRM, on_signal);
    signal(SIGSEGV, on_signal);
    signal(SIGBUS, on_signal);
    signal(SIGABRT, on_signal);
}

/* Replay a saved input. */
static inline int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 1; }
    static uint8_t buf[1 << 22];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    g_cur = buf;
    g_cur_len = n;
    LLVMFuzzerTestOneInput(buf, n);
    printf(FUZZ_NAME ": %s ran clean\n", path);
    return 0;
}

/* Save seed input i of a corpus as dir/seed-<i>.bin (dir made if need be);
 * 0, or 1 when it cannot. */
static inline int write_seed(const char *dir, int i, const uint8_t *buf, size_t len) {
    char path[512];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/seed-%02d.bin", dir, i);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    fwrite(buf, 1, len, f);
    fclose(f);
    return 0;
}

/* Seed inputs 0..n-1, each made by seed(buf, cap, i), saved as write_seed does;
 * 0, or 1 when one cannot be. */
static inline int fuzz_write_seeds(const char *dir, int n, uint8_t *buf, size_t cap,
                                   size_t (*seed)(uint8_t *buf, size_t cap, int i)) {
    for (int i = 0; i < n; i++) {
        if (write_seed(dir, i, buf, seed(buf, cap, i))) return 1;
    }
    printf(FUZZ_NAME ": wrote %d seed inputs to %s\n", n, dir);
    return 0;
}

/* The smoke run: `iters` inputs, each made in buf by next(buf, cap), through
 * the harness, each under a 10 s alarm, any one that crashes, hangs or draws a
 * sanitizer report saved (fuzz_catch_crashes).  Returns the seconds taken. */
static inline double fuzz_run(unsigned long iters, uint8_t *buf, size_t cap,
                              size_t (*next)(uint8_t *buf, size_t cap)) {
    fuzz_catch_crashes();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        size_t len = next(buf, cap);
        g_cur = buf;
        g_cur_len = len;
        alarm(10);
        LLVMFuzzerTestOneInput(buf, len);
    }
    alarm(0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* The usual command line, [-n iterations] [-s seed] | -w corpus_dir | FILE...:
 * fills the options and returns -1 to go on, or replays the FILEs (or finds
 * a usage error) and returns the exit status. */
static inline int fuzz_smoke_args(int argc, char **argv, unsigned long *iters,
                                  unsigned long *seed, const char **seed_dir) {
    int opt;
    while ((opt = getopt(argc, argv, "n:s:w:")) != -1) {
        switch (opt) {
        case 'n': *iters = strtoul(optarg, NULL, 10); break;
        case 's': *seed = strtoul(optarg, NULL, 10); break;
        case 'w': *seed_dir = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-n iterations] [-s seed] | -w corpus_dir | FILE...\n",
                    argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    if (optind >= argc) return -1;
    int rc = 0;
    for (int i = optind; i < argc; i++) rc |= run_file(argv[i]);
    return rc;
}

#endif
