package io.aiochronicle.spark;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * Decodes method calls of any framing, each payload by its first byte as aiochronicle's
 * method reader does: {@code 0x92}/{@code 0x93} msgpack ({@link MsgpackCalls}), {@code [}
 * JSON ({@code [method, argument]} or {@code [history, method, argument]}), anything else
 * BinaryWire, Java's own format (events {@code method: argument}, by name or by method id,
 * after an optional {@code history}; of several events in one excerpt the last one read
 * gives the row).  A call of a method the interface lacks gives a row of nulls; a payload
 * that is not a call, or whose argument does not decode, too (or an error when asked).
 *
 * <p>Arguments decode as the Python side's readers decode them: in JSON strictly (an int
 * field takes only an integer, bytes are base64 text); in BinaryWire as Java writes
 * numbers (an int field takes an integral float too, saturated at the largest long). The
 * text-to-number conversions msgspec's lax mode adds for optional fields are not made here.
 */
final class Calls extends Decoder {
    private static final long serialVersionUID = 1L;
    private static final int MAP = 0;
    private static final int ARRAY = 1;
    private static final int PARAMS = 2;
    private static final int SINGLE = 3;
    private static final int MAX_DEPTH = 64;

    /** A method's argument: its fields (a Struct's, or the parameters) and their rules. */
    private static final class Arg implements java.io.Serializable {
        private static final long serialVersionUID = 1L;
        final int shape;
        final String[] keys;
        final int[] types;
        final boolean[] nullable;
        final boolean[] hasDefault;
        final Object[] defaults;

        Arg(JsonNode spec) {
            switch (spec.get("shape").asText()) {
                case "map": shape = MAP; break;
                case "array": shape = ARRAY; break;
                case "params": shape = PARAMS; break;
                default: shape = SINGLE; break;
            }
            JsonNode fs = spec.get("fields");
            int n = fs.size();
            keys = new String[n];
            types = new int[n];
            nullable = new boolean[n];
            hasDefault = new boolean[n];
            defaults = new Object[n];
            for (int i = 0; i < n; i++) {
                JsonNode f = fs.get(i);
                keys[i] = f.get("key").asText();
                types[i] = fieldType(f);
                nullable[i] = f.get("nullable").asBoolean();
                hasDefault[i] = f.get("hasDefault").asBoolean();
                defaults[i] = fieldDefault(f, types[i]);
            }
        }
    }

    /** A payload that is not what its method takes. */
    private static final class Bad extends Exception {
        private static final long serialVersionUID = 1L;

        Bad() {
            super(null, null, false, false);
        }
    }

    private static final Bad BAD = new Bad();

    private final MsgpackCalls msgpack;
    private final String[] names;
    private final byte[][] nameBytes;
    private final Long[] ids;
    private final int[] arity;
    private final int[] columnOf;        // per method: its column (0: none)
    private final int[] methodOfColumn;  // per column: its method (-1: METHOD)
    private final Arg[] args;
    private final Map<String, Integer> byName = new HashMap<>();
    private final Map<Long, Integer> byId = new HashMap<>();
    private final String iface;

    // the call of the last payload decoded
    private transient int method;
    private transient Object[] values;
    private transient boolean overflow;
    private transient byte[] b;
    private transient int end;
    private transient ObjectMapper json;

    private Calls(MsgpackCalls msgpack, JsonNode methods, Map<String, StructField> fields, String iface,
                  boolean failOnError) throws IOException {
        super(msgpack.columns, failOnError);
        this.msgpack = msgpack;
        this.iface = iface;
        ObjectMapper mapper = new ObjectMapper();
        int n = methods.size();
        names = new String[n];
        nameBytes = new byte[n][];
        ids = new Long[n];
        arity = new int[n];
        columnOf = new int[n];
        args = new Arg[n];
        methodOfColumn = new int[columns.length];
        methodOfColumn[0] = -1;
        for (int m = 0; m < n; m++) {
            JsonNode spec = methods.get(m);
            names[m] = spec.get("name").asText();
            nameBytes[m] = names[m].getBytes(StandardCharsets.UTF_8);
            arity[m] = spec.get("arity").asInt();
            byName.putIfAbsent(names[m], m);
            for (JsonNode k : spec.get("keys")) {
                Long id = msgpackInt(k.asText());
                if (id != null) {
                    ids[m] = id;
                    byId.putIfAbsent(id, m);
                }
            }
            JsonNode col = spec.get("column");
            if (col == null || col.isNull()) {
                continue;
            }
            StructField f = fields.get(col.asText());
            args[m] = new Arg(mapper.readTree(f.metadata().getMetadata(META).json()));
            columnOf[m] = column(col.asText());
            methodOfColumn[columnOf[m]] = m;
        }
    }

    /** The integer a method key (msgpack, in hex) encodes, or null for a name. */
    private static Long msgpackInt(String hex) {
        int c = Integer.parseInt(hex.substring(0, 2), 16);
        if (c <= 0x7f) {
            return (long) c;
        }
        if (c >= 0xe0) {
            return (long) (byte) c;
        }
        if (c >= 0xcc && c <= 0xd3) {
            BigInteger v = new BigInteger(hex.substring(2), 16);
            int bits = (hex.length() - 2) * 4;
            if (c >= 0xd0 && v.testBit(bits - 1)) {
                v = v.subtract(BigInteger.ONE.shiftLeft(bits));
            }
            return v.bitLength() < 64 ? v.longValue() : null;
        }
        return null;
    }

    /** The decoder the {@code method} column's metadata describes, or null (the Python source reads). */
    static Calls of(StructType schema, boolean failOnError) {
        MsgpackCalls mp = MsgpackCalls.of(schema, failOnError);
        if (mp == null) {
            return null;
        }
        Map<String, StructField> fields = new HashMap<>();
        for (StructField f : schema.fields()) {
            fields.put(f.name(), f);
        }
        try {
            JsonNode spec = new ObjectMapper().readTree(fields.get(MsgpackCalls.METHOD).metadata()
                    .getMetadata(META).json());
            return new Calls(mp, spec.get("methods"), fields, spec.get("interface").asText(), failOnError);
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    @Override
    String expected() {
        return "method call of " + iface;
    }

    private static boolean msgpackFramed(byte[] buf, int off, int len) {
        return len > 0 && (buf[off] == (byte) 0x92 || buf[off] == (byte) 0x93);
    }

    @Override
    boolean read(byte[] buf, int off, int len, int row, WritableColumnVector[] out) {
        if (msgpackFramed(buf, off, len)) {
            return msgpack.read(buf, off, len, row, out);
        }
        boolean ok = decode(buf, off, len);
        for (int i = 0; i < out.length; i++) {
            if (out[i] != null) {
                put(out[i], row, i, true);
            }
        }
        return ok;
    }

    /**
     * Decodes one payload: false when it is not a call or an argument does not decode
     * (the row then holds the call read before that in the same excerpt, if any).
     */
    @Override
    boolean decode(byte[] buf, int off, int len) {
        if (msgpackFramed(buf, off, len)) {
            return msgpack.decode(buf, off, len);
        }
        method = -1;
        values = null;
        overflow = false;
        if (len == 0) {
            return false;
        }
        try {
            if (buf[off] == '[') {
                json(buf, off, len);
            } else {
                wire(buf, off, len);
            }
            return true;
        } catch (Bad | IOException | RuntimeException e) {
            return false;
        }
    }

    @Override
    void put(WritableColumnVector v, int row, int column, boolean ok) {
        int m = methodOfColumn[column];
        if (m < 0) {
            if (method >= 0) {
                v.putByteArray(row, nameBytes[method]);
            } else {
                v.putNull(row);
            }
            return;
        }
        boolean some = method == m && values != null && !overflow;
        if (some) {
            v.putNotNull(row);
        } else {
            v.putNull(row);
        }
        Arg a = args[m];
        for (int i = 0; i < a.keys.length; i++) {
            WritableColumnVector c = v.getChild(i);
            Object x = some ? values[i] : null;
            if (x == null) {
                c.putNull(row);
            } else if (x instanceof Long) {
                c.putLong(row, (Long) x);
            } else if (x instanceof Double) {
                c.putDouble(row, (Double) x);
            } else if (x instanceof Boolean) {
                c.putBoolean(row, (Boolean) x);
            } else {
                byte[] bytes = (byte[]) x;
                c.putByteArray(row, bytes, 0, bytes.length);
            }
        }
    }

    /** Records a decoded call: the row shows it (the last one of an excerpt wins). */
    private void call(int m, Object[] vals, boolean tooBig) {
        method = m;
        values = vals;
        overflow = tooBig;
    }

    /** Completes the values of {@code a} not given: their defaults, or not a call. */
    private static void fill(Arg a, Object[] vals, boolean[] seen) throws Bad {
        for (int i = 0; i < vals.length; i++) {
            if (!seen[i]) {
                if (!a.hasDefault[i]) {
                    throw BAD;
                }
                vals[i] = a.defaults[i];
            }
        }
    }

    // -- JSON ------------------------------------------------------------------

    private void json(byte[] buf, int off, int len) throws Bad, IOException {
        if (json == null) {
            json = new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);
        }
        JsonNode call = json.readTree(buf, off, len);
        if (call == null || !call.isArray()) {
            throw BAD;
        }
        int at = 0;
        if (call.size() == 3) {
            history(call.get(0));
            at = 1;
        }
        if (call.size() - at != 2) {
            throw BAD;
        }
        JsonNode key = call.get(at);
        Integer m = key.isIntegralNumber() ? (key.canConvertToLong() ? byId.get(key.longValue()) : null)
                : key.isTextual() ? byName.get(key.textValue()) : null;
        if (m == null) {
            return; // a method the interface lacks: a row of nulls
        }
        JsonNode arg = call.get(at + 1);
        Arg a = args[m];
        if (arity[m] == 0) {
            call(m, null, false);
            return;
        }
        Object[] vals = new Object[a.keys.length];
        boolean[] seen = new boolean[vals.length];
        boolean[] big = new boolean[1];
        if (a.shape == SINGLE) {
            vals[0] = jsonValue(a, 0, arg, big);
            seen[0] = true;
        } else if (a.shape == MAP) {
            if (!arg.isObject()) {
                throw BAD;
            }
            for (int i = 0; i < vals.length; i++) {
                JsonNode v = arg.get(a.keys[i]);
                if (v != null) {
                    vals[i] = jsonValue(a, i, v, big);
                    seen[i] = true;
                }
            }
        } else {
            if (!arg.isArray() || (a.shape == PARAMS && arg.size() == 0)) {
                throw BAD;
            }
            for (int i = 0; i < vals.length && i < arg.size(); i++) {
                vals[i] = jsonValue(a, i, arg.get(i), big);
                seen[i] = true;
            }
        }
        fill(a, vals, seen);
        call(m, vals, big[0]);
    }

    /** A JSON history: {@code {"sources": [id, index, ...] or pairs, "timings": [...]}}. */
    private static void history(JsonNode h) throws Bad {
        if (!h.isObject()) {
            throw BAD;
        }
        List<JsonNode> sources = new ArrayList<>();
        JsonNode src = h.get("sources");
        if (src != null && !src.isNull() && !(src.isArray() && src.size() == 0)) {
            if (!src.isArray()) {
                throw BAD;
            }
            boolean pairs = src.get(0).isArray();
            for (JsonNode x : src) {
                if (pairs) {
                    x.forEach(sources::add);
                } else {
                    sources.add(x);
                }
            }
        }
        List<JsonNode> timings = new ArrayList<>();
        JsonNode tim = h.get("timings");
        if (tim != null && !tim.isNull() && !(tim.isArray() && tim.size() == 0)) {
            if (!tim.isArray()) {
                throw BAD;
            }
            tim.forEach(timings::add);
        }
        if (sources.size() % 2 != 0) {
            throw BAD;
        }
        sources.addAll(timings);
        for (JsonNode x : sources) {
            if (!x.isIntegralNumber()) {
                throw BAD;
            }
        }
    }

    /** Field {@code i} of {@code a} from a JSON value, strictly as msgspec decodes JSON. */
    private static Object jsonValue(Arg a, int i, JsonNode v, boolean[] big) throws Bad {
        if (v.isNull()) {
            if (!a.nullable[i]) {
                throw BAD;
            }
            return null;
        }
        switch (a.types[i]) {
            case LONG:
                if (!v.isIntegralNumber()) {
                    throw BAD;
                }
                if (!v.canConvertToLong()) {
                    big[0] = true; // above a long: Arrow takes no such record
                    return null;
                }
                return v.longValue();
            case DOUBLE:
                if (!v.isNumber()) {
                    throw BAD;
                }
                return v.doubleValue();
            case BOOLEAN:
                if (!v.isBoolean()) {
                    throw BAD;
                }
                return v.booleanValue();
            case STRING:
                if (!v.isTextual()) {
                    throw BAD;
                }
                return v.textValue().getBytes(StandardCharsets.UTF_8);
            default:
                if (!v.isTextual()) {
                    throw BAD;
                }
                try {
                    return Base64.getDecoder().decode(v.textValue());
                } catch (IllegalArgumentException e) {
                    throw BAD;
                }
        }
    }

    // -- BinaryWire --------------------------------------------------------------

    private int u8(int p) throws Bad {
        if (p >= end) {
            throw BAD;
        }
        return b[p] & 0xff;
    }

    private long le(int p, int n) throws Bad {
        if (p + n > end || p + n < p) {
            throw BAD;
        }
        long v = 0;
        for (int i = n - 1; i >= 0; i--) {
            v = (v << 8) | (b[p + i] & 0xff);
        }
        return v;
    }

    /** A stop-bit number at {@code p}: {value, position after it}. */
    private long[] stopBit(int p) throws Bad {
        long v = 0;
        int shift = 0;
        int q = p;
        while (true) {
            int c = u8(q++);
            if ((c & 0x80) != 0) {
                v |= (long) (c & 0x7f) << shift;
                shift += 7;
                if (shift > 63) {
                    throw BAD;
                }
                continue;
            }
            if (c == 0 && shift > 0) {
                v = ~v;
            } else {
                v |= (long) c << shift;
            }
            return new long[] {v, q};
        }
    }

    private int padding(int p, int stop) throws Bad {
        while (p < stop) {
            int c = b[p] & 0xff;
            if (c == 0x8f) {
                p++;
            } else if (c == 0x8e) {
                long n = le(p + 1, 4);
                if (n > stop - p - 5) {
                    throw BAD;
                }
                p += 5 + (int) n;
            } else if (c == 0xbe) {
                long[] n = stopBit(p + 1);
                if (n[0] < 0 || n[0] > stop - n[1]) {
                    throw BAD;
                }
                p = (int) (n[1] + n[0]);
            } else {
                break;
            }
        }
        return p;
    }

    private static boolean isKey(int c) {
        return c >= 0xc0 && c < 0xe0 || c == 0xb7 || c == 0xb9 || c == 0xba;
    }

    private transient String keyName;
    private transient long keyNumber;

    /** Reads a key at {@code p} into {@link #keyName} (null for a number, then in {@link #keyNumber}). */
    private int key(int p, int stop) throws Bad {
        int c = u8(p);
        if (c >= 0xc0 && c < 0xe0) {
            int n = c - 0xc0;
            if (p + 1 + n > stop) {
                throw BAD;
            }
            keyName = new String(b, p + 1, n, StandardCharsets.ISO_8859_1);
            return p + 1 + n;
        }
        if (c == 0xb7 || c == 0xb9) {
            long[] n = stopBit(p + 1);
            if (n[0] < 0 || n[0] > stop - n[1]) {
                throw BAD;
            }
            keyName = new String(b, (int) n[1], (int) n[0], StandardCharsets.ISO_8859_1);
            return (int) (n[1] + n[0]);
        }
        if (c == 0xba) {
            long[] n = stopBit(p + 1);
            keyName = null;
            keyNumber = n[0];
            return (int) n[1];
        }
        throw BAD;
    }

    private void wire(byte[] buf, int off, int len) throws Bad {
        b = buf;
        end = off + len;
        int p = padding(off, end);
        if (p < end && !isKey(b[p] & 0xff)) {
            throw BAD; // not a method call
        }
        while (true) {
            p = padding(p, end);
            if (p >= end) {
                return;
            }
            p = key(p, end);
            if (keyName == null ? keyNumber == -1 : keyName.equals("history")) {
                p = skip(p, end, 0);
                continue;
            }
            Integer m = keyName == null ? byId.get(keyNumber) : byName.get(keyName);
            if (m == null) {
                p = skip(p, end, 0); // a method the interface lacks
                continue;
            }
            p = wireCall(m, p);
        }
    }

    /** The argument of a call of method {@code m} at {@code p}; where it ends. */
    private int wireCall(int m, int p) throws Bad {
        if (arity[m] == 0) {
            // Java's generic events write a call without arguments as its name alone
            int q = padding(p, end) >= end ? end : skip(p, end, 0);
            call(m, null, false);
            return q;
        }
        Arg a = args[m];
        Object[] vals = new Object[a.keys.length];
        boolean[] seen = new boolean[vals.length];
        boolean[] big = new boolean[1];
        int q;
        if (a.shape == SINGLE) {
            q = wireValue(a, 0, p, end, vals, big);
            seen[0] = true;
        } else if (a.shape == MAP) {
            q = padding(p, end);
            int c = u8(q);
            while (c == 0xb6) { // a type alias before the Struct
                long[] n = stopBit(q + 1);
                if (n[0] < 0 || n[0] > end - n[1]) {
                    throw BAD;
                }
                q = padding((int) (n[1] + n[0]), end);
                c = u8(q);
            }
            int[] body = body(q);
            int r = body[0];
            while (true) {
                r = padding(r, body[1]);
                if (r >= body[1]) {
                    break;
                }
                r = key(r, body[1]);
                String k = keyName != null ? keyName : Long.toString(keyNumber);
                int i = indexOf(a.keys, k);
                if (i < 0 || seen[i]) {
                    r = skip(r, body[1], 0); // a field this version lacks; the first of a key wins
                    continue;
                }
                r = wireValue(a, i, r, body[1], vals, big);
                seen[i] = true;
            }
            q = body[1];
        } else if (a.shape == ARRAY && u8(padding(p, end)) != 0x80 && u8(padding(p, end)) != 0x81
                && u8(padding(p, end)) != 0x82) {
            throw BAD;
        } else {
            // several parameters, or an array-like Struct as a sequence of values (one
            // written as fields, as a method writer writes it, is not read by the Python
            // reader either)
            q = padding(p, end);
            int c = u8(q);
            int[] body;
            if (c == 0x80 || c == 0x81 || c == 0x82) {
                body = body(q);
                int first = padding(body[0], body[1]);
                if (a.shape == ARRAY && first < body[1] && isKey(b[first] & 0xff)) {
                    throw BAD;
                }
            } else { // a single value where several were declared
                body = new int[] {q, skip(q, end, 0)};
            }
            int r = padding(body[0], body[1]);
            for (int i = 0; i < vals.length && r < body[1]; i++) {
                r = wireValue(a, i, r, body[1], vals, big);
                seen[i] = true;
                r = padding(r, body[1]);
            }
            q = body[1];
        }
        fill(a, vals, seen);
        call(m, vals, big[0]);
        return q;
    }

    private static int indexOf(String[] keys, String k) {
        for (int i = 0; i < keys.length; i++) {
            if (keys[i].equals(k)) {
                return i;
            }
        }
        return -1;
    }

    /** The body of the length-prefixed value at {@code p}: {start, end}. */
    private int[] body(int p) throws Bad {
        int c = u8(p);
        int n = c == 0x80 ? 1 : c == 0x81 ? 2 : c == 0x82 ? 4 : -1;
        if (n < 0) {
            throw BAD;
        }
        long size = le(p + 1, n);
        int start = p + 1 + n;
        if (size > end - start) {
            throw BAD;
        }
        return new int[] {start, start + (int) size};
    }

    /** Field {@code i} of {@code a} from the BinaryWire value at {@code p}; where it ends. */
    private int wireValue(Arg a, int i, int p, int stop, Object[] vals, boolean[] big) throws Bad {
        p = padding(p, stop);
        int c = u8(p);
        if (c == 0xbb || (c == 0xb8 && stopBit(p + 1)[0] == -1)) {
            if (!a.nullable[i]) {
                throw BAD;
            }
            vals[i] = null;
            return skip(p, stop, 0);
        }
        int q = skip(p, stop, 0);
        switch (a.types[i]) {
            case LONG: {
                Object n = number(c, p, q);
                if (n instanceof Long) {
                    vals[i] = n;
                } else if (n instanceof Double) {
                    double d = (Double) n;
                    if (d != Math.rint(d) || Double.isInfinite(d)) {
                        throw BAD;
                    }
                    if (d < -0x1p63) {
                        big[0] = true;
                        vals[i] = null;
                    } else {
                        vals[i] = d >= 0x1p63 ? Long.MAX_VALUE : (long) d; // Java saturates
                    }
                } else {
                    throw BAD;
                }
                return q;
            }
            case DOUBLE: {
                Object n = number(c, p, q);
                if (n instanceof Long) {
                    vals[i] = (double) (Long) n;
                } else if (n instanceof Double) {
                    vals[i] = n;
                } else {
                    throw BAD;
                }
                return q;
            }
            case BOOLEAN:
                if (c != 0xb0 && c != 0xb1) {
                    throw BAD;
                }
                vals[i] = c == 0xb1;
                return q;
            case STRING:
                if (c >= 0xe0) {
                    vals[i] = java.util.Arrays.copyOfRange(b, p + 1, q);
                } else if (c == 0xb8) {
                    long[] n = stopBit(p + 1);
                    vals[i] = java.util.Arrays.copyOfRange(b, (int) n[1], q);
                } else {
                    throw BAD;
                }
                return q;
            default:
                if (c == 0x80 || c == 0x81 || c == 0x82) {
                    int[] body = body(p);
                    int first = padding(body[0], body[1]);
                    if (first < body[1] && (b[first] & 0xff) == 0x8a) {
                        vals[i] = java.util.Arrays.copyOfRange(b, first + 1, body[1]);
                        return q;
                    }
                }
                throw BAD;
        }
    }

    /** The number at {@code p} (code {@code c}, ending at {@code q}): a Long, a Double, or null. */
    private Object number(int c, int p, int q) throws Bad {
        if (c < 0x80) {
            return (long) c;
        }
        switch (c) {
            case 0xa1: return le(p + 1, 1);
            case 0xa2: return le(p + 1, 2);
            case 0xa3: return le(p + 1, 4);
            case 0xa4: return (long) (byte) le(p + 1, 1);
            case 0xa5: return (long) (short) le(p + 1, 2);
            case 0xa6: return (long) (int) le(p + 1, 4);
            case 0xa7: case 0xaf: return le(p + 1, 8);
            case 0x90: return (double) Float.intBitsToFloat((int) le(p + 1, 4));
            case 0x91: return Double.longBitsToDouble(le(p + 1, 8));
            case 0x92: return stopBit(p + 1)[0] / 1e2;
            case 0x94: return stopBit(p + 1)[0] / 1e4;
            case 0x96: return stopBit(p + 1)[0] / 1e6;
            default: return null;
        }
    }

    /** Where the BinaryWire value at {@code p} (after any padding) ends. */
    private int skip(int p, int stop, int depth) throws Bad {
        if (depth > MAX_DEPTH) {
            throw BAD;
        }
        p = padding(p, stop);
        int c = u8(p);
        if (p >= stop) {
            throw BAD;
        }
        int q;
        if (c >= 0xe0) {
            q = p + 1 + (c - 0xe0);
        } else if (c < 0x80 || c == 0xb0 || c == 0xb1 || c == 0xbb) {
            q = p + 1;
        } else {
            switch (c) {
                case 0xa1: case 0xa4: q = p + 2; break;
                case 0xa2: case 0xa5: q = p + 3; break;
                case 0xa3: case 0xa6: case 0x90: q = p + 5; break;
                case 0xa7: case 0xaf: case 0x91: q = p + 9; break;
                case 0xa0: q = p + 17; break;
                case 0x92: case 0x94: case 0x96: q = (int) stopBit(p + 1)[1]; break;
                case 0x80: case 0x81: case 0x82: q = body(p)[1]; break;
                case 0x8a: case 0x86: q = stop; break;
                case 0x8d: {
                    long cap = le(p + 1, 8);
                    if (cap < 0 || cap > (stop - p - 17) / 8) {
                        throw BAD;
                    }
                    q = p + 17 + (int) cap * 8;
                    break;
                }
                case 0xb6: {
                    long[] n = stopBit(p + 1);
                    if (n[0] < 0 || n[0] > stop - n[1]) {
                        throw BAD;
                    }
                    return skip((int) (n[1] + n[0]), stop, depth + 1);
                }
                case 0xb2: case 0xb3: case 0xb4: case 0xb5: case 0xb8: case 0xbc: {
                    long[] n = stopBit(p + 1);
                    if (n[0] == -1) {
                        q = (int) n[1];
                    } else if (n[0] < 0 || n[0] > stop - n[1]) {
                        throw BAD;
                    } else {
                        q = (int) (n[1] + n[0]);
                    }
                    break;
                }
                default: throw BAD; // a key where a value should be, or a code not read here
            }
        }
        if (q > stop || q < p) {
            throw BAD;
        }
        return q;
    }
}
