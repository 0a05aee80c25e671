package aiochronicle.interop;

import net.openhft.chronicle.wire.SelfDescribingMarshallable;

/** The DTO of {@link Prices#onPrice}: field names as the Python Struct's. */
public class Price extends SelfDescribingMarshallable {
    String symbol;
    double bid;
    double ask;
    long qty;

    public Price() {
    }

    public Price(String symbol, double bid, double ask, long qty) {
        this.symbol = symbol;
        this.bid = bid;
        this.ask = ask;
        this.qty = qty;
    }

    @Override
    public String toString() {
        return symbol + " " + bid + " " + ask + " " + qty;
    }
}
