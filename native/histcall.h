/*
 * The Python side of message history on the hot path (native/histcall.c):
 * the Incoming type (what a method reader knows of the message a handler is
 * handling), the context variable that holds it while the handler runs, and
 * the history bytes a method writer writes from it.  Used by hot.c.
 */
#ifndef AIOCHRONICLE_HISTCALL_H
#define AIOCHRONICLE_HISTCALL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "history.h"

/* the forms of the history a method writer puts first */
enum { HC_NONE = 0, HC_MSGPACK = 1, HC_WIRE = 2 };
/* the most bytes hc_outgoing writes: the head and the longest compact history */
#define HC_MAX (HIST_HEAD_MAX + HIST_MAX_RAW)
/* hc_outgoing: the Python writer does this one (a history the handler looked
 * at, a self-describing one, one at its limits, or none registered) */
#define HC_SLOW (-2)

int aiochronicle_histcall_init(PyObject *m);

/* CLOCK_MONOTONIC in ns: time.monotonic_ns()'s clock */
int64_t hc_now(void);

/* The history (head + compact bytes, in ``form``) of an excerpt written now
 * in this context: its length, HC_SLOW, or -1 with a Python error set. */
Py_ssize_t hc_outgoing(int form, uint8_t *out);

/* Whether histories are tracked here (set_history() was called). */
int hc_ready(void);

/* The message a handler is handling, while a sync handler runs: a slot on
 * the dispatching C frame (or inside an Incoming held by Python's dispatch),
 * this thread's current one, the one before it kept by the caller.  A
 * method writer called meanwhile writes its history from it; Python reads
 * it as an Incoming (made when first asked for).  Outside any sync handler
 * call, the context variable (an async handler's) holds it. */
typedef struct hc_slot {
    PyObject *obj;       /* the Incoming (owned when made for Python), or NULL */
    const uint8_t *raw;  /* the compact history read (checked), or NULL */
    size_t raw_len;
    int64_t index;
    int64_t read_ns;
    int32_t source_id;
} hc_slot;

/* Make ``s`` (filled by the caller, obj NULL) this thread's current message;
 * returns the one before, for hc_pop. */
hc_slot *hc_push(hc_slot *s);
void hc_pop(hc_slot *s, hc_slot *prev);

#endif
