package io.aiochronicle.spark;

import java.util.Map;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("chronicle")} in the JVM: batch and streaming reads of the raw columns
 * ({@code index, cycle, sequence, payload, metadata}).  Everything else (decoded
 * columns, other schemas, writing) is handed to aiochronicle's Python data source, and {@code option("engine", "python")} asks for it.
 */
public final class ChronicleSource implements TableProvider, DataSourceRegister {
    static final String NAME = "chronicle";

    @Override
    public String shortName() {
        return NAME;
    }

    /** The name aiochronicle.spark.register() gives the Python source when this one is loaded. */
    static final String PYTHON_NAME = "chronicle_python";

    /**
     * The Python data source: registered as {@code chronicle_python} by
     * {@code aiochronicle.spark.register(spark)}, else as {@code chronicle} by PySpark's
     * automatic {@code pyspark_aiochronicle} module.
     */
    private static PythonDataSourceV2 python() {
        boolean explicit = SparkSession.active().sessionState().dataSourceManager().dataSourceExists(PYTHON_NAME);
        PythonDataSourceV2 ds = new PythonDataSourceV2();
        ds.setShortName(explicit ? PYTHON_NAME : NAME);
        return ds;
    }

    /** Whether the options ask for what only the Python data source does. */
    static boolean wantsPython(Map<String, String> options) {
        CaseInsensitiveStringMap o = options instanceof CaseInsensitiveStringMap
                ? (CaseInsensitiveStringMap) options : new CaseInsensitiveStringMap(options);
        String engine = o.getOrDefault("engine", "auto").trim().toLowerCase();
        if (engine.equals("python")) {
            return true;
        }
        if (!engine.equals("auto") && !engine.equals("jvm")) {
            throw new IllegalArgumentException("option engine must be auto, jvm or python, not '" + engine + "'");
        }
        for (String k : Reading.PYTHON_OPTIONS) {
            String v = o.get(k);
            if (v != null && !v.isEmpty()) {
                if (engine.equals("jvm")) {
                    throw new IllegalArgumentException("option " + k + " needs engine python or auto");
                }
                return true;
            }
        }
        return false;
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (wantsPython(options)) {
            return python().inferSchema(options);
        }
        return new Reading(options).schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        if (wantsPython(properties) || !Reading.canProduce(schema)) {
            return python().getTable(schema, partitioning, properties);
        }
        return new ChronicleTable(schema, () -> python().getTable(schema, partitioning, properties));
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }
}
