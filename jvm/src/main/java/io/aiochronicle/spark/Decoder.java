package io.aiochronicle.spark;

import java.io.Serializable;

import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decoded columns of a read: a payload is decoded once, then each decoded column
 * of the row is written from it.  The Python side says what to decode: each such
 * column of the schema it gave carries {@code aiochronicle.msgpack} metadata.
 */
abstract class Decoder implements Serializable {
    private static final long serialVersionUID = 1L;
    /** The metadata key of the decoded columns. */
    static final String META = "aiochronicle.msgpack";

    /** The decoded columns, in the order {@link #column} numbers them. */
    final String[] columns;
    private final boolean failOnError;

    Decoder(String[] columns, boolean failOnError) {
        this.columns = columns;
        this.failOnError = failOnError;
    }

    /** The place of decoded column {@code name}, or -1. */
    final int column(String name) {
        return java.util.Arrays.asList(columns).indexOf(name);
    }

    /** How many decoded columns there are. */
    final int width() {
        return columns.length;
    }

    /** Whether a payload that does not decode fails the read (option decodeErrors=fail). */
    final boolean failOnError() {
        return failOnError;
    }

    /** Decodes one payload; false if it does not decode (every decoded column is then null). */
    abstract boolean decode(byte[] buf, int off, int len);

    /** Writes decoded column {@code column} of the last payload decoded into row {@code row} of {@code v}. */
    abstract void put(WritableColumnVector v, int row, int column, boolean ok);

    /** What a payload should be, for the error a payload that does not decode raises. */
    abstract String expected();

    /**
     * Decodes one payload into row {@code row} of the decoded columns' vectors
     * ({@code out[i]} for column {@code i}; null for a column the read does not need);
     * false if it does not decode (the row is then null in each).
     */
    boolean read(byte[] buf, int off, int len, int row, WritableColumnVector[] out) {
        boolean ok = decode(buf, off, len);
        for (int i = 0; i < out.length; i++) {
            if (out[i] != null) {
                put(out[i], row, i, ok);
            }
        }
        return ok;
    }

    /**
     * The decoder for the decoded columns of {@code schema}: method calls (of any
     * framing, {@link Calls}) when its {@code method} column says which, else a msgpack
     * Struct's fields; null when a column
     * the reader does not produce itself lacks the metadata (the Python source reads).
     */
    static Decoder of(StructType schema, boolean failOnError) {
        for (StructField f : schema.fields()) {
            if (f.name().equals(MsgpackCalls.METHOD) && f.metadata().contains(META)) {
                return Calls.of(schema, failOnError);
            }
        }
        return MsgpackStruct.of(schema, failOnError);
    }
}
