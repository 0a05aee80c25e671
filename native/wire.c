/*
 * BinaryWire method-call arguments without Python (see wire.h).  The
 * semantics are those of aiochronicle/_format/_wire.py (WireWriter.int_compact,
 * WireWriter.float64 with small_raw=False) and of the typed readers of
 * aiochronicle/_messages/_codecs.py; tests/test_wire_fast.py compares the two over
 * generated values.
 */
#include "wire.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define I64_MAX_D 9223372036854775807.0 /* 2^63 as a double */

static inline uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* ------------------------------------------------------------------ */
/* reading                                                             */

/* A stop-bit number at buf[*pos]; as _wire._read_stop_bit (at most 10
 * bytes, within int64). */
static int read_stop_bit(const uint8_t *buf, size_t *pos, size_t end, int64_t *value) {
    size_t p = *pos, start = p;
    uint64_t result = 0;
    unsigned shift = 0;
    for (;;) {
        if (p >= end || p - start >= 10) return WIRE_OTHER;
        uint8_t b = buf[p++];
        uint64_t bits = b & 0x7F;
        if (bits && shift > 57 && (shift >= 64 || (bits >> (64 - shift)) != 0))
            return WIRE_OTHER; /* past 64 bits: beyond int64 */
        if (b & 0x80) {
            if (shift < 64) result |= bits << shift;
            shift += 7;
            continue;
        }
        if (b == 0 && shift > 0) {
            if (result > (uint64_t)INT64_MAX) return WIRE_OTHER;
            *value = ~(int64_t)result;
        } else {
            if (shift < 64) result |= bits << shift;
            if (result > (uint64_t)INT64_MAX) return WIRE_OTHER;
            *value = (int64_t)result;
        }
        *pos = p;
        return WIRE_OK;
    }
}

/* Skip 8F, 8E and BE (comment) from pos, as PlainReader.skip_padding. */
static int skip_padding(const uint8_t *buf, size_t *pos, size_t end) {
    size_t p = *pos;
    while (p < end) {
        uint8_t c = buf[p];
        if (c == 0x8F) {
            p++;
        } else if (c == 0x8E) {
            if (end - p < 5) return WIRE_OTHER;
            uint64_t n = ld32(buf + p + 1);
            if (n > end - p - 5) return WIRE_OTHER;
            p += 5 + (size_t)n;
        } else if (c == 0xBE) {
            size_t q = p + 1;
            int64_t n;
            if (read_stop_bit(buf, &q, end, &n) < 0 || n < 0 || (uint64_t)n > end - q)
                return WIRE_OTHER;
            p = q + (size_t)n;
        } else {
            break;
        }
    }
    *pos = p;
    return WIRE_OK;
}

/* A number at buf[*pos] (its code at *pos): an integer (is_int) or a float. */
static int read_number(const uint8_t *buf, size_t *pos, size_t end, int *is_int, int64_t *iv,
                       double *dv) {
    size_t p = *pos;
    uint8_t c = buf[p++];
    size_t left = end - p;
    *is_int = 1;
    if (c < 0x80) {
        *iv = c;
    } else {
        switch (c) {
        case 0xA1: if (left < 1) return WIRE_OTHER; *iv = buf[p]; p += 1; break;
        case 0xA2: if (left < 2) return WIRE_OTHER; *iv = ld16(buf + p); p += 2; break;
        case 0xA3: if (left < 4) return WIRE_OTHER; *iv = ld32(buf + p); p += 4; break;
        case 0xA4: if (left < 1) return WIRE_OTHER; *iv = (int8_t)buf[p]; p += 1; break;
        case 0xA5: if (left < 2) return WIRE_OTHER; *iv = (int16_t)ld16(buf + p); p += 2; break;
        case 0xA6: if (left < 4) return WIRE_OTHER; *iv = (int32_t)ld32(buf + p); p += 4; break;
        case 0xA7:
        case 0xAF:
            if (left < 8) return WIRE_OTHER;
            *iv = (int64_t)ld64(buf + p);
            p += 8;
            break;
        case 0x90: {
            if (left < 4) return WIRE_OTHER;
            float f;
            memcpy(&f, buf + p, 4);
            *dv = (double)f;
            *is_int = 0;
            p += 4;
            break;
        }
        case 0x91:
            if (left < 8) return WIRE_OTHER;
            memcpy(dv, buf + p, 8);
            *is_int = 0;
            p += 8;
            break;
        case 0x92:
        case 0x94:
        case 0x96: {
            int64_t n;
            if (read_stop_bit(buf, &p, end, &n) < 0) return WIRE_OTHER;
            *dv = (double)n / (c == 0x92 ? 1e2 : c == 0x94 ? 1e4 : 1e6);
            *is_int = 0;
            break;
        }
        default:
            return WIRE_OTHER;
        }
    }
    *pos = p;
    return WIRE_OK;
}

static int read_node(const wire_node *nodes, uint32_t idx, const uint8_t *buf, size_t *pos,
                     size_t end, wire_val *out);

/* 80/81/82 + length at buf[p]: the body range. */
static int read_length(const uint8_t *buf, size_t p, size_t end, size_t *body, size_t *body_end) {
    uint8_t c = buf[p];
    size_t left = end - p - 1;
    uint64_t n;
    if (c == 0x82) {
        if (left < 4) return WIRE_OTHER;
        n = ld32(buf + p + 1);
        *body = p + 5;
    } else if (c == 0x81) {
        if (left < 2) return WIRE_OTHER;
        n = ld16(buf + p + 1);
        *body = p + 3;
    } else if (c == 0x80) {
        if (left < 1) return WIRE_OTHER;
        n = buf[p + 1];
        *body = p + 2;
    } else {
        return WIRE_OTHER;
    }
    if (n > end - *body) return WIRE_OTHER;
    *body_end = *body + (size_t)n;
    return WIRE_OK;
}

static int read_struct(const wire_node *nodes, uint32_t idx, const uint8_t *buf, size_t p,
                       size_t end, size_t *after, wire_val *out) {
    const wire_node *n = &nodes[idx];
    /* as _codecs._struct_reader: an untyped 82 body, fields in any order */
    if (buf[p] != 0x82) return WIRE_OTHER;
    size_t body, body_end;
    if (read_length(buf, p, end, &body, &body_end) < 0) return WIRE_OTHER;
    uint64_t seen = 0;
    uint32_t guess = 0; /* fields usually come in declared order */
    size_t q = body;
    while (q < body_end) {
        uint8_t c = buf[q];
        if (c == 0x8F || c == 0x8E || c == 0xBE) {
            if (skip_padding(buf, &q, body_end) < 0) return WIRE_OTHER;
            continue;
        }
        if (c < 0xC0 || c >= 0xE0) return WIRE_OTHER; /* a long name or a field number */
        size_t klen = c - 0xC0;
        if (klen > body_end - q - 1) return WIRE_OTHER;
        const uint8_t *k = buf + q + 1;
        uint32_t found = n->nfields;
        for (uint32_t t = 0; t < n->nfields; t++) {
            uint32_t f = guess + t < n->nfields ? guess + t : guess + t - n->nfields;
            const wire_node *fn = &nodes[n->first + f];
            if (fn->key_len == klen && memcmp(fn->key, k, klen) == 0) {
                found = f;
                break;
            }
        }
        if (found == n->nfields || (seen >> found) & 1) return WIRE_OTHER;
        seen |= (uint64_t)1 << found;
        guess = found + 1 < n->nfields ? found + 1 : 0;
        q += 1 + klen;
        if (read_node(nodes, n->first + found, buf, &q, body_end, out) < 0) return WIRE_OTHER;
    }
    uint64_t all = n->nfields == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n->nfields) - 1);
    if (seen != all) return WIRE_OTHER; /* missing fields: defaults are Python's */
    out[idx].tag = WV_STRUCT;
    *after = body_end;
    return WIRE_OK;
}

/* One value of node idx at buf[*pos] (leading padding skipped). */
static int read_node(const wire_node *nodes, uint32_t idx, const uint8_t *buf, size_t *pos,
                     size_t end, wire_val *out) {
    const wire_node *n = &nodes[idx];
    wire_val *v = &out[idx];
    size_t p = *pos;
    if (skip_padding(buf, &p, end) < 0 || p >= end) return WIRE_OTHER;
    uint8_t c = buf[p];
    if (c == 0xBB) {
        if (!n->nullable) return WIRE_OTHER;
        v->tag = WV_NULL;
        *pos = p + 1;
        return WIRE_OK;
    }
    switch (n->kind) {
    case WK_INT: {
        int is_int;
        int64_t iv = 0;
        double dv = 0;
        if (read_number(buf, &p, end, &is_int, &iv, &dv) < 0) return WIRE_OTHER;
        if (!is_int) {
            /* a long Java sent as a float (FLOAT32): integral, saturating at the top;
             * Optional[int] converts through msgspec, which is Python's to do */
            if (n->nullable || !isfinite(dv) || dv != floor(dv)) return WIRE_OTHER;
            if (dv >= I64_MAX_D) iv = INT64_MAX;
            else if (dv < -I64_MAX_D) return WIRE_OTHER;
            else iv = (int64_t)dv;
        }
        v->tag = WV_INT;
        v->i = iv;
        break;
    }
    case WK_FLOAT: {
        int is_int;
        int64_t iv = 0;
        double dv = 0;
        if (read_number(buf, &p, end, &is_int, &iv, &dv) < 0) return WIRE_OTHER;
        v->tag = WV_FLOAT;
        v->d = is_int ? (double)iv : dv;
        break;
    }
    case WK_STR: {
        size_t len;
        if (c >= 0xE0) {
            len = c - 0xE0;
            p += 1;
        } else if (c == 0xB8) {
            int64_t sn;
            p += 1;
            if (read_stop_bit(buf, &p, end, &sn) < 0 || sn < 0) return WIRE_OTHER;
            len = (size_t)sn;
            if ((uint64_t)sn != len) return WIRE_OTHER;
        } else {
            return WIRE_OTHER;
        }
        if (len > end - p) return WIRE_OTHER;
        v->tag = WV_STR;
        v->off = p;
        v->len = len;
        p += len;
        break;
    }
    case WK_BOOL:
        if (c != 0xB0 && c != 0xB1) return WIRE_OTHER;
        v->tag = WV_BOOL;
        v->i = c == 0xB1;
        p += 1;
        break;
    case WK_BYTES: {
        size_t body, body_end;
        if (read_length(buf, p, end, &body, &body_end) < 0) return WIRE_OTHER;
        if (skip_padding(buf, &body, body_end) < 0 || body >= body_end || buf[body] != 0x8A)
            return WIRE_OTHER;
        v->tag = WV_BYTES;
        v->off = body + 1;
        v->len = body_end - body - 1;
        p = body_end;
        break;
    }
    case WK_STRUCT:
        if (n->nullable) return WIRE_OTHER;
        return read_struct(nodes, idx, buf, p, end, pos, out);
    default:
        return WIRE_OTHER;
    }
    *pos = p;
    return WIRE_OK;
}

int wire_read_args(const wire_node *nodes, uint32_t nnodes, const uint8_t *buf, size_t pos,
                   size_t end, wire_val *out) {
    if (nnodes == 0 || nodes[0].kind != WK_ARGS || pos > end) return WIRE_OTHER;
    const wire_node *a = &nodes[0];
    size_t p = pos;
    if (a->nfields == 0) {
        /* no argument: E0 (an empty text) */
        if (skip_padding(buf, &p, end) < 0 || p >= end || buf[p] != 0xE0) return WIRE_OTHER;
        p += 1;
    } else if (a->nfields == 1) {
        if (read_node(nodes, a->first, buf, &p, end, out) < 0) return WIRE_OTHER;
    } else {
        /* 82 <len> and exactly the declared number of values */
        size_t body, body_end;
        if (skip_padding(buf, &p, end) < 0 || p >= end) return WIRE_OTHER;
        if (read_length(buf, p, end, &body, &body_end) < 0) return WIRE_OTHER;
        size_t q = body;
        for (uint32_t i = 0; i < a->nfields; i++)
            if (read_node(nodes, a->first + i, buf, &q, body_end, out) < 0) return WIRE_OTHER;
        if (skip_padding(buf, &q, body_end) < 0 || q != body_end) return WIRE_OTHER;
        p = body_end;
    }
    /* the last event: only padding may follow */
    if (skip_padding(buf, &p, end) < 0 || p != end) return WIRE_OTHER;
    out[0].tag = WV_STRUCT;
    return WIRE_OK;
}

static int plan_walk(const wire_node *nodes, uint32_t nnodes, uint32_t idx, unsigned depth) {
    const wire_node *n = &nodes[idx];
    if (depth > 32) return WIRE_OTHER;
    if (n->kind == WK_ARGS || n->kind == WK_STRUCT) {
        if ((n->kind == WK_ARGS) != (idx == 0) || n->nfields > WIRE_MAX_FIELDS) return WIRE_OTHER;
        if (n->first <= idx || n->first > nnodes || n->nfields > nnodes - n->first)
            return WIRE_OTHER;
        for (uint32_t i = 0; i < n->nfields; i++)
            if (plan_walk(nodes, nnodes, n->first + i, depth + 1) < 0) return WIRE_OTHER;
        return WIRE_OK;
    }
    return n->kind >= WK_INT && n->kind <= WK_BYTES ? WIRE_OK : WIRE_OTHER;
}

int wire_plan_ok(const wire_node *nodes, uint32_t nnodes) {
    if (nnodes == 0 || nodes[0].kind != WK_ARGS) return WIRE_OTHER;
    return plan_walk(nodes, nnodes, 0, 0);
}

/* ------------------------------------------------------------------ */
/* writing                                                             */

size_t wire_put_stop_bit(uint8_t *out, int64_t v) {
    size_t k = 0;
    if (v < 0) {
        uint64_t n = ~(uint64_t)v;
        do {
            out[k++] = (uint8_t)(0x80 | (n & 0x7F));
            n >>= 7;
        } while (n);
        out[k++] = 0;
        return k;
    }
    uint64_t n = (uint64_t)v;
    while (n >= 0x80) {
        out[k++] = (uint8_t)(0x80 | (n & 0x7F));
        n >>= 7;
    }
    out[k++] = (uint8_t)n;
    return k;
}

static size_t put_fixed(uint8_t *out, uint8_t code, const void *v, size_t n) {
    out[0] = code;
    memcpy(out + 1, v, n);
    return 1 + n;
}

static size_t put_float32(uint8_t *out, float f) { return put_fixed(out, 0x90, &f, 4); }

/* Python's struct.pack("<f", d) succeeds and unpacks to d */
static int double_fits_float32(double d) {
    if (isinf(d)) return 1;
    if (isnan(d) || fabs(d) > FLT_MAX) return 0;
    return (double)(float)d == d;
}

size_t wire_put_long(uint8_t *out, int64_t v) {
    if (v >= 0 && v <= 0xFF) {
        out[0] = 0xA1;
        out[1] = (uint8_t)v;
        return 2;
    }
    if (v >= 0 && v <= 0x7FFF) { int16_t x = (int16_t)v; return put_fixed(out, 0xA5, &x, 2); }
    if (v >= 0 && v <= 0xFFFF) { uint16_t x = (uint16_t)v; return put_fixed(out, 0xA2, &x, 2); }
    if (v >= 0 && v <= 0x7FFFFFFF) { int32_t x = (int32_t)v; return put_fixed(out, 0xA6, &x, 4); }
    if (v >= 0 && v <= 0xFFFFFFFFLL) { uint32_t x = (uint32_t)v; return put_fixed(out, 0xA3, &x, 4); }
    if (v >= -0x80 && v < 0) { int8_t x = (int8_t)v; return put_fixed(out, 0xA4, &x, 1); }
    if (v >= -0x8000 && v < 0) { int16_t x = (int16_t)v; return put_fixed(out, 0xA5, &x, 2); }
    if (v >= -0x80000000LL && v < 0) { int32_t x = (int32_t)v; return put_fixed(out, 0xA6, &x, 4); }
    /* Java's (long) (float) v == v, the cast saturating */
    float f = (float)(double)v;
    int fits;
    if (v == INT64_MAX) fits = 1;
    else if ((double)f >= I64_MAX_D) fits = 0;
    else fits = (int64_t)f == v;
    if (fits) return put_float32(out, f);
    return put_fixed(out, 0xA7, &v, 8);
}

/* Java's saturating (long) d */
static int64_t java_d2l(double d) {
    if (isnan(d)) return 0;
    if (d >= I64_MAX_D) return INT64_MAX;
    if (d <= -I64_MAX_D) return INT64_MIN;
    return (int64_t)d;
}

/* Java's Math.round(double) */
static int64_t java_round(double x) {
    if (isnan(x)) return 0;
    double fl = floor(x);
    double r = x - fl >= 0.5 ? fl + 1 : fl;
    return java_d2l(r);
}

static int64_t java_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a) / b); }

static size_t put_non_integral(uint8_t *out, double d) {
    int64_t l6 = java_round(d * 1e6);
    if ((double)l6 / 1e6 == d && l6 > -((int64_t)1 << 35) && l6 < ((int64_t)1 << 42)) {
        int64_t i2 = java_div(l6, 10000), i4 = java_div(l6, 100);
        if ((double)i2 / 1e2 == d) { out[0] = 0x92; return 1 + wire_put_stop_bit(out + 1, i2); }
        if ((double)i4 / 1e4 == d) { out[0] = 0x94; return 1 + wire_put_stop_bit(out + 1, i4); }
        out[0] = 0x96;
        return 1 + wire_put_stop_bit(out + 1, l6);
    }
    if (isnan(d) || double_fits_float32(d)) return put_float32(out, (float)d);
    return put_fixed(out, 0x91, &d, 8);
}

size_t wire_put_double(uint8_t *out, double d) {
    if ((double)java_d2l(d) != d) return put_non_integral(out, d);
    if (d >= 0) {
        if (d <= 0xFF) { out[0] = 0xA1; out[1] = (uint8_t)d; return 2; }
        if (d <= 0xFFFF) { uint16_t x = (uint16_t)d; return put_fixed(out, 0xA2, &x, 2); }
        if (double_fits_float32(d)) return put_float32(out, (float)d);
        if (d <= 4294967295.0) { uint32_t x = (uint32_t)d; return put_fixed(out, 0xA3, &x, 4); }
        return put_fixed(out, 0x91, &d, 8);
    }
    if (d >= -0x80) { int8_t x = (int8_t)d; return put_fixed(out, 0xA4, &x, 1); }
    if (d >= -0x8000) { int16_t x = (int16_t)d; return put_fixed(out, 0xA5, &x, 2); }
    if (double_fits_float32(d)) return put_float32(out, (float)d);
    if (d >= -2147483648.0) { int32_t x = (int32_t)d; return put_fixed(out, 0xA6, &x, 4); }
    return put_fixed(out, 0x91, &d, 8);
}

size_t wire_put_length(uint8_t *out, uint64_t n) {
    if (n < 0x100) { out[0] = 0x80; out[1] = (uint8_t)n; return 2; }
    if (n < 0x10000) { uint16_t x = (uint16_t)n; return put_fixed(out, 0x81, &x, 2); }
    if (n < 0x100000000ULL) { uint32_t x = (uint32_t)n; return put_fixed(out, 0x82, &x, 4); }
    return 0;
}
