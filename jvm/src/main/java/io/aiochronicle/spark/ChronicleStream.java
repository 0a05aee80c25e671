package io.aiochronicle.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Micro-batch reads; an offset is {@code {"index": n}}, the queue index the next
 * micro-batch starts at (the same offsets, in the same JSON, as the Python source).
 */
final class ChronicleStream implements MicroBatchStream, SupportsTriggerAvailableNow {
    private static final Pattern INDEX = Pattern.compile("\"index\"\\s*:\\s*(-?\\d+)");

    /** A queue index as a streaming offset. */
    static final class IndexOffset extends Offset {
        final long index;

        IndexOffset(long index) {
            this.index = index;
        }

        @Override
        public String json() {
            return "{\"index\": " + index + "}";
        }
    }

    private final StructType schema;
    private final Decoder decoder;
    private final CaseInsensitiveStringMap options;
    private final Reading reading;
    private final String starting;
    private final Long maxRows;
    private Long target; // Trigger.AvailableNow: the end when the query started
    private QueueFiles queue;

    ChronicleStream(StructType schema, Decoder decoder, CaseInsensitiveStringMap options,
                    Reading reading) {
        this.schema = schema;
        this.decoder = decoder;
        this.options = options;
        this.reading = reading;
        String s = options.getOrDefault("startingIndex", "earliest").trim().toLowerCase();
        if (!s.equals("earliest") && !s.equals("latest")) {
            Reading.integer(options, "startingIndex"); // validate
        }
        this.starting = s;
        this.maxRows = Reading.integer(options, "maxRecordsPerTrigger");
        if (maxRows != null && maxRows <= 0) {
            throw new IllegalArgumentException("maxRecordsPerTrigger must be positive");
        }
    }

    /** The queue, or null while it does not exist yet. */
    private QueueFiles queue() {
        if (queue == null) {
            try {
                queue = new QueueFiles(Reading.hadoopConf(), reading.path);
            } catch (FileNotFoundException e) {
                return null;
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return queue;
    }

    private long end(QueueFiles q) {
        try {
            return q == null ? 0 : Reading.endIndex(q);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Override
    public Offset initialOffset() {
        QueueFiles q = queue();
        if (starting.equals("earliest")) {
            try {
                Map.Entry<Long, Path> first = q == null ? null : q.cycles().firstEntry();
                return new IndexOffset(first == null ? 0 : q.index(first.getKey(), 0));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        if (starting.equals("latest")) {
            return new IndexOffset(end(q));
        }
        Long start = Reading.integer(options, "startingIndex");
        return new IndexOffset(start == null ? 0 : start);
    }

    @Override
    public Offset deserializeOffset(String json) {
        Matcher m = INDEX.matcher(json);
        if (!m.find()) {
            throw new IllegalArgumentException("not a chronicle offset: " + json);
        }
        return new IndexOffset(Long.parseLong(m.group(1)));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
        return maxRows != null ? ReadLimit.maxRows(maxRows) : ReadLimit.allAvailable();
    }

    @Override
    public void prepareForTriggerAvailableNow() {
        target = end(queue());
    }

    @Override
    public Offset reportLatestOffset() {
        QueueFiles q = queue();
        return q == null ? null : new IndexOffset(end(q));
    }

    @Override
    public Offset latestOffset() {
        throw new UnsupportedOperationException("latestOffset(start, limit) is the one to call");
    }

    @Override
    public Offset latestOffset(Offset startOffset, ReadLimit limit) {
        long begin = ((IndexOffset) (startOffset == null ? initialOffset() : startOffset)).index;
        QueueFiles q = queue();
        if (q == null) {
            return new IndexOffset(begin);
        }
        Long budget = null;
        if (limit instanceof ReadMaxRows) {
            budget = ((ReadMaxRows) limit).maxRows();
        } else if (!(limit instanceof ReadAllAvailable) && maxRows != null) {
            budget = maxRows;
        }
        long bc = q.cycleOfIndex(begin);
        long bs = q.seqOfIndex(begin);
        long end = begin;
        try {
            for (Map.Entry<Long, Path> e : q.cycles().tailMap(bc, true).entrySet()) {
                long c = e.getKey();
                long lo = c == bc ? bs : 0;
                long avail = q.count(e.getKey(), e.getValue()) - lo;
                if (avail <= 0) {
                    continue;
                }
                long take = budget == null ? avail : Math.min(avail, budget);
                end = q.index(c, lo + take);
                if (budget != null) {
                    budget -= take;
                    if (budget <= 0) {
                        break;
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        if (target != null && end > target) {
            end = Math.max(begin, target);
        }
        return new IndexOffset(end);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
        long lo = ((IndexOffset) start).index;
        long hi = ((IndexOffset) end).index;
        QueueFiles q = queue();
        if (hi <= lo || q == null) {
            return new InputPartition[0];
        }
        return Reading.plan(q, lo, hi, null, null, reading.partitionSize, Reading.parallelism())
                .toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new SpanReaders(schema, decoder, reading);
    }

    @Override
    public void commit(Offset end) {
        // reading consumes nothing; the checkpoint holds the position
    }

    @Override
    public String toString() {
        return "chronicle(" + reading.path + ")";
    }

    @Override
    public void stop() {
        queue = null;
    }
}
