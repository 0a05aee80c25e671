/*
 * Message history (Java's VanillaMessageHistory) in its compact binary form,
 * without Python: checking the bytes a reader finds, and building the bytes
 * a method writer puts first in the excerpt it writes while a message is
 * handled (the sources and timings read, plus the source and index of that
 * message, the time it was read and the time of the write).
 *
 * The compact form (what follows the 0x86 code in BinaryWire, and the data
 * of the msgpack Ext that aiochronicle writes):
 *
 *     u8 n, i32 source_id[n], i64 index[n], u8 t, i64 timing[t]
 *
 * little-endian.  Bytes after the last timing are not part of it (a reader
 * ignores them, as Java's does).  aiochronicle/_format/_history.py is the
 * Python side and the reference: every builder here gives its bytes.
 *
 * aiochronicle._core._hot (native/hot.c) holds the Python side of the hot
 * path; the fuzz harness native/tests/fuzz_history.c drives this file alone.
 * Every read is bounds-checked; nothing here allocates.
 */
#ifndef AIOCHRONICLE_HISTORY_H
#define AIOCHRONICLE_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#define HIST_MAX_SOURCES 128 /* Java's MESSAGE_HISTORY_LENGTH */
#define HIST_MAX_TIMINGS 255 /* timings written, the writer's own included (a u8 count) */
/* the longest compact history: 128 sources, 255 timings */
#define HIST_MAX_RAW (1 + 12 * HIST_MAX_SOURCES + 1 + 8 * HIST_MAX_TIMINGS)

#define HIST_OK 0
#define HIST_TRUNCATED (-1) /* the counts ask for more bytes than there are */
#define HIST_FULL (-2)      /* one more source or two more timings do not fit */
#define HIST_ROOM (-3)      /* the output buffer is too small */

typedef struct hist_view {
    uint32_t sources;  /* n */
    uint32_t timings;  /* t */
    size_t used;       /* 2 + 12 n + 8 t: the bytes of the history */
} hist_view;

/* Check raw[0 .. len): HIST_OK and *v filled, or HIST_TRUNCATED. */
int hist_check(const uint8_t *raw, size_t len, hist_view *v);

/* The compact history of an excerpt written while a message is handled:
 * ``raw`` (checked by hist_check into ``v``; NULL when the message had no
 * history: then ``v`` is ignored) plus (source_id, index), then the timings
 * read_ns and now.  Returns the bytes written to out[0 .. cap), HIST_FULL
 * when the history is at its limits (the Python side raises the error), or
 * HIST_ROOM. */
int64_t hist_forward(const uint8_t *raw, const hist_view *v, int32_t source_id, int64_t index,
                     int64_t read_ns, int64_t now, uint8_t *out, size_t cap);

/* The compact history of an excerpt written outside any handler: no source,
 * one timing (now).  Returns the bytes written (10) or HIST_ROOM. */
int64_t hist_first(int64_t now, uint8_t *out, size_t cap);

/* The bytes before a compact history of ``len`` bytes: as a msgpack Ext of
 * type ``ext_type`` (as msgspec encodes one: fixext for 1, 2, 4, 8 and 16
 * bytes, else ext 8/16/32), or as BinaryWire's ``history`` field
 * (BA 80 00 81 <u16 len + 1> 86).  Return the bytes written to out (which
 * has room for HIST_HEAD_MAX), or HIST_ROOM for a length the form cannot
 * hold. */
#define HIST_HEAD_MAX 8
int hist_msgpack_head(size_t len, int8_t ext_type, uint8_t *out);
int hist_wire_head(size_t len, uint8_t *out);

/* A msgpack Ext header at p[0 .. len): its type and data length, and where
 * the data starts; HIST_OK, or HIST_TRUNCATED when it is not one or runs
 * past len. */
int hist_msgpack_ext(const uint8_t *p, size_t len, int8_t *type, size_t *start,
                     size_t *data_len);

#endif
