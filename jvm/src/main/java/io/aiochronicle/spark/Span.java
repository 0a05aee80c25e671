package io.aiochronicle.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** Data excerpts {@code lo} (inclusive) to {@code hi} (exclusive) of one cycle file. */
final class Span implements InputPartition {
    private static final long serialVersionUID = 1L;

    final String file;
    final long cycle;
    final long lo;
    final long hi;
    final int shift;

    Span(String file, long cycle, long lo, long hi, int shift) {
        this.file = file;
        this.cycle = cycle;
        this.lo = lo;
        this.hi = hi;
        this.shift = shift;
    }

    @Override
    public String toString() {
        return "Span(" + file + ", " + lo + ".." + hi + ")";
    }
}
