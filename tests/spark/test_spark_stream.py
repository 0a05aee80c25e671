"""Streaming reads and writes: offsets are queue indices; exactly-once sink."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import aiochronicle as ac
from aiochronicle.spark import ChronicleStreamReader, committed_batch

DAY = 86_400_000
T0 = 1_637_251_500_000

APPENDER = """
import sys, time
import aiochronicle as ac
path, t0, n1, n2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
clock = ac.SetTimeProvider(t0)
with ac.open_queue(path, time_provider=clock) as q:
    a = q.appender()
    for i in range(n1 + n2):
        if i == n1:
            clock.advance_millis(86_400_000)   # roll to the next daily cycle
        a.append(f"c{i}".encode())
        time.sleep(0.004)
"""


def payloads(path: Path) -> list[tuple[int, bytes]]:
    with ac.open_queue(path, read_only=True) as q:
        return [(ex.index, ex.payload) for ex in q.tailer()]


def fill(path: Path, texts: list[str], clock: ac.SetTimeProvider | None = None) -> None:
    with ac.open_queue(path, time_provider=clock or ac.SetTimeProvider(T0)) as q:
        a = q.appender()
        for t in texts:
            a.append(t.encode())


# -- the offsets, without Spark -------------------------------------------------


def test_stream_offsets_cross_cycles_without_gap_or_duplicate(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    fill(tmp_path / "q", [f"a{i}" for i in range(5)], clock)
    clock.advance_millis(2 * DAY)  # a cycle with no file between
    fill(tmp_path / "q", [f"b{i}" for i in range(4)], clock)
    r = ChronicleStreamReader({"path": str(tmp_path / "q")}, None, False)  # type: ignore[arg-type]
    start = r.initialOffset()
    seen: list[tuple[int, bytes]] = []
    while True:
        end = r.latestOffset(start, ReadMaxRows(3))
        if end == start:
            break
        for part in r.partitions(start, end):
            for rb in r.read(part):
                seen += zip(rb.column("index").to_pylist(), rb.column("payload").to_pylist(),
                            strict=True)
        start = end
    assert seen == payloads(tmp_path / "q")
    # more excerpts in the last cycle, then in a new one: picked up from `start`
    fill(tmp_path / "q", ["b4"], clock)
    clock.advance_millis(DAY)
    fill(tmp_path / "q", ["c0"], clock)
    end = r.latestOffset(start, ReadAllAvailable())
    got = [bytes(p) for part in r.partitions(start, end) for rb in r.read(part)
           for p in rb.column("payload").to_pylist()]
    assert got == [b"b4", b"c0"]


def test_stream_starting_positions_and_available_now(tmp_path: Path) -> None:
    opts = {"path": str(tmp_path / "q")}
    r = ChronicleStreamReader(opts, None, False)  # type: ignore[arg-type]
    assert r.initialOffset() == {"index": 0}  # no queue yet
    assert r.latestOffset({"index": 0}, ReadAllAvailable()) == {"index": 0}
    fill(tmp_path / "q", ["x", "y"])
    first, last = payloads(tmp_path / "q")[0][0], payloads(tmp_path / "q")[-1][0]
    assert ChronicleStreamReader(opts, None, False).initialOffset() == {  # type: ignore[arg-type]
        "index": first}
    latest = ChronicleStreamReader({**opts, "startingIndex": "latest"}, None,  # type: ignore[arg-type]
                                   False)
    assert latest.initialOffset() == {"index": last + 1}
    r = ChronicleStreamReader({**opts, "maxRecordsPerTrigger": "1"}, None, False)  # type: ignore[arg-type]
    assert r.getDefaultReadLimit() == ReadMaxRows(1)
    r.prepareForTriggerAvailableNow()
    fill(tmp_path / "q", ["z"])  # after the query started: not read by AvailableNow
    assert r.latestOffset({"index": first}, ReadAllAvailable()) == {"index": last + 1}
    assert r.reportLatestOffset() == {"index": last + 2}


# -- Spark -----------------------------------------------------------------------


def test_stream_picks_up_another_process_across_a_roll(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q"
    fill(path, [f"p{i}" for i in range(5)])
    n1, n2 = 30, 25
    query = (spark.readStream.format("chronicle").option("maxRecordsPerTrigger", "16")
             .load(str(path)).writeStream.format("memory").queryName("rolls")
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="100 milliseconds").start())
    child = subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(T0), str(n1),
                              str(n2)], env=dict(os.environ))
    try:
        deadline = time.monotonic() + 90
        total = 5 + n1 + n2
        while time.monotonic() < deadline:
            if child.poll() is not None and spark.table("rolls").count() >= total:
                break
            time.sleep(0.5)
        query.processAllAvailable()
    finally:
        query.stop()
        child.wait(30)
    assert child.returncode == 0
    got = [(r["index"], bytes(r["payload"])) for r in
           spark.table("rolls").orderBy("index").collect()]
    expected = payloads(path)
    assert len({ac.RollCycles.FAST_DAILY.to_cycle(i) for i, _ in expected}) == 2
    assert got == expected  # every excerpt once, in order, across the roll
    sizes = [p["numInputRows"] for p in query.recentProgress]
    assert max(sizes) <= 16 and sum(sizes) == len(expected)


def _forget_commit(ckpt: Path, batch: int) -> None:
    """Drop Spark's record that ``batch`` was committed (as a crash between the
    sink's commit and Spark's would): the next run replays that micro-batch."""
    for name in (str(batch), f".{batch}.crc"):
        (ckpt / "commits" / name).unlink(missing_ok=True)


def _run_available_now(spark: Any, src: Path, dst: Path, ckpt: Path,
                       exactly_once: bool = True) -> Any:
    query = (spark.readStream.format("chronicle").load(str(src))
             .writeStream.format("chronicle")
             .option("exactlyOnce", str(exactly_once).lower())
             .option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(str(dst)))
    assert query.awaitTermination(120)
    return query


def test_stream_to_queue_resumes_from_checkpoint_exactly_once(spark: Any,
                                                                tmp_path: Path) -> None:
    src, dst, ckpt = tmp_path / "src", tmp_path / "dst", tmp_path / "ckpt"
    fill(src, [f"m{i}" for i in range(10)])
    q1 = _run_available_now(spark, src, dst, ckpt)
    assert [p for _, p in payloads(dst)] == [p for _, p in payloads(src)]

    fill(src, [f"m{i}" for i in range(10, 16)])  # appended while the query is down
    q2 = _run_available_now(spark, src, dst, ckpt)
    assert q2.id == q1.id  # the checkpoint keeps the query id
    assert [p for _, p in payloads(dst)] == [p for _, p in payloads(src)]
    last = max(p["batchId"] for p in q2.recentProgress)
    with ac.open_queue(dst, read_only=True) as q:
        assert committed_batch(q, q2.id) == last

    # lose Spark's commit record of the last micro-batch: the restart replays it
    _forget_commit(ckpt, last)
    q3 = _run_available_now(spark, src, dst, ckpt)
    replayed = [p for p in q3.recentProgress if p["batchId"] == last]
    assert replayed and replayed[0]["numInputRows"] > 0
    assert [p for _, p in payloads(dst)] == [p for _, p in payloads(src)]  # not twice
