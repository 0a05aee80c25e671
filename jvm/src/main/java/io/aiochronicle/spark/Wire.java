package io.aiochronicle.spark;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Just enough of Chronicle's BinaryWire to read the self-describing documents of queue
 * files: cycle file headers, index pages and table-store records.  Fields become map
 * entries (nested marshallables become maps, type prefixes are dropped), numbers become
 * Long or Double, int64 arrays become {@link LongArray}; anything else is skipped.
 */
final class Wire {
    /** An int64 array in a file: where its values start and how many are in use. */
    static final class LongArray {
        final long valuesAt;   // absolute offset of values[0] in the file
        final long capacity;
        final long used;

        LongArray(long valuesAt, long capacity, long used) {
            this.valuesAt = valuesAt;
            this.capacity = capacity;
            this.used = used;
        }
    }

    private final byte[] b;
    private final long base; // absolute file offset of b[0]
    private int p;
    private final int end;

    private static final int MAX_DEPTH = 64;
    private final int depth;

    Wire(byte[] b, int start, int end, long base, int depth) {
        this.depth = depth;
        this.b = b;
        this.p = start;
        this.end = end;
        this.base = base;
    }

    /** The fields of a document body from {@code start} to {@code end}. */
    static Map<String, Object> parse(byte[] b, int start, int end, long base) {
        return new Wire(b, start, end, base, 0).fields(end);
    }

    private int u8() {
        if (p >= end) {
            throw new IllegalArgumentException("truncated wire document");
        }
        return b[p++] & 0xff;
    }

    private long le(int n) {
        if (p + n > end) {
            throw new IllegalArgumentException("truncated wire document");
        }
        long v = 0;
        for (int i = n - 1; i >= 0; i--) {
            v = (v << 8) | (b[p + i] & 0xff);
        }
        p += n;
        return v;
    }

    private long stopBit() {
        long v = 0;
        int shift = 0;
        while (true) {
            int c = u8();
            v |= (long) (c & 0x7f) << shift;
            if ((c & 0x80) == 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw new IllegalArgumentException("bad stop-bit number");
            }
        }
        // a negative number: ~n, ended by a continuation byte and 0x00
        if (shift > 0 && (b[p - 1] == 0)) {
            return ~v;
        }
        return v;
    }

    private String text(long len, boolean utf8) {
        if (len < 0 || len > end - p) {
            throw new IllegalArgumentException("truncated wire text");
        }
        int n = (int) len;
        String s = new String(b, p, n, utf8 ? StandardCharsets.UTF_8 : StandardCharsets.ISO_8859_1);
        p += n;
        return s;
    }

    private void padding() {
        while (p < end) {
            int c = b[p] & 0xff;
            if (c == 0x8f) {
                p++;
            } else if (c == 0x8e) {
                p++;
                skip(le(4)); // read first: `p += le(4)` would lose le's advance
            } else if (c == 0xbe) {
                p++;
                skip(stopBit());
            } else {
                return;
            }
        }
    }

    /** Moves past {@code n} bytes of padding, which must lie inside the document. */
    private void skip(long n) {
        if (n < 0 || n > end - p) {
            throw new IllegalArgumentException("padding runs past its document");
        }
        p += (int) n;
    }

    private Map<String, Object> fields(int stop) {
        Map<String, Object> out = new LinkedHashMap<>();
        while (true) {
            padding();
            if (p >= stop) {
                return out;
            }
            int c = b[p] & 0xff;
            String key;
            if (c >= 0xc0 && c <= 0xdf) {
                p++;
                key = text(c & 0x1f, false);
            } else if (c == 0xb7 || c == 0xb9) {
                p++;
                key = text(stopBit(), false);
            } else if (c == 0xba) {
                p++;
                key = Long.toString(stopBit());
            } else {
                return out; // not a field: a sequence or raw data, not needed here
            }
            padding();
            if (p >= stop) {
                out.put(key, null);
                return out;
            }
            out.put(key, value());
        }
    }

    private Object value() {
        int c = u8();
        while (c == 0xb6) {
            text(stopBit(), true); // a type alias: the value follows
            padding();
            c = u8();
        }
        if (c < 0x80) {
            return (long) c;
        }
        if (c >= 0xe0) {
            return text(c & 0x1f, true);
        }
        switch (c) {
            case 0x80:
            case 0x81:
            case 0x82: {
                int n = (int) le(c == 0x80 ? 1 : c == 0x81 ? 2 : 4);
                if (n < 0 || n > end - p) {
                    throw new IllegalArgumentException("truncated wire document");
                }
                if (depth >= MAX_DEPTH) {
                    throw new IllegalArgumentException("wire documents nested too deep");
                }
                int stop = p + n;
                Object v = new Wire(b, p, stop, base, depth + 1).fields(stop);
                p = stop;
                return v;
            }
            case 0x8d: {
                long cap = le(8);
                long used = le(8);
                long at = base + p;
                if (cap < 0 || cap > (end - p) / 8) {
                    throw new IllegalArgumentException("an int64 array of " + cap + " runs past its document");
                }
                p += (int) (cap * 8);
                return new LongArray(at, cap, used);
            }
            case 0x90:
                return (double) Float.intBitsToFloat((int) le(4));
            case 0x91:
                return Double.longBitsToDouble(le(8));
            case 0x92:
                return stopBit() / 1e2;
            case 0x94:
                return stopBit() / 1e4;
            case 0x96:
                return stopBit() / 1e6;
            case 0xa0:
                skip(16);
                return null;
            case 0xa1:
                return le(1);
            case 0xa2:
                return le(2);
            case 0xa3:
                return le(4);
            case 0xa4:
                return (long) (byte) le(1);
            case 0xa5:
                return (long) (short) le(2);
            case 0xa6:
                return (long) (int) le(4);
            case 0xa7:
            case 0xaf:
                return le(8);
            case 0xb0:
                return Boolean.FALSE;
            case 0xb1:
                return Boolean.TRUE;
            case 0xbb:
                return null;
            case 0xb2:
            case 0xb3:
            case 0xb4:
            case 0xb5:
            case 0xb8:
            case 0xbc:
                return text(stopBit(), true);
            default:
                throw new IllegalArgumentException(String.format("unexpected wire code 0x%02x", c));
        }
    }

    static long asLong(Object v, long dflt) {
        if (v instanceof Long) {
            return (Long) v;
        }
        if (v instanceof Double) {
            return (long) (double) (Double) v;
        }
        return dflt;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> asMap(Object v) {
        return v instanceof Map ? (Map<String, Object>) v : null;
    }
}
