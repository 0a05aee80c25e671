"""Spark over Chronicle queues: batch read rate against Parquet, streaming and feeder latency.

Run:  .venv/bin/python bench/spark.py [--quick] [--rows N] [--payload BYTES] [--dir DIR]
      [--cluster] [--write-docs]

One local Spark session (``local[2]``), in one run:

* **batch read, raw columns**: ``spark.read.format("chronicle").load(queue)``
  (the JVM reader, and the Python data source with ``engine=python``) against
  ``spark.read.parquet(...)`` of the very same rows (``index``, ``cycle``,
  ``sequence``, ``payload``: distinct random payloads in three daily cycles, written
  by PyArrow, snappy, one file a cycle), each aggregated over every column
  (``sum(length(payload)), max(index), sum(sequence), count(cycle)``).
* **batch read, decoded columns**: a queue of msgpack ``Quote`` Structs read with
  ``option("struct", "_spark_messages:Quote")`` (decoded in the JVM; and by the
  Python data source) against Parquet holding the same decoded columns, each
  aggregated over every column.  Best of ``--repeat`` runs; rows/s and the
  ratio to Parquet, and the CPU time the Spark JVM spent on the query (best of
  the runs too): on a shared machine the wall time moves with other load, the
  CPU time much less.
* **streaming latency**: an appender writes excerpts carrying
  ``time.monotonic_ns()`` at ``--rate`` per second; a streaming query
  (``readStream`` chronicle -> ``writeStream`` chronicle, a ``--trigger`` ms
  processing-time trigger) copies them to a second queue, which this process
  tails; latency = time seen in the second queue - time written.  p50/p95.
* **feeder latency**: the same appender; a :class:`aiochronicle.spark.Feeder`
  on the driver's event loop (asyncio; ``--uvloop`` for uvloop) hands micro-batches to a
  callback, as Arrow tables and as Spark DataFrames (``createDataFrame`` of
  the table included); latency = callback time - time written, per excerpt.
  p50/p95.  What a Spark action on such a DataFrame then costs is printed
  beside it (it is the callback's work, not the feeder's).
* with ``--cluster``, **batch reads on a standalone cluster**: the JVM reader's
  cases and their Parquet baselines again, on a master and a worker (two cores)
  started from PySpark's ``spark-class`` on this host, the scans in the
  worker's executor JVM, not the driver's.

This machine is small and shared (2 vCPU): compare the figures within one run.
``--write-docs`` puts the tables into docs/performance.md (the ``spark-bench``
block) and plots docs/spark.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
from typing import Any

# bench/ is on sys.path (the script's directory); aiochronicle is the installed
# package: the source tree has no built native core, so it is never put on the path
import _report  # bench/_report.py

import aiochronicle as ac

TS = struct.Struct("<q")


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


SMALL = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
         "spark.sql.shuffle.partitions": "2"}


def session(master: str = "local[2]", **conf: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Spark's Python workers import _spark_messages from this directory
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (_report.BENCH, os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(master).appName("aiochronicle-bench")
         .config("spark.driver.memory", "2g").config(map={**SMALL, **conf}).getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    from aiochronicle.spark import jvm_reader_loaded, register

    register(s)  # loads the JVM reader shipped with aiochronicle
    if not jvm_reader_loaded(s):
        print("  note: no JVM reader (aiochronicle built without javac): Python source only")
    return s


# -- batch ---------------------------------------------------------------------


CYCLES = 3
"""Daily cycles each queue spans (and Parquet files each copy has, one per cycle)."""


def _parts(rows: int) -> list[int]:
    return [rows // CYCLES + (1 if k < rows % CYCLES else 0) for k in range(CYCLES)]


def _cycles(qdir: str, rows: int, chunks: Any) -> None:
    """``rows`` excerpts in :data:`CYCLES` daily cycles, appended in packed chunks of
    (bytes, offsets) from ``chunks(n)``."""
    clock = ac.SetTimeProvider(1_637_251_500_000)
    with ac.open_queue(qdir, time_provider=clock) as q:
        a = q.appender()
        for n in _parts(rows):
            step = 50_000
            for s in range(0, n, step):
                data, offsets = chunks(min(step, n - s))
                a.append_packed(data, offsets)
            clock.advance_millis(86_400_000)


def _parquet(qdir: str, pdir: str, rows: int, columns: Any) -> None:
    """The rows of ``qdir`` in one Parquet file a cycle: index, cycle, sequence and
    ``columns(batch)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(pdir)
    with ac.open_queue(qdir, read_only=True) as q:
        t = q.tailer()
        shift = q.roll_cycle.cycle_shift
        for part, want in enumerate(_parts(rows)):
            batches = []
            got = 0
            while got < want:
                b = t.read_many(min(65536, want - got), 16 << 20)
                idx = pa.array(b.indices, pa.int64())
                batches.append(pa.record_batch({
                    "index": idx,
                    "cycle": pa.compute.shift_right(idx, shift).cast(pa.int32()),
                    "sequence": pa.compute.bit_wise_and(idx, (1 << shift) - 1),
                    **columns(b)}))
                got += len(b)
            pq.write_table(pa.Table.from_batches(batches),
                           os.path.join(pdir, f"part-{part}.parquet"), compression="snappy")


def make_data(base: str, rows: int, payload: int) -> tuple[str, str, str, str]:
    """A queue of distinct random payloads and one of msgpack Quotes, each with a
    Parquet copy of the same columns (raw, and decoded)."""
    import msgspec
    import pyarrow as pa
    from _spark_messages import Quote

    qdir, pdir = os.path.join(base, "queue"), os.path.join(base, "parquet")

    def randoms(k: int) -> tuple[bytes, list[int]]:
        return os.urandom(payload * k), list(range(0, payload * k + 1, payload))

    _cycles(qdir, rows, randoms)
    _parquet(qdir, pdir, rows, lambda b: {"payload": pa.array(b.payloads(), pa.binary())})

    sdir, spdir = os.path.join(base, "structs"), os.path.join(base, "structs-parquet")
    enc = msgspec.msgpack.Encoder()
    symbols = [f"SYM{i:03d}" for i in range(500)]
    seq = iter(range(rows))

    def quotes(k: int) -> tuple[bytes, list[int]]:
        out = bytearray()
        offsets = [0]
        for _ in range(k):
            i = next(seq)
            px = (i * 7919 % 100_000) / 100
            out += enc.encode(Quote(symbols[i % 500], px, px + 0.01, i % 1000 + 1, i))
            offsets.append(len(out))
        return bytes(out), offsets

    with ac.open_queue(sdir) as q:
        ac.set_queue_codec(q, "msgpack")
    _cycles(sdir, rows, quotes)
    dec = msgspec.msgpack.Decoder(Quote)

    def decoded(b: Any) -> dict[str, Any]:
        qs = [dec.decode(p) for p in b.payloads()]
        return {"symbol": pa.array([x.symbol for x in qs], pa.string()),
                "bid": pa.array([x.bid for x in qs], pa.float64()),
                "ask": pa.array([x.ask for x in qs], pa.float64()),
                "qty": pa.array([x.qty for x in qs], pa.int64()),
                "seq": pa.array([x.seq for x in qs], pa.int64())}

    _parquet(sdir, spdir, rows, decoded)
    return qdir, pdir, sdir, spdir


RAW_AGG = ["sum(length(payload))", "max(index)", "sum(sequence)", "count(cycle) as n"]
DECODED_AGG = ["count(*) as n", "max(index)", "max(cycle)", "sum(sequence)",
               "max(length(symbol))", "sum(bid)", "sum(ask)", "sum(qty)", "sum(seq)"]

BASELINES = {"chronicle JVM, raw columns": "Parquet, raw columns",
             "chronicle Python, raw columns": "Parquet, raw columns",
             "chronicle JVM, decoded struct": "Parquet, decoded columns",
             "chronicle Python, decoded struct": "Parquet, decoded columns"}
"""Each batch source's baseline: Parquet holding the same columns."""

CLUSTER = " (standalone cluster)"
"""The suffix of the batch sources' names when read on the standalone cluster."""

CLUSTER_CASES = ("Parquet, raw columns", "chronicle JVM, raw columns",
                 "Parquet, decoded columns", "chronicle JVM, decoded struct")
"""The batch sources read again on the standalone cluster (the JVM reader and its
baselines: the Python data source's workers are the same processes as in local mode)."""


def baseline(name: str) -> str:
    """The name of ``name``'s baseline (on the cluster too), or ``""``."""
    base = name.removesuffix(CLUSTER)
    return BASELINES[base] + name[len(base):] if base in BASELINES else ""


def bench_batch(spark: Any, data: tuple[str, str, str, str], repeat: int,
                only: tuple[str, ...] | None = None, suffix: str = ""
                ) -> dict[str, dict[str, float]]:
    """Per source (of ``only``, default all; its name + ``suffix``): rows read,
    the best time (s) and rows/s."""
    qdir, pdir, sdir, spdir = data

    def chronicle(path: str, engine: str, **opts: str) -> Any:
        r = spark.read.format("chronicle").option("engine", engine)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load(path)

    struct = {"struct": "_spark_messages:Quote", "includePayload": "false"}
    cases = [
        ("Parquet, raw columns", RAW_AGG, lambda: spark.read.parquet(pdir)),
        ("chronicle JVM, raw columns", RAW_AGG, lambda: chronicle(qdir, "jvm")),
        ("chronicle Python, raw columns", RAW_AGG, lambda: chronicle(qdir, "python")),
        ("Parquet, decoded columns", DECODED_AGG, lambda: spark.read.parquet(spdir)),
        ("chronicle JVM, decoded struct", DECODED_AGG,
         lambda: chronicle(sdir, "jvm", **struct)),
        ("chronicle Python, decoded struct", DECODED_AGG,
         lambda: chronicle(sdir, "python", **struct)),
    ]
    cases = [(name + suffix, agg, load) for name, agg, load in cases
             if only is None or name in only]
    width = max(34, *(len(name) for name, _, _ in cases))
    jvm_cpu = _jvm_cpu(spark)
    # round-robin: every repetition runs each source in turn, so a burst of other
    # work on this shared machine slows all of them, not one; best per source
    best: dict[str, float] = {}
    cpu: dict[str, float] = {}
    rows: dict[str, int] = {}
    for rep in range(repeat + 1):  # the first round is a warm-up (JIT, workers, caches)
        for name, agg, load in cases:
            if rep and name not in best:
                continue  # failed in the warm-up
            c0 = jvm_cpu()
            t0 = time.perf_counter()
            try:
                r = load().selectExpr(*agg).collect()[0]
            except Exception as exc:  # the JVM reader missing: say so, go on
                print(f"  {name:{width}s} failed: {str(exc).splitlines()[0][:100]}", flush=True)
                continue
            took = time.perf_counter() - t0
            used = jvm_cpu() - c0
            rows[name] = r["n"]
            best[name] = min(best.get(name, float("inf")), took) if rep else float("inf")
            cpu[name] = min(cpu.get(name, float("inf")), used) if rep else float("inf")
    out: dict[str, dict[str, float]] = {}
    for name, _, _ in cases:
        if name not in best:
            continue
        out[name] = {"rows": rows[name], "seconds": best[name], "rate": rows[name] / best[name],
                     "cpu": cpu[name]}
        base = out.get(baseline(name))
        vs = (f"  {out[name]['rate'] / base['rate']:5.2f}x Parquet, by CPU "
              f"{base['cpu'] / max(cpu[name], 1e-9):5.2f}x") if base else ""
        print(f"  {name:{width}s} {rows[name]:>10,} rows  best {best[name]:6.3f} s  "
              f"{out[name]['rate']:>12,.0f} rows/s  JVM CPU {cpu[name]:6.2f} s{vs}", flush=True)
    return out


def bench_cluster(base: str, data: tuple[str, str, str, str], repeat: int,
                  memory: str) -> dict[str, dict[str, float]]:
    """:data:`CLUSTER_CASES` on a standalone cluster on this host (a master and a
    worker of two cores, as separate JVMs; one executor of ``memory``)."""
    from pathlib import Path

    from _standalone import standalone_cluster

    worker = f"{int(memory.rstrip('g')) + 1}g"
    with standalone_cluster(Path(base) / "cluster", cores=2, memory=worker) as url:
        spark = session(url, **{"spark.driver.host": "127.0.0.1",
                                "spark.driver.bindAddress": "127.0.0.1",
                                "spark.executor.memory": memory, "spark.executor.cores": "2",
                                "spark.cores.max": "2"})
        try:
            return bench_batch(spark, data, repeat, CLUSTER_CASES, CLUSTER)
        finally:
            spark.stop()


def _jvm_cpu(spark: Any) -> Any:
    """A clock of the CPU seconds the Spark JVM (driver and local executors; on a
    cluster the driver alone) has used;
    it reads 0 where /proc does not tell (the Python workers are not counted)."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    return read


# -- latency -------------------------------------------------------------------


def paced_appender(path: str, rate: float, seconds: float,
                   stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with ac.open_queue(path) as q:
            a = q.appender()
            n = int(rate * seconds)
            t0 = time.monotonic()
            for i in range(n):
                if stop.is_set():
                    return
                a.append(TS.pack(time.monotonic_ns()) + b"x" * 24)
                delay = t0 + (i + 1) / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def bench_stream(spark: Any, base: str, rate: float, seconds: float,
                 trigger_ms: float) -> tuple[list[float], dict[str, float]]:
    """Latencies (ms), and the mean durations (ms) of the micro-batches' phases."""
    src, dst = os.path.join(base, "s-src"), os.path.join(base, "s-dst")
    with ac.open_queue(src):
        pass
    query = (spark.readStream.format("chronicle").option("startingIndex", "latest").load(src)
             .writeStream.format("chronicle")
             .option("checkpointLocation", os.path.join(base, "s-ckpt"))
             .trigger(processingTime=f"{trigger_ms:g} milliseconds").start(dst))
    lat: list[float] = []
    # warm up at the measured rate until the query keeps up (the first micro-batches
    # start Spark's Python workers and JIT-compile both sides): latencies under
    # 1.5 trigger intervals + 0.5 s for a second (at most 30 s); none of it is counted
    with ac.open_queue(dst) as q:
        t = q.tailer()
        stop = threading.Event()
        th = paced_appender(src, rate, 60.0, stop)
        begin = time.monotonic()
        keeping_up: float | None = None
        while time.monotonic() < begin + 30:
            ex = t.read_nowait()
            if ex is None:
                time.sleep(0.0005)
                continue
            now = time.monotonic()
            if (time.monotonic_ns() - TS.unpack_from(ex.payload)[0]) / 1e6 > 1.5 * trigger_ms + 500:
                keeping_up = None
            elif keeping_up is None:
                keeping_up = now
            elif now - keeping_up > 1.0:
                break
        stop.set()
        th.join()
        last = time.monotonic()
        while time.monotonic() - last < 1.0:  # drain the warm-up excerpts
            if t.read_nowait() is None:
                time.sleep(0.001)
            else:
                last = time.monotonic()
        stop = threading.Event()
        th = paced_appender(src, rate, seconds, stop)
        want = int(rate * seconds)
        deadline = time.monotonic() + seconds + 60
        while len(lat) < want and time.monotonic() < deadline:
            ex = t.read_nowait()
            if ex is None:
                time.sleep(0.0005)
                continue
            lat.append((time.monotonic_ns() - TS.unpack_from(ex.payload)[0]) / 1e6)
    stop.set()
    th.join()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    query.stop()
    means: dict[str, float] = {}
    if progress:
        keys = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets",
                "triggerExecution")
        means = {k: statistics.mean(p["durationMs"].get(k, 0) for p in progress) for k in keys}
        print(f"  {len(progress)} micro-batches with rows; mean ms per batch: "
              + ", ".join(f"{k} {v:.0f}" for k, v in means.items()), flush=True)
    return lat, means


def bench_feeder(spark: Any, base: str, rate: float, seconds: float, with_df: bool,
                 linger: float, use_uvloop: bool = False) -> tuple[list[float], list[float]]:
    """Latencies append -> callback (ms), and, with DataFrames, the time of a
    ``count()`` on a few of the micro-batch DataFrames (ms)."""
    from aiochronicle.spark import Feeder

    path = os.path.join(base, f"f-{int(with_df)}")
    with ac.open_queue(path):
        pass
    lat: list[float] = []
    actions: list[float] = []
    want = int(rate * seconds)

    def on_batch(b: Any) -> None:
        now = time.monotonic_ns()
        for p in b.table.column("payload").to_pylist():
            lat.append((now - TS.unpack_from(p)[0]) / 1e6)
        if b.df is not None and len(actions) < 5 and len(lat) > want // 2:
            t0 = time.perf_counter()
            b.df.count()  # what a Spark action on one micro-batch costs
            actions.append((time.perf_counter() - t0) * 1e3)

    async def main() -> None:
        with ac.open_queue(path) as q:
            feeder = Feeder(q, on_batch, spark=spark if with_df else None, start="end",
                            max_rows=5000, linger=linger)
            task = feeder.start()
            stop = threading.Event()
            th = paced_appender(path, rate, seconds, stop)
            deadline = time.monotonic() + seconds + 60
            while len(lat) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            stop.set()
            feeder.stop()
            await task
            feeder.close()
            th.join()

    if use_uvloop:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())
    return lat, actions


def summary(lat: list[float]) -> dict[str, float]:
    return {"n": len(lat), "p50": statistics.median(lat), "p95": pct(lat, 95),
            "max": max(lat)} if lat else {"n": 0}


def report(name: str, lat: list[float]) -> None:
    if not lat:
        print(f"  {name:34s} no samples")
        return
    print(f"  {name:34s} n={len(lat):>6,}  p50 {statistics.median(lat):8.2f} ms  "
          f"p95 {pct(lat, 95):8.2f} ms  max {max(lat):8.2f} ms", flush=True)


def docs_lines(batch: dict[str, dict[str, float]], lats: list[tuple[str, dict[str, float]]],
               means: dict[str, float], actions: list[float], args: argparse.Namespace
               ) -> list[str]:
    rows = []
    for name, b in batch.items():
        base = batch.get(baseline(name))
        rows.append([name, f"{b['rows']:,.0f}", f"{b['seconds']:.2f}", _report.rate(b["rate"]),
                     _report.ratio(b["rate"], base["rate"]) if base else "-",
                     f"{b['cpu']:.2f}",
                     _report.ratio(base["cpu"], b["cpu"]) if base and b["cpu"] else "-"])
    out = [f"Batch reads of {args.rows:,} rows in {CYCLES} cycles (raw: distinct random "
           f"{args.payload}-byte payloads; decoded: msgpack `Quote` Structs of 5 fields), each "
           f"aggregated over every column it has, best of {args.repeat}; ratio against Parquet "
           "holding the same columns, by wall time and by the CPU time of the Spark JVM:", "",
           *_report.table(["source", "rows", "best s", "rows/s", "vs Parquet", "JVM CPU s",
                           "vs Parquet (CPU)"], rows), ""]
    base = dict(lats).get("Spark streaming (readStream -> writeStream)", {})
    rows = []
    for name, st in lats:
        if not st.get("n"):
            rows.append([name, "0", "-", "-", "-", "-", "-"])
            continue
        rows.append([name, f"{st['n']:,.0f}", f"{st['p50']:.1f}", f"{st['p95']:.1f}",
                     f"{st['max']:.1f}",
                     _report.ratio(st["p50"], base.get("p50", 0.0)),
                     _report.ratio(st["p95"], base.get("p95", 0.0))])
    out += [f"Latency from `append` to where the excerpt is seen, in ms, at "
            f"{args.rate:,.0f} excerpts/s for {args.seconds:g} s (streaming trigger "
            f"{args.trigger:g} ms; feeder linger {args.linger * 1e3:g} ms); ratios against "
            "Spark streaming:", "",
            *_report.table(["path", "samples", "p50 ms", "p95 ms", "max ms",
                            "p50 / streaming", "p95 / streaming"], rows)]
    notes = []
    if means:
        notes.append("A streaming micro-batch with rows took "
                     f"{means.get('triggerExecution', 0):.0f} ms on average (of which "
                     f"`addBatch` {means.get('addBatch', 0):.0f} ms, "
                     f"`walCommit` {means.get('walCommit', 0):.0f} ms, "
                     f"`commitOffsets` {means.get('commitOffsets', 0):.0f} ms)")
    if actions:
        notes.append(f"a `count()` on one micro-batch DataFrame in the callback took "
                     f"{statistics.median(actions):.0f} ms (median of {len(actions)})")
    if notes:
        out += ["", "; ".join(notes) + "."]
    return out


def plot(batch: dict[str, dict[str, float]], lats: list[tuple[str, dict[str, float]]],
         name: str) -> bool:
    plt = _report.pyplot()
    if plt is None:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=_report.FIGSIZE)
    names = list(batch)
    colors = ["#999999" if n.startswith("Parquet") else "#3182bd" if "JVM" in n
              else "#9ecae1" for n in names]
    left.barh(range(len(names)), [batch[n]["rate"] / 1e6 for n in names], color=colors)
    left.set_yticks(range(len(names)))
    left.set_yticklabels([n.replace(", ", "\n") for n in names], fontsize=7)
    left.invert_yaxis()
    left.set_xlabel("million rows/s")
    left.set_title("batch read", fontsize=10)
    left.grid(True, axis="x", alpha=0.3)
    shown = [(n, st) for n, st in lats if st.get("n")]
    short = {"Spark streaming (readStream -> writeStream)": "streaming\nqueue->queue"}
    labels = [short.get(n, n.replace(", ", "\n", 1)) for n, _ in shown]
    width = 0.38
    for k, (p, color) in enumerate((("p50", "#3182bd"), ("p95", "#9ecae1"))):
        xs = [i + (k - 0.5) * width for i in range(len(shown))]
        right.bar(xs, [st[p] for _, st in shown], width, label=p, color=color)
    right.set_xticks(range(len(shown)))
    right.set_xticklabels(labels, fontsize=8)
    right.set_yscale("log")
    right.set_ylabel("ms from append (log)")
    right.set_title("latency", fontsize=10)
    right.grid(True, axis="y", which="both", alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle("Spark local[2]: chronicle source/sink and driver feeder")
    fig.tight_layout()
    _report.save(fig, name)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--payload", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rate", type=float, default=10_000.0,
                    help="excerpts/s for the latencies")
    ap.add_argument("--trigger", type=float, default=100.0,
                    help="streaming: the processing-time trigger, ms")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--linger", type=float, default=0.002,
                    help="feeder: seconds a micro-batch waits for more after its first")
    ap.add_argument("--uvloop", action="store_true", help="run the feeder on uvloop")
    ap.add_argument("--cluster", action="store_true",
                    help="also read the JVM reader's batch cases and their Parquet baselines "
                         "on a standalone cluster (master, worker, executor JVMs) on this host")
    ap.add_argument("--executor-memory", default="2g", help="--cluster: the executor's memory")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--write-docs", action="store_true",
                    help="write the tables into docs/performance.md and docs/spark.png")
    args = ap.parse_args(argv)
    if args.quick:
        args.rows, args.repeat, args.seconds = 200_000, 2, 3.0
    base = args.dir or tempfile.mkdtemp(prefix="bench-spark-")
    os.makedirs(base, exist_ok=True)
    load0 = _report.load()
    t_start = time.monotonic()
    lats: list[tuple[str, dict[str, float]]] = []
    try:
        print(f"spark bench: {args.rows:,} rows of {args.payload} B, latency at "
              f"{args.rate:,.0f}/s for {args.seconds:.0f} s; load average "
              f"{load0:.2f}", flush=True)
        t0 = time.perf_counter()
        spark = session()
        print(f"  (session started in {time.perf_counter() - t0:.1f} s)", flush=True)
        data = make_data(base, args.rows, args.payload)
        print("batch read:")
        batch = bench_batch(spark, data, args.repeat)
        print("streaming end to end (queue -> Spark micro-batch -> queue):")
        lat, means = bench_stream(spark, base, args.rate, args.seconds, args.trigger)
        report("readStream -> writeStream", lat)
        lats.append(("Spark streaming (readStream -> writeStream)", summary(lat)))
        print(f"driver feeder (append -> callback; linger {args.linger * 1e3:g} ms):")
        loop = "uvloop" if args.uvloop else "asyncio"
        lat, _ = bench_feeder(spark, base, args.rate, args.seconds, False, args.linger,
                              args.uvloop)
        report(f"Feeder, Arrow table ({loop})", lat)
        lats.append((f"Feeder, Arrow table ({loop})", summary(lat)))
        lat, actions = bench_feeder(spark, base, args.rate, args.seconds, True, args.linger,
                                    args.uvloop)
        report(f"Feeder, DataFrame ({loop})", lat)
        lats.append((f"Feeder, DataFrame ({loop})", summary(lat)))
        if actions:
            print(f"  (a count() on one micro-batch DataFrame: median "
                  f"{statistics.median(actions):.0f} ms of {len(actions)})", flush=True)
        version = spark.version
        spark.stop()
        if args.cluster:
            print("batch read on a standalone cluster (1 worker, 2 cores, executor "
                  f"{args.executor_memory}):", flush=True)
            batch.update(bench_cluster(base, data, args.repeat, args.executor_memory))
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    load1 = _report.load()
    print(f"total {time.monotonic() - t_start:.0f} s; load average {load1:.2f}", flush=True)
    if args.write_docs:
        png = "spark.png"
        body = [_report.measured_by(
                    "spark.py", load0, load1,
                    [f"Spark {version} in `local[2]` (one JVM, two cores, driver memory 2g)",
                     *([f"rows marked {CLUSTER.strip()}: a master, a worker and its "
                        f"executor (2 cores, {args.executor_memory}) as separate JVMs on "
                        "the same host"] if args.cluster else [])]),
                "",
                *docs_lines(batch, lats, means, actions, args)]
        if plot(batch, lats, png):
            body += ["", f"![Spark batch read rates and latencies]({png})"]
        else:
            _report.skipped_plot(png)
        _report.replace_block(_report.PERFORMANCE, "spark-bench", body)
        print("wrote docs/performance.md" + (f" and docs/{png}" if "![" in body[-1] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
