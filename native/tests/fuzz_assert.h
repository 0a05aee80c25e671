/*
 * FUZZ_ASSERT(c): an invariant of a fuzz harness (fuzz_*.c), checked in the
 * libFuzzer build and the smoke driver alike; when it fails, the file, line
 * and condition go to stderr and the process aborts (the smoke driver then
 * saves the input being run, fuzz_smoke.h).
 */
#ifndef AIOCHRONICLE_FUZZ_ASSERT_H
#define AIOCHRONICLE_FUZZ_ASSERT_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_ASSERT(c)                                                                 \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);  \
            abort();                                                                   \
        }                                                                              \
    } while (0)

#endif
