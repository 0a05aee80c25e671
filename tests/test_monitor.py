"""Watching running queues: ``aiochronicle metrics`` (a real HTTP endpoint in
a child process, scraped with urllib), ``top --once`` and ``latency --plot``
run as commands, the library API of :mod:`aiochronicle.metrics`, and the
figures they stand on.  Expected values are computed here from what the test
wrote, never taken from the code under test."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import pty
import random
import re
import select
import signal
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from skips import skip
from test_cli import assert_one_line_error, run
from test_damage import _without_privilege

import aiochronicle as ac
from aiochronicle._format._wire import WireWriter
from aiochronicle._monitoring._monitor import LatencyHistogram, QueueWatch
from aiochronicle.metrics import ServiceMetrics

DAY = 86_400_000
START = 19_000 * DAY
TIMEOUT = 60.0


def _align4(n: int) -> int:
    return (n + 3) & ~3


def _disk(path: Path) -> int:
    return sum(os.stat(p).st_blocks * 512 for p in path.glob("*.cq4"))


# --------------------------------------------------------------------------
# the metrics endpoint, as a child process
# --------------------------------------------------------------------------


class Endpoint:
    """``aiochronicle metrics`` running in a child; :meth:`scrape` reads it."""

    def __init__(self, *queues: str, unprivileged: bool = False, extra: tuple[str, ...] = (),
                 context: ssl.SSLContext | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.context, self.headers = context, headers or {}
        argv = [sys.executable, "-m", "aiochronicle", "metrics", *queues, "--port", "0", *extra]
        if unprivileged:  # file permissions apply to it, even as root
            argv = _without_privilege(argv)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        # the child prints the line once it listens (or exits: then it is empty)
        ready = select.select([self.proc.stdout], [], [], TIMEOUT)[0]
        line = self.proc.stdout.readline() if ready else ""
        m = re.match(r"serving (https?)://(127\.0\.0\.1|0\.0\.0\.0):(\d+)/metrics", line)
        if m is None:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=TIMEOUT)
            raise AssertionError(f"no endpoint: {line!r} {err}")
        self.url = f"{m.group(1)}://127.0.0.1:{m.group(3)}/metrics"

    def text(self) -> str:
        req = urllib.request.Request(self.url, headers=self.headers)
        with urllib.request.urlopen(req, timeout=TIMEOUT, context=self.context) as r:
            assert r.status == 200
            return str(r.read().decode())

    def scrape(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """{(sample name, sorted labels): value}."""
        out = {}
        for fam in text_string_to_metric_families(self.text()):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=TIMEOUT)
        return self.proc.returncode, out, err


def q_(queue: str, **labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"queue": queue, **labels}.items()))


def test_metrics_follow_appends_and_reads(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(START)
    rng = random.Random(27)
    payloads: list[bytes] = []
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY, time_provider=clock) as q:
        a = q.appender()

        def append(n: int) -> int:
            last = -1
            for _ in range(n):
                p = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 90)))
                payloads.append(p)
                last = a.append(p)
            return last

        append(30)
        clock.advance_millis(DAY)  # a second cycle file
        last = append(25)
        reader = q.tailer("audit")
        read = 17
        for _ in range(read):
            assert reader.read_nowait() is not None
        reader.close()

        e = Endpoint(path)
        endpoint.append(e)

        def check(read: int, last: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
            m = e.scrape()
            lab = q_(path)
            tl = q_(path, tailer="audit")
            assert m[("aiochronicle_queue_up", lab)] == 1
            assert m[("aiochronicle_excerpts_total", lab)] == len(payloads)
            assert m[("aiochronicle_last_index", lab)] == last
            assert m[("aiochronicle_cycle_files", lab)] == len(list(tmp_path.glob("q/*.cq4")))
            assert m[("aiochronicle_disk_bytes", lab)] == _disk(tmp_path / "q")
            # the lag of a named tailer is what was appended less what it read
            assert m[("aiochronicle_named_tailer_lag_excerpts", tl)] == len(payloads) - read
            # ... and in bytes, each unread excerpt's 4-byte header and padded payload
            unread = payloads[read:]
            assert m[("aiochronicle_named_tailer_lag_bytes", tl)] == sum(
                4 + _align4(max(1, len(p))) for p in unread)
            return m

        m = check(read, last)
        assert m[("aiochronicle_write_lock_held_seconds", q_(path))] == 0
        assert m[("aiochronicle_write_lock_holder", q_(path))] == 0
        assert m[("aiochronicle_cycle_files", q_(path))] == 2

        # append more, read more: the figures move
        last = append(40)
        reader = q.tailer("audit")
        for _ in range(50):
            assert reader.read_nowait() is not None
        reader.close()
        check(read + 50, last)

        # the write lock, held (an open writing context) and let go
        doc = a.writing_document()
        try:
            first = e.scrape()[("aiochronicle_write_lock_held_seconds", q_(path))]
            m = e.scrape()
            assert m[("aiochronicle_write_lock_holder", q_(path))] == os.getpid()
            assert m[("aiochronicle_write_lock_holder_alive", q_(path))] == 1
            assert m[("aiochronicle_write_lock_dead_seconds", q_(path))] == 0
            assert m[("aiochronicle_write_lock_held_seconds", q_(path))] > first >= 0
        finally:
            doc.write(b"done")
            doc.close()
        payloads.append(b"done")
        m = check(read + 50, a.last_index_appended)
        assert m[("aiochronicle_write_lock_held_seconds", q_(path))] == 0
        assert m[("aiochronicle_write_lock_holder", q_(path))] == 0

    code, _, err = e.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_metrics_of_several_queues_one_gone(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    paths = [str(tmp_path / n) for n in ("a", "b")]
    for n, p in enumerate(paths):
        with ac.open_queue(p) as q:
            for i in range(3 + n):
                q.appender().append(b"x" * i)
    e = Endpoint(*paths)
    endpoint.append(e)
    m = e.scrape()
    assert [m[("aiochronicle_excerpts_total", q_(p))] for p in paths] == [3, 4]
    for f in Path(paths[0]).iterdir():
        f.unlink()
    os.rmdir(paths[0])
    m = e.scrape()
    assert m[("aiochronicle_queue_up", q_(paths[0]))] == 0
    assert ("aiochronicle_excerpts_total", q_(paths[0])) not in m
    assert m[("aiochronicle_queue_up", q_(paths[1]))] == 1
    assert m[("aiochronicle_excerpts_total", q_(paths[1]))] == 4
    # made again: a new queue at the same path is seen as it is now
    with ac.open_queue(paths[0]) as q:
        q.appender().append_many([b"new", b"queue"])
    m = e.scrape()
    assert m[("aiochronicle_queue_up", q_(paths[0]))] == 1
    assert m[("aiochronicle_excerpts_total", q_(paths[0]))] == 2
    code, _, err = e.stop(signal.SIGINT)  # Ctrl-C: a clean stop too
    assert code == 0, err


def _tree_state(path: Path) -> dict[str, tuple[str, int]]:
    return {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
            for f in sorted(path.iterdir())}


def test_metrics_on_a_read_only_queue(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    """Files and directory without write permission, and the child without
    root's power to write anyway: the figures are read, nothing changes."""
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        a = q.appender()
        for i in range(12):
            a.append(b"y" * i)
        t = q.tailer("slow")
        for _ in range(5):
            t.read_nowait()
        t.close()
    before = _tree_state(path)
    for f in path.iterdir():
        os.chmod(f, 0o444)
    os.chmod(path, 0o555)
    try:
        e = Endpoint(str(path), unprivileged=True)
        endpoint.append(e)
        m = e.scrape()
        assert m[("aiochronicle_queue_up", q_(str(path)))] == 1
        assert m[("aiochronicle_excerpts_total", q_(str(path)))] == 12
        assert m[("aiochronicle_named_tailer_lag_excerpts", q_(str(path), tailer="slow"))] == 7
        code, _, err = e.stop()
        assert code == 0, err
    finally:
        os.chmod(path, 0o755)
        for f in path.iterdir():
            os.chmod(f, 0o644)
    assert _tree_state(path) == before


def test_metrics_bad_arguments(tmp_path: Path) -> None:
    not_queue = tmp_path / "plain"
    not_queue.mkdir()
    (not_queue / "notes.txt").write_text("hello")
    line = assert_one_line_error(run("metrics", str(not_queue), "--port", "0"))
    assert "not a Chronicle queue" in line
    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"x")
    q = str(tmp_path / "q")
    for bad in ("70000", "-1", "http"):
        line = assert_one_line_error(run("metrics", q, "--port", bad), 2)
        assert "--port" in line
    line = assert_one_line_error(run("metrics", q), 2)
    assert "--port" in line
    line = assert_one_line_error(run("metrics", "--port", "0"), 2)
    line = assert_one_line_error(run("metrics", q, "--port", "0", "--host", "no.such.host."))
    assert "no.such.host" in line or "Name or service" in line or "resolution" in line


# --------------------------------------------------------------------------
# top --once
# --------------------------------------------------------------------------


def _cells(out: str, first: str) -> list[list[str]]:
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line) if c.strip()]
        if cells and cells[0] == first:
            rows.append(cells)
    return rows


def test_top_once(tmp_path: Path) -> None:
    paths = [tmp_path / "md", tmp_path / "orders[bold]:fire:"]  # shown as they are
    counts = [40, 9]
    lasts = []
    for p, n in zip(paths, counts, strict=True):
        with ac.open_queue(p) as q:
            a = q.appender()
            for i in range(n):
                last = a.append(f"m{i}".encode())
            lasts.append(last)
    reads = {"risk": 11, "audit": 0}
    with ac.open_queue(paths[0]) as q:
        for name, k in reads.items():
            t = q.tailer(name)
            for _ in range(k):
                t.read_nowait()
            t.close()
    r = run("top", "--once", "-i", "0.05", *map(str, paths))
    assert r.returncode == 0, r.stderr
    for p, n, last in zip(paths, counts, lasts, strict=True):
        (row,) = _cells(r.stdout, str(p))[:1]
        # queue, excerpts, last index, append/s (nothing appended meanwhile), cycles, disk, lock
        assert row[1] == str(n) and row[2] == f"{last:#x}" and row[3] == "0.0", row
        assert row[4] == "1" and row[6] == "free", row
    tailer_rows = {c[1]: c for c in _cells(r.stdout, str(paths[0])) if len(c) == 6}
    assert set(tailer_rows) == set(reads)
    for name, k in reads.items():
        assert tailer_rows[name][3] == str(counts[0] - k), tailer_rows[name]
    # bad arguments
    assert_one_line_error(run("top", "--once", "-i", "0", str(paths[0])), 2)
    assert_one_line_error(run("top", "--once"), 2)


_STOP_LOOP = """
import signal, sys
from aiochronicle._monitor_cli import _SignalStop
stop = _SignalStop()
print("ready", flush=True)
n = 0
while not stop.wait(0):  # the loop top and metrics run, with no sleep in it
    n += 1
stop.close()
restored = signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("stopped", n > 0, restored, flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_always_ends_the_watching_commands_wait(sig: signal.Signals) -> None:
    """top and metrics wait for Ctrl-C or SIGTERM; the signal must end the wait
    wherever in it the signal lands.  (A handler that set a threading.Event hung
    for good when it landed while the interrupted Event.wait() held the Event's
    lock, in most of these runs.)"""
    for _ in range(8):
        p = subprocess.Popen([sys.executable, "-c", _STOP_LOOP], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        try:
            assert p.stdout is not None
            assert p.stdout.readline() == b"ready\n"
            time.sleep(0.02)
            p.send_signal(sig)
            out, err = p.communicate(timeout=TIMEOUT / 4)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=TIMEOUT)
        assert p.returncode == 0, err
        assert out == b"stopped True True\n", err


def test_the_watching_commands_wait_takes_descriptors_past_1023() -> None:
    """A process watching many queues has many descriptors open: the wait's
    own pipe may land past 1023, where select() refuses it."""
    code = """
import os, resource, signal
from aiochronicle._monitor_cli import _SignalStop
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < 1100:
    print("low hard limit", hard)
    raise SystemExit(0)
resource.setrlimit(resource.RLIMIT_NOFILE, (2048, hard))
held = [os.dup(0) for _ in range(1100)]
stop = _SignalStop()
assert stop._r > 1023, stop._r
assert stop.wait(0.01) is False
os.kill(os.getpid(), signal.SIGTERM)
assert stop.wait(30) is True
stop.close()
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith(b"low hard limit"):
        skip("nofile", r.stdout.decode().strip())
    assert r.stdout == b"ok\n", r.stderr


def test_top_live_follows_appends_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """On a terminal, top redraws: the excerpt count moves when we append."""
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        a = q.appender()
        for i in range(5):
            a.append(b"%d" % i)
        master, slave = pty.openpty()
        p = subprocess.Popen([sys.executable, "-m", "aiochronicle", "top", str(path),
                              "-i", "0.05"], stdin=slave, stdout=slave, stderr=slave,
                             env=dict(os.environ, COLUMNS="300", LINES="40"))
        os.close(slave)
        try:
            got = b""
            deadline = time.monotonic() + TIMEOUT

            def until(pattern: bytes) -> None:
                nonlocal got
                while re.search(pattern, got) is None:
                    assert time.monotonic() < deadline, got.decode(errors="replace")
                    if select.select([master], [], [], 0.2)[0]:
                        got += os.read(master, 65536)

            row = re.escape(str(path).encode()) + rb"\s*\S+\s+%d\s"
            until(row % 5)
            for i in range(7):
                a.append(b"more %d" % i)
            until(row % 12)
            p.send_signal(signal.SIGINT)
            # go on reading (a terminal does): a child blocked writing to a
            # full pty could not act on the signal
            while p.poll() is None:
                assert time.monotonic() < deadline, "top did not stop on SIGINT"
                if select.select([master], [], [], 0.2)[0]:
                    with contextlib.suppress(OSError):
                        got += os.read(master, 65536)
            assert p.returncode == 0
        finally:
            os.close(master)
            if p.poll() is None:  # an assertion failed above: do not leave it running
                p.kill()
                p.wait(timeout=TIMEOUT)
        assert b"Traceback" not in got


# --------------------------------------------------------------------------
# latency
# --------------------------------------------------------------------------


def _nearest_rank(values: list[int], p: float) -> int:
    s = sorted(values)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


def _wire_call(history: ac.MessageHistory) -> bytes:
    w = WireWriter()
    w.event_name("onTick")
    w.int_compact(7)
    return history.wire_bytes() + w.getvalue()


def _msgpack_call(history: ac.MessageHistory) -> bytes:
    return msgspec.msgpack.encode([msgspec.msgpack.Ext(72, history.to_bytes()), "on_tick",
                                   {"x": 1}])


def test_latency_percentiles_and_plot(tmp_path: Path) -> None:
    """Histories written with known hop times: the percentiles the command
    reports are the exact ones within its stated 1/128 precision."""
    rng = random.Random(99)
    hop1: list[int] = []
    hop2: list[int] = []
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        a = q.appender()
        a.append(b"no history here")
        for i in range(3000):
            d1 = int(rng.lognormvariate(9, 1.2))  # ~8 us typical, long tail
            d2 = int(rng.lognormvariate(7, 0.8))
            hop1.append(d1)
            hop2.append(d2)
            t0 = 10**12 + i * 10**6
            h = ac.MessageHistory([(5, i)], [t0, t0 + d1, t0 + d1 + d2])
            a.append(_wire_call(h) if i % 2 else _msgpack_call(h))
    plot = tmp_path / "lat.png"
    r = run("latency", str(path), "--json", "--plot", str(plot))
    assert r.returncode == 0, r.stderr
    got = msgspec.json.decode(r.stdout)
    assert got["excerpts"] == 3001 and got["with_history"] == 3000 and got["damaged"] == 0
    hops = {h["hop"]: h for h in got["hops"]}
    assert list(hops) == ["1: queue 5 (write -> read)", "2: service after 5 (read -> write)"]
    for h, values in zip(hops.values(), (hop1, hop2), strict=True):
        assert h["count"] == len(values)
        assert h["max"] == max(values)
        for p in (50, 90, 99, 99.9):
            exact = _nearest_rank(values, p)
            assert abs(h[f"p{p:g}"] - exact) <= exact / 128 + 1, (p, h, exact)
    png = plot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 300 and height > 200
    # the table form shows the same numbers, in microseconds
    r = run("latency", str(path))
    assert r.returncode == 0, r.stderr
    row = next(x for x in r.stdout.splitlines() if x.startswith("1: queue 5"))
    cells = row.split()
    assert cells[-6] == "3000"
    assert float(cells[-1].replace(",", "")) == pytest.approx(max(hop1) / 1000, abs=0.05)


class Tick(msgspec.Struct):
    n: int


class Ticks:
    def on_tick(self, t: Tick) -> None: ...


def test_latency_of_a_real_chain(tmp_path: Path) -> None:
    """A writer, a service reading and writing on, and latency over its output."""
    n = 200
    with ac.open_queue(tmp_path / "in", source_id=1) as qin, \
            ac.open_queue(tmp_path / "out", source_id=2) as qout:
        w = qin.appender().method_writer(Ticks)
        for i in range(n):
            w.on_tick(Tick(i))
        out = qout.appender().method_writer(Ticks)

        class Service:
            def on_tick(self, t: Tick) -> None:
                out.on_tick(t)

        reader = qin.tailer().method_reader(Service())
        while reader.read_one():
            pass
    r = run("latency", str(tmp_path / "out"), "--json")
    assert r.returncode == 0, r.stderr
    got = msgspec.json.decode(r.stdout)
    assert got["with_history"] == n
    assert [(h["hop"], h["count"]) for h in got["hops"]] == [
        ("1: queue 1 (write -> read)", n), ("2: service after 1 (read -> write)", n)]
    assert all(h["p50"] > 0 for h in got["hops"])
    # the first queue's histories hold one timing: no hop yet
    r = run("latency", str(tmp_path / "in"))
    assert r.returncode == 0 and "no hops" in r.stdout, r.stdout


def test_latency_counts_damaged_histories(tmp_path: Path) -> None:
    good = ac.MessageHistory([(1, 0)], [1_000, 3_000, 4_000])
    raw = good.to_bytes()
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        a.append(_msgpack_call(good))
        # a history ext whose counts promise more timings than it holds
        a.append(msgspec.msgpack.encode([msgspec.msgpack.Ext(72, raw[:-8]), "on_tick", 1]))
        a.append(_wire_call(good)[:12])  # cut inside the history
        a.append(msgspec.msgpack.encode(["on_tick", 1]))  # a call without history
    r = run("latency", str(tmp_path / "q"), "--json")
    assert r.returncode == 0, r.stderr
    got = msgspec.json.decode(r.stdout)
    assert (got["excerpts"], got["with_history"], got["damaged"]) == (4, 1, 2)
    assert [(h["hop"], h["count"], h["max"]) for h in got["hops"]] == [
        ("1: queue 1 (write -> read)", 1, 2_000), ("2: service after 1 (read -> write)", 1,
                                                   1_000)]


def test_latency_bad_arguments(tmp_path: Path) -> None:
    line = assert_one_line_error(run("latency", str(tmp_path / "nope")))
    assert "no such queue" in line
    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"x")
    line = assert_one_line_error(run("latency", str(tmp_path / "q"), "--plot",
                                     str(tmp_path / "lat.txt")), 2)
    assert ".png" in line
    line = assert_one_line_error(run("latency", str(tmp_path / "q"), "--plot",
                                     str(tmp_path / "no" / "dir" / "lat.png")), 2)
    assert "no directory" in line


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=-5, max_value=10**12), min_size=1, max_size=400))
def test_histogram_percentiles_within_precision(values: list[int]) -> None:
    h = LatencyHistogram()
    for v in values:
        h.add(v)
    clipped = [max(0, v) for v in values]
    assert h.count == len(values) and h.max == max(clipped) and h.min == min(clipped)
    for p in (0.1, 50, 90, 99, 99.9, 100):
        exact = _nearest_rank(clipped, p)
        assert abs(h.percentile(p) - exact) <= exact / 128 + 1, (p, exact)
    assert len(h.buckets) <= len(set(clipped))


# --------------------------------------------------------------------------
# the figures underneath, and the library API
# --------------------------------------------------------------------------


def test_ended_cycles_are_not_opened_again(tmp_path: Path) -> None:
    """A watch opens only the cycles still written: ended ones cost a stat."""
    clock = ac.SetTimeProvider(START)
    path = tmp_path / "q"
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        for _ in range(5):
            for i in range(4):
                a.append(b"z" * i)
            clock.advance_millis(DAY)
        a.append(b"last")
    cycles = sorted(path.glob("*.cq4"))
    assert len(cycles) == 6
    opened: list[int] = []

    class Spy:
        def on_acquired(self, cycle: int, p: str) -> None:
            opened.append(cycle)

        def on_released(self, cycle: int, p: str) -> None:
            pass

    from aiochronicle._tools._stats import SealedCycles, queue_stats  # the layer under the watch

    sealed: SealedCycles = {}
    with ac.open_queue(path, read_only=True) as q:
        ac.add_store_file_listener(q, Spy(), background=False)
        first = queue_stats(q, sealed=sealed)
        assert len(opened) == 6
        opened.clear()
        again = queue_stats(q, sealed=sealed)
        assert len(set(opened)) == 1  # the last, unfinished cycle only
        assert again == first
        assert first.total_excerpts == 21
    w = QueueWatch(str(path))
    assert w.figures().excerpts == 21


def test_appender_counts_what_it_wrote(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q") as q:
        a, b = q.appender(), q.appender()
        a.append(b"1")
        a.append_many([b"2", b"3", b"4"])
        a.append_metadata(b"not an excerpt")
        with a.writing_document() as d:
            d.write(b"5")
        b.append(b"other")
        assert a.excerpts_appended == 5 and b.excerpts_appended == 1
        assert q.entry_count() == 6


def test_service_metrics(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    with ac.open_queue(tmp_path / "q") as q:
        mine, other = q.appender(), q.appender()
        metrics.add_appender("mine", mine)
        for i in range(30):
            mine.append(b"m%d" % i)
        for i in range(12):
            other.append(b"o%d" % i)
        assert value("aiochronicle_appender_excerpts_total", appender="mine") == 30
        assert value("aiochronicle_appender_last_index", appender="mine") == \
            mine.last_index_appended

        pauser = ac.Pauser.millis(1)
        t = q.tailer(pauser=pauser)
        metrics.add_tailer("t", t)
        metrics.add_pauser("p", pauser)
        for _ in range(25):
            assert t.read_nowait() is not None
        assert value("aiochronicle_tailer_excerpts_total", tailer="t") == 25
        assert value("aiochronicle_tailer_lag_excerpts", tailer="t") == 42 - 25
        while t.read_nowait() is not None:
            pass
        assert t.read_blocking(timeout=0.01) is None  # nothing more: the pauser pauses
        stats = pauser.statistics()
        assert stats.count_paused > 0
        assert value("aiochronicle_pauser_pauses_total", pauser="p") == stats.count_paused
        assert value("aiochronicle_pauser_paused_seconds_total", pauser="p") == \
            pytest.approx(stats.time_paused_ns / 1e9)
        assert value("aiochronicle_tailer_lag_excerpts", tailer="t") == 0

        class Sink:
            def on_tick(self, tick: Tick) -> None:
                metrics.observe_history(ac.MessageHistory([(3, 0)], [100, 100 + tick.n * 1000,
                                                                     100 + tick.n * 3000]))

        with ac.open_queue(tmp_path / "calls") as qc:
            w = qc.appender().method_writer(Ticks)
            for i in range(1, 11):
                w.on_tick(Tick(i))
            reader = qc.tailer().method_reader(Sink())
            metrics.add_reader("sink", reader)
            while reader.read_one():
                pass
            assert value("aiochronicle_reader_read_total", reader="sink") == 10
            assert value("aiochronicle_reader_dispatched_total", reader="sink") == 10
        hop1 = "1: queue 3 (write -> read)"
        hop2 = "2: service after 3 (read -> write)"
        assert value("aiochronicle_hop_latency_seconds_count", hop=hop1) == 10
        assert value("aiochronicle_hop_latency_seconds_sum", hop=hop1) == pytest.approx(
            sum(n * 1000 for n in range(1, 11)) / 1e9)
        assert value("aiochronicle_hop_latency_seconds_sum", hop=hop2) == pytest.approx(
            sum(n * 2000 for n in range(1, 11)) / 1e9)
        metrics.remove("mine")
        assert value("aiochronicle_appender_excerpts_total", appender="mine") is None
    # the queue closed: its tailer leaves the scrape
    assert value("aiochronicle_tailer_index", tailer="t") is None
