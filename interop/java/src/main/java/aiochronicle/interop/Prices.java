package aiochronicle.interop;

/** The method interface both languages exchange calls of (Python: tests/test_java_live.py). */
public interface Prices {
    void onPrice(Price price);

    void onClose(String symbol, boolean last);
}
