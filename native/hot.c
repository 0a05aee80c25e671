/*
 * aiochronicle._hot: the per-message calls through the CPython C API.
 *
 * A cffi call costs ~0.5 us (argument conversion, releasing and taking the
 * GIL back); the calls made once per message are here instead, as methods of
 * two small base types that aiochronicle.Appender and aiochronicle.Tailer
 * derive from.  They call the same core (cq.c, compiled into this module
 * too) on the same structs, which Python allocates with cffi and hands over
 * by address.  Anything but the common case (a roll, a remap, a busy lock,
 * an error, a closed object) goes back to the Python slow path with the
 * native result code, exactly as the cffi path does.
 *
 * The GIL stays held: every call here is short and never waits.  The write
 * lock is tried with no spin budget; a busy lock returns CQ_LOCKED and the
 * slow path waits for it with the GIL released.
 *
 * Every call that may touch the mapped file is counted in flight (`busy`,
 * slow path included; Python's own entry points count through _enter and
 * _leave).  A close, from any thread or from a signal handler running inside
 * such a call, asks _owe(): while calls are in flight the object keeps its
 * cycle file and the last call out lets it go (_let_go); none in flight, the
 * close lets it go itself.  Under the GIL these steps cannot interleave.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "cq.h"
#include "pause.h"

#ifndef AIOCHRONICLE_VERSION
#define AIOCHRONICLE_VERSION "0+unknown"
#endif

int aiochronicle_wirecall_init(PyObject *m); /* native/wirecall.c */

static PyObject *str_append_slow;   /* "_append_native_failed" */
static PyObject *str_read_slow;     /* "_read_slow" */
static PyObject *str_read_other;    /* "_read_other" */
static PyObject *str_read_blocking; /* "_read_blocking" */
static PyObject *str_anext;         /* "_anext" */
static PyTypeObject *excerpt_type;  /* aiochronicle.Excerpt (a tuple subclass) */
static PyObject *str_let_go;        /* "_let_go" */

/* ------------------------------------------------------------------ */
/* Calls in flight (both types start with this)                        */

#define HOT_CALLS_HEAD \
    PyObject_HEAD \
    Py_ssize_t busy; /* calls of this object in flight (any thread, nested) */ \
    int owing;       /* closed while busy: the last call out lets the file go */

typedef struct {
    HOT_CALLS_HEAD
} HotCalls;

/* End a counted call, passing its result through; the last call out of an
 * object closed meanwhile calls self._let_go() (an error there cannot replace
 * the call's outcome: it is reported as unraisable). */
static PyObject *leave(PyObject *obj, PyObject *result) {
    HotCalls *c = (HotCalls *)obj;
    if (--c->busy > 0 || !c->owing) return result;
    c->owing = 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *r = PyObject_CallMethodNoArgs(obj, str_let_go);
    if (r) Py_DECREF(r);
    else PyErr_WriteUnraisable(obj);
    PyErr_Restore(et, ev, tb);
    return result;
}

static PyObject *calls_enter(PyObject *obj, PyObject *unused) {
    ((HotCalls *)obj)->busy++;
    Py_RETURN_NONE;
}

static PyObject *calls_leave(PyObject *obj, PyObject *unused) {
    return leave(obj, Py_NewRef(Py_None));
}

static PyObject *calls_owe(PyObject *obj, PyObject *unused) {
    HotCalls *c = (HotCalls *)obj;
    if (c->busy <= 0) Py_RETURN_FALSE;
    c->owing = 1;
    Py_RETURN_TRUE;
}

#define HOT_CALLS_METHODS \
    {"_enter", calls_enter, METH_NOARGS, \
     "Count a call in flight (it may touch the mapped file)."}, \
    {"_leave", calls_leave, METH_NOARGS, \
     "End a counted call; the last one out of a closed object calls _let_go()."}, \
    {"_owe", calls_owe, METH_NOARGS, \
     "On close: True (and the last call out lets the file go) while calls are " \
     "in flight; False when none is (the caller lets it go now)."}

/* ------------------------------------------------------------------ */
/* Appender                                                            */

typedef struct {
    HOT_CALLS_HEAD
    cq_appender *a;
} HotAppender;

static PyObject *hot_appender_bind(HotAppender *self, PyObject *addr) {
    void *p = PyLong_AsVoidPtr(addr);
    if (p == NULL && PyErr_Occurred()) return NULL;
    self->a = (cq_appender *)p;
    Py_RETURN_NONE;
}

static PyObject *slow_append(HotAppender *self, int64_t rc, PyObject *data) {
    PyObject *code = PyLong_FromLongLong(rc);
    if (!code) return NULL;
    PyObject *args[3] = {(PyObject *)self, code, data};
    PyObject *r = PyObject_VectorcallMethod(str_append_slow, args,
                                            3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(code);
    return r;
}

/* append(data) -> index.  bytes, bytearray, memoryview or any contiguous
 * buffer; anything else (str included) is the slow path's to coerce. */
static PyObject *appender_append(HotAppender *self, PyObject *const *args,
                                Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "append() takes exactly one argument (%zd given)", nargs);
        return NULL;
    }
    PyObject *data = args[0];
    cq_appender *a = self->a;
    if (a == NULL) return slow_append(self, 0, data);
    int64_t r;
    if (PyBytes_CheckExact(data)) {
        uint64_t spin = a->lock_spin_ns;
        a->lock_spin_ns = 0;
        r = cq_append(a, (const uint8_t *)PyBytes_AS_STRING(data),
                      (uint64_t)PyBytes_GET_SIZE(data), 0);
        a->lock_spin_ns = spin;
    } else if (!PyUnicode_Check(data) && PyObject_CheckBuffer(data)) {
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            return slow_append(self, 0, data);  /* 0: not tried, the slow path says why */
        }
        uint64_t spin = a->lock_spin_ns;
        a->lock_spin_ns = 0;
        r = cq_append(a, (const uint8_t *)view.buf, (uint64_t)view.len, 0);
        a->lock_spin_ns = spin;
        PyBuffer_Release(&view);
    } else {
        return slow_append(self, 0, data);
    }
    if (r >= 0) return PyLong_FromLongLong(r);
    return slow_append(self, r, data);
}

static PyObject *hot_appender_append(HotAppender *self, PyObject *const *args,
                                     Py_ssize_t nargs) {
    self->busy++;
    return leave((PyObject *)self, appender_append(self, args, nargs));
}

static PyMethodDef hot_appender_methods[] = {
    {"_bind_native", (PyCFunction)hot_appender_bind, METH_O,
     "Point this object at its native cq_appender (an address)."},
    {"append", (PyCFunction)(void (*)(void))hot_appender_append, METH_FASTCALL,
     "append(data) -> int\n--\n\nAppend one excerpt; returns its 64-bit index."},
    HOT_CALLS_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HotAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._hot.HotAppender",
    .tp_basicsize = sizeof(HotAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The per-message calls of an Appender (C API).",
    .tp_methods = hot_appender_methods,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Tailer                                                              */

typedef struct {
    HOT_CALLS_HEAD
    cq_tailer *t;
    int forward;
    int plain;    /* read_nowait is this type's own: read_blocking may read here first */
    int unyielded;        /* excerpts handed to async readers since the loop's last turn */
    int checkpoint_every; /* give the loop a turn at least this often (in _aio) */
} HotTailer;

#define DEFAULT_CHECKPOINT_EVERY 64

static PyObject *hot_tailer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    HotTailer *self = (HotTailer *)PyType_GenericNew(type, args, kwds);
    if (self) self->checkpoint_every = DEFAULT_CHECKPOINT_EVERY;
    return (PyObject *)self;
}

static PyObject *hot_tailer_bind(HotTailer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 && nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_bind_native(address, forward, plain=False)");
        return NULL;
    }
    void *p = PyLong_AsVoidPtr(args[0]);
    if (p == NULL && PyErr_Occurred()) return NULL;
    int fw = PyObject_IsTrue(args[1]);
    if (fw < 0) return NULL;
    int plain = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (plain < 0) return NULL;
    self->t = (cq_tailer *)p;
    self->forward = fw;
    self->plain = plain;
    Py_RETURN_NONE;
}

static PyObject *call_self(HotTailer *self, PyObject *name, PyObject *arg) {
    PyObject *args[2] = {(PyObject *)self, arg};
    return PyObject_VectorcallMethod(name, args,
                                     (arg ? 2 : 1) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* An Excerpt(index, payload) built as tuple.__new__(Excerpt, ...) does. */
static PyObject *make_excerpt(int64_t index, const char *data, uint64_t len) {
    PyObject *payload = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    if (!payload) return NULL;
    PyObject *idx = PyLong_FromLongLong(index);
    if (!idx) {
        Py_DECREF(payload);
        return NULL;
    }
    PyObject *ex = excerpt_type->tp_alloc(excerpt_type, 2);
    if (!ex) {
        Py_DECREF(payload);
        Py_DECREF(idx);
        return NULL;
    }
    PyTuple_SET_ITEM(ex, 0, idx);
    PyTuple_SET_ITEM(ex, 1, payload);
    return ex;
}

/* The excerpt cq_read/cq_spin_read just returned the length n (>= 0) of:
 * short payloads were copied to the scratch buffer, longer ones are read in
 * place. */
static PyObject *read_excerpt(const cq_tailer *t, int64_t n) {
    const char *src = ((uint64_t)n <= t->scratch_cap && t->scratch) ? t->scratch : t->data;
    return make_excerpt(t->index, src, (uint64_t)n);
}

/* read_nowait() -> Excerpt | None */
static PyObject *tailer_read_nowait(HotTailer *self) {
    cq_tailer *t = self->t;
    if (t == NULL || !self->forward || excerpt_type == NULL)
        return call_self(self, str_read_other, NULL);
    int64_t n = cq_read(t);
    if (n >= 0) {
        return read_excerpt(t, n);
    }
    if (n == CQ_NONE) Py_RETURN_NONE;
    PyObject *code = PyLong_FromLongLong(n);
    if (!code) return NULL;
    PyObject *r = call_self(self, str_read_slow, code);
    Py_DECREF(code);
    return r;
}

static PyObject *hot_tailer_read_nowait(HotTailer *self, PyObject *unused) {
    self->busy++;
    return leave((PyObject *)self, tailer_read_nowait(self));
}

/* read_blocking(timeout=None) -> Excerpt | None: an excerpt already there
 * is read here, as read_nowait() reads it; anything else (waiting, a roll,
 * an error, a subclass that reads its own way) is _read_blocking() in Python
 * with the caller's arguments. */
static PyObject *tailer_read_blocking(HotTailer *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames) {
    cq_tailer *t = self->t;
    if (t != NULL && self->forward && self->plain && excerpt_type != NULL) {
        int64_t n = cq_read(t);
        if (n >= 0) {
            return read_excerpt(t, n);
        }
        /* a code: nothing was consumed, Python's read_nowait takes it again */
    }
    PyObject *slow = PyObject_GetAttr((PyObject *)self, str_read_blocking);
    if (!slow) return NULL;
    PyObject *r = PyObject_Vectorcall(slow, args, (size_t)nargs, kwnames);
    Py_DECREF(slow);
    return r;
}

static PyObject *hot_tailer_read_blocking(HotTailer *self, PyObject *const *args,
                                          Py_ssize_t nargs, PyObject *kwnames) {
    self->busy++;
    return leave((PyObject *)self, tailer_read_blocking(self, args, nargs, kwnames));
}

/* _spin_read(budget_ns, stop_address, stop_seen) -> Excerpt | int: the
 * waiting step of read_blocking() and await read() with a spinning pauser.
 * Spins for the next excerpt with the GIL released (cq_spin_read: bounded
 * by budget_ns, ended early when *stop moves); an excerpt comes back built
 * here, anything else as its result code for the Python side. */
static PyObject *tailer_spin_read(HotTailer *self, PyObject *const *args,
                                 Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_spin_read(budget_ns, stop_address, stop_seen)");
        return NULL;
    }
    unsigned long long budget = PyLong_AsUnsignedLongLong(args[0]);
    if (budget == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    void *stop = PyLong_AsVoidPtr(args[1]);
    if (stop == NULL && PyErr_Occurred()) return NULL;
    unsigned long seen = PyLong_AsUnsignedLong(args[2]);
    if (seen == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    cq_tailer *t = self->t;
    if (t == NULL || excerpt_type == NULL) return PyLong_FromLong(CQ_BAD_STATE);
    if (budget > 1000000000ull) budget = 1000000000ull; /* a slice, never a long wait */
    int64_t n;
    Py_BEGIN_ALLOW_THREADS
    n = cq_spin_read(t, (uint64_t)budget, (const uint32_t *)stop, (uint32_t)seen);
    Py_END_ALLOW_THREADS
    if (n >= 0) {
        return read_excerpt(t, n);
    }
    return PyLong_FromLongLong(n);
}

static PyObject *hot_tailer_spin_read(HotTailer *self, PyObject *const *args,
                                      Py_ssize_t nargs) {
    self->busy++;
    return leave((PyObject *)self, tailer_spin_read(self, args, nargs));
}

/* ------------------------------------------------------------------ */
/* `async for`: an excerpt that is already there, without a coroutine  */

/* What __anext__ returns: an awaitable whose first step reads the next
 * excerpt in C and, when one is there, returns it (am_send: the awaiting
 * coroutine neither suspends nor builds a StopIteration).  Otherwise it
 * hands over to the coroutine _anext() (a wait, a roll, an error) and
 * passes its steps, throws and close through, as `yield from` would.
 * Nothing is read before the first step, so an awaitable dropped unawaited
 * (a task cancelled before it started) loses nothing, as a coroutine. */
typedef struct {
    PyObject_HEAD
    HotTailer *owner; /* strong */
    PyObject *sub;    /* the _anext() coroutine once handed over */
    int state;        /* NEXT_FRESH, NEXT_SUB or NEXT_DONE */
} Next;

enum { NEXT_FRESH, NEXT_SUB, NEXT_DONE };

static PyTypeObject NextType;

static void next_dealloc(Next *self) {
    Py_XDECREF(self->owner);
    Py_XDECREF(self->sub);
    PyObject_Free(self);
}

static PyObject *next_await(PyObject *self) {
    return Py_NewRef(self);
}

/* Hand over to _anext() (not started yet). */
static int next_to_sub(Next *self) {
    self->sub = call_self(self->owner, str_anext, NULL);
    if (self->sub == NULL) {
        self->state = NEXT_DONE;
        return -1;
    }
    self->state = NEXT_SUB;
    return 0;
}

static PySendResult next_send(Next *self, PyObject *arg, PyObject **result) {
    *result = NULL;
    if (self->state == NEXT_FRESH) {
        HotTailer *o = self->owner;
        cq_tailer *t = o->t;
        if (t != NULL && o->forward && o->plain && excerpt_type != NULL) {
            /* counted in flight as read_nowait is: a close meanwhile (a
             * signal handler in read_excerpt's allocation) leaves the file
             * mapped until this read leaves */
            o->busy++;
            int64_t n = cq_read(t);
            if (n >= 0) {
                self->state = NEXT_DONE;
                PyObject *ex = leave((PyObject *)o, read_excerpt(t, n));
                if (ex == NULL) return PYGEN_ERROR;
                o->unyielded++;
                *result = ex;
                return PYGEN_RETURN;
            }
            Py_XDECREF(leave((PyObject *)o, Py_NewRef(Py_None)));
            /* a code: nothing was consumed, _anext's read takes it again */
        }
        if (next_to_sub(self) < 0) return PYGEN_ERROR;
    }
    if (self->state == NEXT_SUB) {
        PySendResult r = PyIter_Send(self->sub, arg, result);
        if (r != PYGEN_NEXT) {
            self->state = NEXT_DONE;
            Py_CLEAR(self->sub);
        }
        return r;
    }
    PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited __anext__()");
    return PYGEN_ERROR;
}

/* the generator protocol for what does not use am_send */
static PyObject *send_result(PySendResult r, PyObject *v) {
    if (r == PYGEN_NEXT) return v;
    if (r == PYGEN_ERROR) return NULL;
    if (v == Py_None) {
        Py_DECREF(v);
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    PyObject *stop = PyObject_CallOneArg(PyExc_StopIteration, v);
    Py_DECREF(v);
    if (stop == NULL) return NULL;
    PyErr_SetObject(PyExc_StopIteration, stop);
    Py_DECREF(stop);
    return NULL;
}

static PyObject *next_iternext(Next *self) {
    PyObject *v;
    PySendResult r = next_send(self, Py_None, &v);
    return send_result(r, v);
}

static PyObject *next_send_method(Next *self, PyObject *arg) {
    PyObject *v;
    PySendResult r = next_send(self, arg, &v);
    return send_result(r, v);
}

/* throw(...) and close(): to _anext(), made first if need be (an unstarted
 * coroutine takes the exception at its start, reading nothing) */
static PyObject *next_forward(Next *self, const char *name, PyObject *const *args,
                              Py_ssize_t nargs) {
    if (self->state == NEXT_DONE) {
        if (nargs == 0) Py_RETURN_NONE; /* close() */
        PyErr_SetString(PyExc_RuntimeError, "cannot reuse an already awaited __anext__()");
        return NULL;
    }
    if (self->state == NEXT_FRESH && next_to_sub(self) < 0) return NULL;
    PyObject *m = PyObject_GetAttrString(self->sub, name);
    if (m == NULL) return NULL;
    PyObject *r = PyObject_Vectorcall(m, args, (size_t)nargs, NULL);
    Py_DECREF(m);
    if (r == NULL || nargs == 0) {
        self->state = NEXT_DONE;
        Py_CLEAR(self->sub);
    }
    return r;
}

static PyObject *next_throw(Next *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "throw() takes 1 to 3 arguments");
        return NULL;
    }
    return next_forward(self, "throw", args, nargs);
}

static PyObject *next_close(Next *self, PyObject *unused) {
    return next_forward(self, "close", NULL, 0);
}

static PyMethodDef next_methods[] = {
    {"send", (PyCFunction)next_send_method, METH_O, NULL},
    {"throw", (PyCFunction)(void (*)(void))next_throw, METH_FASTCALL, NULL},
    {"close", (PyCFunction)next_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyAsyncMethods next_async = {
    .am_await = next_await,
    .am_send = (sendfunc)next_send,
};

static PyTypeObject NextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._hot.NextExcerpt",
    .tp_basicsize = sizeof(Next),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "What `async for` over a tailer awaits: the next excerpt.",
    .tp_dealloc = (destructor)next_dealloc,
    .tp_as_async = &next_async,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)next_iternext,
    .tp_methods = next_methods,
};

/* __anext__(): a Next, or _anext() itself when the loop is due a turn (every
 * checkpoint_every excerpts) or the tailer reads its own way (a subclass,
 * metadata, another direction). */
static PyObject *hot_tailer_anext(HotTailer *self) {
    if (self->t != NULL && self->forward && self->plain && excerpt_type != NULL &&
        self->unyielded < self->checkpoint_every) {
        Next *r = PyObject_New(Next, &NextType);
        if (r == NULL) return NULL;
        r->owner = (HotTailer *)Py_NewRef(self);
        r->sub = NULL;
        r->state = NEXT_FRESH;
        return (PyObject *)r;
    }
    return call_self(self, str_anext, NULL);
}

static PyAsyncMethods hot_tailer_async = {
    .am_anext = (unaryfunc)hot_tailer_anext,
};

static PyMemberDef hot_tailer_members[] = {
    {"checkpoint_every", T_INT, offsetof(HotTailer, checkpoint_every), 0,
     "``read()`` and ``async for`` give the event loop a turn at least once per\n"
     "this many excerpts returned without waiting (default 64), so a backlog\n"
     "never starves the loop."},
    {"_unyielded", T_INT, offsetof(HotTailer, unyielded), 0,
     "Excerpts returned without waiting since the loop's last turn."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef hot_tailer_methods[] = {
    {"_spin_read", (PyCFunction)(void (*)(void))hot_tailer_spin_read, METH_FASTCALL,
     "Spin (GIL released, bounded) for the next excerpt: it, or a result code."},
    {"_bind_native", (PyCFunction)(void (*)(void))hot_tailer_bind, METH_FASTCALL,
     "Point this object at its native cq_tailer (an address) and say whether it "
     "reads forward."},
    {"read_nowait", (PyCFunction)hot_tailer_read_nowait, METH_NOARGS,
     "read_nowait() -> Excerpt | None\n--\n\n"
     "The next excerpt, or None if none has been written yet."},
    {"read_blocking", (PyCFunction)(void (*)(void))hot_tailer_read_blocking,
     METH_FASTCALL | METH_KEYWORDS,
     "read_blocking(timeout=None) -> Excerpt | None\n--\n\n"
     "The next excerpt, blocking this thread with the tailer's pauser for at\n"
     "most ``timeout`` seconds (None: until one comes).  Returns None on\n"
     "timeout.  Spins run in native code with the GIL released, in slices of\n"
     "at most 1 ms (so signals are handled); parks end early on\n"
     "``unpause()``, on close, and with ``Pauser.notify()`` on a commit.  Do\n"
     "not call it from an event loop thread: use ``await read()``.\n\n"
     "Raises:\n"
     "    QueueClosedError: the tailer or its queue is (or gets) closed."},
    HOT_CALLS_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HotTailerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._hot.HotTailer",
    .tp_basicsize = sizeof(HotTailer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The per-message calls of a Tailer (C API).",
    .tp_methods = hot_tailer_methods,
    .tp_members = hot_tailer_members,
    .tp_as_async = &hot_tailer_async,
    .tp_new = hot_tailer_new,
};

/* ------------------------------------------------------------------ */
/* module                                                              */

static PyObject *set_excerpt_type(PyObject *mod, PyObject *tp) {
    if (!PyType_Check(tp) || !PyType_IsSubtype((PyTypeObject *)tp, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "Excerpt must be a tuple subclass");
        return NULL;
    }
    Py_XSETREF(excerpt_type, (PyTypeObject *)Py_NewRef(tp));
    Py_RETURN_NONE;
}

static PyObject *version(PyObject *mod, PyObject *unused) {
    return PyUnicode_FromString(AIOCHRONICLE_VERSION);
}

/* ------------------------------------------------------------------ */
/* method readers: the common msgpack call, dispatched in C            */

/* _dispatch_mp(data, offsets, start, end, fast, done) -> int
 *
 * Excerpt k of a batch is data[offsets[k]:offsets[k + 1]].  From ``start``
 * on, while an excerpt is a msgpack call ``[name, arg]`` (0x92, a fixstr)
 * whose name (bytes) ``fast`` maps to ``(decode, handler)``: decode the
 * argument and call the handler with it.  Stops (returning where) at the
 * first other excerpt, at one whose argument does not decode (Python's
 * path decodes it again and reports it), or at ``end``.  ``done`` is two
 * int64: done[0] is the index after the last excerpt consumed, set before
 * its handler is called (when a handler raises, that is where reading goes
 * on); done[1] counts the calls consumed, in all.  Bounded by ``end - start`` excerpts; calls Python only to
 * decode and to call the handlers the caller gave. */
static PyObject *dispatch_mp(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "_dispatch_mp(data, offsets, start, end, fast, done)");
        return NULL;
    }
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[3]);
    if (end == -1 && PyErr_Occurred()) return NULL;
    PyObject *fast = args[4];
    if (!PyDict_Check(fast)) {
        PyErr_SetString(PyExc_TypeError, "fast must be a dict");
        return NULL;
    }
    Py_buffer data, offs, done;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &offs, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (PyObject_GetBuffer(args[5], &done, PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&offs);
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *last_key = NULL, *last_entry = NULL;
    const int64_t *off = (const int64_t *)offs.buf;
    Py_ssize_t n_off = offs.len / (Py_ssize_t)sizeof(int64_t);
    int64_t *out = (int64_t *)done.buf;
    const uint8_t *base = (const uint8_t *)data.buf;
    if (done.len < 2 * (Py_ssize_t)sizeof(int64_t) || i < 0 || end < i || end >= n_off) {
        PyErr_SetString(PyExc_ValueError, "_dispatch_mp: bad range or buffers");
        goto out;
    }
    out[0] = i;
    for (; i < end; i++) {
        int64_t a = off[i], b = off[i + 1];
        if (a < 0 || b < a || b > (int64_t)data.len) {
            PyErr_SetString(PyExc_ValueError, "_dispatch_mp: offsets outside the data");
            goto out;
        }
        const uint8_t *p = base + a;
        int64_t len = b - a;
        if (len < 2 || p[0] != 0x92 || p[1] < 0xA0 || p[1] > 0xBF) break;
        Py_ssize_t klen = p[1] - 0xA0;
        if (2 + klen > len) break;
        PyObject *entry;
        if (last_key != NULL && PyBytes_GET_SIZE(last_key) == klen &&
            memcmp(PyBytes_AS_STRING(last_key), p + 2, (size_t)klen) == 0) {
            entry = last_entry;
        } else {
            PyObject *key = PyBytes_FromStringAndSize((const char *)p + 2, klen);
            if (key == NULL) goto out;
            entry = PyDict_GetItemWithError(fast, key);
            if (entry == NULL) {
                Py_DECREF(key);
                if (PyErr_Occurred()) goto out;
                break;
            }
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
                Py_DECREF(key);
                PyErr_SetString(PyExc_TypeError, "fast maps names to (decode, handler)");
                goto out;
            }
            Py_XSETREF(last_key, key);
            Py_XSETREF(last_entry, Py_NewRef(entry)); /* the handler may change fast */
        }
        PyObject *body = PyBytes_FromStringAndSize((const char *)p + 2 + klen,
                                                   (Py_ssize_t)(len - 2 - klen));
        if (body == NULL) goto out;
        PyObject *arg = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 0), body);
        Py_DECREF(body);
        if (arg == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) goto out;
            PyErr_Clear(); /* not decodable: Python's path reports it */
            break;
        }
        out[0] = i + 1;
        out[1]++;
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 1), arg);
        Py_DECREF(arg);
        if (r == NULL) goto out;
        Py_DECREF(r);
    }
    result = PyLong_FromSsize_t(i);
out:
    Py_XDECREF(last_key);
    Py_XDECREF(last_entry);
    PyBuffer_Release(&done);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef module_methods[] = {
    {"_dispatch_mp", (PyCFunction)(void (*)(void))dispatch_mp, METH_FASTCALL,
     "Dispatch the common msgpack method calls of a batch (see native/hot.c)."},
    {"set_excerpt_type", set_excerpt_type, METH_O, "Register aiochronicle.Excerpt."},
    {"version", version, METH_NOARGS, "The version this module was built for."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT, "aiochronicle._hot",
    "Per-message calls of aiochronicle through the CPython C API.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hot(void) {
    if (PyType_Ready(&HotAppenderType) < 0 || PyType_Ready(&HotTailerType) < 0 ||
        PyType_Ready(&NextType) < 0)
        return NULL;
    str_append_slow = PyUnicode_InternFromString("_append_native_failed");
    str_read_slow = PyUnicode_InternFromString("_read_slow");
    str_read_other = PyUnicode_InternFromString("_read_other");
    str_read_blocking = PyUnicode_InternFromString("_read_blocking");
    str_let_go = PyUnicode_InternFromString("_let_go");
    str_anext = PyUnicode_InternFromString("_anext");
    if (!str_append_slow || !str_read_slow || !str_read_other || !str_read_blocking ||
        !str_let_go || !str_anext)
        return NULL;
    PyObject *m = PyModule_Create(&hot_module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "HotAppender", (PyObject *)&HotAppenderType) < 0 ||
        PyModule_AddObjectRef(m, "HotTailer", (PyObject *)&HotTailerType) < 0 ||
        aiochronicle_wirecall_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
