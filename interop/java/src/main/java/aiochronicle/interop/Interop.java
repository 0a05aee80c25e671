package aiochronicle.interop;

import java.io.File;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.locks.LockSupport;

import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.bytes.MethodReader;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.RollCycle;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import net.openhft.chronicle.queue.main.DumpMain;
import net.openhft.chronicle.wire.DocumentContext;
import net.openhft.chronicle.wire.MessageHistory;

/**
 * Scenarios the interop tests run in a real JVM beside aiochronicle.
 *
 * <p>Arguments are commands separated by {@code --}, run in order in one JVM (so a test
 * pays one start-up for several). Each prints lines on stdout, flushed as it goes:
 * {@code W kind index} per excerpt written, {@code E index hex} per excerpt read,
 * {@code M method args} and {@code H sources timings} per method call read, {@code END n}
 * when a command is done. Indices are printed in hex.
 */
public final class Interop {
    private static final PrintStream OUT = System.out;

    private Interop() {
    }

    public static void main(String[] args) throws Exception {
        // Chronicle's background threads load thread affinity (and JNA) when they first
        // run; one that first runs while the JVM exits logs an initializer error at
        // shutdown. Loading it here, before any queue opens, keeps exits quiet.
        Class.forName("net.openhft.affinity.Affinity");
        List<String> cmd = new ArrayList<>();
        for (String a : args) {
            if (a.equals("--")) {
                run(cmd);
                cmd.clear();
            } else {
                cmd.add(a);
            }
        }
        if (!cmd.isEmpty()) {
            run(cmd);
        }
        OUT.flush();
        // Chronicle leaves non-daemon background threads in some versions
        System.exit(0);
    }

    private static void run(List<String> c) throws Exception {
        String[] a = c.subList(1, c.size()).toArray(new String[0]);
        switch (c.get(0)) {
            case "write": write(a[0], a[1], Integer.parseInt(a[2])); break;
            case "tail": tail(a[0], a[1], Long.parseLong(a[2])); break;
            case "follow": follow(a[0], Long.parseLong(a[1]), Long.parseLong(a[2])); break;
            case "methods": methods(a[0]); break;
            case "append": append(a[0], a[1], a[2], Integer.parseInt(a[3]), Long.parseLong(a[4])); break;
            case "append-text": appendText(a[0], a[1], Arrays.copyOfRange(a, 2, a.length)); break;
            case "hold": hold(a[0], a[1]); break;
            case "dump": DumpMain.dump(new File(a[0]), OUT, Long.MAX_VALUE); OUT.println("END 0"); break;
            case "reader": net.openhft.chronicle.queue.ChronicleReaderMain.main(new String[]{"-d", a[0]}); OUT.println("END 0"); break;
            case "bench-write": Bench.write(a[0], Integer.parseInt(a[1]), Integer.parseInt(a[2]), Long.parseLong(a[3])); break;
            case "bench-read": Bench.read(a[0], Integer.parseInt(a[1]), a[2]); break;
            case "sleep": Thread.sleep(Long.parseLong(a[0])); break;
            default: throw new IllegalArgumentException("unknown command " + c);
        }
        OUT.flush();
    }

    /** A roll cycle by its name, wherever this Chronicle version keeps it. */
    public static RollCycle rollCycle(String name) throws Exception {
        for (String cls : new String[]{"net.openhft.chronicle.queue.RollCycles",
                "net.openhft.chronicle.queue.rollcycles.TestRollCycles",
                "net.openhft.chronicle.queue.rollcycles.LegacyRollCycles"}) {
            try {
                for (Object o : Class.forName(cls).getEnumConstants()) {
                    if (((Enum<?>) o).name().equals(name)) {
                        return (RollCycle) o;
                    }
                }
            } catch (ClassNotFoundException ignored) {
                // not in this version
            }
        }
        throw new IllegalArgumentException("no roll cycle " + name);
    }

    static ChronicleQueue open(String dir, String roll, int sourceId) throws Exception {
        SingleChronicleQueueBuilder b = SingleChronicleQueueBuilder.binary(dir).timeoutMS(2000);
        if (!roll.equals("-")) {
            b.rollCycle(rollCycle(roll));
        }
        if (sourceId != 0) {
            b.sourceId(sourceId);
        }
        return b.build();
    }

    /** createAppender() in 2026.x, acquireAppender() in 5.2x. */
    public static ExcerptAppender appender(ChronicleQueue q) throws Exception {
        for (String name : new String[]{"createAppender", "acquireAppender"}) {
            try {
                Method m = ChronicleQueue.class.getMethod(name);
                return (ExcerptAppender) m.invoke(q);
            } catch (NoSuchMethodException ignored) {
                // the other one
            }
        }
        throw new IllegalStateException("no appender factory");
    }

    static String hex(Bytes<?> b, long from, long to) {
        StringBuilder sb = new StringBuilder();
        for (long i = from; i < to; i++) {
            sb.append(String.format("%02x", b.readUnsignedByte(i)));
        }
        return sb.toString();
    }

    /** Every kind of excerpt, in this order: text, raw bytes, a document, two method calls. */
    static void write(String dir, String roll, int sourceId) throws Exception {
        try (ChronicleQueue q = open(dir, roll, sourceId)) {
            ExcerptAppender app = appender(q);
            app.writeText("hello from java");
            OUT.println("W text " + Long.toHexString(q.lastIndex()));
            app.writeBytes(Bytes.wrapForRead(new byte[]{0, 1, 2, (byte) 0xff, 'j', 'a', 'v', 'a'}));
            OUT.println("W bytes " + Long.toHexString(q.lastIndex()));
            app.writeDocument(w -> w.write("symbol").text("EURUSD").write("qty").int64(1_000_000L)
                    .write("px").float64(1.0842).write("live").bool(true));
            OUT.println("W doc " + Long.toHexString(q.lastIndex()));
            Prices prices = q.methodWriter(Prices.class);
            prices.onPrice(new Price("EURUSD", 1.0841, 1.0843, 1_000_000L));
            OUT.println("W onPrice " + Long.toHexString(q.lastIndex()));
            prices.onClose("EURUSD", true);
            OUT.println("W onClose " + Long.toHexString(q.lastIndex()));
        }
        OUT.println("END 5");
    }

    /** Print every excerpt there is (at most {@code max} when positive) with a plain or named tailer. */
    static void tail(String dir, String name, long max) throws Exception {
        long n = 0;
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(dir).timeoutMS(2000).build();
             ExcerptTailer t = name.equals("-") ? q.createTailer() : q.createTailer(name)) {
            while (max <= 0 || n < max) {
                try (DocumentContext dc = t.readingDocument()) {
                    if (!dc.isPresent()) {
                        break;
                    }
                    Bytes<?> b = dc.wire().bytes();
                    OUT.println("E " + Long.toHexString(dc.index()) + " " + hex(b, b.readPosition(), b.readLimit()));
                    n++;
                }
            }
        }
        OUT.println("END " + n);
    }

    /**
     * Tail live until {@code count} excerpts were read (or {@code timeoutMs} passed);
     * print {@code DIGEST count sha256} over (index as 8 little-endian bytes, payload)
     * of each excerpt in the order read, as the Python side computes it.
     */
    static void follow(String dir, long count, long timeoutMs) throws Exception {
        MessageDigest digest = MessageDigest.getInstance("SHA-256");
        ByteBuffer index = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN);
        long n = 0;
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(dir).timeoutMS(2000).build();
             ExcerptTailer t = q.createTailer()) {
            while (n < count && System.currentTimeMillis() < deadline) {
                try (DocumentContext dc = t.readingDocument()) {
                    if (!dc.isPresent()) {
                        LockSupport.parkNanos(50_000);
                        continue;
                    }
                    Bytes<?> b = dc.wire().bytes();
                    index.clear();
                    index.putLong(dc.index());
                    digest.update(index.array());
                    byte[] payload = new byte[(int) b.readRemaining()];
                    b.read(payload);
                    digest.update(payload);
                    n++;
                }
            }
        }
        StringBuilder hex = new StringBuilder();
        for (byte x : digest.digest()) {
            hex.append(String.format("%02x", x));
        }
        OUT.println("DIGEST " + n + " " + hex);
    }

    /** A MethodReader of {@link Prices} over the whole queue. */
    static void methods(String dir) throws Exception {
        long n = 0;
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(dir).timeoutMS(2000).build();
             ExcerptTailer t = q.createTailer()) {
            MethodReader reader = t.methodReader(new Prices() {
                @Override
                public void onPrice(Price p) {
                    OUT.println("M onPrice " + p);
                    history();
                }

                @Override
                public void onClose(String symbol, boolean last) {
                    OUT.println("M onClose " + symbol + " " + last);
                    history();
                }
            });
            while (reader.readOne()) {
                n++;
            }
        }
        OUT.println("END " + n);
    }

    static void history() {
        MessageHistory h = MessageHistory.get();
        StringBuilder sb = new StringBuilder("H");
        for (int i = 0; i < h.sources(); i++) {
            sb.append(' ').append(h.sourceId(i)).append(':').append(Long.toHexString(h.sourceIndex(i)));
        }
        sb.append(" |");
        for (int i = 0; i < h.timings(); i++) {
            sb.append(' ').append(h.timing(i));
        }
        OUT.println(sb);
    }

    /** {@code count} raw excerpts {@code <id>:<seq>}, pausing {@code pauseUs} between them. */
    static void append(String dir, String roll, String id, int count, long pauseUs) throws Exception {
        try (ChronicleQueue q = open(dir, roll, 0)) {
            ExcerptAppender app = appender(q);
            Bytes<?> b = Bytes.allocateElasticDirect(64);
            for (int i = 0; i < count; i++) {
                b.clear();
                b.append8bit(id).append8bit(":").append(i);
                app.writeBytes(b);
                if (pauseUs > 0) {
                    LockSupport.parkNanos(pauseUs * 1000);
                }
            }
            b.releaseLast();
        }
        OUT.println("END " + count);
    }

    static void appendText(String dir, String roll, String[] texts) throws Exception {
        try (ChronicleQueue q = open(dir, roll, 0)) {
            ExcerptAppender app = appender(q);
            for (String s : texts) {
                app.writeText(s);
                OUT.println("W text " + Long.toHexString(q.lastIndex()));
            }
        }
        OUT.println("END " + texts.length);
    }

    /** Open a writing document (taking the write lock), write part of it and wait to be killed. */
    static void hold(String dir, String roll) throws Exception {
        ChronicleQueue q = open(dir, roll, 0);
        DocumentContext dc = appender(q).writingDocument();
        dc.wire().bytes().write("half written".getBytes(StandardCharsets.US_ASCII));
        OUT.println("LOCKED " + ProcessHandle.current().pid());
        OUT.flush();
        Thread.sleep(600_000);
    }
}
