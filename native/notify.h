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
 *
 * Event loops are woken without a thread in between, by a datagram to a
 * socket the loop watches.  More values, created with the first:
 *   "aiochronicle.notify.<i>", i < CQ_NOTIFY_SLOTS: who owns slot i, 0 when
 *       nobody: (token << 32) | pid, naming the owner's Unix datagram socket
 *       in the abstract namespace, "\0aiochronicle.notify.<16 hex digits>";
 *   "aiochronicle.notify.parked": bit i set while slot i's owner is parked.
 * An owner sets its bit (a full barrier), looks for data once more, then
 * sleeps in its event loop.  An appender, after committing, fences and loads
 * the bits; any set one it clears (fetch-and) and sends the owner one byte,
 * so a park costs the appenders one send, and an appender one load when
 * nobody is parked.  A send refused (nobody bound the name: the owner died)
 * frees the slot.
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
    const uint8_t *meta;      /* until every value is found: the metadata.cq4t mapping */
    uint64_t meta_len;        /* ... its length */
    uint64_t probe;           /* ... the offset of the next key record */
    int64_t *parked;          /* "aiochronicle.notify.parked", or NULL */
    int64_t *slots[16];       /* "aiochronicle.notify.<i>", or NULL */
    uint64_t known;           /* bit i: slots[i] is known */
    int32_t sock;             /* 1 + the fd wake-ups are sent from; 0: none yet, -1: none possible */
} cq_notify_watch;

/* Close the watch's socket (when its appender closes). */
void cq_notify_watch_close(cq_notify_watch *n);

/* Owner side: set bit `slot` of the parked value (a full barrier). */
void cq_notify_park(int64_t *parked, int slot);

/* Owner side: clear bit `slot` (it found data after all). */
void cq_notify_unpark(int64_t *parked, int slot);

/* Fill `out` (at least 40 bytes) with the abstract socket name of owner
 * `ident` (leading NUL included); returns its length. */
int cq_notify_sockname(int64_t ident, char *out);

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

/* Appender side, after a commit: while some value is not found yet, one load
 * of the probe word, and when keys were added, a walk over them (bounded);
 * then one fence, and the parked bits and cq_notify's check of the value.
 * Returns CQ_NOTIFY_WOKE when it woke anyone, CQ_NOTIFY_MOVED when the walk
 * found a value, else CQ_NOTIFY_IDLE. */
int cq_notify_commit(cq_notify_watch *n);

/* CDEF-END */

#endif
