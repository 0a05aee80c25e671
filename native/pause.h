/*
 * aiochronicle native pausers: bounded spins over a tailer's next header, and
 * the cross-process wake-up (a futex on a value of metadata.cq4t).
 *
 * Contract (as cq.h): every call returns within its budget, nothing here calls
 * back into Python, and cffi releases the GIL around every call, so a spin lets
 * the other threads of the process run.
 *
 * The notify protocol, for a queue directory:
 *   seq   = the value "aiochronicle.notify" of metadata.cq4t.  Its low 32 bits
 *           (the first four bytes, little-endian) are the futex word.
 *   until = the value "aiochronicle.notify.until": CLOCK_MONOTONIC ns up to
 *           which some process may be blocked waiting (0: nobody).
 * A waiter arms (raises `until`, full fence) and takes a snapshot of the word,
 * looks for data once more, then futex-waits on the snapshot with a timeout.
 * An appender, after committing, fences and loads `until`; only when it lies
 * in the future does it bump `seq` and FUTEX_WAKE every waiter.  The fences on
 * both sides (Dekker) mean a waiter either sees the new excerpt or is woken.
 * A waiter that dies only makes appenders wake for the rest of its horizon.
 */
#ifndef AIOCHRONICLE_PAUSE_H
#define AIOCHRONICLE_PAUSE_H

#include "cq.h"

/* CDEF-BEGIN */
#define CQ_SPIN_DATA 1
#define CQ_SPIN_TIMEOUT 0
#define CQ_SPIN_STOPPED 2

#define CQ_WAIT_WOKEN 0
#define CQ_WAIT_TIMEOUT 1
#define CQ_WAIT_CHANGED 2
#define CQ_WAIT_INTERRUPTED 3

/* CLOCK_MONOTONIC in nanoseconds (the same clock in every process). */
uint64_t cq_mono_ns(void);

/* Spin with the CPU's pause instruction for up to budget_ns, or until
 * *stop != stop_seen (stop may be NULL).  Returns CQ_SPIN_STOPPED or
 * CQ_SPIN_TIMEOUT. */
int cq_spin(uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen);

/* Read the tailer's next excerpt as cq_read does; while there is none yet,
 * poll its next header word (acquire loads, pause instruction) for up to
 * budget_ns, or until *stop != stop_seen.  Returns what cq_read returns:
 * CQ_NONE when the budget ran out (or the spin was stopped) with nothing to
 * read.  Never reads past the store's mapped length. */
int64_t cq_spin_read(cq_tailer *t, uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen);

/* Give up the CPU (sched_yield). */
int cq_yield(void);

/* FUTEX_WAIT (shared, not private) on *word while it holds `expected`, for at
 * most timeout_ns.  Returns CQ_WAIT_WOKEN, CQ_WAIT_TIMEOUT, CQ_WAIT_CHANGED
 * (the word did not hold `expected`), CQ_WAIT_INTERRUPTED (a signal) or
 * CQ_ERRNO. */
int cq_futex_wait(const uint32_t *word, uint32_t expected, uint64_t timeout_ns);

/* FUTEX_WAKE (shared) of up to n waiters on *word; returns how many woke or
 * CQ_ERRNO. */
int cq_futex_wake(const uint32_t *word, int n);

/* The futex word of the notify sequence `seq` (its low 32 bits). */
const uint32_t *cq_notify_word(const int64_t *seq);

/* Waiter side: raise *until to now + horizon_ns, fence, and return a snapshot
 * of the futex word of *seq (to pass to cq_futex_wait after one more look for
 * data). */
uint32_t cq_notify_arm(const int64_t *seq, int64_t *until, uint64_t horizon_ns);

/* Appender side, after a commit: one fence and one load of *until when nobody
 * waits.  Otherwise bump *seq and wake every waiter.  Returns 1 if it woke,
 * 0 if not. */
int cq_notify(int64_t *seq, int64_t *until);

/* One park of a waiting tailer (t may be NULL: a plain park).  With seq and
 * until given: arm the notify word, look for data once more (cq_read), then
 * futex-wait on the notify word for up to park_ns; without them: futex-wait on
 * *stop for up to park_ns (so that a change of *stop, made by unpause with a
 * cq_futex_wake, ends it early).  Then read once more.  Returns what cq_read
 * returns (CQ_NONE when nothing came, or CQ_BAD_STATE when t is NULL). */
int64_t cq_park_read(cq_tailer *t, uint64_t park_ns, int64_t *seq, int64_t *until,
                     uint64_t horizon_ns, const uint32_t *stop, uint32_t stop_seen);
/* CDEF-END */

#endif
