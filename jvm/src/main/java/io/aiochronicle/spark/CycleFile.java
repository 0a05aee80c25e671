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
    /** the position writePosition records, whatever lies there (0: none) */
    private final long recordedEnd;
    /** the sequence writePosition records for its excerpt (-1: none, or its packing does not match) */
    private final long recordedSeq;
    final Map<String, Object> header;
    /** the cycle and the queue's index shift, for messages (-1: not known) */
    private long cycle = -1;
    private int shift;
    /** false once the index disagreed with the chain of headers, which agrees with writePosition */
    private boolean indexTrusted = true;
    private boolean anchorsChecked;
    /** the index page whose entries {@link #pageEntries} holds (-1: none) */
    private long pageNumber = -1;
    private long[] pageEntries;
    /** where the last {@link #positionOf} walked from: {sequence, position} */
    private long[] start;

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
                this.recordedEnd = 0;
                this.recordedSeq = -1;
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
            long[] wp = recorded(h.get("writePosition"));
            this.recordedEnd = wp[0];
            this.writePosition = lastWritten(wp[0]);
            int fileShift = Math.max(32, countBits * 2 + spacingBits);
            long low = wp[0] & ((1L << (64 - fileShift)) - 1);
            this.recordedSeq = wp[0] > 0 && wp[1] >= 0 && (wp[1] >>> fileShift) == low
                    ? wp[1] & ((1L << fileShift) - 1) : -1;
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
     * What the header's {@code writePosition} records: {the position of the last excerpt,
     * (position << shift) + its sequence, or -1 where the header has no second value};
     * {0, -1} when it is absent.
     */
    private long[] recorded(Object wp) throws IOException {
        if (wp instanceof Wire.LongArray) {
            Wire.LongArray a = (Wire.LongArray) wp;
            if (a.capacity < 1 || a.valuesAt + 8 > headerEnd) {
                return new long[] {0, -1};
            }
            long second = a.capacity >= 2 && a.valuesAt + 16 <= headerEnd ? int64(a.valuesAt + 8) : -1;
            return new long[] {Math.max(0, int64(a.valuesAt)), second};
        } else if (wp instanceof Long) {
            return new long[] {Math.max(0, (Long) wp), -1};
        }
        return new long[] {0, -1};
    }

    /**
     * The position of the last excerpt the header's {@code writePosition} records (every
     * header before it is written), or 0 when it is absent or does not point at a
     * complete data excerpt.
     */
    private long lastWritten(long at) throws IOException {
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
        if (!indexTrusted) {
            return new long[] {0, headerEnd};
        }
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

    /** Names the cycle this file holds and the queue's index shift, for messages. */
    void name(long cycle, int shift) {
        this.cycle = cycle;
        this.shift = shift;
    }

    /** A {@link CorruptQueueException} at {@code pos} naming the index of data excerpt {@code seq}. */
    CorruptQueueException corrupt(long pos, long seq, String what) {
        String at = cycle < 0 ? "; at sequence " + seq
                : "; at index 0x" + Long.toHexString((cycle << shift) + seq) + " (cycle " + cycle
                + ", sequence " + seq + ")";
        return new CorruptQueueException(path, pos, what + at);
    }

    /**
     * Raises when the header {@code w} at {@code pos}, which is not complete, reached after
     * {@code s} data excerpts, stands where the data cannot end: before the last excerpt the
     * cycle header's {@code writePosition} records (a damaged header word or length), at the
     * end of a file shorter than that (a truncated file), or an EOF marker there.  (That
     * excerpt was committed before the header was read, and every header before it first.)
     */
    void checkEnd(long pos, long s, int w) throws IOException {
        if (recordedEnd <= pos && recordedSeq < s) {
            return;
        }
        String last = "the last excerpt the cycle header records (at 0x" + Long.toHexString(recordedEnd)
                + (recordedSeq >= 0 ? ", sequence " + recordedSeq : "") + ")";
        if (pos + 4 > fileLength && pos + 4 > (fileLength = Math.max(fileLength, lengthNow()))) {
            throw corrupt(pos, s, "the cycle file ends at 0x" + Long.toHexString(fileLength)
                    + ", before " + last + ": it was truncated");
        }
        if (w == EOF) {
            throw corrupt(pos, s, "an end-of-cycle marker before " + last);
        }
        throw corrupt(pos, s, "corrupt excerpt header: a damaged header or length hides the excerpts up to "
                + last);
    }

    /**
     * From data excerpt {@code s} at {@code pos}, forward over complete documents until
     * data excerpt {@code stop} or the first header that is not complete: {sequence, position}.
     * A complete header whose document runs past the end of the file, or an unwritten one
     * where the data cannot end ({@link #checkEnd}), is damage: a {@link CorruptQueueException}.
     */
    private long[] scan(long s, long pos, long stop) throws IOException {
        while (s < stop) {
            int w = word(pos);
            if (!ready(w)) {
                checkEnd(pos, s, w);
                break;
            }
            checkFits(pos, s, w);
            if ((w & META) == 0) {
                s++;
            } else if (pos == 0 && (w & LENGTH_MASK) == 0) {
                throw corrupt(pos, s, "an empty metadata document at the start of the file");
            }
            pos = align(pos + 4 + (w & LENGTH_MASK));
        }
        return new long[] {s, pos};
    }

    /**
     * The position of data excerpt {@code target}, walking the headers from data excerpt
     * {@code s} at {@code pos}; -1 when they do not lead there.  Raises nothing on damage.
     */
    private long walkTo(long s, long pos, long target) throws IOException {
        while (true) {
            int w = word(pos);
            if (!ready(w) || !fits(pos, w)) {
                return -1;
            }
            if ((w & META) == 0) {
                if (s == target) {
                    return pos;
                }
                s++;
            }
            pos = align(pos + 4 + (w & LENGTH_MASK));
        }
    }

    /** Raises when the document whose complete header {@code w} is at {@code pos} runs past the file. */
    void checkFits(long pos, long seq, int w) throws IOException {
        if (!fits(pos, w)) {
            throw corrupt(pos, seq, "an excerpt runs past the end of the file");
        }
    }

    /** Whether index entries are still used (none disagreed with the chain of headers). */
    boolean indexTrusted() {
        return indexTrusted && index2Index > 0 && !headerless;
    }

    /**
     * The index entry of data excerpt {@code seq} (a multiple of the index spacing): the
     * position it records, 0 when there is none (or the index is not used), -1 when its page
     * is not loaded yet ({@link #loadEntries}).
     */
    long entry(long seq) {
        if (!indexTrusted()) {
            return 0;
        }
        long page = seq >>> (countBits + spacingBits);
        if (page != pageNumber) {
            return -1;
        }
        long k = (seq >>> spacingBits) & (indexCount - 1);
        return k < pageEntries.length ? pageEntries[(int) k] : 0;
    }

    /** Reads the entries of the index page holding {@code seq} (this moves the read window). */
    void loadEntries(long seq) throws IOException {
        long page = seq >>> (countBits + spacingBits);
        pageNumber = page;
        pageEntries = new long[0];
        long[] top = index2Index > 0 ? arrayAt(index2Index) : null;
        if (top == null || page >= top[1]) {
            return;
        }
        long[] sec = arrayAt(int64(top[0] + page * 8));
        if (sec == null) {
            return;
        }
        int n = (int) Math.min(sec[1], indexCount);
        byte[] raw = new byte[n * 8];
        in.readFully(sec[0], raw, 0, raw.length);
        long[] e = new long[n];
        for (int i = 0; i < n; i++) {
            e[i] = (long) LE_LONG.get(raw, i * 8);
        }
        pageEntries = e;
    }

    private long entryLoaded(long seq) throws IOException {
        long e = entry(seq);
        if (e < 0) {
            loadEntries(seq);
            e = entry(seq);
        }
        return e;
    }

    /**
     * Once a file: whether the index agrees with the two anchors that do not depend on it,
     * the first data excerpt (after the header) and the last one {@code writePosition}
     * records; where not, {@link #disownIndex} says whether the index or the data is damaged.
     */
    private void checkAnchors() throws IOException {
        if (anchorsChecked) {
            return;
        }
        anchorsChecked = true;
        if (!indexTrusted() || writePosition <= 0 || recordedSeq < 0) {
            return;
        }
        long[] at = indexedAtOrBefore(recordedSeq);
        boolean ok = walkTo(at[0], at[1], recordedSeq) == writePosition;
        if (ok) {
            long first = entryLoaded(0);
            ok = first == 0 || first == walkTo(0, headerEnd, 0);
        }
        if (!ok) {
            disownIndex();
        }
    }

    /**
     * An index entry disagrees with the chain of headers: walks the whole chain from the
     * start, comparing the index entries on the way.  When it reaches the last excerpt
     * {@code writePosition} records, where it records it, the data is intact and the index
     * is what is damaged: it is not used any more in this file (every position is then found
     * by walking).  Else the data is damaged: raises, naming the last excerpt where the index
     * and the chain still agreed (the damage lies after it).
     */
    private void disownIndex() throws IOException {
        if (!indexTrusted) {
            return;
        }
        long s = 0;
        long pos = headerEnd;
        long agreeSeq = 0;
        long agreePos = headerEnd;
        boolean disagreed = false;
        while (recordedSeq >= 0 && writePosition > 0) {
            int w = word(pos);
            if (!ready(w)) {
                if (!disagreed) {
                    checkEnd(pos, s, w); // names what stands where the data cannot end
                }
                break;
            }
            if (!disagreed) {
                checkFits(pos, s, w);
            } else if (!fits(pos, w)) {
                break;
            }
            if ((w & META) == 0) {
                if (s == recordedSeq) {
                    if (pos == writePosition) {
                        indexTrusted = false;
                        pageNumber = -1;
                        pageEntries = null;
                        return;
                    }
                    break;
                }
                if ((s & (indexSpacing - 1)) == 0 && !disagreed) {
                    long e = entryLoaded(s);
                    if (e == pos) {
                        agreeSeq = s;
                        agreePos = pos;
                    } else if (e > 0) {
                        disagreed = true; // the damage lies between the last agreement and here
                    }
                }
                s++;
            }
            pos = align(pos + 4 + (w & LENGTH_MASK));
        }
        throw corrupt(agreePos, agreeSeq, "corrupt excerpt header: the headers after this excerpt do not "
                + "lead to the last excerpt the cycle header records (at 0x" + Long.toHexString(recordedEnd)
                + (recordedSeq >= 0 ? ", sequence " + recordedSeq : "") + ") where the index says they do");
    }

    /**
     * Whether the walk from the index entry {@code at} ({sequence, position}) passes data
     * excerpt {@code seq} and reaches the next anchor where it records it: the entry after,
     * else the excerpt {@code writePosition} records.
     */
    private boolean confirms(long[] at, long seq) throws IOException {
        long next = (seq | (indexSpacing - 1)) + 1;
        long e = entryLoaded(next);
        if (e > 0) {
            return walkTo(at[0], at[1], next) == e;
        }
        if (writePosition > 0 && recordedSeq >= seq) {
            return walkTo(at[0], at[1], recordedSeq) == writePosition;
        }
        return true;
    }

    /**
     * Where reading data excerpt {@code seq} starts: its header when the index holds it,
     * else just after data excerpt {@code seq - 1} (metadata between the two comes first).
     * The index entry it starts from is confirmed against the next anchor first.
     */
    long positionOf(long seq) throws IOException {
        checkAnchors();
        long[] at = indexedAtOrBefore(seq);
        if ((at[0] != 0 || at[1] != headerEnd) && !confirms(at, seq)) {
            disownIndex();
            at = new long[] {0, headerEnd};
        }
        start = at;
        return scan(at[0], at[1], seq)[1];
    }

    /**
     * A read from {@link #positionOf} met an index entry that disagrees with the headers it
     * walked: raises when the data is damaged ({@link #disownIndex}), or when the data is
     * intact but the entry the read started from was a damaged one (the rows it gave are
     * misattributed); returns when the read is on the right excerpts (the index is then
     * not used any more).
     */
    void indexDisagrees() throws IOException {
        disownIndex();
        long[] at = start;
        if (at != null && (at[0] != 0 || at[1] != headerEnd) && walkTo(0, headerEnd, at[0]) != at[1]) {
            throw corrupt(at[1], at[0], "a damaged index entry led this read to the wrong excerpt");
        }
    }

    /** How many complete data excerpts the file holds now (from writePosition or the last index entry on). */
    long count() throws IOException {
        refresh();
        checkAnchors();
        long[] at = index2Index > 0 && !headerless && writePosition > 0 && recordedSeq >= 0
                ? new long[] {recordedSeq, writePosition}
                : indexedAtOrBefore(Long.MAX_VALUE >>> 1);
        return scan(at[0], at[1], Long.MAX_VALUE)[0];
    }
}
