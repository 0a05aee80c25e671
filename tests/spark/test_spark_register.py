"""What a user gets from ``pip install "aiochronicle[spark]"``: ``register(spark)`` on a
session started with no jar configured reads through the JVM reader (the plan has no
Python scan); an install without the jar warns once with the reason, reads through the
Python data source, and ``option("engine", "jvm")`` fails with that reason.

Each case is a fresh Python process with its own Spark (the session of the other Spark
tests was started with the jar already in ``spark.jars``).  Run against the installed
wheel (``scripts/test.sh``'s packaging step) this is the installed package's own jar."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac
from aiochronicle.spark._jar import NO_JAR, jar_path

pytestmark = pytest.mark.slow

USER = textwrap.dedent("""
    import json, sys, warnings
    from pyspark.sql import SparkSession
    import aiochronicle.spark as acs

    queue, local = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.master("local[1]").appName("register")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "512m")
             .config("spark.local.dir", local)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = {"jar": str(acs.jar_path()) if acs.jar_path() else None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acs.register(spark)
        acs.register(spark)  # idempotent, and warns at most once
    out["warnings"] = [str(w.message) for w in caught if w.category is acs.JvmReaderWarning]
    out["loaded"] = acs.jvm_reader_loaded(spark)
    df = spark.read.format("chronicle").load(queue)
    out["plan"] = df._jdf.queryExecution().executedPlan().toString()
    out["rows"] = [[r["index"], bytes(r["payload"]).decode()] for r in df.collect()]
    try:
        spark.read.format("chronicle").option("engine", "jvm").load(queue).collect()
        out["engine_jvm"] = "read"
    except Exception as e:
        out["engine_jvm"] = str(e)
    spark.stop()
    print("RESULT " + json.dumps(out))
""")


def _queue(path: Path) -> list[list[Any]]:
    with ac.open_queue(path) as q:
        a = q.appender()
        return [[a.append(f"m{i}".encode()), f"m{i}"] for i in range(5)]


def _run_user(tmp_path: Path, env: dict[str, str]) -> dict[str, Any]:
    expected = _queue(tmp_path / "q")
    env = dict(env, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    r = subprocess.run([sys.executable, "-c", USER, str(tmp_path / "q"), str(tmp_path / "local")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    out: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    assert out["rows"] == expected  # whichever reader served it, the same rows
    return out


def _env() -> dict[str, str]:
    # this interpreter's packages, and nothing of the other Spark tests' PYTHONPATH
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_register_reads_through_the_jvm_reader_this_install_carries(tmp_path: Path) -> None:
    jar = jar_path()
    assert jar is not None, "this install carries no aiochronicle-spark.jar"
    out = _run_user(tmp_path, _env())
    assert out["jar"] == str(jar)
    assert out["warnings"] == []
    assert out["loaded"] is True
    assert "BatchScan chronicle[" in out["plan"] and "(Python)" not in out["plan"], out["plan"]
    assert out["engine_jvm"] == "read"


def test_without_the_jar_register_warns_once_and_engine_jvm_fails(tmp_path: Path) -> None:
    """The installed package copied without its jar: what an install built with
    neither Maven nor javac gets."""
    site = tmp_path / "site"
    shutil.copytree(Path(ac.__file__).resolve().parent, site / "aiochronicle",
                    ignore=shutil.ignore_patterns("aiochronicle-spark.jar", "__pycache__"))
    env = dict(_env(), PYTHONPATH=str(site))
    out = _run_user(tmp_path, env)
    assert out["jar"] is None and out["loaded"] is False
    (warning,) = out["warnings"]
    assert "the JVM reader cannot be used" in warning and NO_JAR in warning, warning
    assert "(Python)" in out["plan"], out["plan"]
    assert "option engine=jvm: the JVM reader is not serving this read" in out["engine_jvm"]
    assert NO_JAR in out["engine_jvm"], out["engine_jvm"]


JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from aiochronicle.spark import jvm_reader_loaded, register
    spark = SparkSession.builder.config("spark.ui.enabled", "false").getOrCreate()
    loaded_at_start = jvm_reader_loaded(spark)
    register(spark)
    df = spark.read.format("chronicle").option("engine", "jvm").load(sys.argv[1])
    print("JOB", loaded_at_start, df.count())
    spark.stop()
""")


def test_the_docs_spark_submit_command_runs_as_printed(tmp_path: Path) -> None:
    """docs/spark.md's ``spark-submit --jars "$(python -c ...)" job.py``, run by bash as
    printed (a ``job.py`` of ours reading a queue), with this interpreter's ``python``
    and PySpark's ``spark-submit`` first on PATH: the job's JVM has the reader from the
    start."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "spark.md").read_text()
    (command,) = [ln for ln in text.splitlines()
                  if ln.startswith("spark-submit --jars ") and ln.endswith(" job.py")]
    expected = _queue(tmp_path / "q")
    (tmp_path / "job.py").write_text(JOB)
    env = dict(_env(), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    r = subprocess.run(["bash", "-c", f"{command} {tmp_path / 'q'}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"JOB True {len(expected)}" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
