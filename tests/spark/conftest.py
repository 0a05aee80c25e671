"""One local Spark session for every Spark test (``local[2]``, UI off).

Spark's workers are separate Python processes: they run this interpreter
(``PYSPARK_PYTHON``) with the repository root (for the ``pyspark_aiochronicle``
registration hook), this directory (for ``spark_messages``) and its parent (for
``shared_messages``, which it imports) on their path.

The session loads the JVM reader (``aiochronicle-spark.jar``, built by
``scripts/setup.sh``), so ``format("chronicle")`` reads in the JVM and hands
what it does not do to the Python data source, as it does for users.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _java_ok() -> bool:
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    assert _java_ok(), "Spark needs Java 17 or later: none on PATH or in JAVA_HOME"
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                            "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [str(ROOT), str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    from pyspark.sql import SparkSession

    from aiochronicle.spark import jar_path

    jar = jar_path()
    assert jar is not None, "the JVM reader is not built: run python jvm/build.py"
    tmp = tmp_path_factory.mktemp("spark")
    session = (SparkSession.builder.master("local[2]")
               .config("spark.jars", str(jar))
               .appName("aiochronicle-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.streaming.stopTimeout", "10s")
               .config("spark.driver.memory", "1g")
               .config("spark.local.dir", str(tmp / "local"))
               .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    session.auto_registered = _auto_registered(session, tmp)  # type: ignore[attr-defined]
    from aiochronicle.spark import register

    register(session)
    yield session
    session.stop()
    _stop_jvm()
    for k, v in saved.items():  # the tests that run after these see the old environment
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _stop_jvm() -> None:
    """End the JVM this session started (PySpark keeps it for the process's
    life otherwise, with its memory, while the other tests run)."""
    from pyspark import SparkContext

    gw = SparkContext._gateway
    if gw is None:
        return
    proc = getattr(gw, "proc", None)
    gw.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the gateway server exits when its stdin closes
        try:
            proc.wait(30)
        except Exception:
            proc.kill()


def _auto_registered(session: object, tmp: Path) -> bool:
    """Whether PySpark found ``format("chronicle")`` by itself (the
    ``pyspark_aiochronicle`` module), before any ``register`` call."""
    import aiochronicle as ac

    path = tmp / "auto"
    with ac.open_queue(path) as q:
        q.appender().append(b"x")
    try:
        return bool(session.read.format("chronicle").load(str(path)).count() == 1)  # type: ignore[attr-defined]
    except Exception:
        return False
