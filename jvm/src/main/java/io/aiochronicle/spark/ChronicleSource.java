package io.aiochronicle.spark;

import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

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
 * ({@code index, cycle, sequence, payload, metadata}), msgpack queues' Struct columns
 * ({@code struct=} a Struct of scalars) and method calls in msgpack, JSON or BinaryWire
 * ({@code interface=}, arguments that are such Structs or scalars), whose schema the
 * Python side gives.  Everything
 * else (other decoded columns and codecs, other schemas, writing) is handed to
 * aiochronicle's Python data source, and {@code option("engine", "python")} asks for it.
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

    private static String engine(CaseInsensitiveStringMap o) {
        String engine = o.getOrDefault("engine", "auto").trim().toLowerCase();
        if (!engine.equals("auto") && !engine.equals("jvm") && !engine.equals("python")) {
            throw new IllegalArgumentException("option engine must be auto, jvm or python, not '" + engine + "'");
        }
        return engine;
    }

    private static CaseInsensitiveStringMap map(Map<String, String> options) {
        return options instanceof CaseInsensitiveStringMap
                ? (CaseInsensitiveStringMap) options : new CaseInsensitiveStringMap(options);
    }

    /**
     * Whether the options ask for what only the Python data source does: the struct
     * columns of a codec other than msgpack, or {@code engine=python}.
     */
    static boolean wantsPython(Map<String, String> options) {
        CaseInsensitiveStringMap o = map(options);
        String engine = engine(o);
        if (engine.equals("python")) {
            return true;
        }
        if (calls(o)) {
            return false; // method calls: the JVM reads each payload's framing, as the Python side does
        }
        String codec = o.get("codec");
        if (codec != null && !codec.isEmpty() && !codec.trim().equalsIgnoreCase("msgpack")) {
            if (engine.equals("jvm")) {
                throw new IllegalArgumentException("option codec needs engine python or auto");
            }
            return true;
        }
        if (decodes(o) && !o.containsKey("codec") && !recordsMsgpack(o)) {
            if (engine.equals("jvm")) {
                throw new IllegalArgumentException("the JVM decodes the struct columns of msgpack queues "
                        + "only (and method calls of every codec)");
            }
            return true;
        }
        return false;
    }

    /** Whether the read decodes payloads ({@code struct} or {@code interface}). */
    private static boolean decodes(CaseInsensitiveStringMap o) {
        for (String k : new String[] {"struct", "interface"}) {
            String s = o.get(k);
            if (s != null && !s.isEmpty()) {
                return true;
            }
        }
        return false;
    }

    /** Whether the read decodes method calls ({@code interface}, and no {@code struct}). */
    private static boolean calls(CaseInsensitiveStringMap o) {
        String i = o.get("interface");
        String st = o.get("struct");
        return i != null && !i.isEmpty() && (st == null || st.isEmpty());
    }

    /** Whether the queue records the msgpack codec (aiochronicle's codec key). */
    private static boolean recordsMsgpack(CaseInsensitiveStringMap o) {
        try {
            QueueFiles q = new QueueFiles(Reading.hadoopConf(), new Reading(o).path);
            Long code = q.values.get(QueueFiles.CODEC_KEY);
            return code != null && code == QueueFiles.MSGPACK;
        } catch (java.io.IOException | RuntimeException e) {
            return false; // the Python source reports what is wrong
        }
    }

    /**
     * The columns the Python side gave for a set of options (they depend on the
     * options alone, not on the queue): asked once per driver, as Python's own
     * workers import a struct's module once.
     */
    private static final Map<Map<String, String>, StructType> SCHEMAS = new ConcurrentHashMap<>();

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        if (wantsPython(options)) {
            return python().inferSchema(options);
        }
        if (decodes(options)) {
            Map<String, String> key = new TreeMap<>();
            options.forEach((k, v) -> {
                if (!k.equalsIgnoreCase("path") && !k.equalsIgnoreCase("paths")) {
                    key.put(k.toLowerCase(Locale.ROOT), v);
                }
            });
            StructType known = SCHEMAS.get(key);
            if (known == null) {
                known = python().inferSchema(options); // Python knows the decoded columns
                if (SCHEMAS.size() > 256) {
                    SCHEMAS.clear();
                }
                SCHEMAS.put(key, known);
            }
            return known;
        }
        return new Reading(options).schema();
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        CaseInsensitiveStringMap o = map(properties);
        Decoder decoder = null;
        boolean jvm = !wantsPython(o);
        if (jvm && decodes(o)) {
            String errors = o.getOrDefault("decodeErrors", "null").trim().toLowerCase();
            if (!errors.equals("null") && !errors.equals("fail")) {
                throw new IllegalArgumentException("option decodeErrors must be null or fail, not '"
                        + errors + "'");
            }
            decoder = Decoder.of(schema, errors.equals("fail"));
            jvm = decoder != null;
        } else if (jvm) {
            jvm = Reading.canProduce(schema);
        }
        if (!jvm) {
            if (engine(o).equals("jvm")) {
                throw new IllegalArgumentException("the JVM reader cannot produce the schema " + schema.simpleString());
            }
            return python().getTable(schema, partitioning, properties);
        }
        return new ChronicleTable(schema, decoder, () -> python().getTable(schema, partitioning, properties));
    }

    @Override
    public boolean supportsExternalMetadata() {
        return true;
    }
}
