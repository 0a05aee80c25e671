"""Live interop with Java Chronicle Queue: real JVMs beside aiochronicle on one queue.

The Java programs are ``interop/java`` (built here with Maven against each pinned
Chronicle Queue version, ``interop/jvm.py``); every expectation about Java comes from
what the JVM itself printed. A build failure fails these tests: they never skip.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Protocol

import msgspec
import pytest
from rawfile import raw_documents
from workers import open_q

import aiochronicle as ac
import jvm
from aiochronicle._format._rollcycles import CycleNamer
from aiochronicle._objects._queue import cycles_of
from aiochronicle._waiting._notify import SLOTS, notifier_for, slot_key

VERSIONS = list(jvm.VERSIONS)
WORKERS = str(Path(__file__).with_name("workers.py"))

#: what Java logs about its own queues too: a queue opened without a roll cycle or
#: sourceId takes the one in metadata.cq4t, with a warning "Overriding ... from existing
#: metadata"
JAVA_OWN_WARNINGS = ("from existing metadata",)
#: Java's recovery of a write lock whose holder died (its documented rule)
DEAD_HOLDER_WARNING = "which is now dead"
DEAD_WRITER_SLOT_WARNING = "Incomplete header found"


@pytest.fixture(scope="session")
def java() -> None:
    """Build the Java programs for every pinned version (raises if Maven fails)."""
    for version in VERSIONS:
        jvm.build(version)


def _warnings(stderr: str, allowed: tuple[str, ...]) -> list[str]:
    bad = re.compile(r"\b(WARN|ERROR|Exception|Error)\b")
    # a log line that ends in " - " has its message (an exception) on the next line
    lines = re.sub(r" - \n", " - ", stderr).splitlines()
    return [line for line in lines
            if bad.search(line) and not any(a in line for a in allowed)]


def start_java(version: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(jvm.command(version, *args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], allowed: tuple[str, ...] = ()) -> list[str]:
    """Wait for a Java or Python process; its stdout lines. A failure, or any warning
    or error it logs (beyond ``allowed`` and Java's own notices), fails the test."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert _warnings(err, JAVA_OWN_WARNINGS + allowed) == [], err
    return out.splitlines()


def run_java(version: str, *args: str, allowed: tuple[str, ...] = ()) -> list[str]:
    """Run the Java programs to completion (see :func:`finish`)."""
    return finish(start_java(version, *args), allowed)


def java_excerpts(lines: list[str]) -> list[tuple[int, bytes]]:
    """The ``E index hex`` lines of Java's tailer."""
    return [(int(p[1], 16), bytes.fromhex(p[2] if len(p) > 2 else ""))
            for p in (line.split(" ") for line in lines) if p[0] == "E"]


def python_excerpts(path: Path | str, name: str | None = None) -> list[tuple[int, bytes]]:
    with ac.open_queue(str(path), timeout=10.0) as q:
        tailer = q.tailer(name)
        out = []
        while (e := tailer.read_nowait()) is not None:
            out.append((e.index, bytes(e.payload)))
        return out


def start_python(*args: str, roll: str | None = None) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.path.dirname(WORKERS))
    if roll:
        env["ROLL"] = roll
    return subprocess.Popen([sys.executable, WORKERS, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


class Price(msgspec.Struct):
    """Java's ``aiochronicle.interop.Price`` (same field names)."""
    symbol: str
    bid: float
    ask: float
    qty: int


class Prices(Protocol):
    """Java's ``aiochronicle.interop.Prices``."""
    def onPrice(self, price: Price) -> None: ...  # Java's method names

    def onClose(self, symbol: str, last: bool) -> None: ...


class Recorder:
    """A typed handler of ``Prices`` that keeps each call with its message history."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.histories: list[ac.MessageHistory] = []

    def onPrice(self, price: Price) -> None:
        self.calls.append(("onPrice", price))
        self._history()

    def onClose(self, symbol: str, last: bool) -> None:
        self.calls.append(("onClose", symbol, last))
        self._history()

    def _history(self) -> None:
        h = ac.current_history()
        assert h is not None
        self.histories.append(h)


# --------------------------------------------------------------------------
# 1. Java writes every kind, Python reads it
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_java_writes_python_reads_every_kind(java: None, version: str, tmp_path: Path) -> None:
    q = tmp_path / "q"
    lines = run_java(version, "write", str(q), "FAST_DAILY", "7", "--", "tail", str(q), "-", "0")
    written = {p[1]: int(p[2], 16) for p in (x.split() for x in lines) if p[0] == "W"}
    seen_by_java = java_excerpts(lines)
    assert len(seen_by_java) == 5
    # the same excerpts at the same indices
    got = python_excerpts(q)
    assert got == seen_by_java
    assert [i for i, _ in got] == [written[k] for k in ("text", "bytes", "doc", "onPrice",
                                                        "onClose")]
    payload = dict(got)
    assert ac.Codecs.TEXT.decode(payload[written["text"]]) == "hello from java"
    assert payload[written["bytes"]] == b"\x00\x01\x02\xffjava"
    assert ac.Codecs.BINARY_WIRE.decode(payload[written["doc"]]) == {
        "symbol": "EURUSD", "qty": 1_000_000, "px": 1.0842, "live": True}

    # the method calls, dispatched into typed handlers, with Java's message history
    rec = Recorder()
    with ac.open_queue(str(q)) as queue:
        tailer = queue.tailer()
        assert tailer.move_to_index(written["onPrice"])
        reader = tailer.method_reader(rec, interfaces=[Prices])
        assert reader.read_available() == 2
    assert rec.calls == [("onPrice", Price("EURUSD", 1.0841, 1.0843, 1_000_000)),
                         ("onClose", "EURUSD", True)]
    for h, key in zip(rec.histories, ("onPrice", "onClose"), strict=True):
        # Java wrote no source and its write time; the reader added (sourceId 7, index)
        # and its read time, on the same clock (CLOCK_MONOTONIC)
        assert h.sources == [(7, written[key])]
        assert len(h.timings) == 2 and h.timings[0] < h.timings[1]


# --------------------------------------------------------------------------
# 2. Python writes, Java's tailer, MethodReader, DumpMain and ChronicleReader read
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_python_writes_java_reads(java: None, version: str, tmp_path: Path) -> None:
    mixed, methods = tmp_path / "mixed", tmp_path / "methods"
    with ac.open_queue(str(mixed)) as q:
        app = q.appender()
        app.append(b"\x00\x01raw\xff")
        app.append_text("hello from python")
        w = app.method_writer(Prices, codec="binary_wire")
        w.onPrice(Price("GBPUSD", 1.25, 1.5, 42))
        w.onClose("GBPUSD", False)
        # nothing: on disk one 0x8F padding byte (as Java's commit pads it);
        # Java's readBytes returns that byte, and so does read_nowait
        app.append(b"")
    with ac.open_queue(str(methods), source_id=3) as q:   # history recorded
        w = q.appender().method_writer(Prices, codec="binary_wire")
        w.onPrice(Price("GBPUSD", 1.25, 1.5, 42))
        w.onClose("GBPUSD", False)
    written = python_excerpts(mixed)
    method_indices, write_times = [], []
    for index, payload in python_excerpts(methods):
        history = ac.Codecs.BINARY_WIRE.decode(payload)[-1]   # field number -1: history
        method_indices.append(index)
        write_times.append(ac.MessageHistory.from_plain(history).timings[-1])

    lines = run_java(version, "tail", str(mixed), "-", "0", "--", "methods", str(methods),
                     "--", "dump", str(mixed), "--", "reader", str(mixed))
    assert java_excerpts(lines) == written
    assert written[-1][1] == b"\x8f"
    calls = [x for x in lines if x.startswith(("M ", "H "))]
    assert calls[0::2] == ["M onPrice GBPUSD 1.25 1.5 42", "M onClose GBPUSD false"]
    for hist, index, wrote in zip(calls[1::2], method_indices, write_times, strict=True):
        sources, timings = hist[2:].split(" |")
        # Java's reader adds (sourceId 3, index) and its read time after our write time
        assert sources == f"3:{index:x}"
        t = [int(x) for x in timings.split()]
        assert len(t) == 2 and t[0] == wrote and t[0] < t[1]
    text = "\n".join(lines)
    # DumpMain shows the documents, ChronicleReaderMain the excerpts by index
    assert "hello from python" in text and "onPrice: {" in text and "symbol: GBPUSD" in text
    assert f"0x{written[1][0]:x}:" in text


# --------------------------------------------------------------------------
# 5. Named tailers resume across languages
# --------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_named_tailer_resumes_across_languages(java: None, version: str,
                                               tmp_path: Path) -> None:
    q = tmp_path / "q"
    texts = [f"m{i}" for i in range(6)]
    run_java(version, "append-text", str(q), "-", *texts[:3])
    with ac.open_queue(str(q)) as queue:
        app = queue.appender()
        for t in texts[3:]:
            app.append_text(t)
    everything = python_excerpts(q)
    # Java reads two with tailer "svc"; Python's "svc" goes on from the third
    assert java_excerpts(run_java(version, "tail", str(q), "svc", "2")) == everything[:2]
    with ac.open_queue(str(q)) as queue:
        tailer = queue.tailer("svc")
        for expected in everything[2:4]:
            e = tailer.read_nowait()
            assert e is not None and (e.index, bytes(e.payload)) == expected
    # and Java resumes where Python stopped
    assert java_excerpts(run_java(version, "tail", str(q), "svc", "0")) == everything[4:]
    # a Python named tailer's start, after Java read it to the end, is the end
    assert python_excerpts(q, "svc") == []


# --------------------------------------------------------------------------
# 7. metadata.cq4t stays as the other wrote it
# --------------------------------------------------------------------------

#: entries whose values are the queue's live state (each side updates them)
STATE_KEYS = {b"listing.modCount", b"listing.highestCycle", b"listing.lowestCycle",
              b"chronicle.write.lock", b"chronicle.append.lock"}


def _table(path: Path) -> list[tuple[str, int, bytes]]:
    return raw_documents(path / "metadata.cq4t")


def _assert_kept(before: list[tuple[str, int, bytes]],
                 after: list[tuple[str, int, bytes]]) -> None:
    """Every document the creator wrote is still there at its place, byte for byte
    but the values of live state; the other side only added documents after them."""
    assert len(after) >= len(before)
    for (kind, pos, data), (kind2, pos2, data2) in zip(before, after, strict=False):
        assert (kind, pos, len(data)) == (kind2, pos2, len(data2))
        key = data[2:2 + data[1]] if kind == "data" and data[0] == 0xB9 else None
        if key in STATE_KEYS:
            assert data[:-8] == data2[:-8], key
        else:
            assert data == data2, key


@pytest.mark.parametrize("version", VERSIONS)
def test_metadata_kept_as_the_other_wrote_it(java: None, version: str,
                                             tmp_path: Path) -> None:
    by_java, by_python = tmp_path / "j", tmp_path / "p"
    run_java(version, "append-text", str(by_java), "FAST_DAILY", "java 1")
    before = _table(by_java)
    with ac.open_queue(str(by_java)) as q:
        assert q.roll_cycle is ac.RollCycles.FAST_DAILY
        q.appender().append_text("python 2")
    _assert_kept(before, _table(by_java))
    assert [p for _, p in java_excerpts(run_java(version, "tail", str(by_java), "-", "0"))] \
        == [b"\xe6java 1", b"\xe8python 2"]

    with ac.open_queue(str(by_python), roll_cycle=ac.RollCycles.FAST_DAILY) as q:
        q.appender().append_text("python 1")
    before = _table(by_python)
    run_java(version, "append-text", str(by_python), "FAST_DAILY", "java 2")
    _assert_kept(before, _table(by_python))
    assert [p for _, p in python_excerpts(by_python)] == [b"\xe8python 1", b"\xe6java 2"]


@pytest.mark.parametrize("version", VERSIONS)
def test_java_works_beside_the_notify_values(java: None, version: str,
                                             tmp_path: Path) -> None:
    """The 18 values a parked notify reader adds to metadata.cq4t (futex word,
    parked bits, owner slots) are keys Java passes over: it appends, adds a
    named tailer's key after them and reads, and leaves them as they were."""
    q = tmp_path / "q"
    with ac.open_queue(str(q)) as queue:
        queue.appender().append_text("python 1")
        assert notifier_for(cycles_of(queue).meta) is not None  # creates every notify value
        queue.table_store_put(slot_key(3), 12345 << 32 | 678)
    before = _table(q)
    assert sum(1 for _, _, d in before if b"aiochronicle.notify" in d) == 2 + SLOTS
    run_java(version, "append-text", str(q), "-", "java 2")
    assert [p for _, p in java_excerpts(run_java(version, "tail", str(q), "svc", "0"))] \
        == [b"\xe8python 1", b"\xe6java 2"]
    _assert_kept(before, _table(q))
    with ac.open_queue(str(q)) as queue:
        assert queue.table_store_get(slot_key(3)) == 12345 << 32 | 678
        assert queue.table_store_get("index.svc") is not None  # Java's key, after ours
        assert [e.payload for e in iter(queue.tailer().read_nowait, None)] == [
            b"\xe8python 1", b"\xe6java 2"]


@pytest.mark.parametrize("content", [b"", bytes(65536)])
def test_a_just_created_empty_metadata_gets_a_header(tmp_path: Path, content: bytes) -> None:
    """What the co-writing test met when Java had just created metadata.cq4t: the
    first to take its file lock writes the header (as Java does), the rest read it."""
    q = tmp_path / "q"
    q.mkdir()
    (q / "metadata.cq4t").write_bytes(content)
    with ac.open_queue(str(q), roll_cycle=ac.RollCycles.TEST_SECONDLY) as queue:
        queue.appender().append_text("first")
    with ac.open_queue(str(q), read_only=True) as queue:
        assert queue.roll_cycle is ac.RollCycles.TEST_SECONDLY
    assert [p for _, p in python_excerpts(q)] == [b"\xe5first"]


# --------------------------------------------------------------------------
# 3 and 6. Co-writing on a queue rolling every second, on real clocks
# --------------------------------------------------------------------------

#: messages per writer: enough for the run to span a few one-second cycles
CO_WRITES = 50_000


def _writer_of(payload: bytes) -> tuple[str, int]:
    wid, _, n = payload.decode().partition(":")
    return wid, int(n)


def test_co_writing_two_java_two_python_rolling(java: None, tmp_path: Path) -> None:
    q = tmp_path / "q"
    roll = "TEST_SECONDLY"
    # one Java writer per pinned version, two Python writers, all at once. The older
    # Java goes first and creates the queue (5.21 cannot open a metadata.cq4t 2026.x
    # created: it lacks deltaCheckpointInterval); the others start as soon as the file
    # is there, maybe before its header is
    procs = [start_java(jvm.OLDER, "append", str(q), roll, "j1", str(CO_WRITES), "100")]
    deadline = time.monotonic() + 120
    while not (q / "metadata.cq4t").exists():
        assert procs[0].poll() is None and time.monotonic() < deadline, finish(procs[0])
        time.sleep(0.001)
    total = 4 * CO_WRITES
    # a live tailer in each language, reading as the files roll
    tailers = [start_java(jvm.NEWEST, "follow", str(q), str(total), "300000"),
               start_python("peer-tailer", str(q), str(total), "300", roll=roll)]
    procs += [start_python("peer-writer", str(q), f"p{k}", str(CO_WRITES), "10", roll=roll)
              for k in range(2)]
    procs.append(start_java(jvm.NEWEST, "append", str(q), roll, "j0", str(CO_WRITES), "100"))
    for p in procs:
        finish(p)
    by_python = python_excerpts(q)
    assert len(by_python) == total
    # one total order, seen alike by both, live and afterwards
    by_java = java_excerpts(run_java(jvm.NEWEST, "tail", str(q), "-", "0"))
    assert by_java == by_python
    digest = hashlib.sha256()
    for index, payload in by_python:
        digest.update(struct.pack("<q", index) + payload)
    for t in tailers:
        assert finish(t) == [f"DIGEST {total} {digest.hexdigest()}"]
    # every message exactly once, each writer's own order kept
    seq: dict[str, list[int]] = {}
    for _, payload in by_python:
        wid, n = _writer_of(payload)
        seq.setdefault(wid, []).append(n)
    assert {w: s == list(range(CO_WRITES)) for w, s in seq.items()} == {
        w: True for w in ("j0", "j1", "p0", "p1")}
    # indices dense in each cycle, from 0
    per_cycle: dict[int, list[int]] = {}
    for index, _ in by_python:
        per_cycle.setdefault(index >> 32, []).append(index & 0xFFFFFFFF)
    assert all(s == list(range(len(s))) for s in per_cycle.values())
    # 6. the cycles rolled, one file per cycle whoever created it, named alike
    assert len(per_cycle) >= 2
    files = sorted(p.name for p in q.glob("*.cq4"))
    assert all(re.fullmatch(r"\d{8}-\d{6}T\.cq4", f) for f in files), files
    namer = CycleNamer(ac.RollCycles.TEST_SECONDLY)
    assert {f"{namer.name(c)}.cq4" for c in per_cycle} <= set(files)
    # a cycle file without excerpts is legal: a writer may create its cycle's file and
    # write its first excerpt a second later (a Java appender creates the file when it
    # is made; on a loaded machine the JVM's start spans seconds), and a roll may leave
    # a newest cycle with nothing in it yet.  But only before the first or after the
    # last cycle written: the writers write all along, so an empty cycle between two
    # that hold excerpts would be an excerpt lost or put in the wrong file
    empty = {namer.parse(f.removesuffix(".cq4")) for f in files} - set(per_cycle)
    assert all(c < min(per_cycle) or c > max(per_cycle) for c in empty), (empty, files)
    # both languages wrote into the cycles in which both were running
    mixed: Counter[tuple[int, bytes]] = Counter()
    for index, payload in by_python:
        mixed[(index >> 32, payload[:1])] += 1
    assert any((c, b"j") in mixed and (c, b"p") in mixed for c in per_cycle)


def _wait_for_cycle_after(index: int) -> None:
    """Sleep until the real clock is past the cycle of ``index`` (TEST_SECONDLY)."""
    rc = ac.RollCycles.TEST_SECONDLY
    while rc.current_cycle(int(time.time() * 1000)) <= rc.to_cycle(index):
        time.sleep(0.05)


def test_rolls_on_real_clocks_each_reads_the_others_eof_markers(java: None,
                                                                tmp_path: Path) -> None:
    q = tmp_path / "q"
    roll = "TEST_SECONDLY"
    # Java, Python, Java (the other version), Python: each writes in a later second than
    # the one before, so each rolls the other's cycle (and writes its EOF marker there)
    indices: list[int] = []
    # (the older Java first: it cannot open a queue the newer one created)
    for k, writer in enumerate((jvm.OLDER, "python", jvm.NEWEST, "python")):
        if indices:
            _wait_for_cycle_after(indices[-1])
        if writer == "python":
            with open_q(str(q), roll_cycle=ac.RollCycles.TEST_SECONDLY) as queue:
                indices.append(queue.appender().append_text(f"m{k}"))
        else:
            lines = run_java(writer, "append-text", str(q), roll, f"m{k}")
            indices.append(int(lines[0].split()[2], 16))
    cycles = [ac.RollCycles.TEST_SECONDLY.to_cycle(i) for i in indices]
    assert cycles == sorted(set(cycles))
    namer = CycleNamer(ac.RollCycles.TEST_SECONDLY)
    files = [q / f"{namer.name(c)}.cq4" for c in cycles]
    assert sorted(q.glob("*.cq4")) == files
    # every file but the last ends with the EOF marker its successor's writer put there
    assert [raw_documents(f)[-1][0] for f in files] == ["eof", "eof", "eof", "data"]
    expected = [(i, bytes([0xE2]) + f"m{k}".encode()) for k, i in enumerate(indices)]
    assert python_excerpts(q) == expected
    for version in VERSIONS:
        assert java_excerpts(run_java(version, "tail", str(q), "-", "0")) == expected


# --------------------------------------------------------------------------
# 4. Kills across languages
# --------------------------------------------------------------------------


def _check_writers(excerpts: list[tuple[int, bytes]], writers: dict[str, int]) -> None:
    seq: dict[str, list[int]] = {}
    for _, payload in excerpts:
        if b":" in payload:
            wid, n = _writer_of(payload)
            seq.setdefault(wid, []).append(n)
    assert seq == {w: list(range(n)) for w, n in writers.items()}


def test_java_killed_holding_the_write_lock_python_carries_on(java: None,
                                                               tmp_path: Path) -> None:
    q = tmp_path / "q"
    with open_q(str(q)) as queue:
        queue.appender().append_text("before")
    writers: dict[str, int] = {}
    for k, version in enumerate(VERSIONS):
        holder = start_java(version, "hold", str(q), "-")
        assert holder.stdout is not None
        assert holder.stdout.readline().startswith("LOCKED")
        # Python appenders started while the live JVM holds the lock wait for it ...
        procs = []
        for wid in (f"p{2 * k}", f"p{2 * k + 1}"):
            procs.append(start_python("peer-writer", str(q), wid, "500", "0"))
            writers[wid] = 500
        for w in procs:
            assert w.stdout is not None
            assert w.stdout.readline() == "READY\n"   # queue open, appending next
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        # ... and take it over once its holder is dead (Java's rule), losing nothing
        for w in procs:
            finish(w)
    got = python_excerpts(q)
    for version in VERSIONS:
        assert java_excerpts(run_java(version, "tail", str(q), "-", "0")) == got
    assert got[0][1] == b"\xe6before"
    assert b"half written" not in b"".join(p for _, p in got)
    _check_writers(got, writers)


def test_python_killed_holding_the_write_lock_java_carries_on(java: None,
                                                               tmp_path: Path) -> None:
    q = tmp_path / "q"
    with open_q(str(q)) as queue:
        queue.appender().append_text("before")
    holder = start_python("hold-lock", str(q))
    assert holder.stdout is not None
    assert holder.stdout.readline().startswith("LOCKED")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # both Java versions recover the lock of the dead process and append; the
    # slot the Python writer had claimed (NOT_COMPLETE|META|len, see
    # native/README.md) is an incomplete header to Java, which it overwrites
    # with a warning: its documented recovery of a writer that died mid-excerpt
    procs = [start_java(version, "append", str(q), "-", f"j{k}", "500", "0")
             for k, version in enumerate(VERSIONS)]
    for p in procs:
        finish(p, allowed=(DEAD_HOLDER_WARNING, DEAD_WRITER_SLOT_WARNING))
    with ac.open_queue(str(q)) as queue:
        queue.appender().append_text("after")
    got = python_excerpts(q)
    assert java_excerpts(run_java(jvm.OLDER, "tail", str(q), "-", "0")) == got
    assert got[0][1] == b"\xe6before" and got[-1][1] == b"\xe5after"
    _check_writers(got, {"j0": 500, "j1": 500})
