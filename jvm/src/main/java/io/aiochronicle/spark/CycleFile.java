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
    private static final int WINDOW = 1 << 20;
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

    final int indexCount;
    final int indexSpacing;
    final boolean aligned;
    final long headerEnd;
    final long index2Index;
    private final int countBits;
    private final int spacingBits;
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
            if (w == 0 || (w & NOT_COMPLETE) != 0 || (w & META) == 0) {
                throw new NotReady(path + ": the cycle file header is not complete");
            }
            int len = w & LENGTH_MASK;
            if (len > (1 << 16)) {
                throw new IOException(path + ": not a cycle file (header of " + len + " bytes)");
            }
            ensure(4, len);
            int off = (int) (4 - bufStart);
            Map<String, Object> doc;
            try {
                doc = Wire.parse(buf, off, off + len, bufStart);
            } catch (IllegalArgumentException e) {
                throw new IOException(path + ": malformed cycle file header: " + e.getMessage());
            }
            Map<String, Object> h = Wire.asMap(doc.get("header"));
            if (h == null) {
                throw new IOException(path + ": not a cycle file (no header document)");
            }
            this.header = h;
            Map<String, Object> ix = Wire.asMap(h.get("indexing"));
            int count = ix == null ? 0 : (int) Wire.asLong(ix.get("indexCount"), 0);
            int spacing = ix == null ? 0 : (int) Wire.asLong(ix.get("indexSpacing"), 0);
            this.indexCount = count > 0 ? count : 8192;
            this.indexSpacing = spacing > 0 ? spacing : 64;
            this.index2Index = ix == null ? 0 : Wire.asLong(ix.get("index2Index"), 0);
            this.aligned = Wire.asLong(h.get("dataFormat"), 0) == 1;
            this.countBits = 31 - Integer.numberOfLeadingZeros(this.indexCount);
            this.spacingBits = 31 - Integer.numberOfLeadingZeros(this.indexSpacing);
            this.headerEnd = align(4 + len);
            ok = true;
        } finally {
            if (!ok) {
                in.close();
            }
        }
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

    /** The int64 array of the index document at {@code pos}, or null if there is none. */
    private Wire.LongArray indexArray(long pos) throws IOException {
        if (pos <= 0 || pos + 4 > fileLength) {
            return null;
        }
        int w = word(pos);
        if (!ready(w) || (w & META) == 0) {
            return null;
        }
        int len = w & LENGTH_MASK;
        ensure(pos + 4, len);
        int off = offset(pos + 4);
        try {
            for (Object v : Wire.parse(buf, off, off + len, bufStart).values()) {
                if (v instanceof Wire.LongArray) {
                    return (Wire.LongArray) v;
                }
            }
        } catch (IllegalArgumentException e) {
            return null;
        }
        return null;
    }

    /**
     * The nearest indexed excerpt at or before sequence {@code seq}: {sequence, position}.
     * Walks back over empty slots (index entries are written after the excerpt commits);
     * {0, headerEnd} when nothing before it is indexed.
     */
    long[] indexedAtOrBefore(long seq) throws IOException {
        Wire.LongArray top = indexArray(index2Index);
        if (top == null) {
            return new long[] {0, headerEnd};
        }
        long i2 = seq >>> (countBits + spacingBits);
        long i3 = (seq >>> spacingBits) & (indexCount - 1);
        for (long a = Math.min(i2, top.capacity - 1); a >= 0; a--) {
            long secondaryPos = int64(top.valuesAt + a * 8);
            Wire.LongArray sec = indexArray(secondaryPos);
            if (sec == null) {
                continue;
            }
            long start = a == i2 ? Math.min(i3, sec.capacity - 1) : sec.capacity - 1;
            for (long b = start; b >= 0; b--) {
                long pos = int64(sec.valuesAt + b * 8);
                if (pos > 0) {
                    return new long[] {((a << countBits) + b) << spacingBits, pos};
                }
            }
        }
        return new long[] {0, headerEnd};
    }

    /**
     * From data excerpt {@code s} at {@code pos}, forward over complete documents until
     * data excerpt {@code stop} or the first header that is not complete: {sequence, position}.
     */
    private long[] scan(long s, long pos, long stop) throws IOException {
        while (s < stop) {
            int w = word(pos);
            if (!ready(w) || !fits(pos, w)) {
                break; // not complete, or a length running past the file: nothing more to read
            }
            if ((w & META) == 0) {
                s++;
            }
            pos = align(pos + 4 + (w & LENGTH_MASK));
        }
        return new long[] {s, pos};
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
