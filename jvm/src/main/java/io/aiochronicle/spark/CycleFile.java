package io.aiochronicle.spark;

import java.io.Closeable;
import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.util.Map;

import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * One {@code .cq4} cycle file read through Hadoop's FileSystem API with positioned reads
 * into a window buffer: its header (index layout, alignment), index lookups and excerpts.
 *
 * <p>Safe on a file another process is appending to: a header word is read on its own
 * and an excerpt is only taken when its header is complete (neither zero nor marked
 * not-complete); the caller reads excerpt data only below an end found complete earlier.
 */
final class CycleFile implements Closeable {
    static final int NOT_COMPLETE = 0x80000000;
    static final int META = 0x40000000;
    static final int LENGTH_MASK = 0x3fffffff;
    static final int EOF = NOT_COMPLETE | META;
    private static final int WINDOW = 1 << 20;
    /** the largest header document read (as aiochronicle's MAX_HEADER) */
    private static final int MAX_HEADER = 1 << 20;
    /** documents looked at before a file that starts with data is taken for a headerless one */
    private static final int PROBE_DOCUMENTS = 16;
    private static final VarHandle LE_INT =
            MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);
    private static final VarHandle LE_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);

    final String path;
    private final FileSystem fs;
    private final Path hpath;
    private final FSDataInputStream in;
    private long fileLength;
    private byte[] buf = new byte[WINDOW];
    private long bufStart;
    private int bufLen;

    /** libchronicle's layout: data from offset 0, no header document, no index */
    final boolean headerless;
    final int indexCount;
    final int indexSpacing;
    final boolean aligned;
    final long headerEnd;
    final long index2Index;
    private final int countBits;
    private final int spacingBits;
    /** the last excerpt the header records as written (0: unknown) */
    private final long writePosition;
    final Map<String, Object> header;

    /** Raised when the file's first header is not complete yet (a cycle being created). */
    static final class NotReady extends IOException {
        NotReady(String msg) {
            super(msg);
        }
    }

    CycleFile(FileSystem fs, Path p) throws IOException {
        this.path = p.toString();
        this.fs = fs;
        this.hpath = p;
        this.in = fs.open(p);
        boolean ok = false;
        try {
            this.fileLength = fs.getFileStatus(p).getLen();
            int w = word(0);
            if ((w & META) == 0 && ready(w) || w == EOF) {
                // data first: libchronicle's layout (no header document, no index), or damage
                if (!headerless()) {
                    throw new CorruptQueueException(path, 0, String.format("first header word 0x%08x is not "
                            + "a complete metadata document: not a Chronicle Queue cycle file", w));
                }
                this.headerless = true;
                this.header = java.util.Collections.emptyMap();
                this.indexCount = 8192;
                this.indexSpacing = 64;
                this.index2Index = 0;
                this.aligned = true;
                this.countBits = 13;
                this.spacingBits = 6;
                this.headerEnd = 0;
                this.writePosition = 0;
                ok = true;
                return;
            }
            if (!ready(w)) {
                throw new NotReady(path + ": the cycle file header is not complete");
            }
            int len = w & LENGTH_MASK;
            if (len == 0 || len > MAX_HEADER || 4L + len > fileLength) {
                throw new CorruptQueueException(path, 0, "header length " + len + " is impossible");
            }
            ensure(4, len);
            int off = (int) (4 - bufStart);
            Map<String, Object> doc;
            try {
                doc = Wire.parse(buf, off, off + len, bufStart);
            } catch (IllegalArgumentException e) {
                throw new CorruptQueueException(path, 4, "header is not BinaryWire: " + e.getMessage());
            }
            Map<String, Object> h = Wire.asMap(doc.get("header"));
            if (h == null) {
                throw new CorruptQueueException(path, 4, "first document is not `header`: not a Chronicle "
                        + "Queue cycle file");
            }
            this.headerless = false;
            this.header = h;
            Map<String, Object> ix = Wire.asMap(h.get("indexing"));
            long count = ix == null ? 0 : Wire.asLong(ix.get("indexCount"), 0);
            long spacing = ix == null ? 0 : Wire.asLong(ix.get("indexSpacing"), 0);
            this.indexCount = (int) (count > 0 ? powerOfTwo(count) : 8192);
            this.indexSpacing = (int) (spacing > 0 ? powerOfTwo(spacing) : 64);
            this.index2Index = ix == null ? 0 : Wire.asLong(ix.get("index2Index"), 0);
            long format = Wire.asLong(h.get("dataFormat"), 0);
            if (format != 0 && format != 1) {
                // reading with the wrong alignment would stop short with no error
                throw new CorruptQueueException(path, 4, "dataFormat " + format + " is neither 0 nor 1");
            }
            this.aligned = format == 1;
            this.countBits = 31 - Integer.numberOfLeadingZeros(this.indexCount);
            this.spacingBits = 31 - Integer.numberOfLeadingZeros(this.indexSpacing);
            this.headerEnd = align(4 + len);
            this.writePosition = lastWritten(h.get("writePosition"));
            ok = true;
        } finally {
            if (!ok) {
                in.close();
            }
        }
    }

    private long powerOfTwo(long n) throws CorruptQueueException {
        if ((n & (n - 1)) != 0 || n > (1 << 24)) {
            throw new CorruptQueueException(path, 4, "index count/spacing " + n + " is not a power of two");
        }
        return n;
    }

    /**
     * Whether the file starts with data, as libchronicle writes it: its first documents
     * (up to {@value #PROBE_DOCUMENTS}) are all complete data excerpts that fit in the file,
     * ending at most with an unwritten word or an end-of-file marker (libchronicle writes
     * no metadata into its files, so a Java file whose header word was overwritten, whose
     * next document is an index page, is not taken for one).
     */
    private boolean headerless() throws IOException {
        long pos = 0;
        for (int n = 0; n < PROBE_DOCUMENTS; n++) {
            int w = pos + 4 <= fileLength ? word(pos) : 0;
            if (w == 0) {
                return n > 0;
            }
            if (w == EOF) {
                // a bare EOF first: a cycle closed before anything was written in it
                return n > 0 || (fileLength >= 8 && word(4) == 0);
            }
            if ((w & (META | NOT_COMPLETE)) != 0) {
                return false;
            }
            long end = pos + 4 + (w & LENGTH_MASK);
            if (end > fileLength) {
                return false;
            }
            pos = (end + 3) & ~3L;
        }
        return true;
    }

    /**
     * The position of the last excerpt the header's {@code writePosition} records (every
     * header before it is written), or 0 when it is absent or does not point at a
     * complete data excerpt.
     */
    private long lastWritten(Object wp) throws IOException {
        long at;
        if (wp instanceof Wire.LongArray) {
            Wire.LongArray a = (Wire.LongArray) wp;
            if (a.capacity < 1 || a.valuesAt + 8 > headerEnd) {
                return 0;
            }
            at = int64(a.valuesAt);
        } else if (wp instanceof Long) {
            at = (Long) wp;
        } else {
            return 0;
        }
        if (at < headerEnd || at + 4 > fileLength || (aligned && (at & 3) != 0)) {
            return 0;
        }
        int w = word(at);
        return ready(w) && (w & META) == 0 && at + 4 + (w & LENGTH_MASK) <= fileLength ? at : 0;
    }

    @Override
    public void close() throws IOException {
        in.close();
    }

    long align(long pos) {
        return aligned ? (pos + 3) & ~3L : pos;
    }

    /** Makes {@code [pos, pos + n)} readable in {@link #buf} (reading past the end gives zeros). */
    private void ensure(long pos, int n) throws IOException {
        if (pos >= bufStart && pos + n <= bufStart + bufLen) {
            return;
        }
        if (n > buf.length) {
            buf = new byte[Math.max(n, buf.length * 2)];
        }
        if (pos + n > fileLength) {
            fileLength = Math.max(fileLength, lengthNow()); // a live appender may have grown it
        }
        int want = (int) Math.max(0, Math.min(buf.length, fileLength - pos));
        if (want > 0) {
            in.readFully(pos, buf, 0, want);
        }
        if (want < n) {
            java.util.Arrays.fill(buf, want, n, (byte) 0);
        }
        bufStart = pos;
        bufLen = want; // zeros past the end are not kept: the file may grow
    }

    /** Forgets what was read: the next reads see what appenders committed since. */
    void refresh() {
        bufLen = 0;
    }

    private long lengthNow() throws IOException {
        return fs.getFileStatus(hpath).getLen();
    }

    /** The 32-bit little-endian word at {@code pos} (0 past the end of the file). */
    int word(long pos) throws IOException {
        if (pos + 4 > fileLength) {
            fileLength = Math.max(fileLength, lengthNow());
            if (pos + 4 > fileLength) {
                return 0;
            }
        }
        ensure(pos, 4);
        return (int) LE_INT.get(buf, (int) (pos - bufStart));
    }

    private long int64(long pos) throws IOException {
        ensure(pos, 8);
        return (long) LE_LONG.get(buf, (int) (pos - bufStart));
    }

    /** The byte buffer holding {@code [pos, pos + n)}: call {@link #offset} for where. */
    byte[] bytes(long pos, int n) throws IOException {
        ensure(pos, n);
        return buf;
    }

    /** Whether {@code [pos, pos + n)} is in the bytes read last (reading it moves nothing). */
    boolean inWindow(long pos, int n) {
        return pos >= bufStart && pos + n <= bufStart + bufLen;
    }

    int offset(long pos) {
        return (int) (pos - bufStart);
    }

    /** Whether the document whose header {@code w} is at {@code pos} ends inside the file. */
    boolean fits(long pos, int w) throws IOException {
        long end = pos + 4 + (w & LENGTH_MASK);
        if (end > fileLength) {
            fileLength = Math.max(fileLength, lengthNow());
        }
        return end <= fileLength;
    }

    static boolean ready(int w) {
        return w != 0 && (w & NOT_COMPLETE) == 0;
    }

    private int u8(long pos) throws IOException {
        ensure(pos, 1);
        return buf[(int) (pos - bufStart)] & 0xff;
    }

    /**
     * The values of the index array in the metadata document at {@code doc} (an event name,
     * padding, then an int64 array): {where values[0] is, capacity}; null when there is no
     * such document there (a damaged index is skipped, never trusted: its lengths and
     * capacity must lie inside the document, which must lie inside the file).
     */
    private long[] arrayAt(long doc) throws IOException {
        if (doc < 4 || doc + 4 > fileLength) {
            return null;
        }
        int h = word(doc);
        if (!ready(h) || (h & META) == 0) {
            return null;
        }
        long end = doc + 4 + (h & LENGTH_MASK);
        if (end > fileLength) {
            return null;
        }
        long p = doc + 4;
        if (p + 2 > end || u8(p) != 0xB9) {
            return null;
        }
        int nlen = u8(p + 1);
        if ((nlen & 0x80) != 0) {
            return null;
        }
        p += 2 + nlen;
        for (int guard = 0; p < end && guard < 64; guard++) {
            int c = u8(p);
            if (c == 0x8F) {
                p++;
            } else if (c == 0x8E && p + 5 <= end) {
                p += 5 + (word(p + 1) & 0xffffffffL);
            } else {
                break;
            }
        }
        if (p + 17 > end || u8(p) != 0x8D || ((p + 1) & 7) != 0) {
            return null;
        }
        long cap = int64(p + 1);
        if (cap <= 0 || cap > (end - p - 17) / 8) {
            return null;
        }
        return new long[] {p + 17, cap};
    }

    /** Whether an index entry points at a complete data excerpt of this file. */
    private boolean excerptAt(long pos) throws IOException {
        if (pos < headerEnd || pos + 4 > fileLength || (aligned && (pos & 3) != 0)) {
            return false;
        }
        int w = word(pos);
        return ready(w) && (w & META) == 0;
    }

    /**
     * The nearest indexed excerpt at or before sequence {@code seq}: {sequence, position}.
     * Walks back over empty slots (index entries are written after the excerpt commits) and
     * skips entries and pages that do not check out; {0, headerEnd} (a walk from the first
     * excerpt) when nothing before it is indexed, or after a bounded number of slots.
     */
    long[] indexedAtOrBefore(long seq) throws IOException {
        long[] top = index2Index > 0 ? arrayAt(index2Index) : null;
        if (top == null) {
            return new long[] {0, headerEnd};
        }
        long budget = 4L * indexCount + 64;
        long i2 = seq >>> (countBits + spacingBits);
        long i3 = (seq >>> spacingBits) & (indexCount - 1);
        for (long a = Math.min(i2, top[1] - 1); a >= 0; a--) {
            if (budget-- == 0) {
                break;
            }
            long[] sec = arrayAt(int64(top[0] + a * 8));
            if (sec == null) {
                continue;
            }
            long start = a == i2 ? Math.min(i3, sec[1] - 1) : sec[1] - 1;
            for (long b = start; b >= 0; b--) {
                if (budget-- == 0) {
                    return new long[] {0, headerEnd};
                }
                long pos = int64(sec[0] + b * 8);
                if (pos > 0 && excerptAt(pos)) {
                    return new long[] {((a << countBits) + b) << spacingBits, pos};
                }
            }
        }
        return new long[] {0, headerEnd};
    }

    /**
     * From data excerpt {@code s} at {@code pos}, forward over complete documents until
     * data excerpt {@code stop} or the first header that is not complete: {sequence, position}.
     * A complete header whose document runs past the end of the file, or an unwritten one
     * before the last excerpt the header records, is damage: a {@link CorruptQueueException}.
     */
    private long[] scan(long s, long pos, long stop) throws IOException {
        while (s < stop) {
            int w = word(pos);
            if (!ready(w)) {
                if (w != EOF && pos < writePosition) {
                    throw new CorruptQueueException(path, pos, "corrupt excerpt header: a damaged "
                            + "length hides the excerpts up to 0x" + Long.toHexString(writePosition)
                            + ", the last one the cycle header records");
                }
                break;
            }
            checkFits(pos, w);
            if ((w & META) == 0) {
                s++;
            } else if (pos == 0 && (w & LENGTH_MASK) == 0) {
                throw new CorruptQueueException(path, pos, "an empty metadata document at the start of the file");
            }
            pos = align(pos + 4 + (w & LENGTH_MASK));
        }
        return new long[] {s, pos};
    }

    /** Raises when the document whose complete header {@code w} is at {@code pos} runs past the file. */
    void checkFits(long pos, int w) throws IOException {
        if (!fits(pos, w)) {
            throw new CorruptQueueException(path, pos, "an excerpt runs past the end of the file");
        }
    }

    /**
     * Where reading data excerpt {@code seq} starts: its header when the index holds it,
     * else just after data excerpt {@code seq - 1} (metadata between the two comes first).
     */
    long positionOf(long seq) throws IOException {
        long[] at = indexedAtOrBefore(seq);
        return scan(at[0], at[1], seq)[1];
    }

    /** How many complete data excerpts the file holds now (from the last index entry on). */
    long count() throws IOException {
        refresh();
        long[] at = indexedAtOrBefore(Long.MAX_VALUE >>> 1);
        return scan(at[0], at[1], Long.MAX_VALUE)[0];
    }
}
