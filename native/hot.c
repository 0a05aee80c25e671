/*
 * aiochronicle._core._hot: the per-message calls through the CPython C API.
 *
 * A cffi call costs ~0.5 us (argument conversion, releasing and taking the
 * GIL back); the calls made once per message are here instead, as methods of
 * two small base types that aiochronicle.Appender and aiochronicle.Tailer
 * derive from.  They call the same core (cq.c, compiled into this module
 * too) on the same structs, which Python allocates with cffi and hands over
 * as handles (NativeHandle objects made by handle() below from a cffi buffer
 * of exactly the struct: never a raw address).  Anything but the common case (a roll, a remap, a busy lock,
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
#include "histcall.h"
#include "pause.h"

#ifndef AIOCHRONICLE_VERSION
#define AIOCHRONICLE_VERSION "0+unknown"
#endif

int aiochronicle_wirecall_init(PyObject *m); /* native/wirecall.c */
int aiochronicle_park_init(PyObject *m);     /* native/park.c */

static PyObject *str_append_slow;   /* "_append_native_failed" */
static PyObject *str_read_slow;     /* "_read_slow" */
static PyObject *str_read_other;    /* "_read_other" */
static PyObject *str_read_blocking; /* "_read_blocking" */
static PyObject *str_anext;         /* "_anext" */
static PyObject *str_read_nowait;   /* "read_nowait" */
static PyTypeObject *excerpt_type;  /* aiochronicle.Excerpt (a tuple subclass) */
static PyObject *str_let_go;        /* "_let_go" */

/* ------------------------------------------------------------------ */
/* Calls in flight (both types start with this)                        */

#define HOT_CALLS_HEAD \
    PyObject_HEAD \
    Py_ssize_t busy; /* calls of this object in flight (any thread, nested) */ \
    int owing;       /* closed while busy: the last call out lets the file go */ \
    PyObject *bound; /* the handle of the bound struct: keeps its memory alive */

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

/* In a forked child: the calls in flight were the parent's threads', which
 * the child does not have; none of them will leave. */
static PyObject *calls_forked(PyObject *obj, PyObject *unused) {
    HotCalls *c = (HotCalls *)obj;
    c->busy = 0;
    c->owing = 0;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ */
/* Handles: a native struct handed over as an object, never an address */

/* The kinds of memory that cross from the cffi side (aiochronicle._core._native)
 * to this module.  handle() makes a NativeHandle of one kind from a writable
 * buffer of exactly that kind's size (cffi's ffi.buffer() of a typed
 * pointer); the handle keeps the buffer (and so the memory) alive.  A method
 * taking native memory checks the object's type and kind (two compares: the
 * kind is one of the static strings below) and refuses anything else. */
static const char HANDLE_APPENDER[] = "cq_appender";
static const char HANDLE_TAILER[] = "cq_tailer";
static const char HANDLE_U32[] = "uint32_t";
static const char HANDLE_I64[] = "int64_t";

static const struct {
    const char *ctype; /* cffi's name of the type */
    const char *kind;
    Py_ssize_t size;
} handle_kinds[] = {
    {"struct cq_appender", HANDLE_APPENDER, (Py_ssize_t)sizeof(cq_appender)},
    {"struct cq_tailer", HANDLE_TAILER, (Py_ssize_t)sizeof(cq_tailer)},
    {"uint32_t", HANDLE_U32, (Py_ssize_t)sizeof(uint32_t)},
    {"int64_t", HANDLE_I64, (Py_ssize_t)sizeof(int64_t)},
};

typedef struct {
    PyObject_HEAD
    void *p;
    const char *kind; /* one of the HANDLE_* strings */
    PyObject *keep;   /* the buffer's exporter */
} NativeHandle;

static void native_handle_dealloc(NativeHandle *h) {
    Py_XDECREF(h->keep);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *native_handle_repr(NativeHandle *h) {
    return PyUnicode_FromFormat("<native handle of a %s>", h->kind);
}

static PyTypeObject NativeHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.NativeHandle",
    .tp_basicsize = sizeof(NativeHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)native_handle_dealloc,
    .tp_repr = (reprfunc)native_handle_repr,
    .tp_doc = "A struct or word of the native core, made by handle(): what the methods "
              "taking native memory accept (never an address). It keeps its memory alive.",
};

/* handle(buffer, ctype) -> NativeHandle: the memory `buffer` exposes, as a
 * `ctype` (one of handle_kinds), checked to be writable and of its size. */
static PyObject *make_handle(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "handle(buffer, ctype: str)");
        return NULL;
    }
    const char *ctype = PyUnicode_AsUTF8(args[1]);
    if (ctype == NULL) return NULL;
    size_t k = 0;
    while (k < sizeof handle_kinds / sizeof handle_kinds[0] &&
           strcmp(handle_kinds[k].ctype, ctype) != 0) k++;
    if (k == sizeof handle_kinds / sizeof handle_kinds[0]) {
        PyErr_Format(PyExc_TypeError, "handle: no handle for a %s", ctype);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_WRITABLE) < 0) return NULL;
    void *p = view.buf;
    Py_ssize_t len = view.len;
    PyBuffer_Release(&view);
    if (len != handle_kinds[k].size || p == NULL) {
        PyErr_Format(PyExc_TypeError, "handle: a %s is %zd bytes, the buffer %zd",
                     ctype, handle_kinds[k].size, len);
        return NULL;
    }
    NativeHandle *h = PyObject_New(NativeHandle, &NativeHandleType);
    if (h == NULL) return NULL;
    h->p = p;
    h->kind = handle_kinds[k].kind;
    h->keep = Py_NewRef(args[0]);
    return (PyObject *)h;
}

/* The memory of a handle of `kind`; NULL with a TypeError naming what was
 * expected for anything else (an int, a handle of another kind, ...). */
static inline void *handle_pointer(PyObject *obj, const char *kind, const char *what) {
    if (Py_IS_TYPE(obj, &NativeHandleType) && ((NativeHandle *)obj)->kind == kind)
        return ((NativeHandle *)obj)->p;
    if (Py_IS_TYPE(obj, &NativeHandleType))
        PyErr_Format(PyExc_TypeError, "%s: expected a handle of a %s (from _native), not of a %s",
                     what, kind, ((NativeHandle *)obj)->kind);
    else
        PyErr_Format(PyExc_TypeError, "%s: expected a handle of a %s (from _native), not %.80s",
                     what, kind, Py_TYPE(obj)->tp_name);
    return NULL;
}

/* Bind `obj` to the struct of handle `handle` (kept while bound). */
static void *bind_handle(PyObject *obj, PyObject *handle, const char *name) {
    void *p = handle_pointer(handle, name, "_bind_native");
    if (p == NULL) return NULL;
    Py_XSETREF(((HotCalls *)obj)->bound, Py_NewRef(handle));
    return p;
}

static void calls_dealloc(PyObject *obj) {
    Py_CLEAR(((HotCalls *)obj)->bound);
    Py_TYPE(obj)->tp_free(obj);
}

#define HOT_CALLS_METHODS \
    {"_forked", calls_forked, METH_NOARGS, \
     "In a forked child: no call is in flight (the parent's threads are not here)."}, \
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

static PyObject *hot_appender_bind(HotAppender *self, PyObject *handle) {
    void *p = bind_handle((PyObject *)self, handle, HANDLE_APPENDER);
    if (p == NULL) return NULL;
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
     "_bind_native(handle)\n--\n\nPoint this object at its native cq_appender (a handle "
     "from _native, which it keeps)."},
    {"append", (PyCFunction)(void (*)(void))hot_appender_append, METH_FASTCALL,
     "append(data) -> int\n--\n\nAppend one excerpt; returns its 64-bit index."},
    HOT_CALLS_METHODS,
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HotAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.HotAppender",
    .tp_basicsize = sizeof(HotAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_dealloc = calls_dealloc,
    .tp_doc = "The per-message calls of an Appender (C API).",
    .tp_methods = hot_appender_methods,
    .tp_new = PyType_GenericNew,
};

/* ------------------------------------------------------------------ */
/* Method writers: one proxy method, encoded and appended in C          */

/* The method of a method writer's proxy for the common calls: every
 * argument given by position, as many as the method has.  The payload is
 * prefix + encode(argument) + suffix (the argument alone, or the tuple of
 * them when ``pack``), copied once into the excerpt by cq_append; any other
 * call (keywords, defaults, too few or too many arguments) is the Python
 * method ``fallback``, which does the same thing slower or raises as
 * Python does.  It is a method descriptor, as a function in a class is:
 * ``proxy.method(...)`` calls it with the proxy first, and no bound method
 * is made.  When the appender's ``append`` is
 * HotAppender's own (``direct``), the excerpt is appended here; otherwise
 * (an appender whose append does more) through that bound ``append``.
 * With ``into`` (msgspec's encode_into), the argument is encoded into a
 * bytearray kept for the next call (no bytes object made and shrunk per
 * call); the encoder may run Python code (an enc_hook), so a call that
 * comes in meanwhile, from this thread or another, uses ``encode``. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *appender; /* HotAppender (direct) */
    PyObject *append;   /* its bound append (not direct) */
    PyObject *encode;   /* one argument -> bytes */
    PyObject *prefix;   /* bytes */
    PyObject *suffix;   /* bytes */
    PyObject *fallback; /* function(self, *args, **kwargs) */
    PyObject *into;     /* encode_into(arg, bytearray), or None */
    PyObject *buf;      /* the bytearray encode_into writes (while not busy) */
    int busy;           /* buf is in use (an encoder that calls back in: encode) */
    PyObject *dict;     /* __name__, __doc__, ... for introspection */
    Py_ssize_t arity;
    int pack;
    int direct;
    int hist;           /* HC_NONE, or the form of the history written first */
    Py_ssize_t hist_at; /* where in prefix the history goes */
    /* a replay gate (a service's output): while *gate_p is 0 the excerpt is
     * appended here through gate_appender (a HotAppender), else through
     * ``append`` (which compares it with what was written before a restart) */
    PyObject *gate;          /* the NativeHandle of the int64 cell, or NULL */
    const int64_t *gate_p;
    PyObject *gate_appender; /* HotAppender, or NULL */
} WriterMethod;

#define WM_STACK 512

/* The appender's own append() in C (cq_append, else its slow path); 0 or -1. */
static int wm_append_direct(HotAppender *ha, const char *payload, Py_ssize_t len,
                            PyObject *whole) {
    cq_appender *a = ha->a;
    int64_t r = 0;
    if (a != NULL) {
        uint64_t spin = a->lock_spin_ns;
        a->lock_spin_ns = 0;
        r = cq_append(a, (const uint8_t *)payload, (uint64_t)len, 0);
        a->lock_spin_ns = spin;
        if (r >= 0) return 0;
    }
    PyObject *data = whole ? Py_NewRef(whole) : PyBytes_FromStringAndSize(payload, len);
    if (data == NULL) return -1;
    PyObject *got = slow_append(ha, r, data);
    Py_DECREF(data);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return 0;
}

/* Append payload[0:len] as the appender's append() would; returns 0 or -1. */
static int wm_append(WriterMethod *self, const char *payload, Py_ssize_t len, PyObject *whole) {
    PyObject *data = NULL;
    if (self->direct || (self->gate_p != NULL && *self->gate_p == 0)) {
        /* counted in flight as append() is: a close meanwhile (another
         * thread in the slow path, a signal handler) leaves the file mapped
         * until this call leaves */
        HotAppender *ha = (HotAppender *)(self->direct ? self->appender : self->gate_appender);
        ha->busy++;
        int rc = wm_append_direct(ha, payload, len, whole);
        PyObject *res = leave((PyObject *)ha, rc < 0 ? NULL : Py_NewRef(Py_None));
        if (res == NULL) return -1;
        Py_DECREF(res);
        return 0;
    }
    data = whole ? Py_NewRef(whole) : PyBytes_FromStringAndSize(payload, len);
    if (data == NULL) return -1;
    PyObject *got = PyObject_CallOneArg(self->append, data);
    Py_DECREF(data);
    if (got == NULL) return -1;
    Py_DECREF(got);
    return 0;
}

/* Append prefix + body[0:nb] + suffix (``whole``: body as a bytes object,
 * if it is one), with hist[0:nh] inserted at prefix[hist_at] when nh > 0;
 * returns 0 or -1. */
static int wm_join(WriterMethod *self, const char *body, Py_ssize_t nb, PyObject *whole,
                   const uint8_t *hist, Py_ssize_t nh) {
    Py_ssize_t np = PyBytes_GET_SIZE(self->prefix), ns = PyBytes_GET_SIZE(self->suffix);
    if (np == 0 && ns == 0 && nh == 0) return wm_append(self, body, nb, whole);
    char small[WM_STACK];
    Py_ssize_t len = np + nh + nb + ns, at = nh ? self->hist_at : np;
    char *buf = len <= WM_STACK ? small : PyMem_Malloc((size_t)len);
    if (buf == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    const char *pre = PyBytes_AS_STRING(self->prefix);
    memcpy(buf, pre, (size_t)at);
    if (nh) {
        memcpy(buf + at, hist, (size_t)nh);
        memcpy(buf + at + nh, pre + at, (size_t)(np - at));
    }
    memcpy(buf + np + nh, body, (size_t)nb);
    memcpy(buf + np + nh + nb, PyBytes_AS_STRING(self->suffix), (size_t)ns);
    int rc = wm_append(self, buf, len, NULL);
    if (buf != small) PyMem_Free(buf);
    return rc;
}

static PyObject *wm_call(WriterMethod *self, PyObject *const *args, size_t nargsf,
                         PyObject *kwnames) {
    if (self->encode == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "this method writer is being collected");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf) - 1; /* args[0] is the proxy */
    if ((kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || nargs != self->arity)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    /* the history first: its timing is taken before the arguments are encoded,
     * as the Python writer's (a history this call cannot build: that writer) */
    uint8_t hist[HC_MAX];
    Py_ssize_t nh = 0;
    if (self->hist != HC_NONE) {
        nh = hc_outgoing(self->hist, hist);
        if (nh == -1) return NULL;
        if (nh == HC_SLOW) return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    args++;
    PyObject *arg;
    if (self->pack) {
        arg = PyTuple_New(nargs);
        if (arg == NULL) return NULL;
        for (Py_ssize_t k = 0; k < nargs; k++) PyTuple_SET_ITEM(arg, k, Py_NewRef(args[k]));
    } else {
        arg = Py_NewRef(nargs ? args[0] : Py_None);
    }
    if (self->into != Py_None && !self->busy) {
        self->busy = 1;
        PyObject *in[2] = {arg, self->buf};
        PyObject *r = PyObject_Vectorcall(self->into, in, 2, NULL);
        Py_DECREF(arg);
        if (r == NULL) {
            self->busy = 0;
            return NULL;
        }
        Py_DECREF(r);
        /* no Python code runs from here until busy is cleared */
        int rc = wm_join(self, PyByteArray_AS_STRING(self->buf),
                         PyByteArray_GET_SIZE(self->buf), NULL, hist, nh);
        if (PyByteArray_GET_SIZE(self->buf) > (1 << 16)) {
            /* a large call: let its memory go (the next call grows a new one) */
            PyObject *fresh = PyByteArray_FromStringAndSize(NULL, 0);
            if (fresh == NULL) rc = -1;
            else Py_SETREF(self->buf, fresh);
        }
        self->busy = 0;
        if (rc < 0) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *body = PyObject_CallOneArg(self->encode, arg);
    Py_DECREF(arg);
    if (body == NULL) return NULL;
    if (!PyBytes_Check(body)) {
        PyErr_Format(PyExc_TypeError, "a method writer's encoder returned %.100s, not bytes",
                     Py_TYPE(body)->tp_name);
        Py_DECREF(body);
        return NULL;
    }
    int rc = wm_join(self, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body), body, hist, nh);
    Py_DECREF(body);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *wm_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *appender, *append, *encode, *prefix, *suffix, *fallback, *into = Py_None;
    PyObject *gate = Py_None, *gate_appender = Py_None;
    Py_ssize_t arity, hist_at = 0;
    int pack, direct, hist = HC_NONE;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) > 0) {
        PyErr_SetString(PyExc_TypeError, "WriterMethod takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "OOOSSnppO|OinOO:WriterMethod", &appender, &append, &encode,
                          &prefix, &suffix, &arity, &pack, &direct, &fallback, &into, &hist,
                          &hist_at, &gate, &gate_appender))
        return NULL;
    const int64_t *gate_p = NULL;
    if (gate != Py_None || gate_appender != Py_None) {
        gate_p = handle_pointer(gate, HANDLE_I64, "WriterMethod");
        if (gate_p == NULL) return NULL;
        if (!PyObject_TypeCheck(gate_appender, &HotAppenderType)) {
            PyErr_SetString(PyExc_TypeError, "a replay gate needs a HotAppender");
            return NULL;
        }
    }
    if ((hist != HC_NONE && hist != HC_MSGPACK && hist != HC_WIRE) || hist_at < 0 ||
        hist_at > PyBytes_GET_SIZE(prefix)) {
        PyErr_SetString(PyExc_ValueError, "hist is 0, 1 or 2 and hist_at within the prefix");
        return NULL;
    }
    if (into != Py_None && !PyCallable_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "into must be callable or None");
        return NULL;
    }
    PyObject *buf = PyByteArray_FromStringAndSize(NULL, 0);
    if (buf == NULL) return NULL;
    if (direct && !PyObject_TypeCheck(appender, &HotAppenderType)) {
        PyErr_SetString(PyExc_TypeError, "direct appends need a HotAppender");
        return NULL;
    }
    if (!PyCallable_Check(append) || !PyCallable_Check(encode) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "append, encode and fallback must be callable");
        return NULL;
    }
    if (arity < 0 || (!pack && arity > 1)) {
        PyErr_SetString(PyExc_ValueError, "more than one argument needs pack");
        return NULL;
    }
    WriterMethod *self = PyObject_GC_New(WriterMethod, type);
    if (self == NULL) {
        Py_DECREF(buf);
        return NULL;
    }
    self->into = Py_NewRef(into);
    self->buf = buf;
    self->busy = 0;
    self->vectorcall = (vectorcallfunc)wm_call;
    self->appender = Py_NewRef(appender);
    self->append = Py_NewRef(append);
    self->encode = Py_NewRef(encode);
    self->prefix = Py_NewRef(prefix);
    self->suffix = Py_NewRef(suffix);
    self->fallback = Py_NewRef(fallback);
    self->dict = NULL;
    self->arity = arity;
    self->pack = pack;
    self->direct = direct;
    self->hist = hist;
    self->hist_at = hist_at;
    self->gate_p = gate_p;
    self->gate = gate_p ? Py_NewRef(gate) : NULL;
    self->gate_appender = gate_p ? Py_NewRef(gate_appender) : NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static int wm_traverse(WriterMethod *self, visitproc visit, void *arg) {
    Py_VISIT(self->appender);
    Py_VISIT(self->append);
    Py_VISIT(self->encode);
    Py_VISIT(self->fallback);
    Py_VISIT(self->into);
    Py_VISIT(self->dict);
    Py_VISIT(self->gate_appender);
    return 0;
}

static int wm_clear(WriterMethod *self) {
    Py_CLEAR(self->appender);
    Py_CLEAR(self->append);
    Py_CLEAR(self->encode);
    Py_CLEAR(self->prefix);
    Py_CLEAR(self->suffix);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->into);
    Py_CLEAR(self->buf);
    Py_CLEAR(self->dict);
    self->gate_p = NULL; /* (appends go through ``append``, cleared too: none is made) */
    Py_CLEAR(self->gate);
    Py_CLEAR(self->gate_appender);
    return 0;
}

static void wm_dealloc(WriterMethod *self) {
    PyObject_GC_UnTrack(self);
    wm_clear(self);
    PyObject_GC_Del(self);
}

/* As a function's __get__: a bound method on an instance, itself on the class. */
static PyObject *wm_get(WriterMethod *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New((PyObject *)self, obj);
}

static PyObject *wm_call_slow(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static PyMemberDef wm_members[] = {
    {"fallback", T_OBJECT, offsetof(WriterMethod, fallback), READONLY,
     "The Python method for the calls not made here."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef wm_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WriterMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.WriterMethod",
    .tp_basicsize = sizeof(WriterMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A method writer's method: the call encoded and appended in C.",
    .tp_dealloc = (destructor)wm_dealloc,
    .tp_traverse = (traverseproc)wm_traverse,
    .tp_clear = (inquiry)wm_clear,
    .tp_vectorcall_offset = offsetof(WriterMethod, vectorcall),
    .tp_call = wm_call_slow,
    .tp_descr_get = (descrgetfunc)wm_get,
    .tp_dictoffset = offsetof(WriterMethod, dict),
    .tp_members = wm_members,
    .tp_getset = wm_getset,
    .tp_new = wm_new,
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
        PyErr_SetString(PyExc_TypeError, "_bind_native(handle, forward, plain=False)");
        return NULL;
    }
    int fw = PyObject_IsTrue(args[1]);
    if (fw < 0) return NULL;
    int plain = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (plain < 0) return NULL;
    void *p = bind_handle((PyObject *)self, args[0], HANDLE_TAILER);
    if (p == NULL) return NULL;
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

static PyObject *call_self_obj(PyObject *self, PyObject *name) {
    PyObject *args[1] = {self};
    return PyObject_VectorcallMethod(name, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
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

/* _spin_read(budget_ns, stop, stop_seen) -> Excerpt | int: the
 * waiting step of read_blocking() and await read() with a spinning pauser.
 * Spins for the next excerpt with the GIL released (cq_spin_read: bounded
 * by budget_ns, ended early when *stop moves); an excerpt comes back built
 * here, anything else as its result code for the Python side. */
static PyObject *tailer_spin_read(HotTailer *self, PyObject *const *args,
                                 Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_spin_read(budget_ns, stop, stop_seen)");
        return NULL;
    }
    unsigned long long budget = PyLong_AsUnsignedLongLong(args[0]);
    if (budget == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    void *stop = handle_pointer(args[1], HANDLE_U32, "_spin_read");
    if (stop == NULL) return NULL;
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

/* _arm_read(parked, slot, owner, ident, alone) -> Excerpt | None | False:
 * an event loop's park announced and the look for data after it, in one call
 * (the owner side of notify.h's protocol).  If owner slot `slot` (the int64
 * of handle `owner`) still holds `ident`, set bit `slot` of the parked bits
 * (handle `parked`; a full barrier), then read_nowait() (this type's, in
 * C, or a subclass's own).  None: armed with nothing to read (the caller
 * sleeps until a datagram or its timer).  An excerpt: when the caller is the
 * loop's only parked waiter (`alone`), the bit is cleared again (an appender
 * that saw it meanwhile sends one datagram all the same, which only wakes
 * the loop for nothing).  False: the slot is no longer ours; nothing was
 * armed or read.  The handles are of the caller's mapping of
 * metadata.cq4t, which outlives the call. */
static PyObject *tailer_arm_read(HotTailer *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_arm_read(parked, slot, owner, ident, alone)");
        return NULL;
    }
    int64_t *parked = (int64_t *)handle_pointer(args[0], HANDLE_I64, "_arm_read");
    if (parked == NULL) return NULL;
    long slot = PyLong_AsLong(args[1]);
    if (slot == -1 && PyErr_Occurred()) return NULL;
    if (slot < 0 || slot >= CQ_NOTIFY_SLOTS) {
        PyErr_SetString(PyExc_ValueError, "_arm_read: no such slot");
        return NULL;
    }
    const int64_t *owner = (const int64_t *)handle_pointer(args[2], HANDLE_I64, "_arm_read");
    if (owner == NULL) return NULL;
    long long ident = PyLong_AsLongLong(args[3]);
    if (ident == -1 && PyErr_Occurred()) return NULL;
    int alone = PyObject_IsTrue(args[4]);
    if (alone < 0) return NULL;
    if (__atomic_load_n(owner, __ATOMIC_ACQUIRE) != (int64_t)ident) Py_RETURN_FALSE;
    cq_notify_park(parked, (int)slot);
    PyObject *r = self->plain ? tailer_read_nowait(self) : call_self(self, str_read_nowait, NULL);
    if (r != NULL && r != Py_None && alone) cq_notify_unpark(parked, (int)slot);
    return r;
}

static PyObject *hot_tailer_arm_read(HotTailer *self, PyObject *const *args, Py_ssize_t nargs) {
    self->busy++;
    return leave((PyObject *)self, tailer_arm_read(self, args, nargs));
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
    .tp_name = "aiochronicle._core._hot.NextExcerpt",
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
    {"_arm_read", (PyCFunction)(void (*)(void))hot_tailer_arm_read, METH_FASTCALL,
     "Announce an event loop's park (its notify slot's parked bit), then read:\n"
     "an excerpt, None (armed, nothing yet) or False (the slot is no longer ours)."},
    {"_spin_read", (PyCFunction)(void (*)(void))hot_tailer_spin_read, METH_FASTCALL,
     "Spin (GIL released, bounded) for the next excerpt: it, or a result code."},
    {"_bind_native", (PyCFunction)(void (*)(void))hot_tailer_bind, METH_FASTCALL,
     "_bind_native(handle, forward, plain=False)\n--\n\nPoint this object at its native "
     "cq_tailer (a handle from _native, which it keeps) and say whether it reads forward."},
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
    .tp_name = "aiochronicle._core._hot.HotTailer",
    .tp_basicsize = sizeof(HotTailer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_dealloc = calls_dealloc,
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
/* One excerpt p[0:len]: if it is a common call, decode it and call its
 * handler.  Before the handler is called, the excerpt is counted as
 * consumed: out[0] = next, out[1] += 1, and *cursor = next (if cursor).
 * ``last_key``/``last_entry`` (owned references, NULL at first) cache the
 * last name looked up in ``fast``. */
enum { MP_OTHER = 0, MP_HANDLED = 1, MP_FAILED = -1 };

/* A reader that tracks message history: the queue it reads (its sourceId)
 * and the index of the excerpt at hand.  Its calls may carry a history
 * first (``[Ext 72, name, arg]``, 0x93); each handler runs with its excerpt
 * as the current message (native/histcall.h), as the Python dispatch does. */
typedef struct {
    int32_t source_id;
    int64_t index;
    int mode; /* TRACK_* */
} mp_track;

/* which calls run with their excerpt as the current message: every call (a
 * reader tracking history: history=True, or a queue with a sourceId), the
 * calls that carry a history (history=None on a queue without one), or none
 * (history=False: a history is read past) */
enum { TRACK_ALWAYS = 0, TRACK_CARRIED = 1, TRACK_IGNORE = 2 };

static inline int tracks(const mp_track *tr, const uint8_t *raw) {
    return tr != NULL && (tr->mode == TRACK_ALWAYS || (tr->mode == TRACK_CARRIED && raw));
}

/* handler(arg) with the excerpt as this thread's current message */
static PyObject *mp_call_tracked(PyObject *handler, PyObject *arg, const mp_track *tr,
                                 const uint8_t *raw, size_t raw_len) {
    hc_slot slot = {NULL, raw, raw_len, tr->index, hc_now(), tr->source_id};
    hc_slot *prev = hc_push(&slot);
    PyObject *r = PyObject_CallOneArg(handler, arg);
    hc_pop(&slot, prev);
    return r;
}

static int mp_call(const uint8_t *p, int64_t len, PyObject *fast, PyObject **last_key,
                   PyObject **last_entry, int64_t *out, int64_t next, Py_ssize_t *cursor,
                   const mp_track *tr) {
    const uint8_t *raw = NULL;
    size_t raw_len = 0;
    int64_t pos = 1;
    if (len < 2) return MP_OTHER;
    if (p[0] == 0x93 && tr != NULL) {
        /* the history Ext, as msgpack_history reads it (ext 8/16/32 only) */
        int8_t type;
        size_t start;
        hist_view v;
        if (p[1] < 0xC7 || p[1] > 0xC9 ||
            hist_msgpack_ext(p + 1, (size_t)len - 1, &type, &start, &raw_len) != HIST_OK ||
            type != 72)
            return MP_OTHER;
        raw = p + 1 + start;
        if (hist_check(raw, raw_len, &v) != HIST_OK) return MP_OTHER; /* Python names it */
        pos = 1 + (int64_t)start + (int64_t)raw_len;
    } else if (p[0] != 0x92) {
        return MP_OTHER;
    }
    if (pos >= len || p[pos] < 0xA0 || p[pos] > 0xBF) return MP_OTHER;
    Py_ssize_t klen = p[pos] - 0xA0;
    if (pos + 1 + klen > len) return MP_OTHER;
    const uint8_t *name = p + pos + 1;
    pos += 1 + klen;
    PyObject *entry;
    if (*last_key != NULL && PyBytes_GET_SIZE(*last_key) == klen &&
        memcmp(PyBytes_AS_STRING(*last_key), name, (size_t)klen) == 0) {
        entry = *last_entry;
    } else {
        PyObject *key = PyBytes_FromStringAndSize((const char *)name, klen);
        if (key == NULL) return MP_FAILED;
        entry = PyDict_GetItemWithError(fast, key);
        if (entry == NULL) {
            Py_DECREF(key);
            return PyErr_Occurred() ? MP_FAILED : MP_OTHER;
        }
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            Py_DECREF(key);
            PyErr_SetString(PyExc_TypeError, "fast maps names to (decode, handler)");
            return MP_FAILED;
        }
        Py_XSETREF(*last_key, key);
        Py_XSETREF(*last_entry, Py_NewRef(entry)); /* the handler may change fast */
    }
    PyObject *body = PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)(len - pos));
    if (body == NULL) return MP_FAILED;
    Py_INCREF(entry); /* a handler may replace the cache */
    PyObject *arg = PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 0), body);
    Py_DECREF(body);
    if (arg == NULL) {
        Py_DECREF(entry);
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return MP_FAILED;
        PyErr_Clear(); /* not decodable: Python's path reports it */
        return MP_OTHER;
    }
    out[0] = next;
    out[1]++;
    if (cursor) *cursor = (Py_ssize_t)next;
    PyObject *r = !tracks(tr, raw)
                      ? PyObject_CallOneArg(PyTuple_GET_ITEM(entry, 1), arg)
                      : mp_call_tracked(PyTuple_GET_ITEM(entry, 1), arg, tr, raw, raw_len);
    Py_DECREF(arg);
    Py_DECREF(entry);
    if (r == NULL) return MP_FAILED;
    Py_DECREF(r);
    return MP_HANDLED;
}

/* A batch being dispatched: excerpt k is data[offsets[k]:offsets[k + 1]]
 * (at indices[k], for readers tracking history), from ``start`` to ``end``;
 * ``done``'s cells as _dispatch_mp says. */
typedef struct {
    Py_buffer data, offs, done, idxs;
    Py_ssize_t i, end;
    int tracked;
    mp_track track;
} batch;

static int track_args(PyObject *const *args, Py_ssize_t n, mp_track *tr);

/* The arguments every batch dispatch takes: (data, offsets, start, end, ...,
 * done at args[done_at][, indices, source_id[, mode]] after it); 0, or -1
 * with an error set (nothing held). */
static int batch_open(batch *b, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t done_at,
                      const char *name) {
    b->i = PyLong_AsSsize_t(args[2]);
    if (b->i == -1 && PyErr_Occurred()) return -1;
    b->end = PyLong_AsSsize_t(args[3]);
    if (b->end == -1 && PyErr_Occurred()) return -1;
    b->tracked = nargs > done_at + 1;
    b->track = (mp_track){0, 0, TRACK_ALWAYS};
    if (b->tracked && track_args(args + done_at + 2, nargs - done_at - 2, &b->track) < 0)
        return -1;
    if (PyObject_GetBuffer(args[0], &b->data, PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(args[1], &b->offs, PyBUF_SIMPLE) < 0) goto no_offs;
    if (PyObject_GetBuffer(args[done_at], &b->done, PyBUF_WRITABLE) < 0) goto no_done;
    if (b->tracked && PyObject_GetBuffer(args[done_at + 1], &b->idxs, PyBUF_SIMPLE) < 0)
        goto no_idxs;
    if (b->done.len < 2 * (Py_ssize_t)sizeof(int64_t) || b->i < 0 || b->end < b->i ||
        b->end >= b->offs.len / (Py_ssize_t)sizeof(int64_t) ||
        (b->tracked && b->idxs.len / (Py_ssize_t)sizeof(int64_t) < b->end)) {
        PyErr_Format(PyExc_ValueError, "%s: bad range or buffers", name);
        if (b->tracked) PyBuffer_Release(&b->idxs);
        goto no_idxs;
    }
    return 0;
no_idxs:
    PyBuffer_Release(&b->done);
no_done:
    PyBuffer_Release(&b->offs);
no_offs:
    PyBuffer_Release(&b->data);
    return -1;
}

static void batch_close(batch *b) {
    if (b->tracked) PyBuffer_Release(&b->idxs);
    PyBuffer_Release(&b->done);
    PyBuffer_Release(&b->offs);
    PyBuffer_Release(&b->data);
}

/* one excerpt: MP_OTHER, MP_HANDLED or MP_FAILED (see mp_call) */
typedef int (*batch_call)(void *ctx, const uint8_t *p, int64_t len, int64_t *out, int64_t next,
                          const mp_track *tr);

/* Dispatch the batch's excerpts with ``call`` until one is not for it (or
 * the stop cell is set after a handler); the index where it stopped, or
 * NULL with the error a handler (or the batch) raised. */
static inline __attribute__((always_inline)) PyObject *batch_run(batch *b, batch_call call,
                                                                  void *ctx, const char *name) {
    const int64_t *off = (const int64_t *)b->offs.buf, *idx = (const int64_t *)b->idxs.buf;
    int64_t *out = (int64_t *)b->done.buf;
    int stoppable = b->done.len >= 3 * (Py_ssize_t)sizeof(int64_t);
    const uint8_t *base = (const uint8_t *)b->data.buf;
    Py_ssize_t i = b->i;
    out[0] = i;
    for (; i < b->end; i++) {
        int64_t a = off[i], e = off[i + 1];
        if (a < 0 || e < a || e > (int64_t)b->data.len) {
            PyErr_Format(PyExc_ValueError, "%s: offsets outside the data", name);
            return NULL;
        }
        if (b->tracked) b->track.index = idx[i];
        int r = call(ctx, base + a, e - a, out, i + 1, b->tracked ? &b->track : NULL);
        if (r == MP_FAILED) return NULL;
        if (r == MP_OTHER) break;
        if (stoppable && out[2]) {
            i++;
            break;
        }
    }
    return PyLong_FromSsize_t(i);
}

/* _dispatch_mp's call: mp_call with its cache of the last name looked up */
typedef struct {
    PyObject *fast, *last_key, *last_entry;
} mp_calls;

static int mp_batch_call(void *ctx, const uint8_t *p, int64_t len, int64_t *out, int64_t next,
                         const mp_track *tr) {
    mp_calls *c = (mp_calls *)ctx;
    return mp_call(p, len, c->fast, &c->last_key, &c->last_entry, out, next, NULL, tr);
}

/* source_id[, mode] into *tr; -1 with an error set */
static int track_args(PyObject *const *args, Py_ssize_t n, mp_track *tr) {
    long sid = PyLong_AsLong(args[0]);
    if (sid == -1 && PyErr_Occurred()) return -1;
    long mode = n > 1 ? PyLong_AsLong(args[1]) : TRACK_ALWAYS;
    if (mode == -1 && PyErr_Occurred()) return -1;
    if (sid < INT32_MIN || sid > INT32_MAX || mode < TRACK_ALWAYS || mode > TRACK_IGNORE ||
        !hc_ready()) {
        PyErr_SetString(PyExc_ValueError, "a sourceId is an int32, a mode 0, 1 or 2 (and "
                                          "history registered)");
        return -1;
    }
    tr->source_id = (int32_t)sid;
    tr->mode = (int)mode;
    return 0;
}

/* _dispatch_mp(data, offsets, start, end, fast, done[, indices, source_id[, mode]]) -> int
 *
 * Excerpt k of a batch is data[offsets[k]:offsets[k + 1]].  From ``start``
 * on, while an excerpt is a msgpack call ``[name, arg]`` (0x92, a fixstr)
 * whose name (bytes) ``fast`` maps to ``(decode, handler)``: decode the
 * argument and call the handler with it.  Stops (returning where) at the
 * first other excerpt, at one whose argument does not decode (Python's
 * path decodes it again and reports it), or at ``end``.  ``done`` is two
 * int64: done[0] is the index after the last excerpt consumed, set before
 * its handler is called (when a handler raises, that is where reading goes
 * on); done[1] counts the calls consumed, in all.  A third int64, when
 * ``done`` has one, stops the dispatch after the handler that sets it.
 * With ``indices`` (the excerpts' indices, int64) and ``source_id``, a call
 * may carry its history first (``[Ext 72, name, arg]``), and the handlers
 * of the calls ``mode`` says (TRACK_*: all, by default) run with their
 * excerpt as the current message (native/histcall.h).  Bounded by ``end - start`` excerpts; calls
 * Python only to decode and to call the handlers the caller gave. */
static PyObject *dispatch_mp(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if ((nargs != 6 && nargs != 8 && nargs != 9) || !PyDict_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "_dispatch_mp(data, offsets, start, end, fast: dict, done[, indices, "
                        "source_id[, mode]])");
        return NULL;
    }
    batch b;
    if (batch_open(&b, args, nargs, 5, "_dispatch_mp") < 0) return NULL;
    mp_calls calls = {args[4], NULL, NULL};
    PyObject *result = batch_run(&b, mp_batch_call, &calls, "_dispatch_mp");
    Py_XDECREF(calls.last_key);
    Py_XDECREF(calls.last_entry);
    batch_close(&b);
    return result;
}

/* One BinaryWire excerpt p[0:len]: a call of one event whose key ``names``
 * (an event name under 128 bytes) or ``ids`` (a method id under 128) maps
 * to ``(decode, handlers)``: decode(view, pos) gives its arguments (None:
 * not here), and each handler is called with them.  For a reader tracking
 * history (``tr``), the event may come after its compact history, and the
 * handlers run with the excerpt as the thread's current message.  As mp_call: MP_OTHER (nothing called), MP_HANDLED or
 * MP_FAILED; out[0] = next and out[1] += 1 before the handlers run. */
static int wire_call(const uint8_t *p, int64_t len, PyObject *names, PyObject *ids,
                     int64_t *out, int64_t next, const mp_track *tr) {
    const uint8_t *raw = NULL;
    size_t raw_len = 0;
    int64_t pos = 0;
    if (tr != NULL && len > 7 && p[0] == 0xBA && p[1] == 0x80 && p[2] == 0x00 &&
        p[3] == 0x81) {
        /* BA 80 00 (the history field), 81 <u16 length>, 86, the compact form */
        int64_t end = 6 + (int64_t)(p[4] | p[5] << 8);
        hist_view v;
        if (p[6] != 0x86 || end >= len) return MP_OTHER;
        raw = p + 7;
        raw_len = (size_t)(end - 7);
        if (hist_check(raw, raw_len, &v) != HIST_OK) return MP_OTHER; /* Python names it */
        pos = end;
    }
    if (pos + 2 > len) return MP_OTHER;
    uint8_t b0 = p[pos], k = p[pos + 1];
    PyObject *key, *entry;
    if (b0 == 0xB9 && k < 0x80) { /* an event name */
        if (pos + 2 + k > len) return MP_OTHER;
        key = PyBytes_FromStringAndSize((const char *)p + pos + 2, k);
        pos += 2 + k;
        if (key == NULL) return MP_FAILED;
        entry = PyDict_GetItemWithError(names, key);
    } else if (b0 == 0xBA && k < 0x80) { /* a method id */
        key = PyLong_FromLong(k);
        pos += 2;
        if (key == NULL) return MP_FAILED;
        entry = PyDict_GetItemWithError(ids, key);
    } else {
        return MP_OTHER;
    }
    Py_DECREF(key);
    if (entry == NULL) return PyErr_Occurred() ? MP_FAILED : MP_OTHER;
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        !PyTuple_Check(PyTuple_GET_ITEM(entry, 1))) {
        PyErr_SetString(PyExc_TypeError, "names and ids map keys to (decode, handlers)");
        return MP_FAILED;
    }
    Py_INCREF(entry); /* a handler may change the tables */
    PyObject *view = PyMemoryView_FromMemory((char *)p, (Py_ssize_t)len, PyBUF_READ);
    PyObject *at = view == NULL ? NULL : PyLong_FromLongLong(pos);
    PyObject *args = NULL;
    if (at != NULL) {
        PyObject *in[2] = {view, at};
        args = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), in, 2, NULL);
    }
    Py_XDECREF(at);
    Py_XDECREF(view);
    if (args == NULL) {
        Py_DECREF(entry);
        return MP_FAILED;
    }
    if (args == Py_None || !PyTuple_Check(args)) { /* not here: Python's path reads it */
        Py_DECREF(args);
        Py_DECREF(entry);
        return MP_OTHER;
    }
    out[0] = next;
    out[1]++;
    int tracked = tracks(tr, raw);
    hc_slot slot = {NULL, raw, raw_len, tracked ? tr->index : 0, tracked ? hc_now() : 0,
                    tracked ? tr->source_id : 0};
    hc_slot *prev = tracked ? hc_push(&slot) : NULL;
    PyObject *fns = PyTuple_GET_ITEM(entry, 1);
    int rc = MP_HANDLED;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(fns); j++) {
        PyObject *r = PyObject_Call(PyTuple_GET_ITEM(fns, j), args, NULL);
        if (r == NULL) {
            rc = MP_FAILED;
            break;
        }
        Py_DECREF(r);
    }
    if (tracked) hc_pop(&slot, prev);
    Py_DECREF(args);
    Py_DECREF(entry);
    return rc;
}

/* _dispatch_wire(data, offsets, start, end, names, ids, done[, indices, source_id[, mode]]) -> int
 *
 * _dispatch_mp for BinaryWire calls of one event (wire_call), as the
 * Python loop of _dispatch_common takes them: ``done`` with its optional
 * stop cell; with ``indices``, ``source_id`` and ``mode``, as _dispatch_mp
 * (a call may carry its history first). */
/* _dispatch_wire's call */
typedef struct {
    PyObject *names, *ids;
} wire_calls;

static int wire_batch_call(void *ctx, const uint8_t *p, int64_t len, int64_t *out,
                           int64_t next, const mp_track *tr) {
    wire_calls *c = (wire_calls *)ctx;
    return wire_call(p, len, c->names, c->ids, out, next, tr);
}

static PyObject *dispatch_wire(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if ((nargs != 7 && nargs != 9 && nargs != 10) || !PyDict_Check(args[4]) ||
        !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "_dispatch_wire(data, offsets, start, end, names: dict, "
                                         "ids: dict, done[, indices, source_id[, mode]])");
        return NULL;
    }
    batch b;
    if (batch_open(&b, args, nargs, 6, "_dispatch_wire") < 0) return NULL;
    wire_calls calls = {args[4], args[5]};
    PyObject *result = batch_run(&b, wire_batch_call, &calls, "_dispatch_wire");
    batch_close(&b);
    return result;
}

/* _dispatch_one(payload, index, fast, source_id, names, ids[, mode]) -> bool
 *
 * One excerpt, as _dispatch_mp with indices (or _dispatch_wire, with
 * ``names`` and ``ids``) dispatches each, with the reader's TRACK_* mode
 * (default TRACK_ALWAYS: a reader tracking history): True when it was a
 * common call and its handler was called (what the handler raises
 * propagates), False when it is for Python's path (nothing was called). */
static PyObject *dispatch_one(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    if ((nargs != 6 && nargs != 7) || !PyDict_Check(args[2]) || !PyDict_Check(args[4]) ||
        !PyDict_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError,
                        "_dispatch_one(payload, index, fast, source_id, names, ids[, mode]): "
                        "fast, names and ids are dicts");
        return NULL;
    }
    long long index = PyLong_AsLongLong(args[1]);
    if (index == -1 && PyErr_Occurred()) return NULL;
    PyObject *const targs[2] = {args[3], nargs == 7 ? args[6] : NULL};
    mp_track track = {0, (int64_t)index, TRACK_ALWAYS};
    if (track_args(targs, nargs == 7 ? 2 : 1, &track) < 0) return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *last_key = NULL, *last_entry = NULL;
    int64_t out[2] = {0, 0};
    int r = mp_call((const uint8_t *)data.buf, (int64_t)data.len, args[2], &last_key,
                    &last_entry, out, 1, NULL, &track);
    Py_XDECREF(last_key);
    Py_XDECREF(last_entry);
    if (r == MP_OTHER)
        r = wire_call((const uint8_t *)data.buf, (int64_t)data.len, args[4], args[5], out, 1,
                      &track);
    PyBuffer_Release(&data);
    if (r == MP_FAILED) return NULL;
    return PyBool_FromLong(r == MP_HANDLED);
}

/* ------------------------------------------------------------------ */
/* method readers: the pending batch, and read_one(), in C             */

/* The base of aiochronicle.MethodReader: the batch read ahead (its payloads
 * ``_pend_data``, offsets ``_pend_off`` and indices ``_pend_idx``; excerpts
 * ``_pend_i`` to ``_pend_n`` are still to handle) with the buffers of the
 * first two held while they are pending, so read_one() handles the common
 * msgpack call (as _dispatch_mp) and the common BinaryWire call (as
 * _dispatch_wire) with no Python frame of its own.  Anything
 * else is the Python methods' (_read_one_slow, _read_one_general). */
typedef struct {
    PyObject_HEAD
    PyObject *data, *off, *idx, *fast, *done_obj;
    PyObject *wire_names, *wire_ids; /* the common BinaryWire calls (wire_call) */
    Py_buffer data_view, off_view, done_view; /* held when *_ok */
    int data_ok, off_ok, done_ok;
    Py_ssize_t pend_i, pend_n;
    char one_native;
    char busy; /* in a batch read (read_available, run): reads raise */
    PyObject *last_key, *last_entry; /* the cache of mp_call */
} HotReader;

static PyObject *str_read_one_slow;    /* "_read_one_slow" */
static PyObject *str_read_one_general; /* "_read_one_general" */
static PyObject *str_reentered;        /* "_reentered" */

static void hr_release(Py_buffer *v, int *ok) {
    if (*ok) PyBuffer_Release(v);
    *ok = 0;
}

static int hr_traverse(HotReader *self, visitproc visit, void *arg) {
    Py_VISIT(self->data);
    Py_VISIT(self->off);
    Py_VISIT(self->idx);
    Py_VISIT(self->fast);
    Py_VISIT(self->done_obj);
    Py_VISIT(self->wire_names);
    Py_VISIT(self->wire_ids);
    Py_VISIT(self->last_key);
    Py_VISIT(self->last_entry);
    return 0;
}

static int hr_clear(HotReader *self) {
    hr_release(&self->data_view, &self->data_ok);
    hr_release(&self->off_view, &self->off_ok);
    hr_release(&self->done_view, &self->done_ok);
    Py_CLEAR(self->data);
    Py_CLEAR(self->off);
    Py_CLEAR(self->idx);
    Py_CLEAR(self->fast);
    Py_CLEAR(self->done_obj);
    Py_CLEAR(self->wire_names);
    Py_CLEAR(self->wire_ids);
    Py_CLEAR(self->last_key);
    Py_CLEAR(self->last_entry);
    return 0;
}

static void hr_dealloc(HotReader *self) {
    PyObject_GC_UnTrack(self);
    hr_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hr_get(HotReader *self, void *which) {
    PyObject *v = *(PyObject **)((char *)self + (Py_ssize_t)which);
    return Py_NewRef(v ? v : Py_None);
}

/* an int64 buffer (array('q'), ...), or 0 (not one: read the Python way) */
static int hr_int64s(PyObject *v, Py_buffer *view, int writable) {
    if (PyObject_GetBuffer(v, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS |
                                        (writable ? PyBUF_WRITABLE : 0)) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    if (view->itemsize != 8 || !(strcmp(f, "q") == 0 || strcmp(f, "l") == 0 ||
                                 strcmp(f, "=q") == 0 || strcmp(f, "@q") == 0)) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

static int hr_set(HotReader *self, PyObject *v, void *which) {
    Py_ssize_t at = (Py_ssize_t)which;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete this attribute");
        return -1;
    }
    if (at == offsetof(HotReader, data)) {
        hr_release(&self->data_view, &self->data_ok);
        if (PyObject_GetBuffer(v, &self->data_view, PyBUF_SIMPLE) == 0) self->data_ok = 1;
        else PyErr_Clear();
    } else if (at == offsetof(HotReader, off)) {
        hr_release(&self->off_view, &self->off_ok);
        self->off_ok = hr_int64s(v, &self->off_view, 0);
    } else if (at == offsetof(HotReader, done_obj)) {
        hr_release(&self->done_view, &self->done_ok);
        self->done_ok = hr_int64s(v, &self->done_view, 1);
        if (self->done_ok && self->done_view.len < 2 * 8) hr_release(&self->done_view, &self->done_ok);
    } else if (at == offsetof(HotReader, wire_names) || at == offsetof(HotReader, wire_ids)) {
        if (!PyDict_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "_fast_wire_names and _fast_wire_ids must be dicts");
            return -1;
        }
    } else if (at == offsetof(HotReader, fast)) {
        if (!PyDict_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "_fast_mp must be a dict");
            return -1;
        }
        Py_CLEAR(self->last_key);
        Py_CLEAR(self->last_entry);
    }
    PyObject **slot = (PyObject **)((char *)self + at);
    Py_XSETREF(*slot, Py_NewRef(v));
    return 0;
}

/* read_one() -> bool: see MethodReader.read_one.  Called by a handler of a
 * batch read in progress (read_available(), run()), it raises (_reentered):
 * the batch would be handled twice.  A handler of read_one() may read on: its
 * excerpt was consumed before it ran. */
static PyObject *hr_read_one(HotReader *self, PyObject *unused) {
    if (self->busy) return call_self_obj((PyObject *)self, str_reentered);
    Py_ssize_t i = self->pend_i;
    if (i >= 0 && i < self->pend_n && self->one_native && self->data_ok && self->off_ok &&
        self->done_ok && self->fast != NULL &&
        i + 1 < self->off_view.len / (Py_ssize_t)sizeof(int64_t)) {
        const int64_t *off = (const int64_t *)self->off_view.buf;
        int64_t a = off[i], b = off[i + 1];
        if (a < 0 || b < a || b > (int64_t)self->data_view.len) {
            PyErr_SetString(PyExc_ValueError, "read_one: offsets outside the data");
            return NULL;
        }
        int64_t *out = (int64_t *)self->done_view.buf;
        /* _pend_i moves past the excerpt before its handler runs (a handler
         * raising, or reading on itself, finds it consumed) */
        const uint8_t *p = (const uint8_t *)self->data_view.buf + a;
        int r = mp_call(p, b - a, self->fast, &self->last_key, &self->last_entry, out, i + 1,
                        &self->pend_i, NULL);
        if (r == MP_OTHER && self->wire_names != NULL && self->wire_ids != NULL &&
            (PyDict_GET_SIZE(self->wire_names) || PyDict_GET_SIZE(self->wire_ids))) {
            /* a common BinaryWire call: consumed before its handler runs, as
             * above (nothing ran when it declines: it is pending again) */
            self->pend_i = i + 1;
            r = wire_call(p, b - a, self->wire_names, self->wire_ids, out, i + 1, NULL);
            if (r == MP_OTHER) self->pend_i = i;
        }
        if (r == MP_HANDLED) Py_RETURN_TRUE;
        if (r == MP_FAILED) return NULL;
        return call_self_obj((PyObject *)self, str_read_one_general);
    }
    return call_self_obj((PyObject *)self, str_read_one_slow);
}

static PyMemberDef hr_members[] = {
    {"_pend_i", T_PYSSIZET, offsetof(HotReader, pend_i), 0,
     "The next pending excerpt of the batch."},
    {"_pend_n", T_PYSSIZET, offsetof(HotReader, pend_n), 0, "The batch's excerpt count."},
    {"_one_native", T_BOOL, offsetof(HotReader, one_native), 0,
     "read_one() may dispatch in C."},
    {"_busy", T_BOOL, offsetof(HotReader, busy), 0,
     "In a batch read (read_available(), run()): its reads raise."},
    {NULL, 0, 0, 0, NULL},
};

#define HR_FIELD(name, field, doc) \
    {name, (getter)hr_get, (setter)hr_set, doc, (void *)offsetof(HotReader, field)}

static PyGetSetDef hr_getset[] = {
    HR_FIELD("_pend_data", data, "The pending batch's payloads (a read-only buffer)."),
    HR_FIELD("_pend_off", off, "Its offsets: excerpt k is _pend_data[off[k]:off[k + 1]]."),
    HR_FIELD("_pend_idx", idx, "Its indices."),
    HR_FIELD("_fast_mp", fast, "The common msgpack calls: name -> (decode, handler)."),
    HR_FIELD("_fast_wire_names", wire_names,
             "The common BinaryWire calls by event name: name -> (decode, handlers)."),
    HR_FIELD("_fast_wire_ids", wire_ids,
             "The common BinaryWire calls by method id: id -> (decode, handlers)."),
    HR_FIELD("_fast_done", done_obj, "Where the last native dispatch got to, and how "
                                     "many calls it handled in all (two int64)."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef hr_methods[] = {
    {"read_one", (PyCFunction)hr_read_one, METH_NOARGS,
     "read_one() -> bool\n--\n\n"
     "Read and handle one excerpt; False when there is none yet.\n\n"
     "True means an excerpt was consumed: dispatched, skipped as unknown,\n"
     "filtered out, or handed to the error handler.\n\n"
     "Raises:\n"
     "    TypeError: a handler method is ``async def`` (use ``await\n"
     "        aread_one()`` or ``run()``)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HotReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.HotReader",
    .tp_basicsize = sizeof(HotReader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The pending batch and read_one() of a MethodReader (C API).",
    .tp_dealloc = (destructor)hr_dealloc,
    .tp_traverse = (traverseproc)hr_traverse,
    .tp_clear = (inquiry)hr_clear,
    .tp_members = hr_members,
    .tp_getset = hr_getset,
    .tp_methods = hr_methods,
    .tp_new = PyType_GenericNew,
};

/* _hot_after(found, hot_ns) -> int: a notify waiter's spin budget after it
 * found an excerpt after a wait (aiochronicle/_waiting/_waiter.py, WaitState):
 * the gap since the last such find (*found, monotonic ns, then set to now)
 * doubled and capped at hot_ns, or 0 (park at once) when the gap is hot_ns or
 * more.  One clock read and no Python arithmetic, once per wake-up. */
static PyObject *hot_after(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    (void)mod;
    if (nargs != 2 || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "_hot_after(found: NativeHandle, hot_ns: int)");
        return NULL;
    }
    int64_t *found = (int64_t *)handle_pointer(args[0], HANDLE_I64, "_hot_after");
    if (found == NULL) return NULL;
    long long hot = PyLong_AsLongLong(args[1]);
    if (hot == -1 && PyErr_Occurred()) return NULL;
    int64_t now = hc_now();
    int64_t gap = now - *found;
    *found = now;
    if (gap < 0 || gap >= hot) return PyLong_FromLong(0);
    return PyLong_FromLongLong(gap < hot / 2 ? 2 * gap : hot);
}

static PyMethodDef module_methods[] = {
    {"_hot_after", (PyCFunction)(void (*)(void))hot_after, METH_FASTCALL,
     "_hot_after(found, hot_ns) -> int\n--\n\nA notify waiter's spin budget after a find: "
     "twice the gap since the last find (found: an int64_t handle of monotonic ns, set to now), "
     "at most hot_ns; 0 from a gap of hot_ns on."},
    {"_dispatch_mp", (PyCFunction)(void (*)(void))dispatch_mp, METH_FASTCALL,
     "Dispatch the common msgpack method calls of a batch (see native/hot.c)."},
    {"_dispatch_wire", (PyCFunction)(void (*)(void))dispatch_wire, METH_FASTCALL,
     "Dispatch the common BinaryWire calls of a batch, tracking history (see native/hot.c)."},
    {"_dispatch_one", (PyCFunction)(void (*)(void))dispatch_one, METH_FASTCALL,
     "Dispatch one common msgpack or BinaryWire call (see native/hot.c)."},
    {"set_excerpt_type", set_excerpt_type, METH_O, "Register aiochronicle.Excerpt."},
    {"handle", (PyCFunction)(void (*)(void))make_handle, METH_FASTCALL,
     "handle(buffer, ctype) -> NativeHandle\n--\n\nThe memory a writable buffer of exactly one "
     "C type (struct cq_appender, struct cq_tailer, uint32_t, int64_t) exposes, as the handle the "
     "methods taking native memory accept; it keeps the buffer alive."},
    {"version", version, METH_NOARGS, "The version this module was built for."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT, "aiochronicle._core._hot",
    "Per-message calls of aiochronicle through the CPython C API.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hot(void) {
    if (PyType_Ready(&HotAppenderType) < 0 || PyType_Ready(&HotTailerType) < 0 ||
        PyType_Ready(&NativeHandleType) < 0 ||
        PyType_Ready(&NextType) < 0 || PyType_Ready(&WriterMethodType) < 0 ||
        PyType_Ready(&HotReaderType) < 0)
        return NULL;
    str_append_slow = PyUnicode_InternFromString("_append_native_failed");
    str_read_slow = PyUnicode_InternFromString("_read_slow");
    str_read_other = PyUnicode_InternFromString("_read_other");
    str_read_blocking = PyUnicode_InternFromString("_read_blocking");
    str_let_go = PyUnicode_InternFromString("_let_go");
    str_anext = PyUnicode_InternFromString("_anext");
    str_read_nowait = PyUnicode_InternFromString("read_nowait");
    str_read_one_slow = PyUnicode_InternFromString("_read_one_slow");
    str_read_one_general = PyUnicode_InternFromString("_read_one_general");
    str_reentered = PyUnicode_InternFromString("_reentered");
    if (!str_read_one_slow || !str_read_one_general || !str_reentered) return NULL;
    if (!str_append_slow || !str_read_slow || !str_read_other || !str_read_blocking ||
        !str_let_go || !str_anext || !str_read_nowait)
        return NULL;
    PyObject *m = PyModule_Create(&hot_module);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "HotAppender", (PyObject *)&HotAppenderType) < 0 ||
        PyModule_AddObjectRef(m, "NativeHandle", (PyObject *)&NativeHandleType) < 0 ||
        PyModule_AddObjectRef(m, "HotTailer", (PyObject *)&HotTailerType) < 0 ||
        PyModule_AddObjectRef(m, "WriterMethod", (PyObject *)&WriterMethodType) < 0 ||
        PyModule_AddObjectRef(m, "HotReader", (PyObject *)&HotReaderType) < 0 ||
        aiochronicle_wirecall_init(m) < 0 || aiochronicle_histcall_init(m) < 0 ||
        aiochronicle_park_init(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
