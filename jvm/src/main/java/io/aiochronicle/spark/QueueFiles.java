package io.aiochronicle.spark;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.time.Instant;
import java.time.LocalDate;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeFormatterBuilder;
import java.time.temporal.ChronoField;
import java.time.temporal.TemporalAccessor;
import java.time.temporal.WeekFields;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;

/**
 * A queue directory seen through Hadoop's FileSystem API: its roll cycle (from
 * {@code metadata.cq4t}, a v4 cycle file header, or the file names), its cycle files
 * and the values its table store records.
 */
final class QueueFiles {
    static final String SUFFIX = ".cq4";
    static final String CODEC_KEY = "aiochronicle.codec";
    /** aiochronicle's code for the msgpack codec (the value under {@link #CODEC_KEY}) */
    static final long MSGPACK = 2;

    /** format, lengthMs, indexCount, indexSpacing, default epoch of every built-in roll cycle. */
    private static final Object[][] ROLL_CYCLES = {
        {"yyyyMMdd-HHmm'V'", 300000L, 2048, 256, 0L},
        {"yyyyMMdd-HHmm'X'", 600000L, 2048, 256, 0L},
        {"yyyyMMdd-HHmm'XX'", 1200000L, 2048, 256, 0L},
        {"yyyyMMdd-HHmm'H'", 1800000L, 2048, 256, 0L},
        {"yyyyMMdd-HH'F'", 3600000L, 4096, 256, 0L},
        {"yyyyMMdd-HH'II'", 7200000L, 4096, 256, 0L},
        {"yyyyMMdd-HH'IV'", 14400000L, 4096, 256, 0L},
        {"yyyyMMdd-HH'VI'", 21600000L, 4096, 256, 0L},
        {"yyyyMMdd'F'", 86400000L, 4096, 256, 0L},
        {"YYYY'W'ww", 604800000L, 4096, 256, 259200000L},
        {"yyyyMMdd-HHmm", 60000L, 2048, 16, 0L},
        {"yyyyMMdd-HH", 3600000L, 4096, 16, 0L},
        {"yyyyMMdd", 86400000L, 8192, 64, 0L},
        {"yyyyMMdd-HH'L'", 3600000L, 8192, 64, 0L},
        {"yyyyMMdd'L'", 86400000L, 32768, 128, 0L},
        {"yyyyMMdd'X'", 86400000L, 32768, 256, 0L},
        {"yyyyMMdd'H'", 86400000L, 32768, 1024, 0L},
        {"yyyyMMdd'S'", 86400000L, 8192, 8, 0L},
        {"yyyyMMdd-HH'LS'", 3600000L, 4096, 1024, 0L},
        {"yyyyMMdd-HH'LX'", 3600000L, 2048, 1048576, 0L},
        {"yyyyMMdd'HX'", 86400000L, 16384, 1048576, 0L},
        {"yyyyMMdd-HHmmss'T'", 1000L, 32768, 4, 0L},
        {"yyyyMMdd-HHmmss'T4'", 1000L, 32, 4, 0L},
        {"yyyyMMdd-HH'T'", 3600000L, 16, 4, 0L},
        {"yyyyMMdd'T1'", 86400000L, 8, 1, 0L},
        {"yyyyMMdd'T2'", 86400000L, 16, 2, 0L},
        {"yyyyMMdd'T4'", 86400000L, 32, 4, 0L},
        {"yyyyMMdd'T8'", 86400000L, 128, 8, 0L},
    };

    final FileSystem fs;
    final Path dir;
    final String format;
    final long lengthMs;
    final long epoch;
    final int shift;
    private final long namingEpoch;
    private final DateTimeFormatter formatter;
    private final boolean weekly;
    final Map<String, Long> values;

    /** Hadoop's file system for {@code p}; local files skip the checksum layer. */
    static FileSystem fileSystem(Path p, Configuration conf) throws IOException {
        FileSystem fs = p.getFileSystem(conf);
        if (fs instanceof LocalFileSystem) {
            return ((LocalFileSystem) fs).getRawFileSystem();
        }
        return fs;
    }

    QueueFiles(Configuration conf, String path) throws IOException {
        Path p = new Path(path);
        this.fs = fileSystem(p, conf);
        this.dir = fs.makeQualified(p);
        if (!fs.exists(dir)) {
            throw new FileNotFoundException("no queue at " + path);
        }
        if (!fs.getFileStatus(dir).isDirectory()) {
            throw new IOException(path + " is not a queue directory");
        }
        Map<String, Long> vals = new HashMap<>();
        Map<String, Object> roll = readTableStore(new Path(dir, "metadata.cq4t"), vals);
        this.values = vals;
        String first = null;
        for (FileStatus st : fs.listStatus(dir)) {
            String n = st.getPath().getName();
            if (n.endsWith(SUFFIX) && st.isFile() && (first == null || n.compareTo(first) < 0)) {
                first = n;
            }
        }
        CycleFile probe = null;
        if (first != null && (roll == null || roll.get("format") == null)) {
            try {
                probe = new CycleFile(fs, new Path(dir, first));
                Map<String, Object> r = Wire.asMap(probe.header.get("roll"));
                if (r != null) {
                    roll = r;
                }
            } catch (CycleFile.NotReady e) {
                probe = null;
            }
        }
        String fmt = null;
        long len = 0;
        long ep = 0;
        if (roll != null && roll.get("format") instanceof String) {
            fmt = (String) roll.get("format");
            len = Wire.asLong(roll.get("length"), 0);
            ep = Wire.asLong(roll.get("epoch"), 0);
        }
        Object[] builtIn = null;
        for (Object[] rc : ROLL_CYCLES) {
            if (fmt != null ? rc[0].equals(fmt) && (len == 0 || len == (Long) rc[1])
                    : first != null && parses((String) rc[0], stem(first))) {
                builtIn = rc;
                break;
            }
        }
        if (fmt == null) {
            if (builtIn == null) {
                builtIn = ROLL_CYCLES[8]; // FAST_DAILY, Chronicle's default (an empty queue)
                if (first != null) {
                    throw new IOException("cannot tell the roll cycle of " + first);
                }
            }
            fmt = (String) builtIn[0];
            ep = (Long) builtIn[4];
        }
        if (len <= 0) {
            len = builtIn != null ? (Long) builtIn[1] : 86400000L;
        }
        int count;
        int spacing;
        if (builtIn != null) {
            count = (Integer) builtIn[2];
            spacing = (Integer) builtIn[3];
        } else {
            if (probe == null && first != null) {
                probe = new CycleFile(fs, new Path(dir, first));
            }
            count = probe != null ? probe.indexCount : 4096;
            spacing = probe != null ? probe.indexSpacing : 256;
        }
        if (probe != null) {
            probe.close();
        }
        this.format = fmt;
        this.lengthMs = len;
        this.epoch = ep;
        this.shift = Math.max(32, log2(count) * 2 + log2(spacing));
        long day = 86400000L;
        this.namingEpoch = ep >= 0 ? ep - ep % day : -day;
        this.weekly = fmt.contains("Y") && fmt.contains("w");
        this.formatter = DateTimeFormatter.ofPattern(fmt, Locale.US).withZone(ZoneOffset.UTC);
    }

    private static int log2(int n) {
        return 31 - Integer.numberOfLeadingZeros(n);
    }

    static String stem(String name) {
        return name.substring(0, name.length() - SUFFIX.length());
    }

    private static boolean parses(String fmt, String stem) {
        try {
            DateTimeFormatter f = DateTimeFormatter.ofPattern(fmt, Locale.US).withZone(ZoneOffset.UTC);
            return f.format(f.parse(stem)).equals(stem);
        } catch (RuntimeException e) {
            return false;
        }
    }

    /** The roll settings in a table store's header, and its key records into {@code out}. */
    private Map<String, Object> readTableStore(Path p, Map<String, Long> out) throws IOException {
        if (!fs.exists(p)) {
            return null;
        }
        long size = fs.getFileStatus(p).getLen();
        byte[] b = new byte[(int) Math.min(size, 1 << 20)];
        try (FSDataInputStream in = fs.open(p)) {
            in.readFully(0, b, 0, b.length);
        }
        Map<String, Object> roll = null;
        int pos = 0;
        boolean first = true;
        while (pos + 4 <= b.length) {
            int w = (b[pos] & 0xff) | (b[pos + 1] & 0xff) << 8 | (b[pos + 2] & 0xff) << 16 | (b[pos + 3] & 0xff) << 24;
            if (!CycleFile.ready(w)) {
                break;
            }
            int len = w & CycleFile.LENGTH_MASK;
            if (pos + 4 + len > b.length) {
                break;
            }
            try {
                Map<String, Object> doc = Wire.parse(b, pos + 4, pos + 4 + len, 0);
                if (first) {
                    Map<String, Object> h = Wire.asMap(doc.get("header"));
                    Map<String, Object> m = h == null ? null : Wire.asMap(h.get("metadata"));
                    roll = m == null ? null : Wire.asMap(m.get("roll"));
                } else {
                    for (Map.Entry<String, Object> e : doc.entrySet()) {
                        if (e.getValue() instanceof Long) {
                            out.put(e.getKey().toLowerCase(Locale.ROOT), (Long) e.getValue());
                        }
                    }
                }
            } catch (IllegalArgumentException e) {
                // a record this reader does not understand: skipped
            }
            first = false;
            pos = (pos + 4 + len + 3) & ~3;
        }
        return roll;
    }

    /** The file stem of {@code cycle}, as Chronicle names it. */
    String name(long cycle) {
        return formatter.format(Instant.ofEpochMilli(cycle * lengthMs + namingEpoch));
    }

    /** The cycle a file stem names, or -1 if it is not one of this queue's names. */
    long cycleOf(String stem) {
        try {
            long millis;
            if (weekly) {
                DateTimeFormatter f = new DateTimeFormatterBuilder().appendPattern(format)
                        .parseDefaulting(WeekFields.of(Locale.US).dayOfWeek(), 1)
                        .toFormatter(Locale.US).withZone(ZoneOffset.UTC);
                millis = LocalDate.from(f.parse(stem)).toEpochDay() * 86400000L;
            } else {
                TemporalAccessor t = formatter.parse(stem);
                long day = t.getLong(ChronoField.EPOCH_DAY);
                long sec = t.isSupported(ChronoField.SECOND_OF_DAY) ? t.getLong(ChronoField.SECOND_OF_DAY) : 0;
                millis = day * 86400000L + sec * 1000L;
            }
            long c = Math.floorDiv(millis - namingEpoch, lengthMs);
            for (long k = c - 1; k <= c + 1; k++) {
                if (k >= 0 && name(k).equals(stem)) {
                    return k;
                }
            }
        } catch (RuntimeException e) {
            // not a name of this roll cycle
        }
        return -1;
    }

    /** Every cycle with a file, in order, with its path. */
    TreeMap<Long, Path> cycles() throws IOException {
        TreeMap<Long, Path> out = new TreeMap<>();
        for (FileStatus st : fs.listStatus(dir)) {
            String n = st.getPath().getName();
            if (!n.endsWith(SUFFIX) || !st.isFile()) {
                continue;
            }
            long c = cycleOf(stem(n));
            if (c >= 0) {
                out.put(c, st.getPath());
            }
        }
        return out;
    }

    long index(long cycle, long seq) {
        return (cycle << shift) + seq;
    }

    long cycleOfIndex(long index) {
        return index >>> shift;
    }

    long seqOfIndex(long index) {
        return index & ((1L << shift) - 1);
    }

    /** The complete data excerpts in the cycle file {@code p} of {@code cycle} now (0 if it is being created). */
    long count(long cycle, Path p) throws IOException {
        try (CycleFile f = new CycleFile(fs, p)) {
            f.name(cycle, shift);
            return f.count();
        } catch (CycleFile.NotReady e) {
            return 0;
        }
    }
}
