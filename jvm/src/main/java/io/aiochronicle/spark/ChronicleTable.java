package io.aiochronicle.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.function.Supplier;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** A queue as a table: read in the JVM; writes go to the Python data source (the sink). */
final class ChronicleTable implements SupportsRead, SupportsWrite {
    private final StructType schema;
    private final Decoder decoder;
    private final Supplier<Table> python;

    ChronicleTable(StructType schema, Decoder decoder, Supplier<Table> python) {
        this.schema = schema;
        this.decoder = decoder;
        this.python = python;
    }

    @Override
    public String name() {
        return "chronicle";
    }

    @Override
    public StructType schema() {
        return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
        return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ,
                TableCapability.BATCH_WRITE, TableCapability.STREAMING_WRITE, TableCapability.TRUNCATE);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
        return new ChronicleScan(schema, decoder, options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
        return ((SupportsWrite) python.get()).newWriteBuilder(info);
    }

    @Override
    public Map<String, String> properties() {
        return java.util.Collections.emptyMap();
    }
}
