package io.aiochronicle.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.List;

import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A batch or streaming scan of a queue: column pruning, partitions by cycle and index range. */
final class ChronicleScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private final CaseInsensitiveStringMap options;
    private final Reading reading;
    private final Decoder decoder;
    private final StructType table;
    private StructType schema;

    ChronicleScan(StructType schema, Decoder decoder, CaseInsensitiveStringMap options) {
        this.table = schema;
        this.schema = schema;
        this.decoder = decoder;
        this.options = options;
        this.reading = new Reading(options);
    }

    /**
     * Keeps the columns asked for; a struct column (a method's arguments) is read whole,
     * as its decoder writes every field, when Spark's nested pruning asks for fewer.
     */
    @Override
    public void pruneColumns(StructType required) {
        StructField[] f = required.fields().clone();
        for (int i = 0; i < f.length; i++) {
            if (f[i].dataType() instanceof StructType) {
                f[i] = table.apply(f[i].name());
            }
        }
        this.schema = new StructType(f);
    }

    @Override
    public Scan build() {
        return this;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public String description() {
        return "chronicle(" + reading.path + ")";
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
        return new ChronicleStream(schema, decoder, options, reading);
    }

    @Override
    public InputPartition[] planInputPartitions() {
        QueueFiles q;
        try {
            q = new QueueFiles(Reading.hadoopConf(), reading.path);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        List<Span> spans = Reading.plan(q, Reading.integer(options, "startIndex"),
                Reading.integer(options, "endIndex"), Reading.integer(options, "startCycle"),
                Reading.integer(options, "endCycle"), reading.partitionSize, Reading.parallelism());
        return spans.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SpanReaders(schema, decoder, reading);
    }
}
