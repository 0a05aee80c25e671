package io.aiochronicle.spark;

import java.util.Arrays;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The {@code payload} column of a batch as views of the cycle file's read window: row
 * {@code i} is {@code lengths[i]} bytes at {@code offsets[i]} of {@link #data}, copied out
 * only when Spark asks for the value (no copy into a column of its own first).  The
 * reader keeps the window in place until the batch is consumed.
 */
final class PayloadVector extends ColumnVector {
    byte[] data;
    final int[] offsets;
    final int[] lengths;

    PayloadVector(int rows) {
        super(DataTypes.BinaryType);
        this.offsets = new int[rows];
        this.lengths = new int[rows];
    }

    @Override
    public byte[] getBinary(int row) {
        int off = offsets[row];
        return Arrays.copyOfRange(data, off, off + lengths[row]);
    }

    @Override
    public UTF8String getUTF8String(int row) {
        return UTF8String.fromBytes(getBinary(row));
    }

    @Override
    public void close() {
        data = null;
    }

    @Override
    public boolean hasNull() {
        return false;
    }

    @Override
    public int numNulls() {
        return 0;
    }

    @Override
    public boolean isNullAt(int row) {
        return false;
    }

    private static UnsupportedOperationException binary() {
        return new UnsupportedOperationException("the payload column is binary");
    }

    @Override
    public boolean getBoolean(int row) {
        throw binary();
    }

    @Override
    public byte getByte(int row) {
        throw binary();
    }

    @Override
    public short getShort(int row) {
        throw binary();
    }

    @Override
    public int getInt(int row) {
        throw binary();
    }

    @Override
    public long getLong(int row) {
        throw binary();
    }

    @Override
    public float getFloat(int row) {
        throw binary();
    }

    @Override
    public double getDouble(int row) {
        throw binary();
    }

    @Override
    public ColumnarArray getArray(int row) {
        throw binary();
    }

    @Override
    public ColumnarMap getMap(int row) {
        throw binary();
    }

    @Override
    public Decimal getDecimal(int row, int precision, int scale) {
        throw binary();
    }

    @Override
    public ColumnVector getChild(int ordinal) {
        throw binary();
    }
}
