package aiochronicle.interop;

public final class Bench {
    private Bench() {
    }

    static void write(String dir, int count, int size, long rate) {
    }

    static void read(String dir, int count, String out) {
    }
}
