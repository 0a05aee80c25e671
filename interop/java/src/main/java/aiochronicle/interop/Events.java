package aiochronicle.interop;

import java.io.PrintStream;
import java.lang.reflect.Method;

import net.openhft.chronicle.bytes.MethodReader;
import net.openhft.chronicle.bytes.MethodReaderBuilder;
import net.openhft.chronicle.queue.ChronicleQueue;
import net.openhft.chronicle.queue.ExcerptTailer;
import net.openhft.chronicle.queue.impl.single.SingleChronicleQueueBuilder;
import net.openhft.chronicle.wire.WireParselet;

/**
 * The method layer beyond typed calls, for the interop tests: generic events (the
 * event name as data), metadata method calls, and a default parselet for unknown
 * events. {@code write DIR} writes them; {@code read DIR} prints {@code M ...} per
 * typed call, {@code D event value} per event the default parselet gets, and (where
 * this Chronicle version has {@code metaDataHandler}) {@code MM ...} per metadata
 * call; then {@code END n}.
 */
public final class Events {
    private static final PrintStream OUT = System.out;

    private Events() {
    }

    /** A gateway's outbound side: any event by name. */
    public interface Gateway {
        void send(String event, Price price);
    }

    /** Two-argument events by name. */
    public interface Gateway2 {
        void send2(String event, String symbol, boolean last);
    }

    /** Events without arguments, by name. */
    public interface Gateway0 {
        void send0(String event);
    }

    public static void main(String[] args) throws Exception {
        Class.forName("net.openhft.affinity.Affinity");
        try (ChronicleQueue q = SingleChronicleQueueBuilder.binary(args[1]).timeoutMS(2000).build()) {
            if (args[0].equals("write")) {
                Gateway g = q.methodWriterBuilder(Gateway.class).genericEvent("send").build();
                Gateway2 g2 = q.methodWriterBuilder(Gateway2.class).genericEvent("send2").build();
                Gateway0 g0 = q.methodWriterBuilder(Gateway0.class).genericEvent("send0").build();
                Prices meta = q.methodWriterBuilder(Prices.class).metaData(true).build();
                g.send("onPrice", new Price("EURUSD", 1.0841, 1.0843, 1_000_000L));
                meta.onClose("META", false);
                g2.send2("onClose", "EURUSD", true);
                g.send("onQuote", new Price("GBPUSD", 1.25, 1.26, 5L));
                g0.send0("heartbeat");
                OUT.println("END 4");
            } else {
                read(q);
            }
        }
        OUT.flush();
        System.exit(0);
    }

    static void read(ChronicleQueue q) throws Exception {
        long n = 0;
        try (ExcerptTailer t = q.createTailer()) {
            MethodReaderBuilder b = t.methodReaderBuilder()
                    .defaultParselet((WireParselet) (name, in) -> OUT.println("D " + name + " " + in.object()));
            Prices metaHandler = new Prices() {
                @Override
                public void onPrice(Price p) {
                    OUT.println("MM onPrice " + p);
                }

                @Override
                public void onClose(String symbol, boolean last) {
                    OUT.println("MM onClose " + symbol + " " + last);
                }
            };
            try {
                Method m = b.getClass().getMethod("metaDataHandler", Object[].class);
                m.invoke(b, (Object) new Object[]{metaHandler});
                OUT.println("METAHANDLER");
            } catch (NoSuchMethodException ignored) {
                // not in this version
            }
            MethodReader reader = b.build(new Prices() {
                @Override
                public void onPrice(Price p) {
                    OUT.println("M onPrice " + p);
                }

                @Override
                public void onClose(String symbol, boolean last) {
                    OUT.println("M onClose " + symbol + " " + last);
                }
            });
            while (reader.readOne()) {
                n++;
            }
        }
        OUT.println("END " + n);
    }
}
