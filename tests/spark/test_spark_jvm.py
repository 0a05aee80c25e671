"""The JVM reader behind ``format("chronicle")``: it serves raw-column reads and
streams, hands the rest to the Python data source, and returns exactly the rows the
Python data source returns for Java-written fixtures and generated queues (rolls,
gaps, metadata, large excerpts, many index pages, a live appender in another
process, a queue reached through a ``file://`` Hadoop path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac

DAY = 86_400_000
T0 = 1_637_251_500_000


def plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def rows(df: Any) -> list[tuple[Any, ...]]:
    return [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in df.collect()]


def both(spark: Any, path: Path | str, **options: str) -> tuple[list[Any], list[Any]]:
    """The rows of the JVM reader and of the Python data source, in read order."""
    out = []
    for engine in ("jvm", "python"):
        reader = spark.read.format("chronicle").option("engine", engine)
        for k, v in options.items():
            reader = reader.option(k, v)
        df = reader.load(str(path))
        assert ("(Python)" in plan(df)) == (engine == "python")
        out.append(rows(df))
    return out[0], out[1]


def tailed(path: Path) -> list[tuple[int, bytes]]:
    with ac.open_queue(path, read_only=True) as q:
        return [(ex.index, ex.payload) for ex in q.tailer()]


def test_raw_reads_run_in_the_jvm_the_rest_in_python(spark: Any, tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"x")
    df = spark.read.format("chronicle").load(str(tmp_path / "q"))
    assert "BatchScan chronicle[" in plan(df) and "(Python)" not in plan(df)
    assert "ColumnarToRow" in plan(df)  # the columnar path
    # column pruning: only what is selected is read
    assert "payload" not in plan(df.select("index"))
    decoded = (spark.read.format("chronicle").option("struct", "spark_messages:Tick")
               .load(str(tmp_path / "q")))
    assert "(Python)" in plan(decoded)
    typed = spark.read.format("chronicle").schema("index long, symbol string").load(
        str(tmp_path / "q"))
    assert "(Python)" in plan(typed)
    with pytest.raises(Exception, match="engine"):
        spark.read.format("chronicle").option("engine", "gpu").load(str(tmp_path / "q"))
    with pytest.raises(Exception, match="no queue at"):
        spark.read.format("chronicle").load(str(tmp_path / "missing")).collect()


@pytest.mark.parametrize("archive,subdir", [("cqv5-sample-input.tar.bz2", "qv5"),
                                            ("cqv4-sample-input.tar.bz2", "cqv4")])
def test_java_fixtures_read_the_same(spark: Any, extract_fixture: Callable[..., Path],
                                     archive: str, subdir: str) -> None:
    path = extract_fixture(archive) / subdir
    jvm, py = both(spark, path)
    assert jvm == py and len(jvm) == 4
    assert [r[0] for r in jvm] == [i for i, _ in tailed(path)]
    assert jvm[-1][3].endswith(b"a much longer item that will need encoding as variable "
                               b"length text")


def test_v4_file_with_a_header_then_eof_has_no_rows(spark: Any, java_fixtures: Path,
                                                     tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    shutil.copyfile(java_fixtures / "cq4-header-then-eof" / "20170320.cq4", d / "20170320.cq4")
    jvm, py = both(spark, d)
    assert jvm == py == []


def _rolls_gaps_metadata(path: Path) -> None:
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        a.append_metadata(b"before any data")
        for i in range(300):
            a.append(f"a{i}".encode() * (i % 7 + 1))
            if i % 97 == 0:
                a.append_metadata(f"note {i}".encode())
        clock.advance_millis(3 * DAY)  # cycles with no file between
        for i in range(40):
            a.append(f"b{i}".encode())
        a.append_metadata(b"trailing")
        clock.advance_millis(DAY)
        a.append(b"last")


def _large_excerpts(path: Path) -> None:
    with ac.open_queue(path) as q:
        a = q.appender()
        for i, size in enumerate([1, 3 << 20, 17, (1 << 20) + 3, 5 << 20, 100, 2 << 20]):
            a.append(bytes([i % 251]) * size)


def _many_index_pages(path: Path) -> None:
    # 32 slots of 4 excerpts per index page: 1000 excerpts fill 8 pages
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST4_DAILY,
                       time_provider=ac.SetTimeProvider(T0)) as q:
        a = q.appender()
        for i in range(1000):
            a.append(i.to_bytes(4, "little") * (i % 5 + 1))


def _other_roll_cycles(path: Path) -> None:
    for name, step in (("HOURLY", 3_600_000), ("WEEKLY", 7 * DAY), ("FIVE_MINUTELY", 300_000)):
        clock = ac.SetTimeProvider(T0)
        with ac.open_queue(path / name, roll_cycle=getattr(ac.RollCycles, name),
                           time_provider=clock) as q:
            a = q.appender()
            for i in range(9):
                a.append(f"{name}{i}".encode())
                if i % 3 == 2:
                    clock.advance_millis(step)


@pytest.mark.parametrize("make,options", [
    (_rolls_gaps_metadata, {}),
    (_rolls_gaps_metadata, {"includeMetadata": "true"}),
    (_rolls_gaps_metadata, {"includeMetadata": "true", "partitionSize": "13"}),
    (_rolls_gaps_metadata, {"startIndex": "SEQ5", "endIndex": "SEQ-2", "includePayload": "false"}),
    (_large_excerpts, {}),
    (_many_index_pages, {}),
    (_many_index_pages, {"partitionSize": "37"}),
    (_other_roll_cycles, {}),
])
def test_generated_queues_read_the_same(spark: Any, tmp_path: Path,
                                        make: Callable[[Path], None],
                                        options: dict[str, str]) -> None:
    path = tmp_path / "q"
    make(path)
    paths = sorted(p.parent for p in path.rglob("metadata.cq4t"))
    for p in paths:
        idx = [i for i, _ in tailed(p)]
        opts = {k: str(idx[int(v[3:])]) if v.startswith("SEQ") else v
                for k, v in options.items()}
        jvm, py = both(spark, p, **opts)
        assert jvm == py
        if "includeMetadata" not in opts and "startIndex" not in opts:
            assert [(r[0], r[3]) for r in jvm] == tailed(p)


def test_a_file_url_through_the_hadoop_api_reads_the_same(spark: Any, tmp_path: Path) -> None:
    _rolls_gaps_metadata(tmp_path / "q")
    shutil.copytree(tmp_path / "q", tmp_path / "copy")
    url = (tmp_path / "copy").resolve().as_uri()
    assert url.startswith("file:///")
    got = rows(spark.read.format("chronicle").load(url))
    assert got == rows(spark.read.format("chronicle").load(str(tmp_path / "q")))
    assert [(r[0], r[3]) for r in got] == tailed(tmp_path / "q")


LIVE_APPENDER = """
import sys, time
import aiochronicle as ac
path, n = sys.argv[1], int(sys.argv[2])
clock = ac.SetTimeProvider(1_637_251_500_000)
with ac.open_queue(path, time_provider=clock) as q:
    a = q.appender()
    for i in range(n):
        if i == n // 2:
            clock.advance_millis(86_400_000)
        a.append(bytes([i % 256]) * (1 + (i * 7919) % 30000))
        if i % 50 == 0:
            a.append_metadata(b"m" * 100)
        if i % 20 == 0:
            time.sleep(0.002)
"""


def test_a_live_appender_in_another_process(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q"
    n = 4000

    def payload(i: int) -> bytes:
        return bytes([i % 256]) * (1 + (i * 7919) % 30000)

    with ac.open_queue(path) as q:
        q.appender()  # the queue exists before the first read
    child = subprocess.Popen([sys.executable, "-c", LIVE_APPENDER, str(path), str(n)],
                             env=dict(os.environ))
    reads = 0
    try:
        while child.poll() is None or reads == 0:
            got = rows(spark.read.format("chronicle").load(str(path)))
            # a prefix of what the appender writes: complete excerpts, in order, no gap
            assert [r[3] for r in got] == [payload(i) for i in range(len(got))]
            assert [r[0] for r in got] == sorted({r[0] for r in got})
            reads += 1
    finally:
        child.wait(60)
    assert child.returncode == 0 and reads >= 1
    jvm, py = both(spark, path)
    assert jvm == py and len(jvm) == n
    assert [(r[0], r[3]) for r in jvm] == tailed(path)


def test_stream_in_the_jvm_max_records_available_now_and_restart(spark: Any,
                                                                  tmp_path: Path) -> None:
    src, ckpt, out = tmp_path / "src", tmp_path / "ckpt", tmp_path / "out"
    _rolls_gaps_metadata(src)
    expected = tailed(src)

    def run() -> tuple[list[tuple[int, bytes]], Any]:
        query = (spark.readStream.format("chronicle").option("maxRecordsPerTrigger", "64")
                 .load(str(src)).writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(ckpt))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        got = [(r["index"], bytes(r["payload"])) for r in
               spark.read.parquet(str(out)).orderBy("index").collect()]
        return got, query

    got, query = run()
    assert got == expected
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert progress and all(p["numInputRows"] <= 64 for p in progress)
    assert progress[0]["sources"][0]["description"].startswith("chronicle(")  # the JVM stream
    # appended while the query is down: the restart reads exactly those
    with ac.open_queue(src, time_provider=ac.SetTimeProvider(T0 + 5 * DAY)) as q:
        for i in range(5):
            q.appender().append(f"late{i}".encode())
    got, query = run()
    assert got == tailed(src)  # the first run's rows and the new ones, each once
    assert sum(p["numInputRows"] for p in query.recentProgress) == 5


def test_excerpts_past_2_gib_of_a_cycle_file(spark: Any, tmp_path: Path) -> None:
    """Three metadata documents of ~1 GiB (holes in a sparse file: only their header
    words are written) put the next excerpts past 3 GiB."""
    path = tmp_path / "q"
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        q.appender().append(b"first")
    (cycle_file,) = path.glob("*.cq4")
    big = 0x3FFFFFF0
    with open(cycle_file, "r+b") as f:
        pos = 0
        while (word := int.from_bytes(f.read(4), "little")) != 0:
            pos = (pos + 4 + (word & 0x3FFFFFFF) + 3) & ~3
            f.seek(pos)
        for _ in range(3):
            f.seek(pos)
            f.write((0x40000000 | big).to_bytes(4, "little"))
            pos = (pos + 4 + big + 3) & ~3
        assert pos > 3 << 30
        for i in range(3):  # complete data excerpts, as an appender commits them
            body = f"after{i}".encode()
            f.seek(pos)
            f.write(len(body).to_bytes(4, "little") + body)
            pos = (pos + 4 + len(body) + 3) & ~3
    payloads = [b"first", b"after0", b"after1", b"after2"]
    for size in ("1", "1000"):
        jvm, py = both(spark, path, partitionSize=size)
        assert jvm == py and [r[3] for r in jvm] == payloads
    assert [p for _, p in tailed(path)] == payloads


def test_msgpack_struct_columns_decoded_in_the_jvm(spark: Any, tmp_path: Path) -> None:
    import msgspec
    from spark_messages import Point, Quote

    enc = msgspec.msgpack.encode
    quotes = [Quote(i, i / 4, f"S{i}", i % 2 == 0, None if i % 3 else f"n{i}",
                    bytes([i]) * (i % 4) if i % 5 else None, i * 10) for i in range(40)]
    odd = [
        enc({"venueId": 1, "price": 2, "symbol": "int price"}),  # defaults, int -> float
        enc({"venueId": 1, "price": 1.5, "symbol": "x", "other": [1, {"a": b"z"}, None]}),
        enc({"venueId": "1", "price": 1.5, "symbol": "wrong type"}),
        enc({"price": 1.5, "symbol": "missing required"}),
        enc({"venueId": None, "price": 1.5, "symbol": "null not allowed"}),
        enc({"venueId": 2**63, "price": 1.5, "symbol": "too big"}),
        enc({"venueId": -5, "price": float("inf"), "symbol": "é", "note": None}),
        enc([1, 2.0, "an array"]),
        enc({"venueId": 1, "price": 1.5, "symbol": "x"}) + b"\x00",  # trailing byte
        b"\xc1 not msgpack",
        b"\x82",  # truncated
        # every field in order (the JVM's fast path) until a late one of the wrong type
        enc({"venueId": 1, "price": 1.5, "symbol": "s", "live": True, "note": "n",
             "raw": b"r", "size": "late"}),
        enc({"venueId": -70000, "price": 1.5, "symbol": "s" * 40, "live": False, "note": None,
             "raw": b"r" * 300, "size": 2**40}),
    ]
    with ac.open_queue(tmp_path / "q") as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        for i, qt in enumerate(quotes):
            a.append(enc(qt))
            if i < len(odd):
                a.append(odd[i])
    jvm, py = both(spark, tmp_path / "q", struct="spark_messages:Quote")
    assert jvm == py and len(jvm) == len(quotes) + len(odd)
    df = spark.read.format("chronicle").option("struct", "spark_messages:Quote").load(
        str(tmp_path / "q"))
    assert "(Python)" not in plan(df)
    assert "payload" not in plan(df.select("symbol", "price"))
    decoded = [r for r in jvm if r[6] is not None]  # symbol
    assert len(decoded) == len(quotes) + 5
    with pytest.raises(Exception, match=r"(?i)msgpack"):
        (spark.read.format("chronicle").option("struct", "spark_messages:Quote")
         .option("decodeErrors", "fail").load(str(tmp_path / "q")).collect())

    with ac.open_queue(tmp_path / "p") as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        for i in range(20):
            a.append(enc(Point(i, i / 2, f"p{i}")))
        a.append(enc([1, 2.5]))  # the default label
        a.append(enc([1, 2.5, "l", "extra"]))  # extra items are ignored
        a.append(enc({"x": 1, "y": 2.5}))
    jvm, py = both(spark, tmp_path / "p", struct="spark_messages:Point",
                   includePayload="false")
    assert jvm == py and jvm[20][3:] == (1, 2.5, "p") and jvm[22][3:] == (None, None, None)


def test_structs_the_jvm_does_not_decode_go_to_python(spark: Any, tmp_path: Path) -> None:
    import msgspec
    from spark_messages import Order, Tick

    with ac.open_queue(tmp_path / "msgpack") as q:
        ac.set_queue_codec(q, "msgpack")
        q.appender().append(msgspec.msgpack.encode(Order("S", "BUY", 1, ["a"])))
    df = spark.read.format("chronicle").option("struct", "spark_messages:Order").load(
        str(tmp_path / "msgpack"))
    assert "(Python)" in plan(df)  # a list column
    assert df.collect()[0]["tags"] == ["a"]
    with ac.open_queue(tmp_path / "json") as q:
        ac.set_queue_codec(q, "json")
        q.appender().append(msgspec.json.encode(Tick("S", 1.0, 2.0, 3)))
    df = spark.read.format("chronicle").option("struct", "spark_messages:Tick").load(
        str(tmp_path / "json"))
    assert "(Python)" in plan(df)  # not msgpack
    assert df.collect()[0]["seq"] == 3


def _headers(cycle_file: Path) -> list[tuple[int, int]]:
    """(position, header word) of every document of a cycle file, in order."""
    out = []
    with open(cycle_file, "rb") as f:
        pos = 0
        f.seek(pos)
        while (word := int.from_bytes(f.read(4), "little")) not in (0, 0xC0000000):
            out.append((pos, word))
            pos = (pos + 4 + (word & 0x3FFFFFFF) + 3) & ~3
            f.seek(pos)
    return out


def _put32(cycle_file: Path, pos: int, value: int, size: int = 4) -> None:
    with open(cycle_file, "r+b") as f:
        f.seek(pos)
        f.write(value.to_bytes(size, "little"))


def _both_fail(spark: Any, path: Path, message: str) -> None:
    """The library, the JVM reader and the Python data source all refuse the queue,
    each with its named error."""
    with pytest.raises(ac.CorruptQueueError, match=message):
        tailed(path)
    for engine in ("jvm", "python"):
        df = spark.read.format("chronicle").option("engine", engine).load(str(path))
        # the Python source counts each cycle's excerpts when it plans partitions:
        # the end-finding, which confirms the walk against the writePosition,
        # refuses the damaged cycle there, before a read meets the header
        expected = message if engine == "jvm" else f"{message}|cannot find the end of the data"
        with pytest.raises(Exception, match=expected) as err:
            df.collect()
        name = "CorruptQueueException" if engine == "jvm" else "CorruptQueueError"
        assert name in str(err.value)


@pytest.mark.parametrize("which", ["last", "middle"])
def test_a_length_past_the_end_of_the_file_is_a_named_error(spark: Any, tmp_path: Path,
                                                            which: str) -> None:
    """A complete header claiming ~1 GiB past the end of the file: the JVM reader
    allocates nothing from it and fails with CorruptQueueException, where the
    library raises CorruptQueueError (no rows silently dropped after it)."""
    path = tmp_path / "q"
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        a = q.appender()
        for i in range(5):
            a.append(f"e{i}".encode())
    (cycle_file,) = path.glob("*.cq4")
    data = [pos for pos, word in _headers(cycle_file) if not word & 0x40000000]
    end = data[-1] + 8
    _put32(cycle_file, end if which == "last" else data[2], 0x3FFFFFF0)
    _both_fail(spark, path, "runs past the end of the file")


def test_a_shortened_length_that_hides_excerpts_is_a_named_error(spark: Any,
                                                                 tmp_path: Path) -> None:
    """A damaged length that leads the walk into unwritten bytes before the last
    excerpt the header records: an error, not a queue that seems to end there."""
    path = tmp_path / "q"
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        a = q.appender()
        for i in range(6):
            a.append(bytes([65 + i]) + bytes(60))
    (cycle_file,) = path.glob("*.cq4")
    data = [pos for pos, word in _headers(cycle_file) if not word & 0x40000000]
    _put32(cycle_file, data[2], 8)  # lands in the zeros of its own payload
    _both_fail(spark, path, "corrupt excerpt header")


def _index_pages(cycle_file: Path) -> tuple[int, list[tuple[int, int]]]:
    """The position of the index2index document, and of each index page in order:
    (the page's header, its values[0])."""
    docs = [pos for pos, word in _headers(cycle_file) if word & 0x40000000][1:]
    raw = cycle_file.read_bytes()
    return docs[0], [(pos, raw.index(b"\x8d", pos + 4) + 17) for pos in docs[1:]]


def test_a_corrupt_index_is_skipped_never_trusted(spark: Any, tmp_path: Path) -> None:
    """Index entries that do not check out (pointing past the end of the file, at
    metadata, off the 4-byte grid, or at a "page" claiming ~1 GiB) are skipped, as the
    library skips them: the reader walks from an earlier entry and returns every row,
    allocating nothing sized from the damage."""
    path = tmp_path / "q"
    _many_index_pages(path)  # 32 slots of 4 excerpts a page: page p slot k is 128p + 4k
    (cycle_file,) = path.glob("*.cq4")
    i2i, pages = _index_pages(cycle_file)
    size = cycle_file.stat().st_size
    data = [pos for pos, word in _headers(cycle_file) if not word & 0x40000000]
    bomb = data[504] + 4  # inside a payload of 20 bytes, off the walk
    _put32(cycle_file, bomb, 0x40000000 | 0x3FFFFFF0)
    expected = tailed(path)
    # partitions of 37 start at 296 (page 2 slot 10), 333 (2, 19), 444 (3, 15), 703 (5, 15)
    _put32(cycle_file, pages[2][1] + 8 * 10, size + 4096, 8)     # past the end of the file
    _put32(cycle_file, pages[2][1] + 8 * 19, i2i, 8)             # at a metadata document
    raw = cycle_file.read_bytes()
    i2i_values = raw.index(b"\x8d", i2i + 4) + 17
    _put32(cycle_file, i2i_values + 8 * 5, bomb, 8)              # page 5: ~1 GiB
    for options in ({}, {"partitionSize": "37"}):
        jvm, py = both(spark, path, **options)
        assert jvm == py and [(r[0], r[3]) for r in jvm] == expected

    def jvm_rows() -> list[tuple[int, bytes]]:
        df = (spark.read.format("chronicle").option("engine", "jvm")
              .option("partitionSize", "37").load(str(path)))
        return [(r[0], r[3]) for r in rows(df)]

    # off the 4-byte grid (the library takes this one and then fails on what it finds)
    _put32(cycle_file, pages[3][1] + 8 * 15, pages[3][1] + 1, 8)
    assert jvm_rows() == expected
    at = raw.index(b"index2Index")
    _put32(cycle_file, raw.index(b"\xa7", at) + 1, bomb, 8)     # index2index: ~1 GiB
    assert jvm_rows() == expected


def _libchronicle_queue(path: Path, n: int) -> list[tuple[int, bytes]]:
    """``n`` excerpts in the layout libchronicle writes, over three hourly cycles with
    an hour without a file between the second and the third."""
    from libchronicle_format import LibchronicleStyleWriter, text_payload

    first = 18949 * 24
    w = LibchronicleStyleWriter(path, "yyyyMMdd-HH'F'", 3_600_000, first, "%Y%m%d-%HF")
    written = []
    try:
        for i in range(n):
            cycle = first + (0 if i < n // 2 else 1 if i < n - 40 else 3)
            payload = text_payload(f"t{i}") if i % 3 == 0 else b"r%d" % i * (i % 9 + 1)
            written.append((w.append(payload, cycle), payload))
    finally:
        w.close()
    return written


@pytest.mark.parametrize("options", [{}, {"partitionSize": "97", "includeMetadata": "true"},
                                     {"startIndex": "SEQ333", "endIndex": "SEQ-20"}])
def test_libchronicle_queues_read_the_same(spark: Any, tmp_path: Path,
                                           options: dict[str, str]) -> None:
    """Cycle files without a header document or index (libchronicle's): the JVM
    reader walks them from offset 0 and returns the library's rows."""
    path = tmp_path / "lcq"
    written = _libchronicle_queue(path, 1000)
    assert tailed(path) == written
    idx = [i for i, _ in written]
    opts = {k: str(idx[int(v[3:])]) if v.startswith("SEQ") else v for k, v in options.items()}
    jvm, py = both(spark, path, **opts)
    assert jvm == py
    if not opts:
        assert [(r[0], r[3]) for r in jvm] == written
        stream = (spark.readStream.format("chronicle").option("engine", "jvm").load(str(path))
                  .writeStream.format("memory").queryName("lcq").trigger(availableNow=True)
                  .start())
        assert stream.awaitTermination(120)
        got = [(r["index"], bytes(r["payload"])) for r in
               spark.sql("select * from lcq order by index").collect()]
        assert got == written


def test_a_file_that_starts_with_damaged_data_is_a_named_error(spark: Any,
                                                               tmp_path: Path) -> None:
    """A file whose first word is a data header but whose documents are not
    libchronicle's either (here a length past the end): a named error, not 0 rows."""
    path = tmp_path / "lcq"
    _libchronicle_queue(path, 10)
    first = sorted(path.glob("*.cq4"))[0]
    _put32(first, 0, 0x3FFFFFF0)
    with pytest.raises(Exception, match="not a complete metadata document") as err:
        spark.read.format("chronicle").option("engine", "jvm").load(str(path)).collect()
    assert "CorruptQueueException" in str(err.value)


def _write_round(w: Any, i: int) -> None:
    """Round ``i`` of calls by a method writer of :class:`spark_messages.TradingV2`."""
    from spark_messages import Point, Quote

    w.on_quote(Quote(i, i / 4, f"S{i}", i % 2 == 0, None if i % 3 else f"n{i}",
                     bytes([i]) * (i % 4) if i % 5 else None, i * 10))
    w.on_point(Point(i, i / 2, f"p{i}"))
    if i % 2:
        w.fill(f"F{i}", i, i * 1.5, None if i % 3 else "odd")
    else:
        w.fill(f"F{i}", -i)
    if i % 7 == 0:
        w.heartbeat()
        w.cancel(i)  # a method Trading lacks
    w.count(i)


def _method_calls(path: Path) -> None:
    """Calls of :class:`spark_messages.TradingV2` by a method writer recording history
    (source id 3), a roll, metadata (one of them a call), and hand-framed calls."""
    import msgspec
    from spark_messages import TradingV2

    enc = msgspec.msgpack.encode
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock, source_id=3) as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        w = a.method_writer(TradingV2)
        for i in range(60):
            _write_round(w, i)
            if i % 11 == 0:
                a.append_metadata(enc(["heartbeat", None]))
                a.append_metadata(b"a note")
            if i == 30:
                clock.advance_millis(DAY)
        odd = [
            enc(["fill", ["x", 1, 2.5, "note", "extra"]]),  # an extra argument is dropped
            enc(["fill", ["x", 1]]),  # the defaults of the others
            enc(["fill", ["x"]]),  # a missing argument without a default
            enc(["fill", []]),
            enc(["fill", ["x", 2**63]]),  # above a long: a null struct, the method named
            enc(["fill", {"symbol": "x"}]),
            enc(["fill", ["x", 1.5]]),  # a float for an int
            enc(["on_quote", {"venueId": 1, "price": 2, "symbol": "int price"}]),
            enc(["on_quote", {"venueId": 2**63, "price": 2, "symbol": "too big"}]),
            enc(["on_quote", [1, 2.0, "s"]]),  # an array for a map Struct
            enc(["on_point", [1, 2.5]]),  # the default label
            enc(["on_point", [1, 2.5, "l", "extra"]]),
            enc(["count", "seven"]),
            enc([7, 5]),  # by method id
            enc(["heartbeat", {"any": [1, 2]}]),  # no parameter: the argument is not read
            enc(["count", 1]) + b"\x00",  # a trailing byte
            enc(["count", 3])[:-1],  # no argument
            enc(["nosuch", 1]),
            enc([99, 1]),
            enc(["heartbeat"]),
            b"\x93" + enc(msgspec.msgpack.Ext(5, b"abc")) + enc("count") + enc(1),
            b"\x93" + enc(msgspec.msgpack.Ext(72, b"\x02\x00\x00")) + enc("count") + enc(1),
            b"\x93" + enc(msgspec.msgpack.Ext(72, b"\x00\x00\x00")) + enc("count") + enc(2),
            b"\x93" + enc(msgspec.msgpack.Ext(72, b"\x00\x00\x00")),
            b"\xc1 not a call",
            b"",
        ]
        for p in odd:
            a.append(p)


@pytest.mark.parametrize("options", [
    {},
    {"includeMetadata": "true", "partitionSize": "50"},
    {"includePayload": "false", "startIndex": "SEQ40"},
])
def test_method_calls_decoded_in_the_jvm(spark: Any, tmp_path: Path,
                                         options: dict[str, str]) -> None:
    path = tmp_path / "q"
    _method_calls(path)
    idx = [i for i, _ in tailed(path)]
    opts = {k: str(idx[int(v[3:])]) if v.startswith("SEQ") else v for k, v in options.items()}
    jvm, py = both(spark, path, interface="spark_messages:Trading", **opts)
    assert jvm == py
    df = spark.read.format("chronicle").option("interface", "spark_messages:Trading").load(
        str(path))
    assert "(Python)" not in plan(df)
    if opts:
        return
    assert len(jvm) == len(idx)
    got = df.collect()
    methods = [r["method"] for r in got]
    # 9 cancel calls (unknown) and 16 hand-framed payloads that do not decode
    assert methods.count(None) == 9 + 16 and methods.count("heartbeat") == 10
    assert methods.count("on_quote") == 62 and methods.count("count") == 62
    first = got[0]["on_quote"]
    assert (first.venue_id, first.symbol, first.note, first.size) == (0, "S0", "n0", 0)
    assert [r["on_quote"] for r in got if r["method"] == "on_quote"][-1] is None  # too big
    fills = [r["fill"] for r in got if r["method"] == "fill"]
    assert fills[1] == ("F1", 1, 1.5, None) and fills[2] == ("F2", -2, 0.0, None)
    assert fills[-3:] == [("x", 1, 2.5, "note"), ("x", 1, 0.0, None), None]
    counts = [r["count"] for r in got if r["method"] == "count"]
    assert counts[-2:] == [(5,), (2,)]  # by method id; after a history
    pruned = df.select("method", "fill")
    assert "payload" not in plan(pruned) and pruned.count() == len(idx)
    # nested fields: Spark prunes inside the struct column, the JVM reads it whole
    py = (spark.read.format("chronicle").option("engine", "python")
          .option("interface", "spark_messages:Trading").load(str(path)))

    def nested(frame: Any) -> list[Any]:
        return rows(frame.where("method <> 'count'").selectExpr("fill.symbol", "fill.qty",
                                                                "on_point.y"))

    assert nested(df) == nested(py) and "(Python)" not in plan(df.selectExpr("fill.qty"))
    failing = (spark.read.format("chronicle").option("interface", "spark_messages:Trading")
               .option("decodeErrors", "fail").load(str(path)))
    # the index in the error is hex, as the CLI and the docs print indices
    with pytest.raises(Exception, match=r"excerpt 0x[0-9a-f]+ of \S+ is not a method call "
                                        "of spark_messages:Trading"):
        failing.collect()
    # as documented: decodeErrors checks the payloads a query decodes; one that reads
    # no decoded column decodes none, and reads every row
    assert len(failing.select("index").collect()) == len(idx)
    other = spark.read.format("chronicle").option("interface", "spark_messages:MarketData")
    assert "(Python)" in plan(other.load(str(path)))  # a list field: the Python source


def _wire(*parts: Any) -> bytes:
    """A BinaryWire payload: ``("event", name)``, ``("number", id)``, ``("field", name)``,
    ``("int", n)``, ``("float", x)``, ``("text", s)``, ``("null",)``, ``("bool", b)``,
    ``("typed", alias)``, ``("open",)``/``("close",)`` a length-prefixed body, or raw bytes."""
    from aiochronicle._format._wire import WireWriter

    w = WireWriter(small_raw=False)
    tokens = []
    for p in parts:
        if isinstance(p, bytes):
            w.raw(p)
            continue
        kind, *arg = p
        if kind == "open":
            tokens.append(w.begin_length32())
        elif kind == "close":
            w.end_length32(tokens.pop())
        elif kind == "number":
            w.field_number(arg[0])
        elif kind == "int":
            w.int_compact(arg[0])
        elif kind == "float":
            w.float64(arg[0])
        elif kind == "typed":
            w.type_prefix(arg[0])
        elif kind == "null":
            w.null()
        elif kind == "bool":
            w.bool(arg[0])
        else:
            getattr(w, {"event": "event_name", "field": "field", "text": "text"}[kind])(arg[0])
    return w.getvalue()


def _calls(path: Path, codec: str) -> int:
    """Calls of :class:`spark_messages.TradingV2` framed by ``codec`` by a method writer
    recording history (source id 3), a roll, metadata, and hand-framed calls: odd
    arguments, several events in one excerpt, other framings, payloads that are not calls."""
    import msgspec
    from spark_messages import TradingV2

    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock, source_id=3) as q:
        ac.set_queue_codec(q, codec)
        a = q.appender()
        w = a.method_writer(TradingV2)
        for i in range(30):
            _write_round(w, i)
            if i % 11 == 0:
                a.append_metadata(b"a note")
            if i == 15:
                clock.advance_millis(DAY)
        odd = [msgspec.msgpack.encode(["count", 3]), b"", b"\x00", b"not a call"]
        if codec == "json":
            odd += [
                b'["fill", ["x", 1, 2.5, "note", "extra"]]', b'["fill", ["x", 1]]',
                b'["fill", ["x"]]', b'["fill", []]', b'["fill", ["x", 9223372036854775808]]',
                b'["fill", {"symbol": "x"}]', b'["fill", ["x", 1.5]]', b'["fill", "x"]',
                b'["on_quote", {"venueId": 1, "price": 2, "symbol": "int price"}]',
                b'["on_quote", {"venueId": 1, "price": 2, "symbol": "b", "raw": "AQI="}]',
                b'["on_quote", {"venueId": 1, "price": 2, "symbol": "b", "raw": "***"}]',
                b'["on_quote", {"venueId": 1, "price": 2, "symbol": "s", "other": [1, {}]}]',
                b'["on_quote", {"venueId": null, "price": 2, "symbol": "null"}]',
                b'["on_quote", {"venueId": 1, "price": 2}]', b'["on_quote", [1, 2.0, "s"]]',
                b'["on_point", [1, 2.5]]', b'["on_point", [1, 2.5, "l", "extra"]]',
                b'["on_point", {"x": 1, "y": 2.5}]', b'["count", "seven"]', b'[7, 5]',
                b'["heartbeat", {"any": [1, 2]}]', b'["count", 1] x', b'["count", 1e2]',
                b'["nosuch", 1]', b'[99, 1]', b'["heartbeat"]', b'[true, 1]', b'[7.0, 1]',
                b'[{"sources": [3, 5], "timings": [1]}, "count", 4]',
                b'[{"sources": [[3, 5]], "timings": []}, "count", 6]',
                b'[{"sources": [3]}, "count", 4]', b'["count", 1', b'[]', b'{}',
            ]
        else:
            quote = [("open",), ("field", "venueId"), ("int", 1), ("field", "price"),
                     ("int", 2), ("field", "symbol"), ("text", "s")]
            odd += [_wire(*p) for p in [
                [("number", 7), ("int", 5)],
                [("event", "count"), ("int", 1), ("event", "count"), ("int", 2)],
                [("event", "cancel"), ("int", 1), ("event", "count"), ("int", 3)],
                [("event", "count"), ("int", 1), ("event", "count"), ("text", "x")],
                [("event", "count"), ("int", 1), ("event", "nosuch"), ("int", 8)],
                [("event", "history"), ("open",), ("close",), ("event", "count"), ("int", 4)],
                [("event", "count"), ("float", 5.0)], [("event", "count"), ("float", 5.5)],
                [("event", "count"), ("float", 1e19)], [("event", "count"), ("float", -1e19)],
                [("event", "count"), ("null",)], [("event", "count"), ("text", "7")],
                [("event", "fill"), ("text", "x")],
                [("event", "fill"), ("open",), ("text", "x"), ("int", 1), ("close",)],
                [("event", "fill"), ("open",), ("text", "x"), ("null",), ("close",)],
                [("event", "fill"), ("open",), ("text", "x"), ("int", 1), ("float", 2.25),
                 ("null",), ("int", 9), ("close",)],
                [("event", "fill"), ("open",), ("text", "x"), ("int", 1), ("int", 2),
                 ("text", None), ("close",)],
                [("event", "on_quote"), *quote, ("close",)],
                [("event", "on_quote"), ("typed", "Quote"), *quote, ("close",)],
                [("event", "on_quote"), *quote, ("field", "other"), ("int", 1),
                 ("field", "size"), ("float", 3.0), ("field", "note"), ("text", None),
                 ("field", "venueId"), ("int", 99), ("close",)],
                [("event", "on_quote"), *quote[:5], ("close",)],
                [("event", "on_quote"), *quote[:5], ("field", "symbol"), ("int", 1),
                 ("close",)],
                [("event", "on_quote"), ("null",)],
                [("event", "on_point"), ("open",), ("int", 1), ("float", 2.5), ("close",)],
                [("event", "heartbeat")], [("event", "heartbeat"), ("int", 1)],
                [("int", 1)], [("text", "a text")], [("event", "count")],
            ]]
        for p in odd:
            a.append(p)
    return len(odd)


@pytest.mark.parametrize("codec", ["binary_wire", "json"])
def test_binary_wire_and_json_calls_decoded_in_the_jvm(spark: Any, tmp_path: Path,
                                                       codec: str) -> None:
    """Method calls in Java's BinaryWire and in JSON are decoded in the JVM into the
    rows the Python data source gives (each payload by its first byte, as the method
    reader reads it: msgpack calls in such a queue too)."""
    path = tmp_path / "q"
    n_odd = _calls(path, codec)
    idx = [i for i, _ in tailed(path)]
    for options in ({}, {"includeMetadata": "true", "partitionSize": "41"}):
        jvm, py = both(spark, path, interface="spark_messages:Trading", **options)
        for j, p in zip(jvm, py, strict=True):
            assert j == p, (j, p)
        assert len(jvm) == len(idx) + (3 if options else 0)
    df = spark.read.format("chronicle").option("interface", "spark_messages:Trading").load(
        str(path))
    assert "(Python)" not in plan(df)
    methods = [r["method"] for r in df.collect()][:len(idx) - n_odd]  # the writer's
    assert methods.count("on_quote") == 30 and methods.count("count") == 30
    assert methods.count("fill") == 30 and methods.count("heartbeat") == 5
    # 5 cancel calls; the Python reader takes no array-like Struct written as fields
    assert methods.count("on_point") == (0 if codec == "binary_wire" else 30)
    assert methods.count(None) == 5 + (30 if codec == "binary_wire" else 0)
    with pytest.raises(Exception, match="method call of spark_messages:Trading"):
        (spark.read.format("chronicle").option("interface", "spark_messages:Trading")
         .option("decodeErrors", "fail").load(str(path)).collect())


def test_a_large_read_is_one_partition_a_core_across_cycles(spark: Any, tmp_path: Path) -> None:
    """Three cycles on two cores are two equal tasks (a partition goes on from the end
    of one cycle into the next), not three; every row once, in order."""
    path = tmp_path / "q"
    clock = ac.SetTimeProvider(T0)
    per = 70_000  # three cycles of it: more than 65,536 excerpts a core
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        for c in range(3):
            data = b"".join(i.to_bytes(4, "little") for i in range(c * per, (c + 1) * per))
            a.append_packed(data, list(range(0, 4 * per + 1, 4)))
            clock.advance_millis(DAY)
    df = spark.read.format("chronicle").option("engine", "jvm").load(str(path))
    assert df.rdd.getNumPartitions() == 2
    sizes = df.rdd.glom().map(len).collect()
    assert sizes == [3 * per // 2] * 2
    assert [(r[0], r[3]) for r in rows(df)] == tailed(path)
    assert spark.read.format("chronicle").option("partitionSize", "100000").load(
        str(path)).rdd.getNumPartitions() == 3  # asked for: by cycle, as before
