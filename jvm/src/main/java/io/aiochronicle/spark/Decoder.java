package io.aiochronicle.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;

import com.fasterxml.jackson.databind.JsonNode;

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
    /** The types of a decoded field (as the Python side names them: long, double, ...). */
    static final int LONG = 0;
    static final int DOUBLE = 1;
    static final int STRING = 2;
    static final int BOOLEAN = 3;
    static final int BINARY = 4;

    /** The type of the field {@code spec} describes (one of {@link #LONG} ... {@link #BINARY}). */
    static int fieldType(JsonNode spec) {
        switch (spec.get("type").asText()) {
            case "long": return LONG;
            case "double": return DOUBLE;
            case "string": return STRING;
            case "boolean": return BOOLEAN;
            default: return BINARY;
        }
    }

    /** The default of the field {@code spec} describes (a Long, Double, Boolean or UTF-8 bytes), or null. */
    static Object fieldDefault(JsonNode spec, int type) {
        JsonNode d = spec.get("default");
        if (d == null || d.isNull()) {
            return null;
        }
        switch (type) {
            case LONG: return d.asLong();
            case DOUBLE: return d.asDouble();
            case BOOLEAN: return d.asBoolean();
            default: return d.asText().getBytes(StandardCharsets.UTF_8);
        }
    }

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
