package aiochronicle.interop;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import net.openhft.chronicle.bytes.Bytes;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptAppender;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import net.openhft.chronicle.wire.DocumentContext;

/**
 * The Java side of {@code bench/java.py}: 40-byte excerpts whose first 8 bytes are the
 * send time ({@code System.nanoTime()}, CLOCK_MONOTONIC on Linux, the clock of Python's
 * {@code time.monotonic_ns()}) and next 8 the sequence number, as the Python side writes.
 */
public final class Bench {
    private Bench() {
    }

    /** Append {@code count} excerpts, paced to {@code rate} a second (flat out when 0). */
    static void write(String dir, int count, int size, long rate) throws Exception {
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(dir).build()) {
            ExcerptAppender app = Interop.appender(q);
            long period = rate > 0 ? 1_000_000_000L / rate : 0;
            long start = System.nanoTime();
            for (int i = 0; i < count; i++) {
                if (period > 0) {
                    long next = start + i * period;
                    while (System.nanoTime() < next) {
                        Thread.onSpinWait();
                    }
                }
                try (DocumentContext dc = app.writingDocument()) {
                    Bytes<?> b = dc.wire().bytes();
                    b.writeLong(System.nanoTime());
                    b.writeLong(i);
                    for (int k = 16; k < size; k += 8) {
                        b.writeLong(0);
                    }
                }
            }
        }
        System.out.println("END " + count);
    }

    /**
     * Busy-read {@code count} excerpts from the start; write (send time, receive time)
     * pairs to {@code out} as little-endian longs.
     */
    static void read(String dir, int count, String out) throws IOException {
        long[] sent = new long[count];
        long[] recv = new long[count];
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(dir).build();
             ExcerptTailer t = q.createTailer()) {
            System.out.println("READY");
            System.out.flush();
            int n = 0;
            while (n < count) {
                try (DocumentContext dc = t.readingDocument()) {
                    if (!dc.isPresent()) {
                        continue;
                    }
                    long now = System.nanoTime();
                    sent[n] = dc.wire().bytes().readLong();
                    recv[n++] = now;
                }
            }
        }
        ByteBuffer buf = ByteBuffer.allocate(16 * count).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < count; i++) {
            buf.putLong(sent[i]).putLong(recv[i]);
        }
        try (FileOutputStream f = new FileOutputStream(out)) {
            f.write(buf.array());
        }
        System.out.println("END " + count);
    }
}
