/*
 * BinaryWire method-call arguments, without Python: the number compaction
 * Java's writers use, and a plan-driven reader of the arguments of one call.
 *
 * A plan is a tree of nodes in one array (a node's fields lie at
 * nodes[first .. first + nfields)); node 0 stands for the argument list of
 * the call and its fields are the arguments.  wire_read_args() fills one
 * wire_val per node it visits (out[i] belongs to nodes[i]).  It handles the
 * common shape only: anything else (an unknown, missing or repeated field,
 * a code the declared type does not take without conversion, more events
 * after the call, corrupt or truncated bytes) returns WIRE_OTHER, and the
 * caller reads the call its general way, which also names what is wrong.
 * Every read is bounds-checked: no input reads outside [buf, buf + end).
 *
 * aiochronicle._core._hot (native/wirecall.c) holds the Python side; the fuzz
 * harness native/tests/fuzz_wire.c drives this file alone.
 */
#ifndef AIOCHRONICLE_WIRE_H
#define AIOCHRONICLE_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum {
    WK_ARGS = 0,   /* node 0: the argument list */
    WK_INT = 1,    /* a Python int (Java long, compacted) */
    WK_FLOAT = 2,  /* a Python float (Java double, compacted) */
    WK_STR = 3,
    WK_BOOL = 4,
    WK_BYTES = 5,  /* bytes(...): 80/81/82 length, 8A, the data */
    WK_STRUCT = 6, /* an untyped marshallable: 82 u32 length, fields */
};

#define WIRE_MAX_FIELDS 64
#define WIRE_OK 0
#define WIRE_OTHER (-1)

typedef struct wire_node {
    uint8_t kind;
    uint8_t nullable;  /* BB (null) is a value too */
    uint16_t nfields;  /* WK_ARGS, WK_STRUCT: children nodes[first ..] */
    uint32_t first;
    const uint8_t *key; /* a struct field: its name bytes (a C0+n key) */
    uint32_t key_len;
} wire_node;

enum { WV_NULL = 1, WV_INT, WV_FLOAT, WV_STR, WV_BOOL, WV_BYTES, WV_STRUCT };

typedef struct wire_val {
    uint8_t tag;
    int64_t i;     /* WV_INT, WV_BOOL */
    double d;      /* WV_FLOAT */
    size_t off;    /* WV_STR, WV_BYTES: the data is buf[off .. off + len) */
    size_t len;
} wire_val;

/* Read the arguments of a call from buf[pos .. end) (pos is just after the
 * event key) using the plan nodes[0 .. nnodes); the call must be the last
 * event (only padding may follow).  out has nnodes entries. */
int wire_read_args(const wire_node *nodes, uint32_t nnodes, const uint8_t *buf, size_t pos,
                   size_t end, wire_val *out);

/* Check a plan (fields in range, no cycles, a node's fields after it). */
int wire_plan_ok(const wire_node *nodes, uint32_t nnodes);

/* Writing: each returns the bytes written to out (which has room for 16). */
size_t wire_put_stop_bit(uint8_t *out, int64_t v);
size_t wire_put_long(uint8_t *out, int64_t v);    /* writeNumber(long) */
size_t wire_put_double(uint8_t *out, double d);   /* writeNumber(double) */
size_t wire_put_length(uint8_t *out, uint64_t n); /* 80/81/82 + length; 0 if n >= 2^32 */

#endif
