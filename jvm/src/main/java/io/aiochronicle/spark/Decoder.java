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
interface Decoder extends Serializable {
    /** The metadata key of the decoded columns. */
    String META = "aiochronicle.msgpack";

    /** The place of decoded column {@code name}, or -1. */
    int column(String name);

    /** Decodes one payload; false if it does not decode (every decoded column is then null). */
    boolean decode(byte[] buf, int off, int len);

    /** Writes decoded column {@code column} of the last payload decoded into row {@code row} of {@code v}. */
    void put(WritableColumnVector v, int row, int column, boolean ok);

    /** How many decoded columns there are ({@link #column} gives their places). */
    int width();

    /**
     * Decodes one payload into row {@code row} of the decoded columns' vectors
     * ({@code out[i]} for column {@code i}; null for a column the read does not need);
     * false if it does not decode (the row is then null in each).
     */
    default boolean read(byte[] buf, int off, int len, int row, WritableColumnVector[] out) {
        boolean ok = decode(buf, off, len);
        for (int i = 0; i < out.length; i++) {
            if (out[i] != null) {
                put(out[i], row, i, ok);
            }
        }
        return ok;
    }

    /** Whether a payload that does not decode fails the read (option decodeErrors=fail). */
    boolean failOnError();

    /** What a payload should be, for the error a payload that does not decode raises. */
    String expected();

    /**
     * The decoder for the decoded columns of {@code schema}: method calls when its
     * {@code method} column says which, else a Struct's fields; null when a column
     * the reader does not produce itself lacks the metadata (the Python source reads).
     */
    static Decoder of(StructType schema, boolean failOnError) {
        for (StructField f : schema.fields()) {
            if (f.name().equals(MsgpackCalls.METHOD) && f.metadata().contains(META)) {
                return MsgpackCalls.of(schema, failOnError);
            }
        }
        return MsgpackStruct.of(schema, failOnError);
    }
}
