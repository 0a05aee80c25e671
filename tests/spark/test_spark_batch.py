"""Batch reads and writes of the ``chronicle`` data source on a local Spark session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from spark_messages import MarketData, Order, Tick

import aiochronicle as ac
from aiochronicle.spark import committed_batch

DAY = 86_400_000
T0 = 1_637_251_500_000


def two_cycles(path: Path, first: int = 10, second: int = 5) -> list[tuple[int, bytes]]:
    """A queue with ``first`` excerpts in one daily cycle and ``second`` in the next."""
    clock = ac.SetTimeProvider(T0)
    out = []
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY, time_provider=clock) as q:
        a = q.appender()
        for i in range(first):
            p = f"a{i}".encode()
            out.append((a.append(p), p))
        clock.advance_millis(DAY)
        for i in range(second):
            p = f"b{i}".encode() * (i + 1)
            out.append((a.append(p), p))
    return out


def rows(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in df.orderBy("index").collect()]


def test_registered_automatically_by_the_pyspark_module_hook(spark: Any) -> None:
    assert spark.auto_registered


def test_batch_read_raw_columns_one_partition_per_cycle(spark: Any, tmp_path: Path) -> None:
    written = two_cycles(tmp_path / "q")
    df = spark.read.format("chronicle").load(str(tmp_path / "q"))
    assert df.columns == ["index", "cycle", "sequence", "payload"]
    assert df.rdd.getNumPartitions() == 2
    got = rows(df)
    assert [(r[0], bytes(r[3])) for r in got] == written
    rc = ac.RollCycles.FAST_DAILY
    assert [(r[1], r[2]) for r in got] == [(rc.to_cycle(i), rc.to_sequence(i)) for i, _ in written]

    # large cycles are split by index range
    split = spark.read.format("chronicle").option("partitionSize", "3").load(str(tmp_path / "q"))
    assert split.rdd.getNumPartitions() == 4 + 2
    assert rows(split) == got


def test_batch_read_index_and_cycle_ranges(spark: Any, tmp_path: Path) -> None:
    written = two_cycles(tmp_path / "q")
    path = str(tmp_path / "q")
    idx = [i for i, _ in written]
    df = (spark.read.format("chronicle").option("startIndex", str(idx[3]))
          .option("endIndex", hex(idx[12])).load(path))
    assert [r[0] for r in rows(df)] == idx[3:12]
    c2 = ac.RollCycles.FAST_DAILY.to_cycle(idx[-1])
    df = spark.read.format("chronicle").option("startCycle", str(c2)).load(path)
    assert [r[0] for r in rows(df)] == idx[10:]
    df = (spark.read.format("chronicle").option("endCycle", str(c2 - 1))
          .option("includePayload", "false").load(path))
    assert df.columns == ["index", "cycle", "sequence"]
    assert df.count() == 10


def test_batch_read_empty_and_metadata(spark: Any, tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "empty"):
        pass
    assert spark.read.format("chronicle").load(str(tmp_path / "empty")).count() == 0
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"one")
        a.append_metadata(b"note")
        a.append(b"two")
    df = spark.read.format("chronicle").option("includeMetadata", "true").load(
        str(tmp_path / "q"))
    got = [(bytes(r["payload"]), r["metadata"]) for r in df.collect()]
    assert (b"one", False) in got and (b"two", False) in got and (b"note", True) in got
    assert got.index((b"one", False)) < got.index((b"note", True)) < got.index((b"two", False))


def test_decoded_struct_columns(spark: Any, tmp_path: Path) -> None:
    ticks = [Tick("EURUSD", 1.1 + i, 1.2 + i, i) for i in range(20)]
    with ac.open_queue(tmp_path / "q") as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        for t in ticks[:10]:
            a.append(ac.Codecs.MSGPACK.encode(t))
        a.append(b"\xc1 not msgpack")
        for t in ticks[10:]:
            a.append(ac.Codecs.MSGPACK.encode(t))
    df = (spark.read.format("chronicle").option("struct", "spark_messages:Tick")
          .option("includePayload", "false").load(str(tmp_path / "q")))
    assert df.columns == ["index", "cycle", "sequence", "symbol", "bid", "ask", "seq"]
    got = [tuple(r)[3:] for r in df.orderBy("index").collect()]
    assert got[10] == (None, None, None, None)
    assert [Tick(*g) for g in got[:10] + got[11:]] == ticks
    # decodeErrors=fail makes a bad payload an error
    bad = (spark.read.format("chronicle").option("struct", "spark_messages:Tick")
           .option("decodeErrors", "fail").load(str(tmp_path / "q")))
    with pytest.raises(Exception, match=r"(?i)msgpack|decode|invalid|malformed"):
        bad.collect()


@pytest.mark.parametrize("codec", ["msgpack", "binary_wire"])
def test_decoded_method_calls(spark: Any, tmp_path: Path, codec: str) -> None:
    with ac.open_queue(tmp_path / "q") as q:
        w = q.appender().method_writer(MarketData, codec=codec)
        w.on_tick(Tick("EURUSD", 1.5, 1.75, 1))
        w.on_order(Order("GBPUSD", "BUY", 100, ["a", "b"]))
        w.end_of_day(2, "done")
        w.on_tick(Tick("USDJPY", 110.25, 110.5, 2))
    df = spark.read.format("chronicle").option("interface", "spark_messages:MarketData").load(
        str(tmp_path / "q"))
    assert df.columns[:4] == ["index", "cycle", "sequence", "payload"]
    assert df.columns[4:] == ["method", "on_tick", "on_order", "end_of_day"]
    got = df.orderBy("index").select("method", "on_tick.symbol", "on_tick.bid",
                                     "on_order.qty", "on_order.tags", "end_of_day").collect()
    assert [r["method"] for r in got] == ["on_tick", "on_order", "end_of_day", "on_tick"]
    assert (got[0]["symbol"], got[0]["bid"]) == ("EURUSD", 1.5)
    assert (got[1]["qty"], list(got[1]["tags"])) == (100, ["a", "b"])
    assert got[2]["end_of_day"].asDict() == {"ticks": 2, "note": "done"}
    assert got[3]["symbol"] == "USDJPY"


def test_user_schema_takes_fields_by_name(spark: Any, tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q") as q:
        ac.set_queue_codec(q, "json")
        a = q.appender()
        for i in range(5):
            a.append(ac.Codecs.JSON.encode({"symbol": f"S{i}", "px": i / 2, "extra": [i]}))
    df = (spark.read.format("chronicle").schema("index long, symbol string, px double")
          .load(str(tmp_path / "q")))
    assert [(r["symbol"], r["px"]) for r in df.orderBy("index").collect()] == [
        (f"S{i}", i / 2) for i in range(5)]


def test_write_payloads_copies_a_queue(spark: Any, tmp_path: Path) -> None:
    written = two_cycles(tmp_path / "src", 30, 20)
    src = spark.read.format("chronicle").load(str(tmp_path / "src"))
    src.write.format("chronicle").mode("append").save(str(tmp_path / "dst"))
    # ordered: the driver appends in partition order
    src.write.format("chronicle").mode("append").option("writeOn", "driver").save(
        str(tmp_path / "ordered"))
    with ac.open_queue(tmp_path / "dst", read_only=True) as q:
        assert sorted(ex.payload for ex in q.tailer()) == sorted(p for _, p in written)
    with ac.open_queue(tmp_path / "ordered", read_only=True) as q:
        assert [ex.payload for ex in q.tailer()] == [p for _, p in written]


def test_write_rows_as_structs_and_method_calls(spark: Any, tmp_path: Path) -> None:
    ticks = [Tick(f"S{i}", i + 0.5, i + 0.75, i) for i in range(12)]
    df = spark.createDataFrame([msgspec.structs.asdict(t) for t in ticks])
    df.write.format("chronicle").mode("append").option("writeOn", "driver").save(
        str(tmp_path / "structs"))
    with ac.open_queue(tmp_path / "structs", read_only=True) as q:
        assert q.codec is ac.Codecs.MSGPACK
        assert [q.codec.decode(ex.payload, Tick) for ex in q.tailer()] == ticks

    # method calls read through an interface write back as the same calls
    with ac.open_queue(tmp_path / "calls") as q:
        w = q.appender().method_writer(MarketData, codec="json")
        for t in ticks[:3]:
            w.on_tick(t)
        w.end_of_day(3, "eod")
    calls = (spark.read.format("chronicle").option("interface", "spark_messages:MarketData")
             .load(str(tmp_path / "calls")).drop("payload"))
    (calls.write.format("chronicle").mode("append").option("writeOn", "driver")
     .option("codec", "json").option("interface", "spark_messages:MarketData")
     .save(str(tmp_path / "calls2")))
    with ac.open_queue(tmp_path / "calls2", read_only=True) as q:
        assert q.codec is ac.Codecs.JSON  # the codec asked for, recorded
        seen: list[Any] = []

        class Handler:
            def on_tick(self, tick: Tick) -> None:
                seen.append(tick)

            def on_order(self, order: Order) -> None:
                seen.append(order)

            def end_of_day(self, ticks: int, note: str) -> None:
                seen.append((ticks, note))

        n = q.tailer().method_reader(Handler(), interfaces=[MarketData]).read_available()
        assert n == 4
        assert seen == [*ticks[:3], (3, "eod")]


def test_write_refuses_overwrite(spark: Any, tmp_path: Path) -> None:
    df = spark.createDataFrame([(b"x",)], "payload binary")
    with pytest.raises(Exception, match="append"):
        df.write.format("chronicle").mode("overwrite").save(str(tmp_path / "q"))
    assert committed_batch is not None


def test_engine_jvm_on_the_python_source_says_why(spark: Any, tmp_path: Path) -> None:
    """The Python data source named directly: ``engine=jvm`` is an error naming what to
    do (this install has the jar, so: load it), and an unknown engine is refused."""
    two_cycles(tmp_path / "q")
    reader = spark.read.format("chronicle_python")
    with pytest.raises(Exception, match="register") as e:
        reader.option("engine", "jvm").load(str(tmp_path / "q")).collect()
    assert "option engine=jvm: the JVM reader is not serving this read" in str(e.value)
    with pytest.raises(Exception, match="option engine must be auto, jvm or python"):
        reader.option("engine", "gpu").load(str(tmp_path / "q")).collect()
    got = reader.option("engine", "python").load(str(tmp_path / "q")).collect()
    assert len(got) == 15
