"""The method pipeline's market-data queue analysed in Spark: batch, streaming, feeder.

Usage: python examples/spark_pipeline.py [DIR] [--ticks N] [--seconds S]

It publishes ticks on ``DIR/md`` through the pipeline's ``MarketData`` method
writer (as ``examples/pipeline/gateway.py`` does; point ``DIR`` at a
``pipeline/run.py`` output to analyse its queues instead, with ``--ticks 0``),
then, on a local Spark session:

1. **batch**: reads the queue with ``option("interface", "messages:MarketData")``
   (a ``method`` column and an ``on_tick`` struct column) and prints ticks,
   mean spread and the index range per symbol;
2. **streaming**: a ``readStream`` query counts ticks per symbol in each
   micro-batch while a publisher keeps writing, and copies the calls into
   ``DIR/md-copy`` exactly once;
3. **feeder**: an asyncio :class:`aiochronicle.spark.Feeder` hands micro-batches
   of the live queue to a callback as DataFrames, with the delay from publish
   to callback.

Needs the Spark extra (``pip install "aiochronicle[spark]"``) and Java 17+.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import threading
import time
from typing import TYPE_CHECKING

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "pipeline")
# the pipeline's message types; aiochronicle itself is the installed package (the
# source tree has no built native core, so it is never put on the path)
sys.path.insert(0, PIPELINE)

from messages import SYMBOLS, MarketData, Tick  # noqa: E402

import aiochronicle as ac  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def publish(path: str, ticks: int, rate: float, start: int = 0) -> None:
    """Ticks through the ``MarketData`` method writer, ``rate`` per second."""
    with ac.open_queue(path, source_id=1) as q:
        feed = q.appender().method_writer(MarketData)
        rnd = random.Random(start)
        t0 = time.monotonic()
        for seq in range(start, start + ticks):
            sym = SYMBOLS[seq % len(SYMBOLS)]
            mid = 1.0 + rnd.random() / 100
            feed.on_tick(Tick(sym, round(mid - 0.00005, 5), round(mid + 0.00005, 5), seq))
            delay = t0 + (seq - start + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def spark_session() -> SparkSession:
    # Spark's Python workers: this interpreter, and `messages` importable by name
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (PIPELINE, os.environ.get("PYTHONPATH", "")) if p)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("chronicle-pipeline")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from aiochronicle.spark import register

    # loads the JVM reader shipped in the wheel (format("chronicle") reads in the
    # JVM) and the Python data source for what the JVM hands over
    register(spark)
    return spark


def batch(spark: SparkSession, md: str) -> None:
    print("\n== batch: ticks per symbol ==")
    calls = (spark.read.format("chronicle").option("interface", "messages:MarketData")
             .option("includePayload", "false").load(md))
    calls.printSchema()
    (calls.where("method = 'on_tick'")
     .groupBy("on_tick.symbol")
     .agg({"on_tick.seq": "count", "index": "max"})
     .withColumnRenamed("count(on_tick.seq AS seq)", "ticks")
     .orderBy("symbol").show(truncate=False))
    (calls.where("method = 'on_tick'")
     .selectExpr("on_tick.symbol", "on_tick.ask - on_tick.bid AS spread")
     .groupBy("symbol").avg("spread").orderBy("symbol").show())


def streaming(spark: SparkSession, md: str, base: str, seconds: float) -> None:
    print(f"\n== streaming for {seconds:.0f} s while the publisher writes ==")
    calls = (spark.readStream.format("chronicle").option("interface", "messages:MarketData")
             .option("maxRecordsPerTrigger", "5000").load(md))

    def per_batch(df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        counts = {r["symbol"]: r["count"] for r in
                  df.where("method = 'on_tick'").groupBy("on_tick.symbol").count().collect()}
        if counts:
            print(f"  micro-batch {batch_id}: {dict(sorted(counts.items()))}", flush=True)

    counting = (calls.writeStream.foreachBatch(per_batch)
                .option("checkpointLocation", os.path.join(base, "chk-count"))
                .trigger(processingTime="1 second").start())
    copying = (calls.select("payload").writeStream.format("chronicle")
               .option("exactlyOnce", "true")
               .option("checkpointLocation", os.path.join(base, "chk-copy"))
               .trigger(processingTime="1 second").start(os.path.join(base, "md-copy")))
    pub = threading.Thread(target=publish, args=(md, int(200 * seconds), 200.0, 1_000_000))
    pub.start()
    pub.join()
    for q in (counting, copying):
        q.processAllAvailable()
        q.stop()
    with ac.open_queue(md, read_only=True) as a, \
            ac.open_queue(os.path.join(base, "md-copy"), read_only=True) as b:
        print(f"  md holds {a.entry_count():,} excerpts, md-copy {b.entry_count():,} "
              "(copied once each)")


def feeder(spark: SparkSession, md: str, seconds: float) -> None:
    from aiochronicle.spark import Feeder

    print(f"\n== feeder for {seconds:.0f} s: micro-batches as DataFrames ==")

    def on_batch(b) -> None:  # type: ignore[no-untyped-def]
        assert b.df is not None
        syms = b.df.where("method = 'on_tick'").select("on_tick.symbol").distinct().count()
        delay = (time.monotonic_ns() - b.read_ns) / 1e6
        print(f"  {b.rows:5d} calls, {syms} symbols, indices {b.first_index:#x}.."
              f"{b.last_index:#x}, {delay:.0f} ms after the first was read", flush=True)

    async def main() -> None:
        with ac.open_queue(md) as q:
            f = Feeder(q, on_batch, spark=spark, name="spark-example", start="end",
                       max_rows=2000, linger=0.2, options={"interface": "messages:MarketData"})
            async with f:
                await asyncio.to_thread(publish, md, int(200 * seconds), 200.0, 2_000_000)
                await asyncio.sleep(0.5)
            st = f.statistics()
            print(f"  {st.batches} micro-batches, {st.rows:,} calls; buffer waits "
                  f"{st.waits_for_room}")

    asyncio.run(main())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="spark-pipeline")
    ap.add_argument("--ticks", type=int, default=20_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    md = os.path.join(args.dir, "md")
    if args.ticks:
        shutil.rmtree(args.dir, ignore_errors=True)
        publish(md, args.ticks, rate=1e9)
        print(f"published {args.ticks:,} ticks to {md}")
    spark = spark_session()
    try:
        batch(spark, md)
        streaming(spark, md, args.dir, args.seconds)
        feeder(spark, md, args.seconds)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
