"""Exactly-once services (issue 32, DESIGN.md decision 12): ``ac.Service``
resumes from its outputs' message history, suppresses what a crash left
written, and rebuilds state from snapshots or a replay, so its outputs are
those of a run without crashes: each once, in order.

In-process tests crash a service by raising a ``BaseException`` from its
handler at chosen outputs (between any two outputs of one input); the slow
test SIGKILLs real service processes of a three-service pipeline at random
moments, hundreds of times, with bursts of input in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest
import service_pipeline as sp
from loops import KINDS, loop_factory

import aiochronicle as ac

HERE = Path(__file__).resolve().parent


class Tick(msgspec.Struct):
    seq: int
    px: int


class Out(msgspec.Struct):
    seq: int
    k: int
    total: int


class Ticks(Protocol):
    def on_tick(self, t: Tick) -> None: ...


class Outs(Protocol):
    def on_out(self, o: Out) -> None: ...


class Crash(BaseException):
    """A crash at a chosen point (not an Exception: nothing catches it)."""


class Summer:
    """Keeps a running total; writes ``seq % 4`` outputs per input, to
    ``main`` and (every other one) to ``side``."""

    crash_points: set[tuple[int, int]] = set()

    def __init__(self, main: Outs, side: Outs | None = None) -> None:
        self.main = main
        self.side = side
        self.total = 0

    def on_tick(self, t: Tick) -> None:
        self.total += t.px
        for k in range(t.seq % 4):
            if (t.seq, k) in Summer.crash_points:
                Summer.crash_points.discard((t.seq, k))
                raise Crash
            out = self.side if self.side is not None and k % 2 else self.main
            out.on_out(Out(t.seq, k, self.total))

    def snapshot(self) -> object:
        return self.total

    def restore(self, state: int) -> None:
        self.total = state


class Plain(Summer):
    """:class:`Summer` without state (each total is the input's own)."""

    def on_tick(self, t: Tick) -> None:
        self.total = 0
        super().on_tick(t)


@pytest.fixture(autouse=True)
def _no_crash_points() -> None:
    Summer.crash_points = set()


def _run(kind: str, coro: Any) -> Any:
    with asyncio.Runner(loop_factory=loop_factory(kind)) as r:
        return r.run(coro)


def _write_ticks(path: Path, seqs: range, source_id: int = 1) -> None:
    with ac.open_queue(path, source_id=source_id) as q:
        w = q.appender().method_writer(Ticks)
        for s in seqs:
            w.on_tick(Tick(s, s * 7 % 11))


def _outs(path: Path) -> list[tuple[int, int, int, list[tuple[int, int]]]]:
    got: list[tuple[int, int, int, list[tuple[int, int]]]] = []

    class H:
        def on_out(self, o: Out) -> None:
            h = ac.current_history()
            assert h is not None
            got.append((o.seq, o.k, o.total, h.sources[:-1]))

    if not path.exists():
        return got
    with ac.open_queue(path, read_only=True) as q:
        q.tailer().method_reader(H(), history=True).read_available()
    return got


def _summer(d: Path, mode: str, *, fan_out: bool = False, handler: Any = None,
            on_error: str = "stop") -> ac.Service:
    if handler is None:
        handler = Plain if mode == "stateless" else Summer
    outs = [ac.ServiceOutput("main", str(d / "out"), Outs, source_id=2)]
    if fan_out:
        outs.append(ac.ServiceOutput("side", str(d / "side"), Outs, source_id=3))
    return ac.Service(
        "summer", handler, [ac.ServiceInput(str(d / "in"), source_id=1, interfaces=(Ticks,))],
        outs, snapshots=ac.SnapshotPolicy(str(d / "snap"), every_inputs=5, every_seconds=None)
        if mode == "snapshots" else None, stateless=mode == "stateless",
        on_error=on_error)  # type: ignore[arg-type]


def _crash_until_done(kind: str, make: Any, rnd: random.Random, points: int,
                      limit: int) -> tuple[int, ac.ServiceStatistics]:
    Summer.crash_points = {(rnd.randrange(limit), rnd.randrange(4)) for _ in range(points)}
    crashes = 0
    while True:
        try:
            return crashes, _run(kind, make().run(until_end=True))
        except Crash:
            crashes += 1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["snapshots", "replay", "stateless"])
def test_crashes_between_outputs_give_the_crash_free_outputs(tmp_path: Path, kind: str,
                                                             mode: str) -> None:
    """A crash between any two outputs of an input, or between inputs: after
    restarts, both output queues hold exactly the crash-free run's calls."""
    ref, run = tmp_path / "ref", tmp_path / "run"
    n = 120
    for d in (ref, run):
        _write_ticks(d / "in", range(n))
    Summer.crash_points = set()
    _run(kind, _summer(ref, mode, fan_out=True).run(until_end=True))
    want = _outs(ref / "out"), _outs(ref / "side")
    assert len(want[0]) > 100 and len(want[1]) > 50
    rnd = random.Random(f"{mode}{kind}")
    crashes, stats = _crash_until_done(kind, lambda: _summer(run, mode, fan_out=True), rnd,
                                       40, n)
    assert crashes >= (5 if mode == "stateless" else 15)  # stateless: no replay
    assert (_outs(run / "out"), _outs(run / "side")) == want
    assert stats.replayed > 0 or mode == "snapshots"
    # more input later: the same service goes on where it stopped
    for d in (ref, run):
        _write_ticks(d / "in", range(n, n + 30))
    _run(kind, _summer(ref, mode, fan_out=True).run(until_end=True))
    _crash_until_done(kind, lambda: _summer(run, mode, fan_out=True), rnd, 10, n + 30)
    assert (_outs(run / "out"), _outs(run / "side")) == (_outs(ref / "out"),
                                                             _outs(ref / "side"))


def test_a_snapshot_bounds_the_replay(tmp_path: Path) -> None:
    _write_ticks(tmp_path / "in", range(100))
    first = _run("asyncio", _summer(tmp_path, "snapshots").run(until_end=True))
    assert first.snapshots >= 19 and first.replayed == 0
    again = _run("asyncio", _summer(tmp_path, "snapshots").run(until_end=True))
    assert again.replayed == 0 and again.inputs_handled == 0 and again.outputs_written == 0
    assert again.snapshot_age is not None
    # without snapshots, a restart replays everything (and writes nothing again)
    full = _run("asyncio", _summer(tmp_path, "replay").run(until_end=True))
    assert full.replayed == 100 and full.outputs_written == 0 and full.suppressed > 100


def test_a_nondeterministic_handler_is_named(tmp_path: Path) -> None:
    _write_ticks(tmp_path / "in", range(20))
    Summer.crash_points = {(10, 1)}
    with pytest.raises(Crash):
        _run("asyncio", _summer(tmp_path, "replay").run(until_end=True))

    class Other(Summer):
        def on_tick(self, t: Tick) -> None:
            self.total += t.px + (t.seq == 6)  # differs from input 6 on
            for k in range(t.seq % 4):
                self.main.on_out(Out(t.seq, k, self.total))

    with pytest.raises(ac.NondeterministicHandlerError) as info:
        _run("asyncio", _summer(tmp_path, "replay", handler=Other).run(until_end=True))
    assert info.value.service == "summer" and info.value.source_id == 1
    assert info.value.output == "main"
    with ac.open_queue(tmp_path / "in") as q:
        assert q.roll_cycle.to_sequence(info.value.index) == 6

    class Fewer(Summer):
        def on_tick(self, t: Tick) -> None:
            self.total += t.px
            for k in range(min(1, t.seq % 4)):
                self.main.on_out(Out(t.seq, k, self.total))

    with pytest.raises(ac.NondeterministicHandlerError, match="more outputs"):
        _run("asyncio", _summer(tmp_path, "replay", handler=Fewer).run(until_end=True))


def test_a_raising_handler_stops_or_is_skipped_never_silently(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _write_ticks(tmp_path / "in", range(10))

    class Bad(Summer):
        def on_tick(self, t: Tick) -> None:
            if t.seq == 4:
                raise ValueError("bad tick")
            super().on_tick(t)

    with pytest.raises(ac.ServiceHandlerError) as info:
        _run("asyncio", _summer(tmp_path, "replay", handler=Bad).run(until_end=True))
    assert isinstance(info.value.__cause__, ValueError)
    with ac.open_queue(tmp_path / "in") as q:
        assert q.roll_cycle.to_sequence(info.value.index) == 4
    assert "the handler raised on input" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR, "aiochronicle.service"):
        stats = _run("asyncio", _summer(tmp_path, "replay", handler=Bad,
                                        on_error="skip").run(until_end=True))
    assert stats.errors == 1
    assert f"{info.value.index:#x}" in caplog.text and "skipped" in caplog.text
    assert sorted({o[0] for o in _outs(tmp_path / "out")}) == [1, 2, 3, 5, 6, 7, 9]


def test_refused_configurations(tmp_path: Path) -> None:
    _write_ticks(tmp_path / "anon", range(3), source_id=0)
    _write_ticks(tmp_path / "in", range(3))
    with pytest.raises(ac.ServiceError, match="no sourceId to resume from"):
        _run("asyncio", ac.Service("s", Summer, [ac.ServiceInput(str(tmp_path / "anon"))],
                                   [ac.ServiceOutput("main", str(tmp_path / "o"), Outs, 2)])
             .run())
    with pytest.raises(ac.ServiceError, match=r"output queue .* has no sourceId"):
        _run("asyncio", ac.Service("s", Summer, [ac.ServiceInput(str(tmp_path / "in"), 1)],
                                   [ac.ServiceOutput("main", str(tmp_path / "o2"), Outs)]).run())
    with pytest.raises(ac.ServiceError, match="share a source_id"):
        ac.Service("s", Summer, [ac.ServiceInput("a", 1), ac.ServiceInput("b", 1)])
    with pytest.raises(ac.ServiceError, match="share a name"):
        ac.Service("s", Summer, [ac.ServiceInput("a", 1)],
                   [ac.ServiceOutput("x", "o", Outs, 2), ac.ServiceOutput("x", "p", Outs, 3)])
    with pytest.raises(ac.ServiceError, match="pauser factory"):
        ac.Service("s", Summer, [ac.ServiceInput("a", 1), ac.ServiceInput("b", 2)],
                   pauser=ac.Pauser.notify())
    # a snapshot queue of another service
    _run("asyncio", _summer(tmp_path, "snapshots").run(until_end=True))
    other = ac.Service("other", Summer, [ac.ServiceInput(str(tmp_path / "in"), 1)],
                       [ac.ServiceOutput("main", str(tmp_path / "o3"), Outs, 2)],
                       snapshots=ac.SnapshotPolicy(str(tmp_path / "snap")))
    with pytest.raises(ac.ServiceError, match="snapshots of service 'summer'"):
        _run("asyncio", other.run())


class Merge:
    """Two inputs, one output; each output names its input."""

    crash_points: set[tuple[int, int]] = set()

    def __init__(self, main: Outs) -> None:
        self.main = main

    def on_tick(self, t: Tick) -> None:
        src = ac.current_history()
        assert src is not None
        sid = src.sources[-1][0]
        for k in range(2):
            if (sid * 1000 + t.seq, k) in Summer.crash_points:
                Summer.crash_points.discard((sid * 1000 + t.seq, k))
                raise Crash
            self.main.on_out(Out(t.seq, k, sid))


@pytest.mark.parametrize("kind", KINDS)
def test_two_inputs_each_excerpt_once_and_in_order(tmp_path: Path, kind: str) -> None:
    _write_ticks(tmp_path / "a", range(60), source_id=5)
    _write_ticks(tmp_path / "b", range(40), source_id=6)

    def make() -> ac.Service:
        return ac.Service("merge", Merge, [ac.ServiceInput(str(tmp_path / "a"), 5, (Ticks,)),
                                           ac.ServiceInput(str(tmp_path / "b"), 6, (Ticks,))],
                          [ac.ServiceOutput("main", str(tmp_path / "out"), Outs, 2)],
                          stateless=True, pauser=ac.Pauser.notify)

    rnd = random.Random(kind)
    crashes = 0
    points = [(5000 + rnd.randrange(60), rnd.randrange(2)) for _ in range(10)]
    points += [(6000 + rnd.randrange(40), rnd.randrange(2)) for _ in range(10)]
    Summer.crash_points = set(points)
    while True:
        try:
            _run(kind, make().run(until_end=True))
            break
        except Crash:
            crashes += 1
    assert crashes >= 10
    got = _outs(tmp_path / "out")
    for sid, n in ((5, 60), (6, 40)):
        assert [(g[0], g[1]) for g in got if g[2] == sid] == [(s, k) for s in range(n)
                                                             for k in range(2)]


@pytest.mark.parametrize("kind", KINDS)
def test_live_with_notify_stop_snapshots_and_returns(tmp_path: Path, kind: str) -> None:
    """``run()`` waits for live input on ``Pauser.notify()``; ``stop()`` from
    the handler finishes that input, writes a snapshot and returns."""
    _write_ticks(tmp_path / "in", range(5))

    class Stopper(Summer):
        svc: ac.Service
        seen: asyncio.Event

        def on_tick(self, t: Tick) -> None:
            super().on_tick(t)
            if t.seq == 4:
                Stopper.seen.set()
            if t.seq == 9:
                Stopper.svc.stop()

    async def main() -> ac.ServiceStatistics:
        Stopper.seen = asyncio.Event()
        svc = Stopper.svc = ac.Service(
            "summer", Stopper, [ac.ServiceInput(str(tmp_path / "in"), 1, (Ticks,))],
            [ac.ServiceOutput("main", str(tmp_path / "out"), Outs, 2)],
            snapshots=ac.SnapshotPolicy(str(tmp_path / "snap"), every_inputs=None,
                                        every_seconds=None),
            pauser=ac.Pauser.notify())
        task = asyncio.ensure_future(svc.run())
        await svc.wait_live()
        assert svc.live
        await Stopper.seen.wait()
        _write_ticks(tmp_path / "in", range(5, 15))  # 10..14 stay unhandled
        return await task

    Summer.crash_points = set()
    stats = _run(kind, main())
    assert stats.inputs_handled == 10 and stats.snapshots == 1 and stats.state == "stopped"
    assert max(o[0] for o in _outs(tmp_path / "out")) == 9
    # the next run starts after the snapshot: nothing replayed
    again = _run(kind, _summer(tmp_path, "snapshots").run(until_end=True))
    assert again.replayed == 0 and again.inputs_handled == 5


def test_stop_while_waiting_returns(tmp_path: Path) -> None:
    _write_ticks(tmp_path / "in", range(3))

    async def main() -> ac.ServiceStatistics:
        svc = _summer(tmp_path, "snapshots")
        task = asyncio.ensure_future(svc.run())
        await svc.wait_live()
        while svc.statistics.inputs_handled < 3:
            await asyncio.sleep(0)
        svc.stop()
        return await task

    Summer.crash_points = set()
    stats = _run("asyncio", main())
    assert stats.inputs_handled == 3 and stats.snapshots == 1


# --------------------------------------------------------------------------
# SIGKILL, real processes
# --------------------------------------------------------------------------


def _feed(n: int, seed: int) -> list[sp.Raw]:
    rnd = random.Random(seed)
    mids = [1.0] * len(sp.SYMBOLS)
    out = []
    for seq in range(n):
        s = seq % len(sp.SYMBOLS)
        mids[s] = round(mids[s] + rnd.choice((-1, 1, 1)) * 0.0001, 5)
        out.append(sp.Raw(seq, s, mids[s]))
    return out


async def _reference(d: Path, snapshots: bool) -> None:
    svcs = sp.services(d, snapshots=snapshots)
    for name in sp.NAMES:
        await svcs[name].run(until_end=True)


def _wait_dead(pid: int) -> None:
    """Return once ``pid`` (not our child) has exited."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], 10)
    finally:
        os.close(fd)


@pytest.mark.slow
@pytest.mark.parametrize("snapshots,kind", [(True, "uvloop"), (False, "asyncio")],
                         ids=["snapshots-uvloop", "replay-asyncio"])
def test_sigkill_random_services_of_a_pipeline(tmp_path: Path, snapshots: bool,
                                               kind: str) -> None:
    """SIGKILL a random service of gateway -> strategy -> router at random
    moments, 200+ times per run (two runs: the strategy's state from snapshots,
    and from a replay of every tick), with bursts of ticks in flight: the
    router's routes and audit records equal those of a crash-free run, each
    once, in order."""
    kills = 220
    raws = _feed(kills * 20, 32)
    ref, run = tmp_path / "ref", tmp_path / "run"
    for d in (ref, run):
        sp.create_queues(d)
    with ac.open_queue(ref / "feed") as q:
        w = q.appender().method_writer(sp.Feed)
        for r in raws:
            w.on_raw(r)
    _run("asyncio", _reference(ref, snapshots))
    want_routes, want_audit = sp.calls(ref / "routes"), sp.calls(ref / "audit")
    assert len(want_routes) > 300

    zygote = subprocess.Popen([sys.executable, str(HERE / "service_pipeline.py"), str(run),
                               "snapshots" if snapshots else "replay", kind],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert zygote.stdin is not None and zygote.stdout is not None

    def start(name: str) -> int:
        assert zygote.stdin is not None and zygote.stdout is not None
        zygote.stdin.write(f"start {name}\n")
        zygote.stdin.flush()
        return int(zygote.stdout.readline())

    rnd = random.Random(f"kills{snapshots}")
    killed = dict.fromkeys(sp.NAMES, 0)
    try:
        pids = {n: start(n) for n in sp.NAMES}
        with ac.open_queue(run / "feed") as q:
            w = q.appender().method_writer(sp.Feed)
            pos = 0
            for _ in range(kills):
                burst = rnd.randint(5, 35)
                for r in raws[pos:pos + burst]:
                    w.on_raw(r)
                pos += burst
                # a random moment: right away, or while the burst is in flight
                if rnd.random() < 0.7:
                    time.sleep(rnd.uniform(0, 0.01))
                victim = rnd.choice(sp.NAMES)
                os.kill(pids[victim], signal.SIGKILL)
                _wait_dead(pids[victim])  # one instance of a service at a time
                killed[victim] += 1
                pids[victim] = start(victim)
            for r in raws[pos:]:
                w.on_raw(r)
        deadline = time.monotonic() + 120
        while len(sp.calls(run / "routes")) < len(want_routes) and time.monotonic() < deadline:
            time.sleep(0.05)
        while len(sp.calls(run / "audit")) < len(want_audit) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        zygote.stdin.close()
        zygote.wait(30)
    assert min(killed.values()) >= 50, killed
    got_routes = sp.calls(run / "routes")
    # each once, in order, equal to the crash-free run (histories' indices too)
    assert [g[1] for g in got_routes] == [w[1] for w in want_routes]
    assert got_routes == want_routes
    assert sp.calls(run / "audit") == want_audit
    assert sp.calls(run / "orders") == sp.calls(ref / "orders")


# --------------------------------------------------------------------------
# Java writes the input
# --------------------------------------------------------------------------


class JPrice(msgspec.Struct):
    """Java's ``aiochronicle.interop.Price``."""

    symbol: str
    bid: float
    ask: float
    qty: int


class JPrices(Protocol):
    """Java's ``aiochronicle.interop.Prices``."""

    def onPrice(self, price: JPrice) -> None: ...

    def onClose(self, symbol: str, last: bool) -> None: ...


class Echo:
    """Two outputs per Java call."""

    crash_at: set[int] = set()

    def __init__(self, main: Outs) -> None:
        self.main = main
        self.n = 0

    def _out(self, k: int) -> None:
        self.n += 1
        if self.n in Echo.crash_at:
            Echo.crash_at.discard(self.n)
            raise Crash
        self.main.on_out(Out(self.n, k, 0))

    def onPrice(self, price: JPrice) -> None:
        self._out(int(price.qty))
        self._out(int(price.bid * 1e4))

    def onClose(self, symbol: str, last: bool) -> None:
        self._out(len(symbol))
        self._out(int(last))


@pytest.mark.parametrize("version", ["2026.4"])
def test_java_written_input(tmp_path: Path, version: str) -> None:
    """Java Chronicle Queue writes the input (method calls with its message
    history, sourceId 7): a service crashed between the outputs of each call
    ends with the crash-free outputs, whose histories hold Java's source."""
    import jvm

    jvm.build(version)
    q = tmp_path / "q"
    proc = subprocess.run(jvm.command(version, "write", str(q), "FAST_DAILY", "7"),
                          capture_output=True, text=True, timeout=300, check=True)
    written = {p[1]: int(p[2], 16) for p in (x.split() for x in proc.stdout.splitlines())
               if p and p[0] == "W"}

    def make(out: str) -> ac.Service:
        return ac.Service("echo", Echo, [ac.ServiceInput(str(q), 7, (JPrices,),
                                                         start=written["onPrice"])],
                          [ac.ServiceOutput("main", str(tmp_path / out), Outs, 2)])

    _run("uvloop", make("ref").run(until_end=True))
    want = _outs(tmp_path / "ref")
    assert [w[1] for w in want] == [1_000_000, 10841, 6, 1]
    # Java's writer had no source of its own; the service read (7, index)
    assert [w[3] for w in want] == ([[(7, written["onPrice"])]] * 2
                                    + [[(7, written["onClose"])]] * 2)
    crashes = 0
    for point in (1, 2, 3, 4):
        Echo.crash_at = {point}
        try:
            _run("uvloop", make("run").run(until_end=True))
        except Crash:
            crashes += 1
    _run("uvloop", make("run").run(until_end=True))
    assert crashes >= 3
    assert _outs(tmp_path / "run") == want


def test_stopped_while_replaying_no_snapshot_claims_what_was_not_replayed(
        tmp_path: Path) -> None:
    ref, run = tmp_path / "ref", tmp_path / "run"
    for d in (ref, run):
        _write_ticks(d / "in", range(100))

    def make(d: Path, handler: Any = Summer) -> ac.Service:
        return ac.Service("summer", handler, [ac.ServiceInput(str(d / "in"), 1, (Ticks,))],
                          [ac.ServiceOutput("main", str(d / "out"), Outs, 2)],
                          snapshots=ac.SnapshotPolicy(str(d / "snap"), every_inputs=1000,
                                                      every_seconds=None))

    _run("asyncio", make(ref).run(until_end=True))
    Summer.crash_points = {(90, 1)}
    with pytest.raises(Crash):
        _run("asyncio", make(run).run(until_end=True))

    class StopEarly(Summer):
        svc: ac.Service

        def on_tick(self, t: Tick) -> None:
            super().on_tick(t)
            if t.seq == 40:
                StopEarly.svc.stop()

    svc = StopEarly.svc = make(run, StopEarly)
    stats = _run("asyncio", svc.run(until_end=True))
    assert stats.snapshots == 0 and stats.replayed == 41 and stats.outputs_written == 0
    _run("asyncio", make(run).run(until_end=True))
    assert _outs(run / "out") == _outs(ref / "out")


@pytest.mark.parametrize("raw", [None, ac.MessageHistory().to_bytes(),
                                 ac.MessageHistory([(1, 5), (2, 1 << 40)],
                                                   [10, 20, 30]).to_bytes()])
def test_history_carried_forward_without_parsing_is_the_parsed_one(
        raw: bytes | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The history a service writes is spliced from the bytes it read (the
    fast path exactly-once pays for): byte for byte what building a
    ``MessageHistory`` and encoding it gives."""
    from aiochronicle._format import _history
    from aiochronicle._format._wire import HistoryBytes

    monkeypatch.setattr(_history, "_now", lambda: 99)
    raw_in = None if raw is None else HistoryBytes(raw)
    fast = _history.Incoming(raw_in, 7, 1234, 55)
    slow = _history.Incoming(raw_in, 7, 1234, 55)
    _history.incoming_history(slow)  # built: the slow path
    for make in (_history.outgoing_raw, _history.outgoing_wire_bytes):
        got = []
        for inc in (fast, slow):
            token = _history.CURRENT.set(inc)
            try:
                got.append(make())
            finally:
                _history.CURRENT.reset(token)
        assert got[0] == got[1]
    h = ac.MessageHistory.from_bytes(got[0][7:])  # the wire form: 7 bytes of key and length
    assert h.sources[-1] == (7, 1234) and h.timings[-2:] == [55, 99]


class AsyncSummer(Summer):
    """:class:`Summer` with an ``async def`` method that awaits between outputs."""

    async def on_tick(self, t: Tick) -> None:  # type: ignore[override]
        self.total += t.px
        for k in range(t.seq % 4):
            await asyncio.sleep(0)
            if (t.seq, k) in Summer.crash_points:
                Summer.crash_points.discard((t.seq, k))
                raise Crash
            self.main.on_out(Out(t.seq, k, self.total))


@pytest.mark.parametrize("kind", KINDS)
def test_async_handlers_crashed_between_outputs(tmp_path: Path, kind: str) -> None:
    ref, run = tmp_path / "ref", tmp_path / "run"
    for d in (ref, run):
        _write_ticks(d / "in", range(60))
    _run(kind, _summer(ref, "snapshots", handler=AsyncSummer).run(until_end=True))
    crashes, _ = _crash_until_done(kind, lambda: _summer(run, "snapshots", handler=AsyncSummer),
                                   random.Random(kind), 20, 60)
    assert crashes >= 5
    assert _outs(run / "out") == _outs(ref / "out")


def test_a_sink_without_outputs_resumes_from_its_snapshot(tmp_path: Path) -> None:
    """No outputs, no history to resume from: the snapshots' positions are
    where it resumes (a handler without snapshot() and restore() too)."""
    _write_ticks(tmp_path / "in", range(10))
    seen: list[int] = []

    class Sink:
        def on_tick(self, t: Tick) -> None:
            seen.append(t.seq)

    def make() -> ac.Service:
        return ac.Service("sink", Sink, [ac.ServiceInput(str(tmp_path / "in"), 1, (Ticks,))],
                          snapshots=ac.SnapshotPolicy(str(tmp_path / "snap")))

    _run("asyncio", make().run(until_end=True))
    _write_ticks(tmp_path / "in", range(10, 15))
    _run("asyncio", make().run(until_end=True))
    assert seen == list(range(15))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", ["sync", "async", "raises", "skips"])
def test_inputs_a_notify_wake_up_finds_are_handled_like_read_ones(
        tmp_path: Path, case: str, kind: str) -> None:
    """Parked on ``Pauser.notify()``, the service handles what a wake-up finds
    in the loop's callback: counted, snapshotted, an async handler awaited in
    order, a raising one stopping the service (or skipped) with its index,
    the outputs those of a run over the same inputs read at once."""
    ref, live = tmp_path / "ref", tmp_path / "live"
    for d in (ref, live):
        _write_ticks(d / "in", range(3))
    class Live(Summer):
        svc: ac.Service | None = None
        seen: asyncio.Event | None = None

        def on_tick(self, t: Tick) -> None:
            if t.seq == 5 and case in ("raises", "skips"):
                raise ValueError("bad tick")
            super().on_tick(t)
            Live.after(t)

        @staticmethod
        def after(t: Tick) -> None:
            if t.seq == 2 and Live.seen is not None:
                Live.seen.set()
            if t.seq == 11 and Live.svc is not None:
                Live.svc.stop()

    class AsyncLive(AsyncSummer):
        async def on_tick(self, t: Tick) -> None:  # type: ignore[override]
            await super().on_tick(t)
            Live.after(t)

    handler = AsyncLive if case == "async" else Live
    on_error = "skip" if case == "skips" else "stop"
    if case != "raises":
        _write_ticks(ref / "in", range(3, 12))
        _run(kind, _summer(ref, "snapshots", handler=handler, on_error=on_error).run(
            until_end=True))

    async def main() -> ac.ServiceStatistics:
        Live.seen = asyncio.Event()
        svc = Live.svc = ac.Service(
            "summer", handler, [ac.ServiceInput(str(live / "in"), 1, (Ticks,))],
            [ac.ServiceOutput("main", str(live / "out"), Outs, 2)],
            snapshots=ac.SnapshotPolicy(str(live / "snap"), every_inputs=5,
                                        every_seconds=None),
            pauser=ac.Pauser.notify(), on_error=on_error)  # type: ignore[arg-type]
        task = asyncio.ensure_future(svc.run())
        await Live.seen.wait()
        for s in range(3, 12):  # one by one: each may wake the parked service
            _write_ticks(live / "in", range(s, s + 1))
            await asyncio.sleep(0)
        return await task

    try:
        if case == "raises":
            with pytest.raises(ac.ServiceHandlerError) as info:
                _run(kind, main())
            with ac.open_queue(live / "in") as q:
                assert q.roll_cycle.to_sequence(info.value.index) == 5
            assert max(o[0] for o in _outs(live / "out")) == 3
            return
        stats = _run(kind, main())
    finally:
        Live.svc = Live.seen = None
    assert stats.inputs_handled == 12  # a skipped input is handled (logged, counted)
    assert stats.errors == (case == "skips")
    assert stats.snapshots == 3  # after 5 and 10 inputs, and on stop
    assert _outs(live / "out") == _outs(ref / "out")
