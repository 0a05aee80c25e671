package io.aiochronicle.spark;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes msgpack payloads (a msgspec Struct, as a map or an array) into struct columns,
 * as msgspec would: a payload that is not the Struct (wrong type, missing required
 * field, trailing bytes) gives nulls in every decoded column, or an error when asked.
 * The fields and their rules come from the schema the Python side built (the
 * {@code aiochronicle.msgpack} metadata of each column).
 *
 * <p>The same decoder reads the argument of a method call ({@link MsgpackCalls}): a
 * Struct, the arguments of a method of several parameters (an array: missing ones
 * take their defaults, extra ones are dropped), or one plain argument.
 */
final class MsgpackStruct extends Decoder {
    private static final long serialVersionUID = 1L;
    /** Shapes of a payload: a Struct as a map or an array, a call's arguments, one value. */
    static final int MAP = 0;
    static final int ARRAY = 1;
    static final int PARAMS = 2;
    static final int SINGLE = 3;

    private final byte[][] keys;
    // what msgspec writes before field i's value (the map's or array's head before the
    // first field, then the field's key in a map): the fast path of read() expects it
    private final byte[][] expect;
    private final int[] types;
    private final boolean[] nullable;
    private final boolean[] hasDefault;
    private final Object[] defaults;
    private final int shape;

    // one decoded payload
    private transient long[] longs;
    private transient double[] doubles;
    private transient int[] starts;
    private transient int[] lengths;
    private transient boolean[] isNull;
    private transient boolean[] seen;
    private transient byte[] b;
    private transient int p;
    private transient int end;
    private transient boolean overflow; // an integer above a long was met
    private transient WritableColumnVector parent; // the struct vector readStruct last wrote
    private transient WritableColumnVector[] children;

    /**
     * A decoder of the fields {@code specs} (as {@code _columns._jvm_msgpack_fields} gives
     * them) into {@code columns}; {@code shape} -1 takes it from the specs (map or array).
     */
    MsgpackStruct(List<String> columns, List<JsonNode> specs, int shape, boolean failOnError) {
        super(columns.toArray(new String[0]), failOnError);
        int n = columns.size();
        this.keys = new byte[n][];
        this.types = new int[n];
        this.nullable = new boolean[n];
        this.hasDefault = new boolean[n];
        this.defaults = new Object[n];
        boolean array = false;
        for (int i = 0; i < n; i++) {
            JsonNode s = specs.get(i);
            keys[i] = s.get("key").asText().getBytes(StandardCharsets.UTF_8);
            types[i] = fieldType(s);
            nullable[i] = s.get("nullable").asBoolean();
            hasDefault[i] = s.get("hasDefault").asBoolean();
            defaults[i] = fieldDefault(s, types[i]);
            array = s.get("arrayLike").asBoolean();
        }
        this.shape = shape >= 0 ? shape : array ? ARRAY : MAP;
        this.expect = new byte[n][];
        for (int i = 0; i < n; i++) {
            java.io.ByteArrayOutputStream e = new java.io.ByteArrayOutputStream();
            if (i == 0 && this.shape != SINGLE) {
                head(e, this.shape == MAP ? 0x80 : 0x90, this.shape == MAP ? 0xde : 0xdc, n);
            }
            if (this.shape == MAP) {
                int k = keys[i].length;
                if (k < 32) {
                    e.write(0xa0 | k);
                } else {
                    head(e, 0xd9, 0xda, k);
                }
                e.write(keys[i], 0, k);
            }
            expect[i] = e.toByteArray();
        }
    }

    /** The head of a msgpack map, array or str of {@code n}: fix form, else 8 or 16-bit (str8/map16). */
    private static void head(java.io.ByteArrayOutputStream e, int fix, int wide, int n) {
        if (n < (fix == 0xd9 ? 0 : 16)) {
            e.write(fix | n);
        } else if (fix == 0xd9 && n < 256) {
            e.write(0xd9);
            e.write(n);
        } else {
            e.write(wide);
            e.write(n >>> 8);
            e.write(n & 0xff);
        }
    }

    /**
     * The decoder for the struct columns of {@code schema} (those carrying the metadata),
     * or null when a column the reader does not produce itself lacks it.
     */
    static MsgpackStruct of(StructType schema, boolean failOnError) {
        List<String> cols = new ArrayList<>();
        List<JsonNode> specs = new ArrayList<>();
        ObjectMapper json = new ObjectMapper();
        for (StructField f : schema.fields()) {
            if (java.util.Arrays.asList(Reading.COLUMNS).contains(f.name())) {
                continue;
            }
            if (!f.metadata().contains(META)) {
                return null;
            }
            try {
                specs.add(json.readTree(f.metadata().getMetadata(META).json()));
            } catch (IOException e) {
                return null;
            }
            cols.add(f.name());
        }
        return cols.isEmpty() ? null : new MsgpackStruct(cols, specs, -1, failOnError);
    }

    @Override
    String expected() {
        return "msgpack " + String.join(", ", columns) + " record";
    }

    private void buffers() {
        if (longs == null) {
            int n = columns.length;
            longs = new long[n];
            doubles = new double[n];
            starts = new int[n];
            lengths = new int[n];
            isNull = new boolean[n];
            seen = new boolean[n];
        }
    }

    /**
     * The fast path: a payload laid out as msgspec writes the Struct (every field, in
     * order, each of its type or null) is decoded straight into the vectors; anything
     * else goes the general way ({@link #decode}, then {@link #put}), which also
     * rewrites the row.
     */
    /**
     * Decodes one payload into row {@code row} of the struct vector {@code v} (its fields
     * are this decoder's columns): null when it does not decode or an integer does not
     * fit a long, as {@link #putStruct} writes it.
     */
    boolean readStruct(byte[] buf, int off, int len, int row, WritableColumnVector v) {
        if (v != parent) {
            children = new WritableColumnVector[columns.length];
            for (int i = 0; i < children.length; i++) {
                children[i] = v.getChild(i);
            }
            parent = v;
        }
        boolean ok = read(buf, off, len, row, children);
        if (ok && !overflow) {
            v.putNotNull(row);
        } else {
            v.putNull(row);
        }
        return ok;
    }

    @Override
    boolean read(byte[] buf, int off, int len, int row, WritableColumnVector[] out) {
        overflow = false;
        int q = off;
        int stop = off + len;
        int n = columns.length;
        for (int i = 0; i < n; i++) {
            byte[] e = expect[i];
            int k = e.length;
            if (q + k >= stop) {
                return super.read(buf, off, len, row, out);
            }
            for (int j = 0; j < k; j++) { // keys are short: a plain loop beats Arrays.equals
                if (buf[q + j] != e[j]) {
                    return super.read(buf, off, len, row, out);
                }
            }
            q += k;
            WritableColumnVector v = out[i];
            int c = buf[q] & 0xff;
            if (c == 0xc0) {
                if (!nullable[i]) {
                    return super.read(buf, off, len, row, out);
                }
                if (v != null) {
                    v.putNull(row);
                }
                q++;
                continue;
            }
            int t = types[i];
            if (t == LONG) {
                long x;
                if (c <= 0x7f || c >= 0xe0) {
                    x = c <= 0x7f ? c : (byte) c;
                    q += 1;
                } else if (c == 0xcd && q + 3 <= stop) {
                    x = be16(buf, q + 1);
                    q += 3;
                } else if (c == 0xce && q + 5 <= stop) {
                    x = be32(buf, q + 1) & 0xffffffffL;
                    q += 5;
                } else if (c == 0xcc && q + 2 <= stop) {
                    x = buf[q + 1] & 0xff;
                    q += 2;
                } else if (c == 0xd0 && q + 2 <= stop) {
                    x = buf[q + 1];
                    q += 2;
                } else if (c == 0xd1 && q + 3 <= stop) {
                    x = (short) be16(buf, q + 1);
                    q += 3;
                } else if (c == 0xd2 && q + 5 <= stop) {
                    x = be32(buf, q + 1);
                    q += 5;
                } else if ((c == 0xd3 || c == 0xcf) && q + 9 <= stop && (c == 0xd3 || buf[q + 1] >= 0)) {
                    x = be64(buf, q + 1);
                    q += 9;
                } else {
                    return super.read(buf, off, len, row, out);
                }
                if (v != null) {
                    v.putLong(row, x);
                }
            } else if (t == DOUBLE) {
                if (c == 0xcb && q + 9 <= stop) {
                    if (v != null) {
                        v.putDouble(row, Double.longBitsToDouble(be64(buf, q + 1)));
                    }
                    q += 9;
                } else {
                    return super.read(buf, off, len, row, out);
                }
            } else if (t == STRING || t == BINARY) {
                int m;
                int h;
                if (t == STRING && c >= 0xa0 && c <= 0xbf) {
                    m = c & 0x1f;
                    h = 1;
                } else if (c == (t == STRING ? 0xd9 : 0xc4) && q + 2 <= stop) {
                    m = buf[q + 1] & 0xff;
                    h = 2;
                } else {
                    return super.read(buf, off, len, row, out);
                }
                if (q + h + m > stop) {
                    return super.read(buf, off, len, row, out);
                }
                if (v != null) {
                    v.putByteArray(row, buf, q + h, m);
                }
                q += h + m;
            } else {
                if (c != 0xc2 && c != 0xc3) {
                    return super.read(buf, off, len, row, out);
                }
                if (v != null) {
                    v.putBoolean(row, c == 0xc3);
                }
                q++;
            }
        }
        if (q != stop) {
            return super.read(buf, off, len, row, out);
        }
        return true;
    }

    // plain shifts: the JIT inlines them where a VarHandle measured not inlined in read()
    private static int be16(byte[] b, int i) {
        return (b[i] & 0xff) << 8 | (b[i + 1] & 0xff);
    }

    private static int be32(byte[] b, int i) {
        return (b[i] & 0xff) << 24 | (b[i + 1] & 0xff) << 16 | (b[i + 2] & 0xff) << 8 | (b[i + 3] & 0xff);
    }

    private static long be64(byte[] b, int i) {
        return (long) be32(b, i) << 32 | be32(b, i + 4) & 0xffffffffL;
    }

    /** Decodes one payload; false if it is not the Struct. */
    @Override
    boolean decode(byte[] buf, int off, int len) {
        buffers();
        b = buf;
        p = off;
        end = off + len;
        overflow = false;
        java.util.Arrays.fill(seen, false);
        try {
            if (shape == SINGLE) {
                return field(0) && p == end;
            }
            int c = u8();
            long n;
            if (shape != MAP) {
                n = c >= 0x90 && c <= 0x9f ? c & 0x0f : c == 0xdc ? be(2) : c == 0xdd ? be(4) : -1;
                if (n < 0 || (n == 0 && shape == PARAMS)) {
                    return false; // a call's arguments: at least the first
                }
                for (int i = 0; i < n; i++) {
                    if (i >= columns.length) {
                        skip(0); // extra items are ignored, as msgspec does
                    } else if (!field(i)) {
                        return false;
                    }
                }
            } else {
                n = c >= 0x80 && c <= 0x8f ? c & 0x0f : c == 0xde ? be(2) : c == 0xdf ? be(4) : -1;
                if (n < 0) {
                    return false;
                }
                int next = 0;
                for (long k = 0; k < n; k++) {
                    int at = match(next);
                    next = at + 1;
                    if (at == -2) {
                        return false;
                    }
                    if (at < 0) {
                        skip(0);
                    } else if (!field(at)) {
                        return false;
                    }
                }
            }
            if (p != end) {
                return false; // trailing bytes
            }
            for (int i = 0; i < columns.length; i++) {
                if (!seen[i]) {
                    if (!hasDefault[i]) {
                        return false;
                    }
                    Object d = defaults[i];
                    isNull[i] = d == null;
                    if (d instanceof Long) {
                        longs[i] = (Long) d;
                    } else if (d instanceof Double) {
                        doubles[i] = (Double) d;
                    } else if (d instanceof Boolean) {
                        longs[i] = (Boolean) d ? 1 : 0;
                    }
                }
            }
            return true;
        } catch (IndexOutOfBoundsException e) {
            return false;
        }
    }

    /**
     * The fields of the last payload decoded as one struct value of {@code v} (null when
     * it did not decode, or an integer did not fit a long: Arrow takes no such record).
     */
    void putStruct(WritableColumnVector v, int row, boolean ok) {
        boolean some = ok && !overflow;
        if (some) {
            v.putNotNull(row);
        } else {
            v.putNull(row);
        }
        for (int i = 0; i < columns.length; i++) {
            put(v.getChild(i), row, i, some);
        }
    }

    /** Writes field {@code i} of the last decoded payload (null if the decode failed). */
    @Override
    void put(WritableColumnVector v, int row, int i, boolean ok) {
        if (!ok || isNull[i]) {
            v.putNull(row);
            return;
        }
        switch (types[i]) {
            case LONG: v.putLong(row, longs[i]); break;
            case DOUBLE: v.putDouble(row, doubles[i]); break;
            case BOOLEAN: v.putBoolean(row, longs[i] != 0); break;
            default:
                if (!seen[i]) {
                    byte[] d = (byte[]) defaults[i];
                    v.putByteArray(row, d, 0, d.length);
                } else {
                    v.putByteArray(row, b, starts[i], lengths[i]);
                }
        }
    }

    private int u8() {
        if (p >= end) {
            throw new IndexOutOfBoundsException();
        }
        return b[p++] & 0xff;
    }

    private static final VarHandle BE_LONG =
            MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle BE_INT =
            MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle BE_SHORT =
            MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.BIG_ENDIAN);

    /** The next {@code n} (1, 2, 4 or 8) bytes as an unsigned big-endian number. */
    private long be(int n) {
        if (p + n > end) {
            throw new IndexOutOfBoundsException();
        }
        long v;
        switch (n) {
            case 1: v = b[p] & 0xff; break;
            case 2: v = (short) BE_SHORT.get(b, p) & 0xffff; break;
            case 4: v = (int) BE_INT.get(b, p) & 0xffffffffL; break;
            default: v = (long) BE_LONG.get(b, p); break;
        }
        p += n;
        return v;
    }

    /**
     * The field whose key is the next map key (tried first: field {@code guess}, as
     * msgspec writes them in order), -1 for another key, -2 for a non-string key.
     */
    private int match(int guess) {
        int c = u8();
        int n;
        if (c >= 0xa0 && c <= 0xbf) {
            n = c & 0x1f;
        } else if (c == 0xd9) {
            n = (int) be(1);
        } else if (c == 0xda) {
            n = (int) be(2);
        } else if (c == 0xdb) {
            n = (int) be(4);
        } else {
            return -2;
        }
        if (n < 0 || p + n > end) {
            throw new IndexOutOfBoundsException();
        }
        int at = -1;
        if (guess >= 0 && guess < keys.length && same(keys[guess], n)) {
            at = guess;
        }
        for (int i = 0; i < keys.length && at < 0; i++) {
            if (same(keys[i], n)) {
                at = i;
            }
        }
        p += n;
        return at;
    }

    /** Whether the {@code n} bytes at {@code p} are {@code key} (keys are short). */
    private boolean same(byte[] key, int n) {
        if (key.length != n) {
            return false;
        }
        for (int j = 0; j < n; j++) {
            if (key[j] != b[p + j]) {
                return false;
            }
        }
        return true;
    }

    private boolean field(int i) {
        seen[i] = true;
        isNull[i] = false;
        int c = u8();
        if (c == 0xc0) {
            isNull[i] = true;
            return nullable[i];
        }
        switch (types[i]) {
            case LONG: {
                if (c == 0xcf && p < end && b[p] < 0) {
                    be(8);
                    isNull[i] = true; // above a long: that value is null (as the Python side does)
                    overflow = true;
                    return true;
                }
                if (!isInteger(c)) {
                    return false;
                }
                longs[i] = integer(c);
                return true;
            }
            case DOUBLE:
                if (c == 0xca) {
                    doubles[i] = Float.intBitsToFloat((int) be(4));
                    return true;
                }
                if (c == 0xcb) {
                    doubles[i] = Double.longBitsToDouble(be(8));
                    return true;
                }
                if (c == 0xcf) {
                    long u = be(8);
                    doubles[i] = u >= 0 ? u : (double) (u >>> 1) * 2.0 + (u & 1);
                    return true;
                }
                if (!isInteger(c)) {
                    return false;
                }
                doubles[i] = integer(c);
                return true;
            case BOOLEAN:
                if (c != 0xc2 && c != 0xc3) {
                    return false;
                }
                longs[i] = c == 0xc3 ? 1 : 0;
                return true;
            case STRING: {
                int n = c >= 0xa0 && c <= 0xbf ? c & 0x1f : c == 0xd9 ? (int) be(1) : c == 0xda ? (int) be(2)
                        : c == 0xdb ? (int) be(4) : -1;
                return span(i, n);
            }
            default: {
                int n = c == 0xc4 ? (int) be(1) : c == 0xc5 ? (int) be(2) : c == 0xc6 ? (int) be(4) : -1;
                return span(i, n);
            }
        }
    }

    private boolean span(int i, int n) {
        if (n < 0 || p + n > end) {
            return false;
        }
        starts[i] = p;
        lengths[i] = n;
        p += n;
        return true;
    }

    /** Whether {@code c} starts a msgpack integer (uint64 above a long is handled before). */
    private static boolean isInteger(int c) {
        return c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xcf) || (c >= 0xd0 && c <= 0xd3);
    }

    /** The msgpack integer of first byte {@code c} (see {@link #isInteger}). */
    private long integer(int c) {
        if (c <= 0x7f) {
            return c;
        }
        if (c >= 0xe0) {
            return (byte) c;
        }
        switch (c) {
            case 0xcc: return be(1);
            case 0xcd: return be(2);
            case 0xce: return be(4);
            case 0xcf: return be(8);
            case 0xd0: return (byte) be(1);
            case 0xd1: return (short) be(2);
            case 0xd2: return (int) be(4);
            default: return be(8);
        }
    }

    private void adv(long n) {
        if (n < 0 || p + n > end) {
            throw new IndexOutOfBoundsException();
        }
        p += (int) n;
    }

    /** Skips one msgpack value. */
    private void skip(int depth) {
        if (depth > 512) {
            throw new IndexOutOfBoundsException();
        }
        int c = u8();
        long n;
        if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
            return;
        }
        if (c >= 0x80 && c <= 0x8f) {
            n = 2L * (c & 0x0f);
        } else if (c >= 0x90 && c <= 0x9f) {
            n = c & 0x0f;
        } else if (c >= 0xa0 && c <= 0xbf) {
            adv(c & 0x1f);
            return;
        } else {
            switch (c) {
                case 0xc4: case 0xd9: adv(be(1)); return;
                case 0xc5: case 0xda: adv(be(2)); return;
                case 0xc6: case 0xdb: adv(be(4)); return;
                case 0xc7: adv(be(1) + 1); return;
                case 0xc8: adv(be(2) + 1); return;
                case 0xc9: adv(be(4) + 1); return;
                case 0xca: adv(4); return;
                case 0xcb: adv(8); return;
                case 0xcc: case 0xd0: adv(1); return;
                case 0xcd: case 0xd1: adv(2); return;
                case 0xce: case 0xd2: adv(4); return;
                case 0xcf: case 0xd3: adv(8); return;
                case 0xd4: adv(2); return;
                case 0xd5: adv(3); return;
                case 0xd6: adv(5); return;
                case 0xd7: adv(9); return;
                case 0xd8: adv(17); return;
                case 0xdc: n = be(2); break;
                case 0xdd: n = be(4); break;
                case 0xde: n = 2 * be(2); break;
                case 0xdf: n = 2 * be(4); break;
                default: throw new IndexOutOfBoundsException(); // 0xc1: never used
            }
        }
        for (long k = 0; k < n; k++) {
            skip(depth + 1);
        }
    }
}
