/*
 * aiochronicle native core: the result codes and header bits every native
 * file (and Python, through cffi) shares.  The bottom of the native layers:
 *   codes.h <- atomic.h, notify.c <- cq.c <- pause.c <- hot.c
 *
 * The region between CDEF-BEGIN and CDEF-END is fed verbatim to cffi's cdef(),
 * so it must stay free of preprocessor logic other than integer #defines.
 */
#ifndef AIOCHRONICLE_CODES_H
#define AIOCHRONICLE_CODES_H

/* CDEF-BEGIN */
/* result codes (>= 0: success, a length or an index) */
#define CQ_OK 0
#define CQ_NONE -1
#define CQ_EOF -2
#define CQ_NEED_MAP -3
#define CQ_LOCKED -4
#define CQ_ROLL -5
#define CQ_CORRUPT -6
#define CQ_NOT_FOUND -7
#define CQ_NOT_REACHED -8
#define CQ_TOO_LARGE -9
#define CQ_INDEX_FULL -10
#define CQ_APPEND_LOCKED -11
#define CQ_ERRNO -12
#define CQ_NO_SPACE -13
#define CQ_BAD_STATE -14
#define CQ_DUPLICATE -15
#define CQ_GAP -16
#define CQ_LOCK_LOST -17
#define CQ_UNALIGNED -18  /* a dataFormat 0 (packed) file: readable, never appended to */
#define CQ_UNMARKED_END -19 /* a forward read stands at an unwritten (or damaged-EOF) header
                                while a later cycle is listed: Python decides whether the
                                cycle ended there (see cq_tailer.last_cycle) */

#define CQ_HDR_LENGTH_MASK 0x3FFFFFFF
#define CQ_HDR_META 0x40000000
#define CQ_HDR_NOT_COMPLETE 0x80000000
#define CQ_HDR_EOF 0xC0000000

/* spins and waits */
#define CQ_SPIN_DATA 1
#define CQ_SPIN_TIMEOUT 0
#define CQ_SPIN_STOPPED 2

#define CQ_WAIT_WOKEN 0
#define CQ_WAIT_TIMEOUT 1
#define CQ_WAIT_CHANGED 2
#define CQ_WAIT_INTERRUPTED 3

/* the appender side of the notify protocol */
#define CQ_NOTIFY_IDLE 0
#define CQ_NOTIFY_WOKE 1
#define CQ_NOTIFY_MOVED 2
#define CQ_NOTIFY_SLOTS 16

/* The errno of the last failed system call of this thread in the native core,
 * saved where the call failed (with CQ_ERRNO, CQ_NO_SPACE or a failed wait),
 * so that it travels with the result code through either module of the one
 * library (cffi's ffi.errno is stale for calls made through the C API module). */
int cq_last_errno(void);
/* CDEF-END */

/* errno into the thread's cell; returns rc (for `return cq_fail(CQ_ERRNO);`) */
int cq_fail(int rc);

#endif
