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
        private CycleFile file;
        private long pos;
        private long seq;
        private final OnHeapColumnVector[] vectors;
        private final WritableColumnVector[] decoded; // by the decoder's column (null: not read)
        private final ColumnarBatch batch;
        private boolean done;

        Columnar(Span span) {
            this.span = span;
            StructField[] f = schema.fields();
            this.vectors = new OnHeapColumnVector[f.length];
            for (int i = 0; i < f.length; i++) {
                vectors[i] = new OnHeapColumnVector(batchRows, f[i].dataType());
            }
            this.batch = new ColumnarBatch(vectors.clone(), 0);
            this.decoded = new WritableColumnVector[decoder == null ? 0 : decoder.width()];
            for (int i = 0; i < f.length; i++) {
                if (columns[i] >= DECODED) {
                    decoded[columns[i] - DECODED] = vectors[i];
                }
            }
        }

        private void open() throws IOException {
            Path p = new Path(span.file);
            FileSystem fs = QueueFiles.fileSystem(p, conf.value());
            file = new CycleFile(fs, p);
            seq = span.lo;
            pos = file.positionOf(span.lo);
        }

        @Override
        public boolean next() throws IOException {
            if (done) {
                return false;
            }
            if (file == null) {
                open();
            }
            for (OnHeapColumnVector v : vectors) {
                v.reset();
            }
            int n = 0;
            long base = span.cycle << span.shift;
            while (n < batchRows && seq < span.hi) {
                int w = file.word(pos);
                if (!CycleFile.ready(w)) {
                    break; // never past a header that is not complete
                }
                file.checkFits(pos, w);
                int len = w & CycleFile.LENGTH_MASK;
                boolean meta = (w & CycleFile.META) != 0;
                long at = pos + 4;
                pos = file.align(at + len);
                if (meta && !includeMetadata) {
                    continue;
                }
                byte[] b = null;
                int off = 0;
                if (decoder != null) {
                    // metadata too, as the Python source decodes every row it gives
                    b = file.bytes(at, len);
                    off = file.offset(at);
                    if (!decoder.read(b, off, len, n, decoded) && decoder.failOnError()) {
                        throw new IOException("excerpt " + (base + seq) + " of " + span.file
                                + " is not a " + decoder.expected());
                    }
                }
                for (int c = 0; c < columns.length; c++) {
                    OnHeapColumnVector v = vectors[c];
                    switch (columns[c]) {
                        case 0: v.putLong(n, base + seq); break;
                        case 1: v.putInt(n, (int) span.cycle); break;
                        case 2: v.putLong(n, seq); break;
                        case 3:
                            if (b == null) {
                                b = file.bytes(at, len);
                                off = file.offset(at);
                            }
                            v.putByteArray(n, b, off, len);
                            break;
                        case 4: v.putBoolean(n, meta); break;
                        default: break; // decoded above
                    }
                }
                if (!meta) {
                    seq++;
                }
                n++;
            }
            if (n == 0) {
                done = true;
                return false;
            }
            batch.setNumRows(n);
            return true;
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
