package aiochronicle.interop;

import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.time.LocalTime;
import java.time.ZonedDateTime;
import java.time.ZoneId;
import java.util.Arrays;
import java.util.TreeSet;

import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.core.time.SetTimeProvider;
import net.openhft.chronicle.core.time.TimeProvider;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.RollCycle;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import net.openhft.chronicle.wire.DocumentContext;

/**
 * Roll-cycle scenarios for the interop tests: custom roll cycles, the indexCount and
 * indexSpacing overrides, and roll times.
 *
 * <p>One command per JVM; the roll cycle is given as {@code NAME} (a built-in) or
 * {@code custom:FORMAT:LENGTH_MS:COUNT:SPACING} (a user-defined {@link RollCycle}).
 * Output lines: {@code W index} per excerpt written, {@code E index hex} per excerpt
 * read, {@code F file} per cycle file, {@code END n}. Indices are hex.
 */
public final class Cycles {
    private static final PrintStream OUT = System.out;

    private Cycles() {
    }

    /** A user-defined roll cycle, as an application would implement the interface. */
    static final class Custom implements RollCycle {
        private final String format;
        private final int length;
        private final int count;
        private final int spacing;
        private final int shift;
        private final long mask;

        Custom(String format, int length, int count, int spacing) {
            this.format = format;
            this.length = length;
            this.count = count;
            this.spacing = spacing;
            this.shift = Math.max(32, log2(count) * 2 + log2(spacing));
            this.mask = (1L << shift) - 1;
        }

        private static int log2(int n) {
            return 31 - Integer.numberOfLeadingZeros(n);
        }

        public String format() { return format; }
        public int lengthInMillis() { return length; }
        public int defaultIndexCount() { return count; }
        public int defaultIndexSpacing() { return spacing; }
        public int current(TimeProvider time, long epoch) {
            return (int) ((time.currentTimeMillis() - epoch) / length);
        }
        public long toIndex(int cycle, long sequence) { return ((long) cycle << shift) + (sequence & mask); }
        public long toSequenceNumber(long index) { return index & mask; }
        public int toCycle(long index) { return (int) (index >>> shift); }
        public long maxMessagesPerCycle() { return Math.min(mask, (long) count * count * spacing); }
        @Override
        public String toString() { return "Custom(" + format + ")"; }
    }

    static RollCycle cycle(String spec) throws Exception {
        if (spec.startsWith("custom:")) {
            // the format may hold ':' itself: the three numbers are the last fields
            String[] p = spec.substring(7).split(":");
            int n = p.length;
            String fmt = String.join(":", Arrays.copyOfRange(p, 0, n - 3));
            return new Custom(fmt, Integer.parseInt(p[n - 3]), Integer.parseInt(p[n - 2]),
                    Integer.parseInt(p[n - 1]));
        }
        return Interop.rollCycle(spec);
    }

    static SingleChronicleQueueBuilder builder(String dir, String roll, int count, int spacing,
                                               TimeProvider time) throws Exception {
        SingleChronicleQueueBuilder b = SingleChronicleQueueBuilder.binary(dir).timeoutMS(2000)
                .rollCycle(cycle(roll));
        if (count > 0) {
            b.indexCount(count);
        }
        if (spacing > 0) {
            b.indexSpacing(spacing);
        }
        if (time != null) {
            b.timeProvider(time);
        }
        return b;
    }

    static long readAll(ExcerptTailer t) {
        long n = 0;
        while (true) {
            try (DocumentContext dc = t.readingDocument()) {
                if (!dc.isPresent()) {
                    return n;
                }
                Bytes<?> b = dc.wire().bytes();
                OUT.println("E " + Long.toHexString(dc.index()) + " "
                        + Interop.hex(b, b.readPosition(), b.readLimit()));
                n++;
            }
        }
    }

    /** A clock standing at {@code ms} (the constructor taking a long counts nanoseconds). */
    static SetTimeProvider at(long ms) {
        SetTimeProvider time = new SetTimeProvider();
        time.currentTimeMillis(ms);
        return time;
    }

    public static void main(String[] args) throws Exception {
        Class.forName("net.openhft.affinity.Affinity");
        switch (args[0]) {
            case "write": {
                // write DIR ROLL COUNT SPACING N TIME_MS: N excerpts "x<i>" at TIME_MS
                SetTimeProvider time = at(Long.parseLong(args[6]));
                int n = Integer.parseInt(args[5]);
                try (ChronicleQueue q = builder(args[1], args[2], Integer.parseInt(args[3]),
                        Integer.parseInt(args[4]), time).build()) {
                    ExcerptAppender app = Interop.appender(q);
                    for (int i = 0; i < n; i++) {
                        app.writeBytes(Bytes.wrapForRead(("x" + i).getBytes(StandardCharsets.US_ASCII)));
                        OUT.println("W " + Long.toHexString(app.lastIndexAppended()));
                    }
                }
                OUT.println("END " + n);
                break;
            }
            case "tail": {
                // tail DIR ROLL COUNT SPACING [INDEX]: every excerpt; then, given INDEX,
                // "SEEK" and every excerpt from INDEX on (moveToIndex)
                long n = 0;
                try (ChronicleQueue q = builder(args[1], args[2], Integer.parseInt(args[3]),
                        Integer.parseInt(args[4]), null).build();
                     ExcerptTailer t = q.createTailer()) {
                    n += readAll(t);
                    if (args.length > 5) {
                        OUT.println("SEEK");
                        if (!t.moveToIndex(Long.parseLong(args[5], 16))) {
                            OUT.println("NOINDEX " + args[5]);
                        }
                        n += readAll(t);
                    }
                }
                OUT.println("END " + n);
                break;
            }
            case "rolltime": {
                // rolltime DIR ROLL HH:MM ZONE T1 T2 ...: one excerpt at each time (ms)
                SetTimeProvider time = at(Long.parseLong(args[5]));
                SingleChronicleQueueBuilder b = builder(args[1], args[2], 0, 0, time)
                        .rollTime(LocalTime.parse(args[3]), ZoneId.of(args[4]));
                ChronicleQueue q;
                try {
                    q = b.build();
                } catch (IllegalStateException e) {
                    OUT.println("REFUSED " + e.getMessage());
                    OUT.println("END 0");
                    break;
                }
                try {
                    ExcerptAppender app = Interop.appender(q);
                    for (int i = 5; i < args.length; i++) {
                        long t = Long.parseLong(args[i]);
                        time.currentTimeMillis(t);
                        app.writeBytes(Bytes.wrapForRead(("t" + t).getBytes(StandardCharsets.US_ASCII)));
                        long index = app.lastIndexAppended();
                        OUT.println("R " + t + " " + q.rollCycle().toCycle(index) + " "
                                + Long.toHexString(index));
                    }
                } finally {
                    q.close();
                }
                for (String f : new TreeSet<>(Arrays.asList(new File(args[1]).list()))) {
                    OUT.println("F " + f);
                }
                OUT.println("END " + (args.length - 5));
                break;
            }
            case "zonedays": {
                // zonedays HH:MM ZONE DATE...: when each date's roll time falls, as
                // java.time resolves it (a gap skipped forward, an overlap's earlier)
                LocalTime at = LocalTime.parse(args[1]);
                ZoneId zone = ZoneId.of(args[2]);
                for (int i = 3; i < args.length; i++) {
                    LocalDate day = LocalDate.parse(args[i]);
                    OUT.println("Z " + day + " " + day.toEpochDay() + " "
                            + ZonedDateTime.of(day, at, zone).toInstant().toEpochMilli());
                }
                OUT.println("END " + (args.length - 3));
                break;
            }
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
        OUT.flush();
        System.exit(0);
    }
}
