package io.aiochronicle.spark;

import java.io.IOException;
import java.util.Iterator;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.util.SerializableConfiguration;

/** Reads {@link Span}s on executors into columnar batches (rows are views of them). */
final class SpanReaders implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    private final SerializableConfiguration conf;
    // for each output column: its place in Reading.COLUMNS, or DECODED + its decoder field
    private final int[] columns;
    private static final int DECODED = 100;
    private final Decoder decoder;
    private final StructType schema;
    private final boolean includeMetadata;
    private final int batchRows;

    SpanReaders(StructType schema, Decoder decoder, Reading r) {
        this.conf = new SerializableConfiguration(Reading.hadoopConf());
        this.schema = schema;
        this.columns = new int[schema.fields().length];
        boolean decodes = false;
        for (int i = 0; i < columns.length; i++) {
            String name = schema.fields()[i].name();
            columns[i] = java.util.Arrays.asList(Reading.COLUMNS).indexOf(name);
            if (columns[i] < 0) {
                columns[i] = DECODED + decoder.column(name);
                decodes = true;
            }
        }
        this.decoder = decodes ? decoder : null;
        this.includeMetadata = r.includeMetadata;
        this.batchRows = r.batchRows;
    }

    @Override
    public boolean supportColumnarReads(InputPartition partition) {
        return true;
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
        return new Columnar((Span) partition);
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
        Columnar c = new Columnar((Span) partition);
        return new PartitionReader<InternalRow>() {
            private Iterator<InternalRow> rows;

            @Override
            public boolean next() throws IOException {
                while (rows == null || !rows.hasNext()) {
                    if (!c.next()) {
                        return false;
                    }
                    rows = c.get().rowIterator();
                }
                return true;
            }

            @Override
            public InternalRow get() {
                return rows.next();
            }

            @Override
            public void close() throws IOException {
                c.close();
            }
        };
    }

    /** One partition's excerpts, a batch of rows at a time. */
    private final class Columnar implements PartitionReader<ColumnarBatch> {
        private final Span span;
        private int piece = -1;
        private CycleFile file;
        private long pos;
        private long seq;
        private long hi;
        private long base;
        private long spacingMask;
        // the columns the read asks for (null: not asked for)
        private final OnHeapColumnVector index;
        private final OnHeapColumnVector cycle;
        private final OnHeapColumnVector sequence;
        private final PayloadVector payload;
        private final OnHeapColumnVector metadata;
        // the decoded columns' vectors, reset before each batch (they hold nulls and
        // appended bytes); the raw ones have neither: each row overwrites its slot
        private final OnHeapColumnVector[] heap;
        private final WritableColumnVector[] decoded; // by the decoder's column (null: not read)
        private final ColumnarBatch batch;
        private boolean done;

        Columnar(Span span) {
            this.span = span;
            StructField[] f = schema.fields();
            ColumnVector[] all = new ColumnVector[f.length];
            OnHeapColumnVector[] byRaw = new OnHeapColumnVector[Reading.COLUMNS.length];
            PayloadVector p = null;
            java.util.List<OnHeapColumnVector> written = new java.util.ArrayList<>();
            this.decoded = new WritableColumnVector[decoder == null ? 0 : decoder.width()];
            for (int i = 0; i < f.length; i++) {
                if (columns[i] == 3) {
                    p = new PayloadVector(batchRows);
                    all[i] = p;
                    continue;
                }
                OnHeapColumnVector v = new OnHeapColumnVector(batchRows, f[i].dataType());
                all[i] = v;
                if (columns[i] >= DECODED) {
                    decoded[columns[i] - DECODED] = v;
                    written.add(v);
                } else {
                    byRaw[columns[i]] = v;
                }
            }
            this.index = byRaw[0];
            this.cycle = byRaw[1];
            this.sequence = byRaw[2];
            this.metadata = byRaw[4];
            this.payload = p;
            this.heap = written.toArray(new OnHeapColumnVector[0]);
            this.batch = new ColumnarBatch(all, 0);
        }

        /** Opens the next piece of the span; false when there is none. */
        private boolean nextPiece() throws IOException {
            if (file != null) {
                file.close();
                file = null;
            }
            if (++piece >= span.files.length) {
                return false;
            }
            Path p = new Path(span.files[piece]);
            FileSystem fs = QueueFiles.fileSystem(p, conf.value());
            file = new CycleFile(fs, p);
            file.name(span.cycles[piece], span.shift);
            seq = span.lo[piece];
            hi = span.hi[piece];
            base = span.cycles[piece] << span.shift;
            pos = file.positionOf(seq);
            spacingMask = file.indexSpacing - 1;
            return true;
        }

        @Override
        public boolean next() throws IOException {
            while (!done) {
                if (file == null || seq >= hi) {
                    if (!nextPiece()) {
                        done = true;
                        return false;
                    }
                }
                int n = fill();
                if (n > 0) {
                    batch.setNumRows(n);
                    return true;
                }
                seq = hi; // a header that is not complete: nothing more in this piece
            }
            return false;
        }

        /**
         * Reads rows of the current piece into the vectors, up to a batch; a batch with a
         * payload column ends where the next excerpt is not in the read window (its rows
         * are views of the window, which must stay in place until Spark has read them).
         */
        private int fill() throws IOException {
            for (OnHeapColumnVector v : heap) {
                v.reset();
            }
            CycleFile f = file;
            PayloadVector pv = payload;
            int[] offs = pv == null ? null : pv.offsets;
            int[] lens = pv == null ? null : pv.lengths;
            boolean views = pv != null;
            int n = 0;
            long s = seq;
            long at = pos;
            int c = (int) span.cycles[piece];
            while (n < batchRows && s < hi) {
                if (views && n > 0 && !f.inWindow(at, 4)) {
                    break;
                }
                int w = f.word(at);
                if (!CycleFile.ready(w)) {
                    // never past a header that is not complete; the planning counted hi
                    // complete excerpts here, so their end before hi is damage
                    f.checkEnd(at, s, w);
                    throw f.corrupt(at, s, "corrupt excerpt header: the excerpts end here, before the "
                            + hi + " the cycle held when the read was planned");
                }
                f.checkFits(at, s, w);
                int len = w & CycleFile.LENGTH_MASK;
                boolean meta = (w & CycleFile.META) != 0;
                if (!meta && (s & spacingMask) == 0 && f.indexTrusted()) {
                    // an index entry here: the walk must be where it says
                    long e = f.entry(s);
                    if (e < 0) {
                        if (views && n > 0) {
                            break; // loading the page moves the window the rows are views of
                        }
                        f.loadEntries(s);
                        e = f.entry(s);
                    }
                    if (e > 0 && e != at) {
                        if (views && n > 0) {
                            break; // the next batch settles it
                        }
                        f.indexDisagrees();
                        w = f.word(at);
                    }
                }
                long body = at + 4;
                if (meta && !includeMetadata) {
                    at = f.align(body + len);
                    continue;
                }
                if (views && n > 0 && !f.inWindow(body, len)) {
                    break;
                }
                byte[] b = null;
                int off = 0;
                if (views || decoder != null) {
                    b = f.bytes(body, len);
                    off = f.offset(body);
                }
                at = f.align(body + len);
                if (decoder != null && !decoder.read(b, off, len, n, decoded) && decoder.failOnError()) {
                    // metadata too, as the Python source decodes every row it gives
                    throw new IOException("excerpt 0x" + Long.toHexString(base + s) + " of " + span.files[piece]
                            + " is not a " + decoder.expected());
                }
                if (views) {
                    pv.data = b;
                    offs[n] = off;
                    lens[n] = len;
                }
                if (index != null) {
                    index.putLong(n, base + s);
                }
                if (cycle != null) {
                    cycle.putInt(n, c);
                }
                if (sequence != null) {
                    sequence.putLong(n, s);
                }
                if (metadata != null) {
                    metadata.putBoolean(n, meta);
                }
                if (!meta) {
                    s++;
                }
                n++;
            }
            seq = s;
            pos = at;
            return n;
        }

        @Override
        public ColumnarBatch get() {
            return batch;
        }

        @Override
        public void close() throws IOException {
            batch.close();
            if (file != null) {
                file.close();
            }
        }
    }
}
