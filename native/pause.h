/*
 * aiochronicle native pausers: bounded spins over a tailer's next header, and
 * parks that end early on a cross-process wake-up (notify.h).
 *
 * Contract (as cq.h): every call returns within its budget, nothing here calls
 * back into Python, and cffi releases the GIL around every call, so a spin lets
 * the other threads of the process run.
 *
 * The notify protocol is in notify.h.
 */
#ifndef AIOCHRONICLE_PAUSE_H
#define AIOCHRONICLE_PAUSE_H

#include "cq.h"
#include "notify.h"

/* CDEF-BEGIN */

/* Spin with the CPU's pause instruction for up to budget_ns, or until
 * *stop != stop_seen (stop may be NULL).  Returns CQ_SPIN_STOPPED or
 * CQ_SPIN_TIMEOUT. */
int cq_spin(uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen);

/* Read the tailer's next excerpt as cq_read does; while there is none yet,
 * poll its next header word (acquire loads, pause instruction) for up to
 * budget_ns, or until *stop != stop_seen.  Returns what cq_read returns:
 * CQ_NONE when the budget ran out (or the spin was stopped) with nothing to
 * read.  With no file to read yet (CQ_BAD_STATE) or at the end of a cycle
 * (CQ_EOF) there is nothing to poll: it spins out the budget and returns the
 * code (Python then looks for the file).  Never reads past the store's mapped
 * length. */
int64_t cq_spin_read(cq_tailer *t, uint64_t budget_ns, const uint32_t *stop, uint32_t stop_seen);

/* Give up the CPU (sched_yield). */
int cq_yield(void);

/* One park of a waiting tailer (t may be NULL: a plain park).  With `cell`:
 * arm for park_ns + horizon_ns, look for data once more (cq_read; CQ_BAD_STATE and CQ_EOF park all the
 * same, Python looks for the file afterwards), then futex-wait on the notify word
 * for up to park_ns; without: futex-wait on *stop for up to park_ns (so that
 * a change of *stop, made by unpause with a cq_futex_wake, ends it early).
 * Then read once more.  Returns what cq_read returns (CQ_NONE when nothing
 * came, CQ_BAD_STATE when t is NULL). */
int64_t cq_park_read(cq_tailer *t, uint64_t park_ns, int64_t *cell, uint64_t horizon_ns,
                     const uint32_t *stop, uint32_t stop_seen);
/* CDEF-END */

#endif
