/*
 * Message history in its compact binary form: see history.h.
 */
#include "history.h"

#include <string.h>

static void put_i32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    for (int k = 0; k < 4; k++) p[k] = (uint8_t)(u >> (8 * k));
}

static void put_i64(uint8_t *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int k = 0; k < 8; k++) p[k] = (uint8_t)(u >> (8 * k));
}

int hist_check(const uint8_t *raw, size_t len, hist_view *v) {
    if (len < 1) return HIST_TRUNCATED;
    size_t n = raw[0];
    size_t tpos = 1 + 12 * n;
    if (tpos >= len) return HIST_TRUNCATED;
    size_t t = raw[tpos];
    size_t used = tpos + 1 + 8 * t;
    if (used > len) return HIST_TRUNCATED;
    v->sources = (uint32_t)n;
    v->timings = (uint32_t)t;
    v->used = used;
    return HIST_OK;
}

int64_t hist_forward(const uint8_t *raw, const hist_view *v, int32_t source_id, int64_t index,
                     int64_t read_ns, int64_t now, uint8_t *out, size_t cap) {
    size_t n = raw ? v->sources : 0, t = raw ? v->timings : 0;
    if (n + 1 > HIST_MAX_SOURCES || t + 2 > HIST_MAX_TIMINGS) return HIST_FULL;
    size_t total = 2 + 12 * (n + 1) + 8 * (t + 2);
    if (total > cap) return HIST_ROOM;
    uint8_t *o = out;
    *o++ = (uint8_t)(n + 1);
    if (n) memcpy(o, raw + 1, 4 * n);
    o += 4 * n;
    put_i32(o, source_id);
    o += 4;
    if (n) memcpy(o, raw + 1 + 4 * n, 8 * n);
    o += 8 * n;
    put_i64(o, index);
    o += 8;
    *o++ = (uint8_t)(t + 2);
    if (t) memcpy(o, raw + 2 + 12 * n, 8 * t);
    o += 8 * t;
    put_i64(o, read_ns);
    put_i64(o + 8, now);
    return (int64_t)total;
}

int64_t hist_first(int64_t now, uint8_t *out, size_t cap) {
    if (cap < 10) return HIST_ROOM;
    out[0] = 0;
    out[1] = 1;
    put_i64(out + 2, now);
    return 10;
}

int hist_msgpack_head(size_t len, int8_t ext_type, uint8_t *out) {
    int k;
    switch (len) {
    case 1: out[0] = 0xD4; k = 1; break;
    case 2: out[0] = 0xD5; k = 1; break;
    case 4: out[0] = 0xD6; k = 1; break;
    case 8: out[0] = 0xD7; k = 1; break;
    case 16: out[0] = 0xD8; k = 1; break;
    default:
        if (len < 0x100) {
            out[0] = 0xC7;
            out[1] = (uint8_t)len;
            k = 2;
        } else if (len < 0x10000) {
            out[0] = 0xC8;
            out[1] = (uint8_t)(len >> 8);
            out[2] = (uint8_t)len;
            k = 3;
        } else if (len <= 0xFFFFFFFFu) {
            out[0] = 0xC9;
            for (int j = 0; j < 4; j++) out[1 + j] = (uint8_t)(len >> (24 - 8 * j));
            k = 5;
        } else {
            return HIST_ROOM;
        }
    }
    out[k] = (uint8_t)ext_type;
    return k + 1;
}

int hist_wire_head(size_t len, uint8_t *out) {
    if (len + 1 > 0xFFFF) return HIST_ROOM;
    static const uint8_t key[4] = {0xBA, 0x80, 0x00, 0x81};
    memcpy(out, key, 4);
    out[4] = (uint8_t)((len + 1) & 0xFF);
    out[5] = (uint8_t)((len + 1) >> 8);
    out[6] = 0x86;
    return 7;
}

int hist_msgpack_ext(const uint8_t *p, size_t len, int8_t *type, size_t *start,
                     size_t *data_len) {
    if (len < 2) return HIST_TRUNCATED;
    size_t n, head;
    switch (p[0]) {
    case 0xD4: n = 1; head = 1; break;
    case 0xD5: n = 2; head = 1; break;
    case 0xD6: n = 4; head = 1; break;
    case 0xD7: n = 8; head = 1; break;
    case 0xD8: n = 16; head = 1; break;
    case 0xC7: n = p[1]; head = 2; break;
    case 0xC8:
        if (len < 3) return HIST_TRUNCATED;
        n = ((size_t)p[1] << 8) | p[2];
        head = 3;
        break;
    case 0xC9:
        if (len < 5) return HIST_TRUNCATED;
        n = ((size_t)p[1] << 24) | ((size_t)p[2] << 16) | ((size_t)p[3] << 8) | p[4];
        head = 5;
        break;
    default:
        return HIST_TRUNCATED;
    }
    if (head + 1 > len || n > len - head - 1) return HIST_TRUNCATED;
    *type = (int8_t)p[head];
    *start = head + 1;
    *data_len = n;
    return HIST_OK;
}
