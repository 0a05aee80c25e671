/*
 * aiochronicle._core._hot.Incoming, and message history on the hot path:
 * see histcall.h.  aiochronicle/_format/_history.py registers its context
 * variable (set_history).  While a sync handler runs, the message it
 * handles is this thread's current slot: a method reader dispatching in C
 * (hot.c) pushes one from its frame, Python's dispatch holds an Incoming
 * (hold/release).  An async handler's message is in the context variable
 * (the slot is never left set across an await: it is pushed and popped
 * around one synchronous call).  A method writer's C call (hot.c's
 * WriterMethod) builds the history it writes from the slot, else from the
 * context variable, byte for byte what _history.outgoing_raw() and
 * outgoing_wire_bytes() build.
 */
#include "histcall.h"

#include <structmember.h>
#include <time.h>

#define HISTORY_EXT_TYPE 72 /* aiochronicle/_messages/_codecs.py HISTORY_EXT */

static PyObject *current_var; /* _history.CURRENT (a ContextVar), NULL until registered */
static _Thread_local hc_slot *hc_cur; /* the message the running sync handler handles */

typedef struct {
    PyObject_HEAD
    PyObject *raw;     /* the compact history read (bytes), a self-describing one, or None */
    PyObject *history; /* the MessageHistory built for the handler (None until asked) */
    int64_t index;
    int64_t read_ns;
    int32_t source_id;
    int held;          /* hold() depth: slot is current (nested holds share it) */
    hc_slot slot;      /* this message as a slot (obj: this object) */
    hc_slot *prev;     /* the slot current before the first hold */
} Incoming;

static PyTypeObject IncomingType;

int64_t hc_now(void) {
    struct timespec ts;
#ifdef __APPLE__
    clock_gettime(CLOCK_UPTIME_RAW, &ts); /* mach_absolute_time: Python's monotonic there */
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static Incoming *incoming_alloc(PyTypeObject *type, PyObject *raw, int32_t source_id,
                                int64_t index, int64_t read_ns) {
    Incoming *self = (Incoming *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->raw = Py_NewRef(raw);
    self->history = Py_NewRef(Py_None);
    self->source_id = source_id;
    self->index = index;
    self->read_ns = read_ns;
    self->held = 0;
    self->prev = NULL;
    self->slot.obj = (PyObject *)self;
    self->slot.raw = NULL;
    self->slot.raw_len = 0;
    self->slot.index = index;
    self->slot.read_ns = read_ns;
    self->slot.source_id = source_id;
    return self;
}

static PyObject *incoming_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *raw;
    int source_id;
    long long index, read_ns;
    static char *kw[] = {"raw", "source_id", "index", "read_ns", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OiLL:Incoming", kw, &raw, &source_id,
                                     &index, &read_ns))
        return NULL;
    return (PyObject *)incoming_alloc(type, raw, source_id, index, read_ns);
}

static void incoming_dealloc(Incoming *self) {
    Py_XDECREF(self->raw);
    Py_XDECREF(self->history);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef incoming_members[] = {
    {"raw", T_OBJECT, offsetof(Incoming, raw), READONLY,
     "The history read: compact bytes, a self-describing mapping, or None."},
    {"source_id", T_INT, offsetof(Incoming, source_id), READONLY,
     "The sourceId of the queue the message was read from."},
    {"index", T_LONGLONG, offsetof(Incoming, index), READONLY, "The index it was read at."},
    {"read_ns", T_LONGLONG, offsetof(Incoming, read_ns), READONLY,
     "When it was read (time.monotonic_ns())."},
    {"history", T_OBJECT, offsetof(Incoming, history), 0,
     "The MessageHistory built for the handler, None until it asks for it."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject IncomingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.Incoming",
    .tp_basicsize = sizeof(Incoming),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Incoming(raw, source_id, index, read_ns): what a method reader knows of the "
              "message being handled; its history is built only when asked for.",
    .tp_dealloc = (destructor)incoming_dealloc,
    .tp_members = incoming_members,
    .tp_new = incoming_new,
};

hc_slot *hc_push(hc_slot *s) {
    hc_slot *prev = hc_cur;
    hc_cur = s;
    return prev;
}

void hc_pop(hc_slot *s, hc_slot *prev) {
    hc_cur = prev;
    if (s->obj != NULL) Py_CLEAR(s->obj); /* made for Python meanwhile */
}

int hc_ready(void) { return current_var != NULL; }

/* The compact history to write now for a message read at ``index`` of the
 * queue ``source_id`` at ``read_ns``, whose own history is raw[0 .. len)
 * (NULL: none): its length in out, or -1 where Python builds it. */
static int64_t forward(const uint8_t *raw, size_t len, int32_t source_id, int64_t index,
                       int64_t read_ns, int64_t now, uint8_t *out, size_t cap) {
    if (raw == NULL) return hist_forward(NULL, NULL, source_id, index, read_ns, now, out, cap);
    hist_view v;
    if (hist_check(raw, len, &v) != HIST_OK) return -1; /* (checked when read: Python names it) */
    return hist_forward(raw, &v, source_id, index, read_ns, now, out, cap);
}

/* forward() for ``inc``'s message; -1 also for a history the handler has (it
 * may have changed it) and a self-describing one. */
static int64_t forward_incoming(Incoming *inc, int64_t now, uint8_t *out, size_t cap) {
    if (inc->history != Py_None || (inc->raw != Py_None && !PyBytes_Check(inc->raw))) return -1;
    const uint8_t *raw = NULL;
    size_t len = 0;
    if (inc->raw != Py_None) {
        raw = (const uint8_t *)PyBytes_AS_STRING(inc->raw);
        len = (size_t)PyBytes_GET_SIZE(inc->raw);
    }
    return forward(raw, len, inc->source_id, inc->index, inc->read_ns, now, out, cap);
}

Py_ssize_t hc_outgoing(int form, uint8_t *out) {
    if (current_var == NULL) return HC_SLOW;
    uint8_t raw[HIST_MAX_RAW];
    int64_t n;
    int64_t now = hc_now();
    hc_slot *s = hc_cur;
    if (s != NULL) {
        n = s->obj != NULL ? forward_incoming((Incoming *)s->obj, now, raw, sizeof raw)
                           : forward(s->raw, s->raw_len, s->source_id, s->index, s->read_ns,
                                     now, raw, sizeof raw);
    } else {
        PyObject *val;
        if (PyContextVar_Get(current_var, NULL, &val) < 0) return -1;
        if (val == NULL || val == Py_None)
            n = hist_first(now, raw, sizeof raw);
        else if (Py_TYPE(val) != &IncomingType)
            n = -1;
        else
            n = forward_incoming((Incoming *)val, now, raw, sizeof raw);
        Py_XDECREF(val);
    }
    if (n < 0) return HC_SLOW;
    int h = form == HC_MSGPACK ? hist_msgpack_head((size_t)n, HISTORY_EXT_TYPE, out)
                               : hist_wire_head((size_t)n, out);
    if (h < 0) return HC_SLOW;
    memcpy(out + h, raw, (size_t)n);
    return h + (Py_ssize_t)n;
}

/* set_history(contextvar): the context variable of the message being handled */
static PyObject *set_history(PyObject *mod, PyObject *var) {
    if (!PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "set_history takes a ContextVar");
        return NULL;
    }
    Py_XSETREF(current_var, Py_NewRef(var));
    Py_RETURN_NONE;
}

/* current_incoming() -> Incoming | None: the message the running sync
 * handler handles (made from the dispatching frame's slot when first asked
 * for, then kept for that call) */
static PyObject *current_incoming(PyObject *mod, PyObject *unused) {
    hc_slot *s = hc_cur;
    if (s == NULL) Py_RETURN_NONE;
    if (s->obj == NULL) {
        PyObject *raw = s->raw == NULL
                            ? Py_NewRef(Py_None)
                            : PyBytes_FromStringAndSize((const char *)s->raw,
                                                        (Py_ssize_t)s->raw_len);
        if (raw == NULL) return NULL;
        Incoming *inc = incoming_alloc(&IncomingType, raw, s->source_id, s->index, s->read_ns);
        Py_DECREF(raw);
        if (inc == NULL) return NULL;
        s->obj = (PyObject *)inc;
    }
    return Py_NewRef(s->obj);
}

/* hold(inc): make ``inc`` the current message until release(inc) (Python's
 * dispatch, around one synchronous handler call) */
static PyObject *hold(PyObject *mod, PyObject *arg) {
    if (Py_TYPE(arg) != &IncomingType) {
        PyErr_SetString(PyExc_TypeError, "hold takes an Incoming");
        return NULL;
    }
    Incoming *inc = (Incoming *)arg;
    if (inc->held == 0) {
        inc->prev = hc_cur;
        hc_cur = &inc->slot;
        Py_INCREF(inc); /* kept while current */
    } else if (hc_cur != &inc->slot) {
        PyErr_SetString(PyExc_RuntimeError, "hold: this Incoming is held under another");
        return NULL;
    }
    inc->held++;
    Py_RETURN_NONE;
}

static PyObject *release(PyObject *mod, PyObject *arg) {
    if (Py_TYPE(arg) != &IncomingType || ((Incoming *)arg)->held == 0 ||
        hc_cur != &((Incoming *)arg)->slot) {
        PyErr_SetString(PyExc_RuntimeError, "release: not the Incoming held last");
        return NULL;
    }
    Incoming *inc = (Incoming *)arg;
    if (--inc->held == 0) {
        hc_cur = inc->prev;
        inc->prev = NULL;
        Py_DECREF(inc);
    }
    Py_RETURN_NONE;
}

/* outgoing_history(form) -> bytes | None: what a method writer's C call
 * writes first now (form 1: the msgpack Ext, 2: BinaryWire's field); None
 * where the Python writer builds it. */
static PyObject *outgoing_history(PyObject *mod, PyObject *arg) {
    long form = PyLong_AsLong(arg);
    if (form == -1 && PyErr_Occurred()) return NULL;
    if (form != HC_MSGPACK && form != HC_WIRE) {
        PyErr_SetString(PyExc_ValueError, "form is 1 (msgpack) or 2 (BinaryWire)");
        return NULL;
    }
    uint8_t out[HC_MAX];
    Py_ssize_t n = hc_outgoing((int)form, out);
    if (n == -1) return NULL;
    if (n == HC_SLOW) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)out, n);
}

static PyMethodDef histcall_methods[] = {
    {"set_history", set_history, METH_O,
     "Register the context variable of the message a handler is handling."},
    {"current_incoming", current_incoming, METH_NOARGS,
     "The Incoming of the message the running sync handler handles, or None."},
    {"hold", hold, METH_O, "Make an Incoming the current message (until release)."},
    {"release", release, METH_O, "Undo the last hold of this Incoming."},
    {"outgoing_history", outgoing_history, METH_O,
     "outgoing_history(form) -> bytes | None\n--\n\nThe history a method writer writes "
     "first now (1: msgpack Ext, 2: BinaryWire field); None where Python builds it."},
    {NULL, NULL, 0, NULL},
};

int aiochronicle_histcall_init(PyObject *m) {
    if (PyType_Ready(&IncomingType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Incoming", (PyObject *)&IncomingType) < 0) return -1;
    return PyModule_AddFunctions(m, histcall_methods);
}
