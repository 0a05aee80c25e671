package io.aiochronicle.spark;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One partition of a read: pieces of cycle files read one after the other, each the
 * data excerpts {@code lo[i]} (inclusive) to {@code hi[i]} (exclusive) of {@code files[i]}.
 */
final class Span implements InputPartition {
    private static final long serialVersionUID = 2L;

    final String[] files;
    final long[] cycles;
    final long[] lo;
    final long[] hi;
    final int shift;

    private Span(List<String> files, List<long[]> ranges, int shift) {
        int n = files.size();
        this.files = files.toArray(new String[0]);
        this.cycles = new long[n];
        this.lo = new long[n];
        this.hi = new long[n];
        for (int i = 0; i < n; i++) {
            long[] r = ranges.get(i);
            cycles[i] = r[0];
            lo[i] = r[1];
            hi[i] = r[2];
        }
        this.shift = shift;
    }

    /** Collects the pieces of one partition. */
    static final class Builder {
        private final List<String> files = new ArrayList<>();
        private final List<long[]> ranges = new ArrayList<>();
        private final int shift;

        Builder(int shift) {
            this.shift = shift;
        }

        void add(String file, long cycle, long lo, long hi) {
            files.add(file);
            ranges.add(new long[] {cycle, lo, hi});
        }

        boolean isEmpty() {
            return files.isEmpty();
        }

        Span build() {
            return new Span(files, ranges, shift);
        }
    }

    @Override
    public String toString() {
        StringBuilder b = new StringBuilder("Span(");
        for (int i = 0; i < files.length; i++) {
            b.append(i > 0 ? ", " : "").append(files[i]).append(' ').append(lo[i]).append("..").append(hi[i]);
        }
        return b.append(')').toString();
    }
}
