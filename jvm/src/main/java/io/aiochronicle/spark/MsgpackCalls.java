package io.aiochronicle.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes method calls written in msgpack ({@code [method, argument]}, or
 * {@code [history, method, argument]} with the history as an ext) into a {@code method}
 * column and one struct column per method of the interface, as the Python source's
 * method reader does: a call of a method the interface lacks gives a row of nulls; a
 * payload that is not a msgpack call, or whose argument does not decode, too (or an
 * error when asked).  Calls framed otherwise (JSON, BinaryWire) are not decoded here.
 *
 * <p>The Python side says which methods there are (the metadata of the {@code method}
 * column: each method's name, its keys as msgpack bytes, its parameter count and
 * column) and how each argument decodes (the metadata of that column).
 */
final class MsgpackCalls extends Decoder {
    private static final long serialVersionUID = 1L;
    static final String METHOD = "method";
    private static final int HISTORY_EXT = 72;

    private final int[] methodOfColumn;  // per column: its method (-1 for METHOD)
    private final int[] columnOf;        // per method: its column (0: none)
    private final byte[][] names;        // per method: its name (UTF-8)
    private final int[] arity;
    private final MsgpackStruct[] args;  // per method: its argument's decoder (null: none)
    private final byte[][] keys;         // msgpack-encoded keys (name, method id)
    private final int[] keyMethod;       // the method of each key
    private final String iface;

    private transient int method; // of the last call decoded, -1 for an unknown method

    private MsgpackCalls(JsonNode methods, Map<String, StructField> fields, String iface,
                         boolean failOnError) throws IOException {
        super(columnsOf(methods), failOnError); // METHOD, then the methods' columns
        ObjectMapper json = new ObjectMapper();
        int n = methods.size();
        this.names = new byte[n][];
        this.arity = new int[n];
        this.args = new MsgpackStruct[n];
        this.methodOfColumn = new int[columns.length];
        this.columnOf = new int[n];
        methodOfColumn[0] = -1;
        List<byte[]> ks = new ArrayList<>();
        List<Integer> km = new ArrayList<>();
        for (int m = 0; m < n; m++) {
            JsonNode spec = methods.get(m);
            names[m] = spec.get("name").asText().getBytes(StandardCharsets.UTF_8);
            arity[m] = spec.get("arity").asInt();
            for (JsonNode k : spec.get("keys")) {
                ks.add(hex(k.asText()));
                km.add(m);
            }
            JsonNode col = spec.get("column");
            if (col == null || col.isNull()) {
                continue;
            }
            StructField f = fields.get(col.asText());
            if (f == null || !f.metadata().contains(META) || !(f.dataType() instanceof StructType)) {
                throw new IOException("no decodable column " + col.asText());
            }
            JsonNode arg = json.readTree(f.metadata().getMetadata(META).json());
            List<String> children = new ArrayList<>();
            for (StructField c : ((StructType) f.dataType()).fields()) {
                children.add(c.name());
            }
            List<JsonNode> specs = new ArrayList<>();
            arg.get("fields").forEach(specs::add);
            int shape;
            switch (arg.get("shape").asText()) {
                case "map": shape = MsgpackStruct.MAP; break;
                case "array": shape = MsgpackStruct.ARRAY; break;
                case "params": shape = MsgpackStruct.PARAMS; break;
                default: shape = MsgpackStruct.SINGLE; break;
            }
            if (specs.size() != children.size() || specs.isEmpty()) {
                throw new IOException("column " + col.asText() + " does not match its fields");
            }
            args[m] = new MsgpackStruct(children, specs, shape, failOnError);
            columnOf[m] = column(col.asText());
            methodOfColumn[columnOf[m]] = m;
        }
        this.keys = ks.toArray(new byte[0][]);
        this.keyMethod = km.stream().mapToInt(Integer::intValue).toArray();
        this.iface = iface;
    }

    /** The decoded columns: {@code method}, then each method's that has one. */
    private static String[] columnsOf(JsonNode methods) {
        List<String> out = new ArrayList<>();
        out.add(METHOD);
        for (JsonNode spec : methods) {
            JsonNode col = spec.get("column");
            if (col != null && !col.isNull()) {
                out.add(col.asText());
            }
        }
        return out.toArray(new String[0]);
    }

    private static byte[] hex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }

    /** The decoder the {@code method} column's metadata describes, or null (the Python source reads). */
    static MsgpackCalls of(StructType schema, boolean failOnError) {
        Map<String, StructField> fields = new HashMap<>();
        for (StructField f : schema.fields()) {
            fields.put(f.name(), f);
        }
        try {
            JsonNode spec = new ObjectMapper().readTree(fields.get(METHOD).metadata().getMetadata(META).json());
            return new MsgpackCalls(spec.get("methods"), fields, spec.get("interface").asText(), failOnError);
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    @Override
    String expected() {
        return "msgpack method call of " + iface;
    }

    @Override
    boolean decode(byte[] b, int off, int len) {
        int at = call(b, off, len);
        if (at < 0) {
            return false;
        }
        int m = method;
        if (m >= 0 && arity[m] > 0 && !args[m].decode(b, at, off + len - at)) {
            method = -1;
            return false;
        }
        return true;
    }

    /**
     * Decodes each call straight into its method's struct column ({@link MsgpackStruct#readStruct});
     * the other method columns are null.
     */
    @Override
    boolean read(byte[] b, int off, int len, int row, WritableColumnVector[] out) {
        int at = call(b, off, len);
        int m = method;
        boolean ok = at >= 0;
        if (ok && m >= 0 && arity[m] > 0) {
            int col = columnOf[m];
            ok = out[col] != null ? args[m].readStruct(b, at, off + len - at, row, out[col])
                    : args[m].decode(b, at, off + len - at);
        }
        for (int i = 0; i < out.length; i++) {
            WritableColumnVector v = out[i];
            if (v == null || (ok && methodOfColumn[i] == m && m >= 0)) {
                continue; // not read, or written above
            }
            if (i == 0 && ok && m >= 0) {
                v.putByteArray(row, names[m]);
            } else if (i == 0) {
                v.putNull(row);
            } else {
                args[methodOfColumn[i]].putStruct(v, row, false);
            }
        }
        return ok;
    }

    /**
     * Reads the head of a call (its history, its method): where the argument starts, or
     * -1 when the payload is not a msgpack call; {@link #method} is its method (-1: one
     * the interface lacks).
     */
    private int call(byte[] b, int off, int len) {
        method = -1;
        int end = off + len;
        if (len < 2) {
            return -1;
        }
        int p = off + 1;
        int c = b[off] & 0xff;
        if (c == 0x93) {
            // [history, method, argument]: the history is an ext whose bytes are complete
            int x = b[p] & 0xff;
            int head = x == 0xc7 ? 3 : x == 0xc8 ? 4 : x == 0xc9 ? 6 : -1;
            if (head < 0 || p + head > end) {
                return -1;
            }
            long n = 0;
            for (int i = 1; i < head - 1; i++) {
                n = (n << 8) | (b[p + i] & 0xff);
            }
            if ((b[p + head - 1] & 0xff) != HISTORY_EXT) {
                return -1;
            }
            int h = p + head;
            long avail = Math.min(n, end - h);
            if (avail < 1) {
                return -1;
            }
            int sources = b[h] & 0xff;
            long at = 1 + 12L * sources;
            if (at >= avail) {
                return -1;
            }
            int timings = b[h + (int) at] & 0xff;
            if (avail < 2 + 12L * sources + 8L * timings) {
                return -1;
            }
            if (h + n >= end) {
                return -1;
            }
            p = (int) (h + n);
        } else if (c != 0x92) {
            return -1;
        }
        int k = b[p] & 0xff;
        int keyEnd;
        if (k >= 0xa0 && k <= 0xbf) {
            keyEnd = p + 1 + (k - 0xa0);
        } else if (k < 0x80 || k >= 0xe0) {
            keyEnd = p + 1;
        } else {
            int size;
            switch (k) {
                case 0xd9: size = p + 1 < end ? 2 + (b[p + 1] & 0xff) : 2; break;
                case 0xcc: case 0xd0: size = 2; break;
                case 0xcd: case 0xd1: size = 3; break;
                case 0xce: case 0xd2: size = 5; break;
                case 0xcf: case 0xd3: size = 9; break;
                default: return -1;
            }
            keyEnd = p + size;
        }
        if (keyEnd > end) {
            return -1;
        }
        method = find(b, p, keyEnd - p); // -1: a method the interface lacks, a row of nulls
        return keyEnd;
    }

    /** The method whose msgpack key is the {@code n} bytes at {@code p}, or -1. */
    private int find(byte[] b, int p, int n) {
        for (int i = 0; i < keys.length; i++) {
            byte[] key = keys[i];
            if (key.length != n) {
                continue;
            }
            int j = 0;
            while (j < n && key[j] == b[p + j]) {
                j++;
            }
            if (j == n) {
                return keyMethod[i];
            }
        }
        return -1;
    }

    @Override
    void put(WritableColumnVector v, int row, int column, boolean ok) {
        int m = methodOfColumn[column];
        if (m < 0) {
            if (ok && method >= 0) {
                v.putByteArray(row, names[method]);
            } else {
                v.putNull(row);
            }
            return;
        }
        args[m].putStruct(v, row, ok && method == m);
    }
}
