"""The Spark job of ``test_spark_cluster.py``: its own driver process (one
SparkContext per process, and the test process may hold a local one) on a
standalone cluster, set up as the docs say (``session_config`` + ``register``).

    python cluster_job.py SPEC.json RESULT.json     # the driver
    python cluster_job.py --writer QUEUE            # the streaming part's appender

Each part (batch, s3, stream, a damaged queue's error, and a batch read again in a second session)
records its results or its error in RESULT, so
the test of one part fails alone.  The rows of batch reads carry the pid of the
JVM that scanned them (``reflect`` runs in the scan's task) and that JVM's
command line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000
FIRST = 300
"""Excerpts the writer appends before the first streaming query starts."""
ROLL_EVERY = 1_500
LIMIT = 200_000
TAIL = 100


def writer(queue: str) -> None:
    """Append FIRST excerpts, say ``ready``; on ``go`` roll to the next cycle and
    append (about 2,000 a second, rolling every ROLL_EVERY) until ``stop``, then
    roll once more, append TAIL, and say ``done <count>``.  Payloads are ``w<n>``."""
    stop = threading.Event()
    clock = ac.SetTimeProvider(T0)
    n = 0
    with ac.open_queue(queue, time_provider=clock) as q:
        a = q.appender()

        def append() -> None:
            nonlocal n
            a.append(b"w%d" % n)
            n += 1

        for _ in range(FIRST):
            append()
        print("ready", n, flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
        clock.advance_millis(DAY)
        append()
        print("appending", flush=True)
        while not stop.is_set() and n < LIMIT:
            append()
            if (n - FIRST) % ROLL_EVERY == 0:
                clock.advance_millis(DAY)
            time.sleep(0.0005)  # pace, not order: the handshakes order
        clock.advance_millis(DAY)
        for _ in range(TAIL):
            append()
    print("done", n, flush=True)


def session(spec: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    from aiochronicle.spark import register, session_config

    tmp = Path(spec["tmp"])
    small = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
             "spark.driver.memory": "512m", "spark.executor.memory": "512m",
             "spark.executor.cores": "1", "spark.cores.max": "1",
             "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
             "spark.sql.shuffle.partitions": "1", "spark.sql.streaming.stopTimeout": "30s",
             "spark.local.dir": str(tmp / "local"),
             # the executors' Python workers import this checkout's aiochronicle
             "spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parents[2]),
             "spark.sql.warehouse.dir": str(tmp / "warehouse")}
    spark = (SparkSession.builder.master(spec["master"]).appName("aiochronicle-cluster-test")
             .config(map=session_config(s3a=spec["s3"]["settings"],
                                       jar_cache=spec["jar_cache"]))
             .config(map=small)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def scanned(spark: Any, path: str, engine: str = "jvm") -> dict[str, Any]:
    """A batch read of ``path``: its rows, plan, and the JVMs that scanned them."""
    df = spark.read.format("chronicle").option("engine", engine).load(path)
    plan = str(df._jdf.queryExecution().executedPlan().toString())
    got = df.selectExpr("index", "cycle", "sequence", "hex(payload) as payload",
                        "reflect('java.lang.ProcessHandle', 'current') as pid").collect()
    pids = sorted({int(r["pid"]) for r in got})
    return {"plan": plan, "rows": [[r["index"], r["cycle"], r["sequence"], r["payload"]]
                                   for r in got],
            "pids": pids, "cmdlines": [_cmdline(p) for p in pids],
            "partitions": df.rdd.getNumPartitions()}


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def stream(spark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """A Parquet sink fed from a queue a writer process appends to, stopped and
    restarted from its checkpoint while the writer appends."""
    import subprocess

    from pyspark.sql.streaming import StreamingQueryListener

    st = spec["stream"]
    runs: dict[str, int] = {}
    progressed = threading.Condition()

    class Progress(StreamingQueryListener):  # type: ignore[misc]
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            with progressed:
                run = str(event.progress.runId)
                runs[run] = runs.get(run, 0) + event.progress.numInputRows
                progressed.notify_all()

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark.streams.addListener(Progress())

    def start() -> Any:
        return (spark.readStream.format("chronicle").option("engine", "jvm")
                .option("maxRecordsPerTrigger", "1000").load(st["queue"])
                .writeStream.format("parquet").option("path", st["out"])
                .option("checkpointLocation", st["checkpoint"]).start())

    w = subprocess.Popen([sys.executable, __file__, "--writer", st["queue"]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert w.stdin is not None and w.stdout is not None
    try:
        assert w.stdout.readline().split() == ["ready", str(FIRST)]
        q1 = start()
        q1.processAllAvailable()  # the writer is idle: all FIRST are read
        w.stdin.write("go\n")
        w.stdin.flush()
        assert w.stdout.readline().strip() == "appending"
        q1.stop()  # while the writer appends
        stopped = q1.exception()
        q2 = start()
        with progressed:
            if not progressed.wait_for(lambda: runs.get(str(q2.runId), 0) > 0, st["timeout"]):
                raise TimeoutError("the restarted query read nothing")
        w.stdin.write("stop\n")
        w.stdin.flush()
        done = w.stdout.readline().split()
        assert done[0] == "done", done
        q2.processAllAvailable()  # the writer has stopped: everything is read
        q2.stop()
        return {"written": int(done[1]), "first": runs.get(str(q1.runId), 0),
                "second": runs.get(str(q2.runId), 0), "same_id": str(q1.id) == str(q2.id),
                "first_stop_error": None if stopped is None else str(stopped)[:500]}
    finally:
        w.stdin.close()
        w.wait(60)


def damaged(spark: Any, path: str, engine: str = "jvm") -> dict[str, Any]:
    """A read of a damaged queue: the error PySpark raises, as the user sees it."""
    try:
        spark.read.format("chronicle").option("engine", engine).load(path).collect()
    except Exception as e:
        return {"raised": f"{type(e).__name__}: {e}"[:20000]}
    return {"raised": None}


def part(result: dict[str, Any], name: str, run: Callable[[], Any]) -> None:
    try:
        result[name] = run()
    except Exception:
        result[name] = {"error": traceback.format_exc()}


def main() -> None:
    if sys.argv[1] == "--writer":
        writer(sys.argv[2])
        return
    spec = json.loads(Path(sys.argv[1]).read_text())
    # the Python workers' interpreter, on the driver and the executors (PySpark runs
    # python3 from PATH otherwise: spark.pyspark.python counts only under spark-submit)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = session(spec)
    result: dict[str, Any] = {"driver_pid": os.getpid()}
    try:
        jvm = spark.sparkContext._jvm
        result["driver_jvm_pid"] = int(jvm.java.lang.ProcessHandle.current().pid())
        part(result, "batch", lambda: scanned(spark, spec["queue"]))
        part(result, "s3", lambda: scanned(spark, spec["s3"]["url"]))
        part(result, "stream", lambda: stream(spark, spec))
        part(result, "damaged", lambda: damaged(spark, spec["damaged"]))
        # the Python data source register() gave the session, in the executors' Python
        part(result, "python", lambda: scanned(spark, spec["queue"], "python"))
        part(result, "damaged_python", lambda: damaged(spark, spec["damaged"], "python"))
        # damage found by the executors' scans, not by the driver's plan
        part(result, "damaged_scan", lambda: damaged(spark, spec["damaged_scan"]))
        part(result, "damaged_scan_python",
             lambda: damaged(spark, spec["damaged_scan"], "python"))
        # a new session on the same driver JVM, whose classes the old one loaded
        spark.stop()
        spark = session(spec)
        part(result, "again", lambda: scanned(spark, spec["queue"]))
    finally:
        Path(sys.argv[2]).write_text(json.dumps(result))
        spark.stop()


if __name__ == "__main__":
    main()
