package io.aiochronicle.spark;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The options of a read, its columns, and its planning into {@link Span}s. */
final class Reading implements Serializable {
    private static final long serialVersionUID = 1L;
    /** the columns this reader produces, in their default order */
    static final String[] COLUMNS = {"index", "cycle", "sequence", "payload", "metadata"};
    static final int MIN_PARTITION = 1 << 16;
    static final int PARTITIONS_PER_CORE = 1;

    final String path;
    final boolean includePayload;
    final boolean includeMetadata;
    final long partitionSize; // 0: sized to the parallelism
    final int batchRows;

    Reading(CaseInsensitiveStringMap o) {
        String p = o.get("path");
        if (p == null || p.isEmpty()) {
            throw new IllegalArgumentException("give the queue directory: load(path) or option('path', ...)");
        }
        this.path = p;
        this.includePayload = bool(o, "includePayload", true);
        this.includeMetadata = bool(o, "includeMetadata", false);
        Long ps = integer(o, "partitionSize");
        this.partitionSize = ps == null ? 0 : Math.max(1, ps);
        Long br = integer(o, "batchSize");
        this.batchRows = br == null || br <= 0 ? 4096 : (int) Math.min(br, 1 << 20);
    }

    static boolean bool(CaseInsensitiveStringMap o, String key, boolean dflt) {
        String v = o.get(key);
        if (v == null) {
            return dflt;
        }
        switch (v.trim().toLowerCase()) {
            case "true": case "1": case "yes": case "on":
                return true;
            case "false": case "0": case "no": case "off":
                return false;
            default:
                throw new IllegalArgumentException("option " + key + " must be true or false, not '" + v + "'");
        }
    }

    /** An integer option (decimal, or 0x hex as the CLI prints indices); null if absent. */
    static Long integer(CaseInsensitiveStringMap o, String key) {
        String v = o.get(key);
        if (v == null || v.trim().isEmpty()) {
            return null;
        }
        String s = v.trim().toLowerCase().replace("_", "");
        try {
            boolean neg = s.startsWith("-");
            String body = neg ? s.substring(1) : s;
            long n = body.startsWith("0x") ? Long.parseUnsignedLong(body.substring(2), 16) : Long.parseLong(body);
            return neg ? -n : n;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("option " + key + " must be an integer, not '" + v + "'");
        }
    }

    /** The default columns for these options. */
    StructType schema() {
        List<StructField> f = new ArrayList<>();
        f.add(DataTypes.createStructField("index", DataTypes.LongType, false));
        f.add(DataTypes.createStructField("cycle", DataTypes.IntegerType, false));
        f.add(DataTypes.createStructField("sequence", DataTypes.LongType, false));
        if (includePayload) {
            f.add(DataTypes.createStructField("payload", DataTypes.BinaryType, false));
        }
        if (includeMetadata) {
            f.add(DataTypes.createStructField("metadata", DataTypes.BooleanType, false));
        }
        return DataTypes.createStructType(f);
    }

    /** Whether this reader can produce {@code schema} (every column one of its own). */
    static boolean canProduce(StructType schema) {
        for (StructField f : schema.fields()) {
            int i = java.util.Arrays.asList(COLUMNS).indexOf(f.name());
            if (i < 0) {
                return false;
            }
            if (!f.dataType().equals(new Reading.Col(i).type())) {
                return false;
            }
        }
        return true;
    }

    /** A column of the reader: its position in {@link #COLUMNS} and Spark type. */
    static final class Col {
        final int which;

        Col(int which) {
            this.which = which;
        }

        org.apache.spark.sql.types.DataType type() {
            switch (which) {
                case 0: case 2: return DataTypes.LongType;
                case 1: return DataTypes.IntegerType;
                case 3: return DataTypes.BinaryType;
                default: return DataTypes.BooleanType;
            }
        }
    }

    static Configuration hadoopConf() {
        SparkSession s = SparkSession.active();
        return s.sessionState().newHadoopConf();
    }

    static int parallelism() {
        try {
            return Math.max(1, SparkSession.active().sparkContext().defaultParallelism());
        } catch (RuntimeException e) {
            return 2;
        }
    }

    /**
     * Partitions covering indices {@code [loIndex, hiIndex)} and cycles
     * {@code [firstCycle, lastCycle]} (null: open), found through the index pages.  The
     * end of each cycle is fixed here (its complete excerpts now), so every partition
     * reads only committed data.
     *
     * <p>By default a read larger than {@link #MIN_PARTITION} excerpts a core is cut into
     * one partition a core of equal size, a partition going on from the end of one cycle
     * into the next (three cycles on two cores are two tasks, not three on two cores);
     * a smaller read, or one with {@code partitionSize}, is read by cycle, a cycle
     * holding more than that many excerpts split by sequence range.
     */
    static List<Span> plan(QueueFiles q, Long loIndex, Long hiIndex, Long firstCycle, Long lastCycle,
                           long partitionSize, int parallelism) {
        try {
            List<long[]> ranges = new ArrayList<>(); // cycle, lo, hi
            List<Path> files = new ArrayList<>();
            long lc = loIndex == null ? -1 : q.cycleOfIndex(loIndex);
            long hc = hiIndex == null ? Long.MAX_VALUE : q.cycleOfIndex(hiIndex);
            long total = 0;
            for (Map.Entry<Long, Path> e : q.cycles().entrySet()) {
                long c = e.getKey();
                if (c < lc || c > hc || (firstCycle != null && c < firstCycle)
                        || (lastCycle != null && c > lastCycle)) {
                    continue;
                }
                long n = q.count(e.getKey(), e.getValue());
                long lo = loIndex != null && c == lc ? Math.min(n, q.seqOfIndex(loIndex)) : 0;
                long hi = hiIndex != null && c == hc ? Math.min(n, q.seqOfIndex(hiIndex)) : n;
                if (hi <= lo) {
                    continue;
                }
                ranges.add(new long[] {c, lo, hi});
                files.add(e.getValue());
                total += hi - lo;
            }
            // one partition per core (more, smaller ones measured slower: each task
            // opens its file and finds its start through the index)
            long parts = (long) parallelism * PARTITIONS_PER_CORE;
            boolean packed = partitionSize <= 0 && total > parts * MIN_PARTITION;
            long step = partitionSize > 0 ? partitionSize
                    : Math.max(MIN_PARTITION, (total + parts - 1) / parts);
            List<Span> out = new ArrayList<>();
            Span.Builder cur = new Span.Builder(q.shift);
            long room = step;
            for (int i = 0; i < ranges.size(); i++) {
                long[] r = ranges.get(i);
                for (long s = r[1]; s < r[2]; ) {
                    long take = Math.min(r[2] - s, room);
                    cur.add(files.get(i).toString(), r[0], s, s + take);
                    s += take;
                    room -= take;
                    if (room == 0 || !packed && s == r[2]) {
                        out.add(cur.build());
                        cur = new Span.Builder(q.shift);
                        room = step;
                    }
                }
            }
            if (!cur.isEmpty()) {
                out.add(cur.build());
            }
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The index after the last complete excerpt (0 for an empty or missing queue). */
    static long endIndex(QueueFiles q) throws IOException {
        java.util.TreeMap<Long, Path> cycles = q.cycles();
        for (Map.Entry<Long, Path> e : cycles.descendingMap().entrySet()) {
            long n = q.count(e.getKey(), e.getValue());
            if (n > 0) {
                return q.index(e.getKey(), n);
            }
        }
        return 0;
    }
}
