/*
 * aiochronicle._core._hot's Park: what a parked task awaits (the C API layer).
 *
 * A park of ``_waiter.wait_async`` used to be an asyncio Future: made per park,
 * resolved by the loop's wake-up callback with set_result(), which schedules
 * the task's step with call_soon (a Handle and one more turn of the loop) and
 * drops the future after.  A Park is the smallest object a Task accepts as a
 * future (the duck-typed protocol asyncio.Task follows for any object with
 * ``_asyncio_future_blocking``): one state, the task's wake-up callback, its
 * context.  The loop's wake-up of the notify socket (park_readable) runs the
 * callbacks of every park of that wake-up at once, in their contexts, instead
 * of scheduling them: the task steps right there, in the reader callback
 * (which no task runs in).  Every other way a park ends (set_result(): the
 * park timer, unpause() from any thread through call_soon_threadsafe, the
 * helper thread, a close; cancel(): the task is cancelled) schedules the
 * callbacks with the loop's call_soon, as a Future does, since those may run
 * inside another task.
 *
 * States: pending -> done (set_result, a wake-up) or cancelled (cancel).  The
 * first callback (the task's) is held inline; more go into a list.  Nothing
 * here waits or loops unbounded: a wake-up serves the parks it was given,
 * each once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#define PARK_PENDING 0
#define PARK_DONE 1
#define PARK_CANCELLED 2

typedef struct {
    PyObject_HEAD
    PyObject *loop;
    PyObject *cb;         /* the first done callback (a task's wake-up), or NULL */
    PyObject *ctx;        /* its context, or NULL */
    PyObject *more;       /* a list of (callback, context) after the first, or NULL */
    PyObject *cancel_msg; /* cancel(msg), or NULL */
    char state;
    char blocking;        /* _asyncio_future_blocking */
} Park;

static PyTypeObject ParkType;
static PyObject *str_call_soon;      /* "call_soon" */
static PyObject *kw_context;         /* ("context",) */
static PyObject *cancelled_error;    /* asyncio.CancelledError */
static PyObject *invalid_state_error; /* asyncio.InvalidStateError */
static PyTypeObject *task_type;      /* _asyncio.Task */
static PyTypeObject *future_type;    /* _asyncio.Future */

static int park_traverse(Park *self, visitproc visit, void *arg) {
    Py_VISIT(self->loop);
    Py_VISIT(self->cb);
    Py_VISIT(self->ctx);
    Py_VISIT(self->more);
    Py_VISIT(self->cancel_msg);
    return 0;
}

static int park_clear(Park *self) {
    Py_CLEAR(self->loop);
    Py_CLEAR(self->cb);
    Py_CLEAR(self->ctx);
    Py_CLEAR(self->more);
    Py_CLEAR(self->cancel_msg);
    return 0;
}

static void park_dealloc(Park *self) {
    PyObject_GC_UnTrack(self);
    park_clear(self);
    PyObject_GC_Del(self);
}

/* new_park(loop[, parks[, wakers]]): a pending park on loop, added to the sets
 * given (a waiter's parks in progress, a loop waker's parks) */
static PyObject *new_park(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs < 1 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "new_park(loop[, parks[, wakers]])");
        return NULL;
    }
    for (Py_ssize_t i = 1; i < nargs; i++) {
        if (args[i] != Py_None && !PySet_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "new_park() adds the park to sets only");
            return NULL;
        }
    }
    PyObject *loop = args[0];
    Park *p = PyObject_GC_New(Park, &ParkType);
    if (!p) return NULL;
    p->loop = Py_NewRef(loop);
    p->cb = p->ctx = p->more = p->cancel_msg = NULL;
    p->state = PARK_PENDING;
    p->blocking = 0;
    PyObject_GC_Track(p);
    for (Py_ssize_t i = 1; i < nargs; i++) {
        if (args[i] != Py_None && PySet_Add(args[i], (PyObject *)p) < 0) {
            for (Py_ssize_t j = 1; j < i; j++)
                if (args[j] != Py_None) (void)PySet_Discard(args[j], (PyObject *)p);
            Py_DECREF(p);
            return NULL;
        }
    }
    return (PyObject *)p;
}

/* end_park(park, parks[, wakers]): the park leaves the sets new_park added it to */
static PyObject *end_park(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "end_park(park, parks[, wakers])");
        return NULL;
    }
    for (Py_ssize_t i = 1; i < nargs; i++) {
        if (args[i] == Py_None) continue;
        if (!PySet_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "end_park() takes sets");
            return NULL;
        }
        if (PySet_Discard(args[i], args[0]) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

/* the callbacks of a park that just ended, moved out of it (the park keeps none:
 * a callback that parks again, or drops the task, finds it clean) */
typedef struct {
    PyObject *cb, *ctx, *more;
} Callbacks;

static Callbacks take_callbacks(Park *self) {
    Callbacks c = {self->cb, self->ctx, self->more};
    self->cb = self->ctx = self->more = NULL;
    return c;
}

static void drop_callbacks(Callbacks *c) {
    Py_CLEAR(c->cb);
    Py_CLEAR(c->ctx);
    Py_CLEAR(c->more);
}

/* loop.call_soon(cb, park, context=ctx) */
static int schedule_one(Park *self, PyObject *cb, PyObject *ctx) {
    PyObject *args[4] = {self->loop, cb, (PyObject *)self, ctx ? ctx : Py_None};
    PyObject *r = PyObject_VectorcallMethod(str_call_soon, args,
                                            3, kw_context);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* schedule every callback with the loop (as a Future's set_result does) */
static int schedule_callbacks(Park *self) {
    Callbacks c = take_callbacks(self);
    int rc = 0;
    if (c.cb && schedule_one(self, c.cb, c.ctx) < 0) rc = -1;
    if (c.more && rc == 0) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c.more); i++) {
            PyObject *t = PyList_GET_ITEM(c.more, i);
            if (schedule_one(self, PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1)) < 0) {
                rc = -1;
                break;
            }
        }
    }
    drop_callbacks(&c);
    return rc;
}

/* cb(arg) in ctx, now */
static int run_one(PyObject *arg, PyObject *cb, PyObject *ctx) {
    if (ctx && ctx != Py_None) {
        if (PyContext_Enter(ctx) < 0) return -1;
    }
    PyObject *r = PyObject_CallOneArg(cb, arg);
    if (ctx && ctx != Py_None) {
        if (PyContext_Exit(ctx) < 0) {
            Py_XDECREF(r);
            return -1;
        }
    }
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* an error raised while others must still be served: the first is kept */
typedef struct {
    PyObject *t, *v, *tb;
} Kept;

static void keep_error(Kept *k) {
    if (k->t) {  /* one kept already: this one is dropped (reported as unraisable) */
        PyErr_WriteUnraisable(NULL);
        return;
    }
    PyErr_Fetch(&k->t, &k->v, &k->tb);
}

/* whether cb is a Task's wake-up (a builtin method of an asyncio Task) */
static int is_task_wakeup(PyObject *cb) {
    return task_type && PyCFunction_Check(cb) && PyCFunction_GET_SELF(cb) &&
           Py_IS_TYPE(PyCFunction_GET_SELF(cb), task_type);
}

/* end a pending park now and run its callbacks here, each in its context.
 * ``done`` (or NULL): a finished asyncio Future whose result is None, which a
 * Task's wake-up is handed instead of the park: the wake-up only takes the
 * result of what it is given, and of an exact Future it takes it in C (of
 * any other object through a method call by name, which costs more than the
 * rest of the wake-up's C part). */
static void wake_now(Park *self, PyObject *done, Kept *err) {
    if (self->state != PARK_PENDING) return;
    self->state = PARK_DONE;
    Callbacks c = take_callbacks(self);
    if (c.cb && run_one(done && is_task_wakeup(c.cb) ? done : (PyObject *)self, c.cb, c.ctx) < 0)
        keep_error(err);
    if (c.more) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(c.more); i++) {
            PyObject *t = PyList_GET_ITEM(c.more, i);
            if (run_one((PyObject *)self, PyTuple_GET_ITEM(t, 0), PyTuple_GET_ITEM(t, 1)) < 0)
                keep_error(err);
        }
    }
    drop_callbacks(&c);
}

#define WAKE_INLINE 8

/* wake_parks(parks[, done]): end every pending park of the set ``parks`` now
 * and run their callbacks (the tasks' steps) here, after emptying the set (a
 * task that parks again meanwhile adds its new park, for the next wake-up).
 * What a callback raises is raised after every other park was served.  Only
 * from a loop callback that no task runs in (the notify socket's reader
 * callback).  ``done``: see wake_now(). */
static PyObject *wake_parks_done(PyObject *parks, PyObject *done) {
    if (done == Py_None) done = NULL;
    if (done && (!future_type || !Py_IS_TYPE(done, future_type))) {
        PyErr_SetString(PyExc_TypeError, "wake_parks(): done is a finished asyncio Future");
        return NULL;
    }
    if (!PySet_Check(parks)) {
        PyErr_SetString(PyExc_TypeError, "wake_parks() takes a set of parks");
        return NULL;
    }
    Py_ssize_t n = PySet_GET_SIZE(parks);
    if (n == 0) Py_RETURN_NONE;
    PyObject *inline_buf[WAKE_INLINE];
    PyObject **got = inline_buf;
    if (n > WAKE_INLINE) {
        got = PyMem_Malloc((size_t)n * sizeof(PyObject *));
        if (!got) return PyErr_NoMemory();
    }
    Py_ssize_t k = 0;
    while (k < n) {  /* the set holds n: n pops empty it */
        PyObject *p = PySet_Pop(parks);
        if (!p) break;
        got[k++] = p;
    }
    if (k < n) {  /* cannot happen under the GIL; be safe */
        for (Py_ssize_t i = 0; i < k; i++) Py_DECREF(got[i]);
        if (got != inline_buf) PyMem_Free(got);
        return NULL;
    }
    Kept err = {NULL, NULL, NULL};
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *p = got[i];
        if (Py_IS_TYPE(p, &ParkType)) {
            wake_now((Park *)p, done, &err);
        } else {  /* any other future: resolved the usual way */
            PyObject *d = PyObject_CallMethod(p, "done", NULL);
            int done = d ? PyObject_IsTrue(d) : -1;
            Py_XDECREF(d);
            PyObject *r = done == 0 ? PyObject_CallMethod(p, "set_result", "O", Py_None) : NULL;
            if (done < 0 || (done == 0 && !r)) keep_error(&err);
            Py_XDECREF(r);
        }
        Py_DECREF(p);
    }
    if (got != inline_buf) PyMem_Free(got);
    if (err.t) {
        PyErr_Restore(err.t, err.v, err.tb);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *wake_parks(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "wake_parks(parks[, done])");
        return NULL;
    }
    return wake_parks_done(args[0], nargs == 2 ? args[1] : Py_None);
}

/* park_readable(fd, parks[, done]): the reader callback of a loop's notify
 * socket: take one datagram (the loop calls again while more are queued) and
 * wake_parks() */
static PyObject *park_readable(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs < 2 || nargs > 3) {
        PyErr_SetString(PyExc_TypeError, "park_readable(fd, parks[, done])");
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) return NULL;
    char buf[64];
    /* non-blocking: none after all, or closed, is fine (a spurious wake-up) */
    if (read((int)fd, buf, sizeof buf) < 0) errno = 0;
    return wake_parks_done(args[1], nargs == 3 ? args[2] : Py_None);
}

/* -- the future protocol asyncio.Task follows ---------------------------------- */
static PyObject *invalid_state(const char *msg) {
    PyErr_SetString(invalid_state_error, msg);
    return NULL;
}

static PyObject *raise_cancelled(Park *self) {
    if (self->cancel_msg)
        PyErr_SetObject(cancelled_error, self->cancel_msg);
    else
        PyErr_SetNone(cancelled_error);
    return NULL;
}

static PyObject *park_result(Park *self, PyObject *unused) {
    (void)unused;
    if (self->state == PARK_DONE) Py_RETURN_NONE;
    if (self->state == PARK_CANCELLED) return raise_cancelled(self);
    return invalid_state("Result is not set.");
}

static PyObject *park_exception(Park *self, PyObject *unused) {
    (void)unused;
    if (self->state == PARK_DONE) Py_RETURN_NONE;
    if (self->state == PARK_CANCELLED) return raise_cancelled(self);
    return invalid_state("Exception is not set.");
}

static PyObject *park_done(Park *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(self->state != PARK_PENDING);
}

static PyObject *park_cancelled(Park *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(self->state == PARK_CANCELLED);
}

static PyObject *park_get_loop(Park *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self->loop);
}

/* set_result(None): end the park; its callbacks run from the loop (call_soon) */
static PyObject *park_set_result(Park *self, PyObject *value) {
    if (value != Py_None) {
        PyErr_SetString(PyExc_TypeError, "a park's result is None");
        return NULL;
    }
    if (self->state != PARK_PENDING) return invalid_state("invalid state");
    self->state = PARK_DONE;
    if (schedule_callbacks(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *park_cancel(Park *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"msg", NULL};
    PyObject *msg = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:cancel", kwlist, &msg)) return NULL;
    if (self->state != PARK_PENDING) Py_RETURN_FALSE;
    self->state = PARK_CANCELLED;
    if (msg != Py_None) Py_XSETREF(self->cancel_msg, Py_NewRef(msg));
    if (schedule_callbacks(self) < 0) return NULL;
    Py_RETURN_TRUE;
}

/* add_done_callback(fn, *, context=None) */
static PyObject *park_add_done_callback(Park *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *ctx = Py_None;
    if (nargs != 1 || nkw > 1 ||
        (nkw == 1 && PyTuple_GET_ITEM(kwnames, 0) != PyTuple_GET_ITEM(kw_context, 0) &&
         PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "context") != 0)) {
        PyErr_SetString(PyExc_TypeError,
                        "add_done_callback(fn, *, context=None) takes one callback");
        return NULL;
    }
    PyObject *fn = args[0];
    if (nkw == 1) ctx = args[1];
    PyObject *own_ctx = NULL;
    if (ctx == Py_None) {
        own_ctx = PyContext_CopyCurrent();
        if (!own_ctx) return NULL;
        ctx = own_ctx;
    }
    int rc = 0;
    if (self->state != PARK_PENDING) {
        rc = schedule_one(self, fn, ctx);
    } else if (!self->cb) {
        self->cb = Py_NewRef(fn);
        self->ctx = Py_NewRef(ctx);
    } else {
        if (!self->more) self->more = PyList_New(0);
        PyObject *t = self->more ? PyTuple_Pack(2, fn, ctx) : NULL;
        rc = t ? PyList_Append(self->more, t) : -1;
        Py_XDECREF(t);
    }
    Py_XDECREF(own_ctx);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* remove_done_callback(fn) -> how many were removed */
static PyObject *park_remove_done_callback(Park *self, PyObject *fn) {
    Py_ssize_t removed = 0;
    if (self->cb) {
        int eq = PyObject_RichCompareBool(self->cb, fn, Py_EQ);
        if (eq < 0) return NULL;
        if (eq) {
            Py_CLEAR(self->cb);
            Py_CLEAR(self->ctx);
            removed++;
        }
    }
    if (self->more) {
        PyObject *keep = PyList_New(0);
        if (!keep) return NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->more); i++) {
            PyObject *t = PyList_GET_ITEM(self->more, i);
            int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(t, 0), fn, Py_EQ);
            if (eq < 0 || (!eq && PyList_Append(keep, t) < 0)) {
                Py_DECREF(keep);
                return NULL;
            }
            removed += eq;
        }
        Py_SETREF(self->more, keep);
    }
    return PyLong_FromSsize_t(removed);
}

/* await park: yields the park itself until it ends */
static PySendResult park_send(Park *self, PyObject *arg, PyObject **presult) {
    (void)arg;
    if (self->state == PARK_PENDING) {
        self->blocking = 1;
        *presult = Py_NewRef((PyObject *)self);
        return PYGEN_NEXT;
    }
    if (self->state == PARK_CANCELLED) {
        raise_cancelled(self);
        *presult = NULL;
        return PYGEN_ERROR;
    }
    *presult = Py_NewRef(Py_None);
    return PYGEN_RETURN;
}

static PyObject *park_iternext(Park *self) {
    PyObject *r;
    PySendResult s = park_send(self, Py_None, &r);
    if (s == PYGEN_NEXT) return r;
    if (s == PYGEN_RETURN) {
        Py_DECREF(r);  /* None: StopIteration without a value */
    }
    return NULL;
}

static PyObject *park_self(PyObject *self) {
    return Py_NewRef(self);
}

static PyObject *park_await(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *park_repr(Park *self) {
    static const char *names[] = {"pending", "done", "cancelled"};
    return PyUnicode_FromFormat("<Park %s>", names[(int)self->state]);
}

static PyMethodDef park_methods[] = {
    {"result", (PyCFunction)park_result, METH_NOARGS, "None once done (CancelledError: cancelled)."},
    {"exception", (PyCFunction)park_exception, METH_NOARGS, "None once done."},
    {"done", (PyCFunction)park_done, METH_NOARGS, "Whether the park ended."},
    {"cancelled", (PyCFunction)park_cancelled, METH_NOARGS, "Whether the park was cancelled."},
    {"get_loop", (PyCFunction)park_get_loop, METH_NOARGS, "The loop of the park."},
    {"set_result", (PyCFunction)park_set_result, METH_O,
     "End the park (result None); its callbacks run from the loop."},
    {"cancel", (PyCFunction)(void (*)(void))park_cancel, METH_VARARGS | METH_KEYWORDS,
     "Cancel the park; its callbacks run from the loop."},
    {"add_done_callback", (PyCFunction)(void (*)(void))park_add_done_callback,
     METH_FASTCALL | METH_KEYWORDS, "Call fn(park) in context when the park ends."},
    {"remove_done_callback", (PyCFunction)park_remove_done_callback, METH_O,
     "Remove fn from the callbacks; returns how many were removed."},
    {"__await__", (PyCFunction)park_await, METH_NOARGS, "The park itself (an iterator)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef park_members[] = {
    {"_asyncio_future_blocking", T_BOOL, offsetof(Park, blocking), 0,
     "Set while the park is yielded to a task (asyncio's future protocol)."},
    {NULL, 0, 0, 0, NULL},
};

static PyAsyncMethods park_async = {
    .am_await = park_self,
    .am_send = (sendfunc)park_send,
};

static PyTypeObject ParkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.Park",
    .tp_basicsize = sizeof(Park),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "What a parked task awaits (native/park.c): asyncio's future protocol, one "
              "state, made by new_park(loop).",
    .tp_dealloc = (destructor)park_dealloc,
    .tp_traverse = (traverseproc)park_traverse,
    .tp_clear = (inquiry)park_clear,
    .tp_repr = (reprfunc)park_repr,
    .tp_as_async = &park_async,
    .tp_iter = park_self,
    .tp_iternext = (iternextfunc)park_iternext,
    .tp_methods = park_methods,
    .tp_members = park_members,
};

static PyMethodDef park_module_methods[] = {
    {"new_park", (PyCFunction)(void (*)(void))new_park, METH_FASTCALL,
     "new_park(loop, parks=None, wakers=None) -> Park\n--\n\nA pending park on loop, added to "
     "the sets given."},
    {"end_park", (PyCFunction)(void (*)(void))end_park, METH_FASTCALL,
     "end_park(park, parks, wakers=None) -> None\n--\n\nThe park leaves the sets."},
    {"wake_parks", (PyCFunction)(void (*)(void))wake_parks, METH_FASTCALL,
     "wake_parks(parks, done=None) -> None\n--\n\nEnd every park of the set now (emptying "
     "it) and run their callbacks here (a Task's wake-up is handed ``done``, a finished "
     "Future, when given); only from a loop callback no task runs in."},
    {"park_readable", (PyCFunction)(void (*)(void))park_readable, METH_FASTCALL,
     "park_readable(fd, parks, done=None) -> None\n--\n\nA notify socket's reader callback: "
     "read one datagram, then wake_parks(parks, done)."},
    {NULL, NULL, 0, NULL},
};

int aiochronicle_park_init(PyObject *m) {
    if (PyType_Ready(&ParkType) < 0) return -1;
    str_call_soon = PyUnicode_InternFromString("call_soon");
    PyObject *ctx = PyUnicode_InternFromString("context");
    if (!str_call_soon || !ctx) return -1;
    kw_context = PyTuple_Pack(1, ctx);
    Py_DECREF(ctx);
    if (!kw_context) return -1;
    PyObject *exc = PyImport_ImportModule("asyncio.exceptions");
    if (!exc) return -1;
    cancelled_error = PyObject_GetAttrString(exc, "CancelledError");
    invalid_state_error = PyObject_GetAttrString(exc, "InvalidStateError");
    Py_DECREF(exc);
    if (!cancelled_error || !invalid_state_error) return -1;
    PyObject *am = PyImport_ImportModule("_asyncio");
    if (am) {  /* without the C tasks, every wake-up hands over the park */
        PyObject *t = PyObject_GetAttrString(am, "Task");
        PyObject *f = PyObject_GetAttrString(am, "Future");
        Py_DECREF(am);
        if (t && f && PyType_Check(t) && PyType_Check(f)) {
            task_type = (PyTypeObject *)t;
            future_type = (PyTypeObject *)f;
        } else {
            Py_XDECREF(t);
            Py_XDECREF(f);
        }
    }
    PyErr_Clear();
    if (PyModule_AddObjectRef(m, "Park", (PyObject *)&ParkType) < 0) return -1;
    return PyModule_AddFunctions(m, park_module_methods);
}
