/*
 * Small inline helpers the native files share (not part of the cffi API).
 */
#ifndef AIOCHRONICLE_ATOMIC_H
#define AIOCHRONICLE_ATOMIC_H

#include <stdint.h>
#include <string.h>
#include <time.h>

/* Atomics on the mapping need natural alignment: an unaligned one is
 * undefined behaviour, and UBSan does not look at __atomic builtins.  The
 * sanitizer builds (native/Makefile) define CQ_CHECK_ALIGNMENT, where a
 * misaligned address aborts with its place, so a load made before its
 * offset's alignment check is caught by the tests that feed such offsets. */
#ifdef CQ_CHECK_ALIGNMENT
#include <stdio.h>
#include <stdlib.h>
#define CQ_ALIGNED(p, n)                                                                  \
    ((((uintptr_t)(p)) & ((n) - 1))                                                       \
         ? (fprintf(stderr, "misaligned %d-byte atomic at %p (%s:%d)\n", (int)(n),          \
                    (const void *)(p), __FILE__, __LINE__),                               \
            abort())                                                                      \
         : (void)0)
#else
#define CQ_ALIGNED(p, n) ((void)0)
#endif

/* The CPU's spin-wait hint. */
static inline void cq_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t cq_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The header word at base + pos, with acquire ordering; pos may be unaligned
 * in a packed (dataFormat 0) file, where it is copied and fenced instead. */
static inline uint32_t cq_header_word(const uint8_t *base, uint64_t pos) {
    const uint8_t *p = base + pos;
    if ((pos & 3) == 0) return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE);
    uint32_t v;
    memcpy(&v, p, 4);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return v;
}

#endif
