"""Spark for aiochronicle: the ``chronicle`` data source and an async driver feeder.

Install with the Spark extra (``pip install aiochronicle[spark]``)::

    from aiochronicle.spark import register
    register(spark)                       # or automatic, see below
    df = spark.read.format("chronicle").load("/data/md")
    spark.readStream.format("chronicle").load("/data/md")
    df.write.format("chronicle").mode("append").save("/data/out")

Installed as a package (not editable), the top-level module
``pyspark_aiochronicle`` makes PySpark register the source by itself: PySpark 4
looks up modules named ``pyspark_*`` that define ``DefaultSource``.

:class:`Feeder` tails a queue in an asyncio task on the driver and hands
micro-batches to a callback as Arrow tables or DataFrames.

Reads run in the JVM when Spark can load ``aiochronicle-spark.jar`` (shipped in
the sdist and the wheel, see :func:`jar_path`): the raw columns are read there, from
cycle files reached through Hadoop's FileSystem API, and so are msgpack structs and
method calls of scalar fields; other decoded columns, other schemas and writing are
served by the Python data source, chosen automatically.  When the JVM reader cannot
be used, :func:`register` warns once with the reason (:class:`JvmReaderWarning`) and
``option("engine", "jvm")`` fails with it.

Nothing here is imported by ``import aiochronicle``; PySpark and PyArrow are
imported when this package's members are first used.
"""

# The top layer of the package: Spark names stay inside this folder.
# May import: ``_core``, ``_format``, ``_waiting``, ``_storage``, ``_messages``,
# ``_objects``, ``_tools``, ``_replicas``, ``_services``, ``_monitoring`` (every folder
# below).

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._core._errors import JvmReaderWarning
from ._jar import JVM_SOURCE, NO_JAR, jar_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ._feeder import Feeder, FeederStatistics
    from ._sink import ChronicleStreamWriter, ChronicleWriter, CommitMessage, committed_batch
    from ._source import (
        ChronicleDataSource,
        ChronicleReader,
        ChronicleStreamReader,
        PythonChronicleDataSource,
    )

__all__ = [
    "ChronicleDataSource",
    "ChronicleReader",
    "ChronicleStreamReader",
    "ChronicleStreamWriter",
    "ChronicleWriter",
    "CommitMessage",
    "Feeder",
    "FeederStatistics",
    "JvmReaderWarning",
    "PythonChronicleDataSource",
    "committed_batch",
    "hadoop_version",
    "jar_path",
    "jvm_reader_loaded",
    "register",
    "s3a_packages",
    "session_config",
]

_WHERE = {
    "ChronicleDataSource": "_source",
    "ChronicleReader": "_source",
    "ChronicleStreamReader": "_source",
    "PythonChronicleDataSource": "_source",
    "ChronicleStreamWriter": "_sink",
    "ChronicleWriter": "_sink",
    "CommitMessage": "_sink",
    "committed_batch": "_sink",
    "Feeder": "_feeder",
    "FeederStatistics": "_feeder",
}


#: defined with the package's other exceptions; shown where users find it
JvmReaderWarning.__module__ = __name__

_warned: list[str] = []  # the reason register() warned with, once per process


def jvm_reader_loaded(spark: SparkSession) -> bool:
    """Whether ``spark``'s JVM can load the JVM reader (then it serves ``format("chronicle")``)."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - pyspark's only way to the driver's JVM
    assert jvm is not None
    return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(JVM_SOURCE))


def _load_jvm_reader(spark: SparkSession) -> str | None:
    """Load the JVM reader into ``spark`` unless it is there; None, or why it cannot."""
    try:
        loaded = jvm_reader_loaded(spark)
    except Exception as e:  # a Spark Connect session has no JVM in this process
        return (f"this session's JVM cannot be reached from Python ({type(e).__name__}); "
                "start its Spark with spark-submit --jars aiochronicle.spark.jar_path()")
    jar = jar_path()
    if jar is None:
        return None if loaded else NO_JAR
    if not _ships_jar(spark, jar.name):
        try:
            spark.sql(f"ADD JAR '{jar}'")
        except Exception as e:
            return f"Spark refused ADD JAR '{jar}': {e}"
    if not jvm_reader_loaded(spark):
        return f"Spark added {jar} but cannot load {JVM_SOURCE} from it"
    return None


def register(spark: SparkSession) -> None:
    """Register ``format("chronicle")`` with ``spark`` (idempotent).

    Unless the session's Spark context already ships the JVM reader's jar to its
    executors (given in ``spark.jars`` or ``--jars``, or added before), the jar
    this package carries is added now with ``ADD JAR``, for the driver and every
    executor (a new context on a JVM that loaded the jar before still needs it
    added).  When the driver can then load the JVM reader, that reader is
    ``chronicle`` and the Python data source is registered as ``chronicle_python``
    for what the JVM hands to it.  Otherwise the Python data source is
    ``chronicle``, and the first such call in a process warns with the reason
    (:class:`JvmReaderWarning`).
    """
    from ._source import ChronicleDataSource, PythonChronicleDataSource

    problem = _load_jvm_reader(spark)
    if problem is None:
        spark.dataSource.register(PythonChronicleDataSource)
        return
    spark.dataSource.register(ChronicleDataSource)
    if not _warned:
        _warned.append(problem)
        warnings.warn(f"aiochronicle.spark: the JVM reader cannot be used: {problem}. "
                      "format('chronicle') reads with the Python data source, and "
                      "option('engine', 'jvm') fails", JvmReaderWarning, stacklevel=2)


def _ships_jar(spark: SparkSession, name: str) -> bool:
    """Whether ``spark``'s context ships a jar called ``name`` to its executors.
    (The driver may load classes of a jar that a context stopped before it had:
    a new context on the same JVM does not ship it.)"""
    jsc = spark.sparkContext._jsc  # noqa: SLF001 - pyspark lists the shipped jars only in Java
    listed = str(jsc.sc().listJars().mkString("\n"))
    return any(url.rsplit("/", 1)[-1] == name for url in listed.splitlines())


_AWS_SDK_FOR_HADOOP = {"3.5.0": "2.35.4"}
"""The AWS SDK v2 version each Hadoop release's ``hadoop-aws`` is built against
(``aws-java-sdk-v2.version`` in Hadoop's ``hadoop-project`` POM)."""

_AWS_SDK_BUNDLE = "software.amazon.awssdk:bundle"
"""The AWS SDK in one shaded jar (686 MB) that ``hadoop-aws`` depends on;
:func:`session_config` leaves it out for the two SDK modules S3A uses."""


def hadoop_version() -> str:
    """The version of the Hadoop client bundled with the installed PySpark."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).resolve().parent / "jars").glob(
        "hadoop-client-api-*.jar"))
    if len(jars) != 1:
        raise ValueError(f"expected one hadoop-client-api jar in PySpark, found {len(jars)}")
    return jars[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def s3a_packages(hadoop: str | None = None, aws_sdk: str | None = None) -> list[str]:
    """The Maven coordinates Hadoop's S3A connector needs: ``hadoop-aws`` of
    ``hadoop`` (default: PySpark's own Hadoop) and the AWS SDK v2 modules ``s3``
    and ``s3-transfer-manager`` of ``aws_sdk`` (default: the version that
    ``hadoop-aws`` release is built against), instead of the SDK bundle."""
    hadoop = hadoop or hadoop_version()
    aws_sdk = aws_sdk or _AWS_SDK_FOR_HADOOP.get(hadoop)
    if aws_sdk is None:
        raise ValueError(f"no known AWS SDK version for Hadoop {hadoop}: pass aws_sdk= "
                         "(hadoop-project's aws-java-sdk-v2.version for that release)")
    return [f"org.apache.hadoop:hadoop-aws:{hadoop}",
            f"software.amazon.awssdk:s3:{aws_sdk}",
            f"software.amazon.awssdk:s3-transfer-manager:{aws_sdk}"]


def session_config(*, s3a: bool | Mapping[str, str] = False, packages: Iterable[str] = (),
                   excludes: Iterable[str] = (),
                   jar_cache: bool | str | Path = False) -> dict[str, str]:
    """Settings for ``SparkSession.builder.config(map=...)`` that bring Maven
    packages to the driver and every executor, and S3A's when ``s3a`` is given.

    ``s3a``: true, or a mapping of S3A settings without their ``fs.s3a.`` prefix
    (``{"endpoint": ..., "path.style.access": "true"}``, which become
    ``spark.hadoop.fs.s3a.*``), adds :func:`s3a_packages` and excludes the SDK
    bundle.  ``packages`` (``group:artifact:version``) and ``excludes``
    (``group:artifact``) are more of Spark's ``spark.jars.packages`` and
    ``spark.jars.excludes``.

    The JVM reader's jar is not among them: call :func:`register` on the new
    session, which adds it (``ADD JAR``) for the driver and the executors.  A
    ``spark.jars`` set on PySpark's builder would replace the jars that
    ``spark.jars.packages`` resolved, and executors would miss them.

    ``jar_cache``: resolve the packages once rather than at every driver start.
    True (a file under ``$XDG_CACHE_HOME/aiochronicle``, else
    ``~/.cache/aiochronicle``) or a file path: the first call starts a JVM of its
    own (``spark-submit`` with the packages, so Spark's Ivy resolves them from
    Maven Central or its cache as a driver would) and writes the jars it resolved
    to that file; later calls for the same packages read them, and the settings
    name them in ``spark.jars`` instead of ``spark.jars.packages``, so the driver
    resolves nothing.  A list whose jars are gone is resolved again.  Under
    ``spark-submit`` (the JVM is already running) it is ignored: give
    ``--packages`` there.
    """
    pkgs = list(packages)
    excl = list(excludes)
    conf: dict[str, str] = {}
    if s3a is not False:
        pkgs = [*s3a_packages(), *pkgs]
        excl = [_AWS_SDK_BUNDLE, *excl]
        if not isinstance(s3a, bool):
            for key, value in s3a.items():
                conf[f"spark.hadoop.fs.s3a.{key.removeprefix('fs.s3a.')}"] = str(value)
    if pkgs and jar_cache is not False and "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf["spark.jars"] = ",".join(_resolved_jars(pkgs, excl, _cache_file(jar_cache)))
        return conf
    if pkgs:
        conf["spark.jars.packages"] = ",".join(pkgs)
    if excl:
        conf["spark.jars.excludes"] = ",".join(excl)
    return conf


def _cache_file(jar_cache: bool | str | Path) -> Path:
    if not isinstance(jar_cache, bool):
        return Path(jar_cache)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "aiochronicle" / "spark-jars.json"


def _resolved_jars(packages: list[str], excludes: list[str], cache: Path) -> list[str]:
    """The jars Spark resolves for ``packages`` (less ``excludes``): from ``cache``
    when it lists them for these packages and this PySpark and they all exist,
    else resolved now by a JVM of Spark's own and written to ``cache``."""
    import json

    import pyspark

    key = json.dumps({"pyspark": pyspark.__version__, "packages": packages,
                      "excludes": excludes})
    try:
        kept = json.loads(cache.read_text())
    except (OSError, ValueError):
        kept = {}
    jars = kept.get(key) if isinstance(kept, dict) else None
    if isinstance(jars, list) and jars and all(
            Path(j.removeprefix("file://")).is_file() for j in jars):
        return [str(j) for j in jars]
    jars = _resolve(packages, excludes)
    kept = kept if isinstance(kept, dict) else {}
    kept[key] = jars
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(kept, indent=1))
    tmp.replace(cache)
    return jars


def _resolve(packages: list[str], excludes: list[str]) -> list[str]:
    """Resolve ``packages`` as a driver start does (``spark-submit`` with them, in
    a JVM of its own that ends here): the local paths of the jars, in Spark's order."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).set("spark.jars.packages", ",".join(packages))
    if excludes:
        conf.set("spark.jars.excludes", ",".join(excludes))
    gateway = launch_gateway(conf)  # type: ignore[no-untyped-call]
    try:
        listed = str(gateway.jvm.java.lang.System.getProperty("spark.jars") or "")
    finally:
        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        if proc is not None:  # the gateway's JVM ends when its standard input closes
            proc.stdin.close()
            proc.wait()
    jars = [j.removeprefix("file:").lstrip("/") for j in listed.split(",") if j]
    if not jars:
        raise RuntimeError(f"Spark resolved no jars for {','.join(packages)}")
    return ["/" + j for j in jars]


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'aiochronicle.spark' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
