/*
 * aiochronicle._core._hot.WireEncoder and WireDecoder: the arguments of a method
 * call in BinaryWire, as Java's method writer writes them, encoded and
 * decoded in C for the types that need no conversion rules beyond Java's
 * number compaction: int, float, str, bool, bytes, an Optional of those,
 * and msgspec Structs made of them (untyped, exactly the declared class).
 *
 * Each holds a plan that aiochronicle/_messages/_codecs.py builds (wire_plan) and a
 * Python fallback: the pure-Python encoder, which the encoder calls for any
 * value the plan does not cover (a subclass, an int beyond int64, ...), so
 * both give the same bytes or the same error.  The decoder returns None for
 * what it does not read (native/wire.h says what), and the caller reads
 * that call the Python way; corrupt input is that too, never a crash.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "wire.h"

#define MAX_NODES 256

/* A plan node as given: (kind, nullable, first, nfields, key, cls, attr). */
typedef struct {
    uint8_t kind, nullable;
    uint16_t nfields;
    uint32_t first;
    const uint8_t *key;  /* into a bytes object the plan tuple keeps */
    Py_ssize_t key_len;
    PyObject *cls;       /* WK_STRUCT: the Struct class (borrowed from the plan) */
    PyObject *kwnames;   /* WK_STRUCT (decoder): the field names, a new tuple */
    Py_ssize_t offset;   /* a struct field (encoder): its slot offset */
} pnode;

typedef struct {
    PyObject *plan;  /* the tuple of node tuples (keeps keys and classes alive) */
    uint32_t n;
    pnode *nodes;
} plan_t;

static void plan_clear(plan_t *p) {
    if (p->nodes) {
        for (uint32_t i = 0; i < p->n; i++) Py_XDECREF(p->nodes[i].kwnames);
        PyMem_Free(p->nodes);
        p->nodes = NULL;
    }
    Py_CLEAR(p->plan);
}

/* The slot offset of field `attr` of Struct class `cls` (its member descriptor). */
static int field_offset(PyObject *cls, PyObject *attr, Py_ssize_t *offset) {
    PyObject *d = PyObject_GetAttr(cls, attr);
    if (!d) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    if (ok) *offset = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) PyErr_Format(PyExc_TypeError, "field %R is not a plain slot", attr);
    return ok ? 0 : -1;
}

static int plan_load(plan_t *p, PyObject *plan, int encoder) {
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) < 1 || PyTuple_GET_SIZE(plan) > MAX_NODES) {
        PyErr_SetString(PyExc_ValueError, "a plan is a tuple of 1 to 256 nodes");
        return -1;
    }
    uint32_t n = (uint32_t)PyTuple_GET_SIZE(plan);
    p->nodes = PyMem_Calloc(n, sizeof(pnode));
    if (!p->nodes) {
        PyErr_NoMemory();
        return -1;
    }
    p->n = n;
    p->plan = Py_NewRef(plan);
    wire_node check[MAX_NODES];
    memset(check, 0, sizeof check);
    for (uint32_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(plan, i);
        int kind, nullable;
        unsigned int first, nfields;
        PyObject *key, *cls, *attr;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "iiIIOOO", &kind, &nullable, &first, &nfields, &key, &cls, &attr))
            goto bad;
        pnode *nd = &p->nodes[i];
        nd->kind = (uint8_t)kind;
        nd->nullable = nullable != 0;
        nd->first = first;
        nd->nfields = (uint16_t)nfields;
        if (kind < 0 || kind > WK_STRUCT || nfields > WIRE_MAX_FIELDS) goto bad;
        if (key != Py_None) {
            if (!PyBytes_Check(key)) goto bad;
            nd->key = (const uint8_t *)PyBytes_AS_STRING(key);
            nd->key_len = PyBytes_GET_SIZE(key);
        }
        if (kind == WK_STRUCT) {
            if (!PyType_Check(cls)) goto bad;
            nd->cls = cls;
        }
        check[i] = (wire_node){.kind = (uint8_t)kind, .nullable = nd->nullable,
                               .nfields = nd->nfields, .first = first,
                               .key = nd->key, .key_len = (uint32_t)nd->key_len};
    }
    if (wire_plan_ok(check, n) < 0) goto bad;
    /* what needs the classes: slot offsets (encoder), keyword names (decoder) */
    for (uint32_t i = 0; i < n; i++) {
        pnode *nd = &p->nodes[i];
        if (nd->kind != WK_STRUCT) continue;
        if (!encoder && nd->nfields) { /* (an empty Struct is called with no keywords) */
            nd->kwnames = PyTuple_New(nd->nfields);
            if (!nd->kwnames) return -1;
        }
        for (uint32_t f = 0; f < nd->nfields; f++) {
            PyObject *attr = PyTuple_GET_ITEM(PyTuple_GET_ITEM(plan, nd->first + f), 6);
            if (!PyUnicode_Check(attr)) goto bad;
            if (encoder) {
                if (field_offset(nd->cls, attr, &p->nodes[nd->first + f].offset) < 0) return -1;
            } else {
                PyObject *name = Py_NewRef(attr);
                PyUnicode_InternInPlace(&name);
                PyTuple_SET_ITEM(nd->kwnames, f, name);
            }
        }
    }
    return 0;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed wire plan");
    return -1;
}

/* ------------------------------------------------------------------ */
/* WireEncoder                                                         */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    plan_t plan;
    PyObject *key;      /* bytes: the event key (B9 name or BA id) */
    PyObject *fallback; /* the Python encoder: fallback(args, history=b"") */
} WireEncoder;

typedef struct {
    uint8_t *p;
    size_t len, cap;
    uint8_t local[512];
} obuf;

static int ob_grow(obuf *b, size_t need) {
    size_t cap = b->cap * 2;
    while (cap < b->len + need) cap *= 2;
    uint8_t *np;
    if (b->p == b->local) {
        np = PyMem_Malloc(cap);
        if (np) memcpy(np, b->p, b->len);
    } else {
        np = PyMem_Realloc(b->p, cap);
    }
    if (!np) return -1;
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int ob_room(obuf *b, size_t need) {
    return b->len + need <= b->cap ? 0 : ob_grow(b, need);
}

static inline int ob_put(obuf *b, const void *data, size_t n) {
    if (ob_room(b, n) < 0) return -1;
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

/* What a value came to: written, not this plan's (the fallback writes the
 * call), or a memory error. */
enum { ENC_OK = 0, ENC_OTHER = -1, ENC_NOMEM = -2 };

/* Java's UTF-8 (surrogates of characters above U+FFFF, lone ones as is). */
static int put_text(obuf *b, PyObject *s) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const uint8_t *data;
    size_t len;
    if (PyUnicode_IS_ASCII(s)) {
        data = PyUnicode_1BYTE_DATA(s);
        len = (size_t)n;
    } else {
        int kind = PyUnicode_KIND(s);
        const void *d = PyUnicode_DATA(s);
        len = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, d, i);
            len += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 6;
        }
        data = NULL;
    }
    uint8_t head[12];
    size_t h;
    if (len < 0x20) {
        head[0] = (uint8_t)(0xE0 + len);
        h = 1;
    } else {
        head[0] = 0xB8;
        h = 1 + wire_put_stop_bit(head + 1, (int64_t)len);
    }
    if (ob_room(b, h + len) < 0) return ENC_NOMEM;
    memcpy(b->p + b->len, head, h);
    uint8_t *o = b->p + b->len + h;
    b->len += h + len;
    if (data) {
        memcpy(o, data, len);
        return ENC_OK;
    }
    int kind = PyUnicode_KIND(s);
    const void *d = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, i);
        Py_UCS4 units[2];
        int k = 1;
        if (c >= 0x10000) {
            units[0] = 0xD800 + ((c - 0x10000) >> 10);
            units[1] = 0xDC00 + ((c - 0x10000) & 0x3FF);
            k = 2;
        } else {
            units[0] = c;
        }
        for (int u = 0; u < k; u++) {
            Py_UCS4 x = units[u];
            if (x < 0x80) {
                *o++ = (uint8_t)x;
            } else if (x < 0x800) {
                *o++ = (uint8_t)(0xC0 | (x >> 6));
                *o++ = (uint8_t)(0x80 | (x & 0x3F));
            } else {
                *o++ = (uint8_t)(0xE0 | (x >> 12));
                *o++ = (uint8_t)(0x80 | ((x >> 6) & 0x3F));
                *o++ = (uint8_t)(0x80 | (x & 0x3F));
            }
        }
    }
    return ENC_OK;
}

static int encode_node(const plan_t *pl, uint32_t idx, PyObject *v, obuf *b) {
    const pnode *nd = &pl->nodes[idx];
    uint8_t tmp[16];
    if (v == Py_None && nd->nullable) return ob_put(b, "\xbb", 1) < 0 ? ENC_NOMEM : ENC_OK;
    switch (nd->kind) {
    case WK_INT: {
        if (!PyLong_CheckExact(v)) return ENC_OTHER;
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return ENC_OTHER;
        size_t k = wire_put_long(tmp, (int64_t)x);
        return ob_put(b, tmp, k) < 0 ? ENC_NOMEM : ENC_OK;
    }
    case WK_FLOAT: {
        double d;
        if (PyFloat_CheckExact(v)) {
            d = PyFloat_AS_DOUBLE(v);
        } else if (PyLong_CheckExact(v)) {
            d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                return ENC_OTHER;
            }
        } else {
            return ENC_OTHER;
        }
        size_t k = wire_put_double(tmp, d);
        return ob_put(b, tmp, k) < 0 ? ENC_NOMEM : ENC_OK;
    }
    case WK_STR:
        if (!PyUnicode_CheckExact(v)) return ENC_OTHER;
        return put_text(b, v);
    case WK_BOOL:
        if (v == Py_True) return ob_put(b, "\xb1", 1) < 0 ? ENC_NOMEM : ENC_OK;
        if (v == Py_False) return ob_put(b, "\xb0", 1) < 0 ? ENC_NOMEM : ENC_OK;
        return ENC_OTHER;
    case WK_BYTES: {
        if (!PyBytes_CheckExact(v)) return ENC_OTHER;
        size_t n = (size_t)PyBytes_GET_SIZE(v);
        size_t k = wire_put_length(tmp, (uint64_t)n + 1);
        if (k == 0) return ENC_OTHER;
        tmp[k++] = 0x8A;
        if (ob_put(b, tmp, k) < 0 || ob_put(b, PyBytes_AS_STRING(v), n) < 0) return ENC_NOMEM;
        return ENC_OK;
    }
    case WK_STRUCT: {
        if ((PyObject *)Py_TYPE(v) != nd->cls) return ENC_OTHER;
        if (ob_put(b, "\x82\0\0\0\0", 5) < 0) return ENC_NOMEM;
        size_t start = b->len;
        for (uint32_t f = 0; f < nd->nfields; f++) {
            const pnode *fn = &pl->nodes[nd->first + f];
            PyObject *x = *(PyObject **)((char *)v + fn->offset);
            if (x == NULL) return ENC_OTHER; /* unset: Python raises AttributeError */
            if (ob_put(b, fn->key, (size_t)fn->key_len) < 0) return ENC_NOMEM;
            int r = encode_node(pl, nd->first + f, x, b);
            if (r != ENC_OK) return r;
        }
        uint64_t body = b->len - start;
        if (body > UINT32_MAX) return ENC_OTHER;
        uint32_t len32 = (uint32_t)body;
        memcpy(b->p + start - 4, &len32, 4);
        return ENC_OK;
    }
    default:
        return ENC_OTHER;
    }
}

/* enc(args, history=b"") -> bytes */
static PyObject *wire_encoder_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    WireEncoder *self = (WireEncoder *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs < 1 || nargs > 2 || !PyTuple_CheckExact(args[0]) ||
        (nargs == 2 && !PyBytes_CheckExact(args[1])))
        return PyObject_Vectorcall(self->fallback, args, nargs, kwnames);
    PyObject *call = args[0];
    const pnode *top = &self->plan.nodes[0];
    if (PyTuple_GET_SIZE(call) != top->nfields)
        return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    obuf b;
    b.p = b.local;
    b.len = 0;
    b.cap = sizeof b.local;
    int r = ENC_OK;
    if (nargs == 2 && ob_put(&b, PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1])) < 0)
        r = ENC_NOMEM;
    if (r == ENC_OK &&
        ob_put(&b, PyBytes_AS_STRING(self->key), (size_t)PyBytes_GET_SIZE(self->key)) < 0)
        r = ENC_NOMEM;
    if (r == ENC_OK) {
        if (top->nfields == 0) {
            r = ob_put(&b, "\xe0", 1) < 0 ? ENC_NOMEM : ENC_OK;
        } else if (top->nfields == 1) {
            r = encode_node(&self->plan, top->first, PyTuple_GET_ITEM(call, 0), &b);
        } else if (ob_put(&b, "\x82\0\0\0\0", 5) < 0) {
            r = ENC_NOMEM;
        } else {
            size_t start = b.len;
            for (uint32_t i = 0; i < top->nfields && r == ENC_OK; i++)
                r = encode_node(&self->plan, top->first + i, PyTuple_GET_ITEM(call, i), &b);
            if (r == ENC_OK) {
                uint64_t body = b.len - start;
                if (body > UINT32_MAX) {
                    r = ENC_OTHER;
                } else {
                    uint32_t len32 = (uint32_t)body;
                    memcpy(b.p + start - 4, &len32, 4);
                }
            }
        }
    }
    PyObject *out = NULL;
    if (r == ENC_OK)
        out = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.len);
    else if (r == ENC_NOMEM)
        PyErr_NoMemory();
    if (b.p != b.local) PyMem_Free(b.p);
    if (r == ENC_OTHER) return PyObject_Vectorcall(self->fallback, args, nargs, NULL);
    return out;
}

static PyObject *wire_encoder_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *key, *plan, *fallback;
    if (!PyArg_ParseTuple(args, "SOO:WireEncoder", &key, &plan, &fallback)) return NULL;
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "the fallback must be callable");
        return NULL;
    }
    WireEncoder *self = (WireEncoder *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->vectorcall = wire_encoder_call;
    self->key = Py_NewRef(key);
    self->fallback = Py_NewRef(fallback);
    if (plan_load(&self->plan, plan, 1) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int wire_encoder_traverse(WireEncoder *self, visitproc visit, void *arg) {
    Py_VISIT(self->fallback);
    Py_VISIT(self->plan.plan);
    return 0;
}

static int wire_encoder_clear(WireEncoder *self) {
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->key);
    plan_clear(&self->plan);
    return 0;
}

static void wire_encoder_dealloc(WireEncoder *self) {
    PyObject_GC_UnTrack(self);
    wire_encoder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef wire_encoder_members[] = {
    {"fallback", T_OBJECT, offsetof(WireEncoder, fallback), READONLY,
     "The Python encoder this one defers to."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject WireEncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.WireEncoder",
    .tp_basicsize = sizeof(WireEncoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "WireEncoder(key, plan, fallback)\n--\n\n"
              "Encode a method call's arguments as Java's method writer does: "
              "enc(args, history=b\"\") -> bytes.",
    .tp_new = wire_encoder_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(WireEncoder, vectorcall),
    .tp_members = wire_encoder_members,
    .tp_traverse = (traverseproc)wire_encoder_traverse,
    .tp_clear = (inquiry)wire_encoder_clear,
    .tp_dealloc = (destructor)wire_encoder_dealloc,
};

/* ------------------------------------------------------------------ */
/* WireDecoder                                                         */

typedef struct {
    PyObject_HEAD
    plan_t plan;
    wire_node nodes[MAX_NODES];
} WireDecoder;

/* Java-written UTF-8 as _wire._decode_utf8 reads it (characters above
 * U+FFFF come as two 3-byte surrogates, paired again here); NULL without an
 * exception when the bytes are not (the Python path names the error). */
static PyObject *make_text(const uint8_t *s, size_t n) {
    int ascii = 1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] & 0x80) {
            ascii = 0;
            break;
        }
    }
    if (ascii) {
        PyObject *u = PyUnicode_New((Py_ssize_t)n, 127);
        if (u) memcpy(PyUnicode_1BYTE_DATA(u), s, n);
        return u;
    }
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogatepass");
    if (!u) {
        PyErr_Clear();
        return NULL;
    }
    int kind = PyUnicode_KIND(u);
    const void *d = PyUnicode_DATA(u);
    Py_ssize_t len = PyUnicode_GET_LENGTH(u);
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, d, i);
        if (c >= 0xD800 && c <= 0xDFFF) {
            /* through UTF-16 and back, pairs become one character */
            PyObject *units = PyUnicode_AsEncodedString(u, "utf-16-le", "surrogatepass");
            Py_DECREF(u);
            if (!units) goto fail;
            u = PyUnicode_Decode(PyBytes_AS_STRING(units), PyBytes_GET_SIZE(units),
                                 "utf-16-le", "surrogatepass");
            Py_DECREF(units);
            if (!u) goto fail;
            break;
        }
    }
    return u;
fail:
    PyErr_Clear();
    return NULL;
}

/* The Python object of node idx; NULL (no exception) when it is not ours. */
static PyObject *build(const WireDecoder *self, uint32_t idx, const uint8_t *buf,
                       const wire_val *out) {
    const wire_val *v = &out[idx];
    const pnode *nd = &self->plan.nodes[idx];
    switch (v->tag) {
    case WV_NULL: Py_RETURN_NONE;
    case WV_INT: return PyLong_FromLongLong(v->i);
    case WV_FLOAT: return PyFloat_FromDouble(v->d);
    case WV_BOOL: return PyBool_FromLong((long)v->i);
    case WV_STR: return make_text(buf + v->off, v->len);
    case WV_BYTES: return PyBytes_FromStringAndSize((const char *)buf + v->off, (Py_ssize_t)v->len);
    case WV_STRUCT: {
        PyObject *vals[WIRE_MAX_FIELDS];
        uint32_t k = 0;
        PyObject *r = NULL;
        for (; k < nd->nfields; k++) {
            vals[k] = build(self, nd->first + k, buf, out);
            if (!vals[k]) goto done;
        }
        r = PyObject_Vectorcall(nd->cls, vals, 0, nd->kwnames);
    done:
        for (uint32_t i = 0; i < k; i++) Py_DECREF(vals[i]);
        return r;
    }
    default:
        return NULL;
    }
}

/* decode(buf, pos) -> tuple | None: the arguments of the call whose
 * arguments start at buf[pos], or None for the Python path to read it. */
static PyObject *wire_decoder_decode(WireDecoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "decode(buf, pos)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    wire_val out[MAX_NODES];
    const uint8_t *buf = view.buf;
    if (pos >= 0 && pos <= view.len &&
        wire_read_args(self->nodes, self->plan.n, buf, (size_t)pos, (size_t)view.len, out) ==
            WIRE_OK) {
        const pnode *top = &self->plan.nodes[0];
        result = PyTuple_New(top->nfields);
        for (uint32_t i = 0; result && i < top->nfields; i++) {
            PyObject *x = build(self, top->first + i, buf, out);
            if (!x) Py_CLEAR(result);
            else PyTuple_SET_ITEM(result, i, x);
        }
    }
    PyBuffer_Release(&view);
    if (result) return result;
    PyErr_Clear(); /* whatever went wrong, the Python path says it */
    Py_RETURN_NONE;
}

static PyObject *wire_decoder_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *plan;
    if (!PyArg_ParseTuple(args, "O:WireDecoder", &plan)) return NULL;
    WireDecoder *self = (WireDecoder *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    if (plan_load(&self->plan, plan, 0) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    for (uint32_t i = 0; i < self->plan.n; i++) {
        const pnode *nd = &self->plan.nodes[i];
        self->nodes[i] = (wire_node){.kind = nd->kind, .nullable = nd->nullable,
                                     .nfields = nd->nfields, .first = nd->first,
                                     .key = nd->key, .key_len = (uint32_t)nd->key_len};
    }
    return (PyObject *)self;
}

static int wire_decoder_traverse(WireDecoder *self, visitproc visit, void *arg) {
    Py_VISIT(self->plan.plan);
    return 0;
}

static int wire_decoder_clear(WireDecoder *self) {
    plan_clear(&self->plan);
    return 0;
}

static void wire_decoder_dealloc(WireDecoder *self) {
    PyObject_GC_UnTrack(self);
    wire_decoder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef wire_decoder_methods[] = {
    {"decode", (PyCFunction)(void (*)(void))wire_decoder_decode, METH_FASTCALL,
     "decode(buf, pos) -> tuple | None\n--\n\n"
     "The arguments of the call whose arguments start at buf[pos] (the last "
     "event of buf), or None when the Python reader must read it."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WireDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "aiochronicle._core._hot.WireDecoder",
    .tp_basicsize = sizeof(WireDecoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "WireDecoder(plan)\n--\n\nDecode a method call's arguments written in BinaryWire.",
    .tp_new = wire_decoder_new,
    .tp_methods = wire_decoder_methods,
    .tp_traverse = (traverseproc)wire_decoder_traverse,
    .tp_clear = (inquiry)wire_decoder_clear,
    .tp_dealloc = (destructor)wire_decoder_dealloc,
};

int aiochronicle_wirecall_init(PyObject *m) {
    if (PyType_Ready(&WireEncoderType) < 0 || PyType_Ready(&WireDecoderType) < 0) return -1;
    if (PyModule_AddObjectRef(m, "WireEncoder", (PyObject *)&WireEncoderType) < 0 ||
        PyModule_AddObjectRef(m, "WireDecoder", (PyObject *)&WireDecoderType) < 0)
        return -1;
    return 0;
}
