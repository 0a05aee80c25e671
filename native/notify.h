/*
 * aiochronicle native wake-up: futexes, the monotonic clock, and the notify
 * protocol between appenders and parked tailers of any process.
 *
 * The notify protocol, for a queue directory.  One value of metadata.cq4t,
 * "aiochronicle.notify", created by the first waiter (so a queue nobody waits
 * on keeps the metadata Java writes, byte for byte):
 *   low 32 bits  (bytes 0-3, little-endian): a counter, the futex word;
 *   high 32 bits (bytes 4-7): until when (CLOCK_MONOTONIC in ms, mod 2^32)
 *                 some process may be parked; 0 when nobody is.
 * A waiter arms (raises `until`, full fence), takes a snapshot of the word,
 * looks for data once more, then futex-waits on the snapshot with a timeout.
 * An appender, after committing, fences and loads the value once; only when
 * `until` lies ahead does it bump the counter and FUTEX_WAKE every waiter.
 * The fences on both sides (Dekker) mean a waiter either sees the new excerpt
 * or is woken.  A waiter that dies only makes appenders wake until its
 * `until` passes; then the first appender to notice clears it.
 *
 * An appender started before the value exists watches the table store's end
 * (the header word where the next key would go); when keys appear it walks
 * them, and picks the notify value up as soon as a waiter creates it.
 */
#ifndef AIOCHRONICLE_NOTIFY_H
#define AIOCHRONICLE_NOTIFY_H

#include <stdint.h>

#include "codes.h"

/* CDEF-BEGIN */
/* CLOCK_MONOTONIC in nanoseconds (the same clock in every process). */
uint64_t cq_mono_ns(void);

/* FUTEX_WAIT (shared, not private) on *word while it holds `expected`, for at
 * most timeout_ns.  Returns CQ_WAIT_WOKEN, CQ_WAIT_TIMEOUT, CQ_WAIT_CHANGED
 * (the word did not hold `expected`), CQ_WAIT_INTERRUPTED (a signal) or
 * CQ_ERRNO. */
int cq_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* FUTEX_WAKE (shared) of up to n waiters on *word; returns how many woke or
 * CQ_ERRNO. */
int cq_futex_wake(const uint32_t *word, int n);


/* An appender's view of the notify value. */
typedef struct cq_notify_watch {
    int64_t *cell;            /* the value of "aiochronicle.notify", or NULL */
    const uint8_t *meta;      /* while cell is NULL: the metadata.cq4t mapping */
    uint64_t meta_len;        /* ... its length */
    uint64_t probe;           /* ... the offset of the next key record */
} cq_notify_watch;

/* The futex word (low half) and the `until` word (high half) of the value. */
const uint32_t *cq_notify_word(const int64_t *cell);
const uint32_t *cq_notify_until(const int64_t *cell);

/* Waiter side: raise `until` to now + horizon_ns (at most an hour), fence, and return a
 * snapshot of the futex word (to pass to cq_futex_wait after one more look
 * for data). */
uint32_t cq_notify_arm(int64_t *cell, uint64_t horizon_ns);

/* Appender side, after a commit, with the value known: one fence and one
 * load when nobody waits; else bump the counter and wake every waiter.
 * Returns CQ_NOTIFY_WOKE or CQ_NOTIFY_IDLE. */
int cq_notify(int64_t *cell);

/* Appender side, after a commit: cq_notify when n->cell is known; else one
 * load of the probe word, and when keys were added, a walk over them that
 * sets n->cell when the notify value is among them (CQ_NOTIFY_MOVED: the
 * word to watch changed). */
int cq_notify_commit(cq_notify_watch *n);

/* CDEF-END */

#endif
