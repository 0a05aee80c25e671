/*
 * aiochronicle native core: the per-message hot path over memory-mapped
 * Chronicle Queue v5 cycle files.
 *
 * Contract (see native/README.md):
 *   - every call returns within a bounded time (spins have explicit budgets);
 *   - no call blocks on I/O except the explicit map/grow helpers;
 *   - nothing here calls back into Python or includes Python.h;
 *   - corrupt input never crashes: every read is bounds-checked against the
 *     mapped length and reported as CQ_CORRUPT with the offending offset.
 *
 * The region between CDEF-BEGIN and CDEF-END is fed verbatim to cffi's cdef(),
 * so it must stay free of preprocessor logic other than integer #defines.
 */
#ifndef AIOCHRONICLE_CQ_H
#define AIOCHRONICLE_CQ_H

#include <stdint.h>
#include <stddef.h>

#include "codes.h"
#include "notify.h"

/* CDEF-BEGIN */

/* One mapped cycle file, shared by every appender and tailer of a process
 * that uses the cycle.  Python owns the struct and the mappings. */
typedef struct cq_store {
    uint8_t *base;            /* mapping of file bytes [0, map_len) */
    uint64_t map_len;
    int64_t cycle;            /* the file's cycle number */
    int32_t align;            /* 4 for dataFormat 1, else 1 */
    int32_t file_shift;       /* cycle shift of the file's own arithmetic */
    uint64_t wp_off;          /* offset of writePosition[0] (0: unknown) */
    uint64_t wp_seq_off;      /* offset of writePosition[1] (0: single-long format) */
    uint64_t i2i_off;         /* offset of the index2Index value in the header */
    uint64_t last_index_off;  /* offset of lastIndex (nextEntryToBeIndexed) */
    uint64_t index_count;
    uint64_t index_spacing;
    int32_t count_bits;
    int32_t spacing_bits;
    uint64_t data_start;      /* first byte after the file header document */
    uint64_t chunk;           /* RSS window: pages behind a reader are dropped per chunk */
    /* holes: on tmpfs a load through the mapping from a page the file does
     * not back allocates one, and on a full tmpfs that is a SIGBUS.  Loads of
     * header words and index values outside the runs of pages known backed
     * ask the file first (SEEK_DATA on fd) and read a hole as the zero it
     * holds (cq_backed). */
    uint64_t backed[4];       /* runs of backed pages: (first page << 32) | end page */
    uint32_t backed_next;     /* the run a new one replaces */
    int32_t fd;               /* the file, for those looks (with holes set) */
    int32_t holes;            /* 0: never look; 1: look (Python sets it with fd);
                                 2: the file system was found to be tmpfs */
    int32_t reserved1;
    int32_t index_bad;        /* set once an index entry disagreed with a chain of headers
                                 that reaches the writePosition: lookups walk instead */
} cq_store;

typedef struct cq_appender {
    cq_store *store;
    int64_t *write_lock;      /* chronicle.write.lock in metadata.cq4t */
    int64_t *append_lock;     /* chronicle.append.lock, or NULL */
    int64_t pid;
    int64_t *clock_cell;      /* settable clock in ms; NULL = CLOCK_REALTIME */
    int64_t epoch;
    int64_t length_ms;
    int32_t queue_shift;      /* cycle shift of the queue's roll cycle */
    int32_t check_cycle;      /* 0 disables the roll check (positioned writes) */
    int32_t closed;           /* set (from any thread) when the appender closes: every
                                 call then returns CQ_BAD_STATE; the mappings stay valid */
    int32_t reserved0;
    uint64_t lock_spin_ns;    /* bounded spin for the write lock */
    uint64_t pos;             /* hint: next header position */
    uint64_t seq;             /* hint: sequence of the next data excerpt */
    uint64_t populated;       /* pages pre-faulted up to here */
    uint64_t populate_step;   /* 0 disables pre-faulting */
    uint64_t dropped;         /* pages before this offset have been released */
    uint64_t allocated;       /* disk blocks are reserved below this offset */
    void *notify;             /* cq_notify_watch * (notify.h) or NULL: wake waiters */
    /* outputs */
    int64_t last_index;       /* index of the last data excerpt appended */
    int64_t want_cycle;       /* on CQ_ROLL: the cycle the clock asks for */
    uint64_t need;            /* on CQ_NEED_MAP: bytes the mapping must cover */
    uint64_t err_pos;         /* on CQ_CORRUPT: offending offset */
    /* writing-document context */
    int32_t doc_open;
    int32_t doc_meta;
    uint64_t doc_pos;
    uint64_t doc_claim;       /* length the open document's header claims */
    /* statistics: data excerpts this appender has committed (any cycle) */
    uint64_t appended;
} cq_appender;

typedef struct cq_tailer {
    cq_store *store;
    int32_t queue_shift;
    int32_t include_meta;
    int32_t closed;           /* set (from any thread) when the tailer closes: every read
                                 then returns CQ_BAD_STATE; the mappings stay valid */
    int32_t reserved0;
    uint64_t pos;             /* next header to read */
    uint64_t seq;             /* sequence of the next data excerpt */
    uint64_t dropped;         /* pages before this offset have been released */
    char *scratch;            /* payloads up to scratch_cap are also copied here */
    uint64_t scratch_cap;
    /* outputs of the last read */
    const char *data;
    uint64_t len;
    int64_t index;
    int32_t is_meta;
    uint64_t need;
    uint64_t err_pos;
    /* what the file's redundancy confirmed (see verify_span in cq.c): data
     * excerpts below sequence vend of store vstore lie where the index entries
     * and writePosition say; (vpos, vseq) is the last confirmed anchor and
     * (vnext, vnext_seq) where the cursor stood after the last confirmed read */
    const cq_store *vstore;
    int64_t vcycle;
    uint64_t vend;
    uint64_t vpos;
    uint64_t vseq;
    uint64_t vnext;
    uint64_t vnext_seq;
    /* the end-of-cycle rule (Tailer._unmarked_end): where a forward read
     * stops at a header that is not ready (0, a claim, a damaged EOF) and
     * *last_cycle (listing.highestCycle; NULL: never) lists a later cycle,
     * the read returns CQ_UNMARKED_END for Python to decide; once Python
     * said "not yet" for (stall_cycle, stall_pos) the read says CQ_NONE
     * there, asking again every 256th time */
    const int64_t *last_cycle;
    int64_t stall_cycle;
    uint64_t stall_pos;
    uint64_t stall_polls;
} cq_tailer;

/* mapping helpers */
int cq_map(int fd, uint64_t len, int writable, uint8_t **out);
int cq_unmap(uint8_t *base, uint64_t len);
/* Publish a larger mapping of the store's file: the new base first, then the
 * new length (release stores).  Readers load the length (acquire), then the
 * base, so a base they see covers every length they saw before it; the old
 * mapping stays valid until the store closes (see native/README.md). */
void cq_store_remap(cq_store *s, uint8_t *base, uint64_t len);
int cq_release_pages(uint8_t *base, uint64_t from, uint64_t to);
int cq_sync(uint8_t *base, uint64_t from, uint64_t to, int async_);
int cq_populate(uint8_t *base, uint64_t from, uint64_t to);

/* atomics on mapped memory (all sequentially consistent) */
int64_t cq_load64(const uint8_t *p);
void cq_store64(uint8_t *p, int64_t v);
int cq_cas64(uint8_t *p, int64_t expected, int64_t value);
int64_t cq_max64(uint8_t *p, int64_t v);
int64_t cq_min64(uint8_t *p, int64_t v);
int64_t cq_add64(uint8_t *p, int64_t delta);
uint32_t cq_load32(const uint8_t *p);
int cq_cas32(uint8_t *p, uint32_t expected, uint32_t value);

/* write lock (value = holder's pid, Long.MIN_VALUE = unlocked) */
int cq_lock(int64_t *lock, int64_t pid, uint64_t spin_ns);
int cq_unlock(int64_t *lock, int64_t pid);

/* reserve disk blocks for [off, off+len) without changing the file size:
 * CQ_OK, CQ_NO_SPACE (ENOSPC/EDQUOT) or CQ_ERRNO (e.g. not supported) */
int cq_reserve(int fd, uint64_t off, uint64_t len);
/* [from, to) of the store's file is backed now (reserved by this process):
 * loads there need not ask the file (cq_store.backed) */
void cq_store_backed(cq_store *s, uint64_t from, uint64_t to);

/* store inspection */
int cq_find_end(cq_store *s, uint64_t *pos, uint64_t *seq, int *eof);
int cq_seek(cq_store *s, uint64_t seq, uint64_t *pos);
/* cq_seek walking from a known document boundary (from_pos holds the header
 * of data excerpt from_seq, or the end of the data): for files without an
 * index, whose caller remembers positions it has passed */
int cq_seek_from(cq_store *s, uint64_t seq, uint64_t from_pos, uint64_t from_seq,
                 uint64_t *pos);
/* CQ_OK; CQ_NEED_MAP: a document runs to *need (map it, or the file is
 * truncated); CQ_NOT_REACHED: the data ends at the end of the mapping, the
 * file must hold *need bytes; CQ_LOCK_LOST; CQ_CORRUPT */
int cq_write_eof(cq_store *s, uint64_t hint, uint64_t *need);
int cq_scan(cq_store *s, uint64_t pos, uint64_t *hdr_out, uint64_t *next_out);

/* appending (each takes and releases the write lock unless a document is open) */
int64_t cq_append(cq_appender *a, const uint8_t *data, uint64_t len, int meta);
/* positioned write (replication): only sequence `seq` of the appender's
 * cycle is accepted: CQ_DUPLICATE if it exists already, CQ_GAP if earlier
 * sequences are missing; no roll check (the caller picks the cycle) */
int64_t cq_append_at(cq_appender *a, const uint8_t *data, uint64_t len, uint64_t seq);
int cq_append_batch(cq_appender *a, const uint8_t *data, const int64_t *offsets,
                    uint64_t n, uint64_t *done);
int cq_doc_begin(cq_appender *a, uint64_t reserve, int meta);
int cq_doc_commit(cq_appender *a, uint64_t len);
int cq_doc_rollback(cq_appender *a, uint64_t len);
/* ends an open document from another thread (close): its slot becomes a
 * metadata padding document, so a copy still in flight lands in dead space */
int cq_doc_abandon(cq_appender *a);
int cq_doc_ensure(cq_appender *a, uint64_t len);

/* reading */
int64_t cq_read(cq_tailer *t);
int cq_read_batch(cq_tailer *t, uint8_t *out, uint64_t out_cap, int64_t *offsets,
                  int64_t *indices, uint64_t max_n, uint64_t *n_out);

const char *cq_version(void);

/* CDEF-END */

/* Whether the bytes [off, off+n) of a header word or index value lie on
 * pages the file backs; a hole (which reads as zero) must not be touched
 * through the mapping.  One load where holes cannot hurt (holes 0), a few
 * compares against the cached runs on tmpfs, the file asked otherwise. */
int cq_backed_slow(const cq_store *s, uint64_t off, uint64_t n);
static inline int cq_backed(const cq_store *s, uint64_t off, uint64_t n) {
    if (__atomic_load_n(&s->holes, __ATOMIC_RELAXED) == 0) return 1;
    uint64_t p0 = off >> 12, p1 = (off + n - 1) >> 12;
    for (int i = 0; i < 4; i++) {
        uint64_t w = __atomic_load_n(&s->backed[i], __ATOMIC_RELAXED);
        if (p0 >= (w >> 32) && p1 < (w & 0xffffffffu)) return 1;
    }
    return cq_backed_slow(s, off, n);
}

#endif
