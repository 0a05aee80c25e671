"""Message history on the hot path in C (native/history.c, native/histcall.c):
what a method writer's C call writes is what the Python writer writes, byte for
byte but its own timing; a reader tracking history dispatches in C exactly what
the Python dispatch would (the same calls, the same histories, the same errors on
damaged histories); the message a sync handler handles is its thread's while it
runs."""

from __future__ import annotations

import asyncio
import random
import struct
import threading
import time
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest

import aiochronicle as ac
from aiochronicle._core import _native
from aiochronicle._format import _history
from aiochronicle._format._wire import HistoryBytes
from aiochronicle._messages._codecs import HISTORY_EXT
from aiochronicle._messages._methods import MP_ENC, call_history, interface_methods
from aiochronicle._messages._methodwriter import _wire_encoder

MSGPACK, WIRE = 1, 2


def raw_history(n_sources: int, n_timings: int, rnd: random.Random) -> bytes:
    srcs = [(rnd.randrange(-2**31, 2**31), rnd.randrange(-2**63, 2**63))
            for _ in range(n_sources)]
    tims = [rnd.randrange(-2**63, 2**63) for _ in range(n_timings)]
    return ac.MessageHistory(srcs, tims).to_bytes()


def python_form(form: int) -> bytes:
    """What the Python writer puts first in an excerpt now."""
    if form == MSGPACK:
        return MP_ENC.encode(msgspec.msgpack.Ext(HISTORY_EXT, _history.outgoing_raw()))
    return _history.outgoing_wire_bytes()


def both_forms(form: int) -> tuple[bytes | None, bytes, int, int]:
    """The C form (None: the Python writer's), the Python form, and the clock
    around them."""
    before = time.monotonic_ns()
    c = _native.outgoing_history(form)
    py = python_form(form)
    return c, py, before, time.monotonic_ns()


def assert_same_but_now(c: bytes | None, py: bytes, before: int, after: int) -> None:
    assert c is not None
    assert len(c) == len(py) and c[:-8] == py[:-8]  # the writer's own timing last
    for b in (c, py):
        assert before <= struct.unpack("<q", b[-8:])[0] <= after


CASES = [(0, 0), (1, 2), (3, 7), (40, 1), (126, 252), (127, 253)]


@pytest.mark.parametrize("form", [MSGPACK, WIRE])
@pytest.mark.parametrize("how", ["context", "held"])
def test_c_history_is_the_python_one(form: int, how: str) -> None:
    """Outside any handler, for a message read without history, and for every
    size up to the limits: the same bytes, through the context variable (an
    async handler's) and through the thread's current message (a sync
    handler's)."""
    rnd = random.Random(5)
    assert_same_but_now(*both_forms(form))  # no message: no source, one timing
    incs: list[_native.Incoming] = [_native.Incoming(None, 7, 1234, 55)]
    for n, t in CASES:
        raw = raw_history(n, t, rnd)
        for extra in (b"", b"\x01\x02\x03"):  # bytes after a history are not part of it
            incs.append(_native.Incoming(HistoryBytes(raw + extra), rnd.randrange(1, 2**31),
                                         rnd.randrange(2**62), rnd.randrange(2**62)))
    for inc in incs:
        if how == "context":
            token = _history.CURRENT.set(inc)
            try:
                got = both_forms(form)
            finally:
                _history.CURRENT.reset(token)
        else:
            _native.hold(inc)
            try:
                got = both_forms(form)
            finally:
                _native.release(inc)
        assert_same_but_now(*got)
        h = ac.MessageHistory.from_bytes(msgspec.msgpack.decode(got[1]).data if form == MSGPACK
                                         else got[1][7:])
        assert h.sources[-1] == (inc.source_id, inc.index)
        assert h.timings[-2] == inc.read_ns


@pytest.mark.parametrize("how", ["context", "held"])
def test_what_c_leaves_to_python(how: str) -> None:
    """A history the handler has looked at (it may have changed it), a
    self-describing one, and one at its limits are the Python writer's, which
    writes the history the handler sees, or raises as it always has."""
    rnd = random.Random(6)
    looked = _native.Incoming(HistoryBytes(raw_history(2, 3, rnd)), 9, 10, 11)
    _history.incoming_history(looked).add_source(77, 78)  # the handler changed it
    plain = _native.Incoming({"sources": [1, 2], "timings": [3]}, 9, 10, 11)
    full = _native.Incoming(HistoryBytes(raw_history(128, 1, rnd)), 9, 10, 11)
    for inc in (looked, plain, full):
        token = _history.CURRENT.set(inc) if how == "context" else None
        if token is None:
            _native.hold(inc)
        try:
            assert _native.outgoing_history(MSGPACK) is None
            assert _native.outgoing_history(WIRE) is None
            if inc is full:
                with pytest.raises(ValueError, match="at most 128 sources"):
                    _history.outgoing_raw()
            else:
                h = ac.MessageHistory.from_bytes(_history.outgoing_raw())
                assert h.sources[-1] == ((77, 78) if inc is looked else (9, 10))
        finally:
            if token is not None:
                _history.CURRENT.reset(token)
            else:
                _native.release(inc)


def test_hold_and_release_are_checked() -> None:
    a = _native.Incoming(None, 1, 2, 3)
    b = _native.Incoming(None, 1, 5, 3)
    with pytest.raises(TypeError):
        _native.hold(object())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        _native.release(a)  # not held
    _native.hold(a)
    _native.hold(b)
    with pytest.raises(RuntimeError):
        _native.release(a)  # not the last held
    with pytest.raises(RuntimeError):
        _native.hold(a)  # held, under another
    assert _native.current_incoming() is b
    _native.release(b)
    assert _native.current_incoming() is a
    _native.release(a)
    assert _native.current_incoming() is None


# -- through queues ------------------------------------------------------------

class Tick(msgspec.Struct):
    symbol: str
    px: float
    seq: int


class Feed(Protocol):
    def on_tick(self, tick: Tick) -> None: ...

    def on_end(self, n: int) -> None: ...


class Out(Protocol):
    def on_echo(self, tick: Tick) -> None: ...


class Echo:
    """Writes each tick on, and records what it saw of its history."""

    def __init__(self, out: Out) -> None:
        self.out = out
        self.seen: list[tuple[int, list[tuple[int, int]], int]] = []
        self.ends = 0

    def on_tick(self, tick: Tick) -> None:
        h = _history.current_history() if tick.seq % 3 == 0 else None  # some look, some not
        self.seen.append((tick.seq, [] if h is None else h.sources,
                          0 if h is None else len(h.timings)))
        self.out.on_echo(tick)

    def on_end(self, n: int) -> None:
        self.ends += 1


def write_input(path: Path, n: int, with_history: bool, codec: str = "msgpack") -> None:
    with ac.open_queue(path, source_id=3 if with_history else 0) as q:
        w = q.appender().method_writer(Feed, codec=codec)
        for i in range(n):
            w.on_tick(Tick("EURUSD", 1.0 + i, i))
        w.on_end(n)


def run_echo(src: Path, dst: Path, native: bool,
             codec: str = "msgpack") -> tuple[Echo, list[Any]]:
    """Read ``src`` with a reader tracking history (source id 3), echoing into
    ``dst`` (source id 4): through the C dispatch, or one excerpt at a time
    through the Python dispatch."""
    with ac.open_queue(src) as q, ac.open_queue(dst, source_id=4) as out:
        echo = Echo(out.appender().method_writer(Out, codec=codec))
        t = q.tailer()
        reader = t.method_reader(echo, history=True)
        if native:
            asyncio.run(reader.run(until_end=True))
        else:
            while (ex := t.read_nowait()) is not None:
                reader._read += 1
                reader._process_general(ex.payload, ex.index)
        with out.tailer() as ot:
            outs = [(ex.index, call_history(ex.payload)) for ex in ot]
        return echo, outs


@pytest.mark.parametrize("codec", ["msgpack", "binary_wire"])
@pytest.mark.parametrize("with_history", [True, False])
def test_c_dispatch_is_the_python_dispatch(tmp_path: Path, with_history: bool,
                                           codec: str) -> None:
    """The same handler calls, the same histories seen, the same histories
    written (sources, and timings in order: each write after its read)."""
    write_input(tmp_path / "in", 300, with_history, codec)
    got = {}
    for native in (True, False):
        echo, outs = run_echo(tmp_path / "in", tmp_path / f"out-{native}", native, codec)
        assert echo.ends == 1
        got[native] = echo.seen, [(h.sources, len(h.timings)) for _, h in outs if h]
        assert len(outs) == 300
        with ac.open_queue(tmp_path / "in") as q:
            indices = [ex.index for ex in q.tailer()]
        for (_, h), i, (seq, sources, _n) in zip(outs, indices, echo.seen, strict=False):
            assert h is not None
            # the input read, as this reader's source (the queue's sourceId)
            assert h.sources == [(3 if with_history else 0, i)]
            # (the input's own write time, when it had a history), read, then written
            assert len(h.timings) == (3 if with_history else 2)
            assert h.timings[-2] <= h.timings[-1]
            if seq % 3 == 0:
                assert sources == h.sources
    assert got[True] == got[False]


class Recorder:
    """Records each call with the history its handler sees (but the read
    time), and each error by its type's name."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def on_tick(self, tick: Any) -> None:
        h = _history.current_history()
        self.got.append(("call", tick, None if h is None else (h.sources, h.timings[:-1])))

    def on_end(self, n: Any) -> None:
        self.got.append(("end", n))

    def error(self, exc: Exception, excerpt: ac.Excerpt) -> None:
        self.got.append(("error", type(exc).__name__))


def wire_call(history: bytes, tick: Tick) -> bytes:
    """``on_tick(tick)`` in BinaryWire with ``history`` (its wire form) first."""
    return history + _wire_encoder(interface_methods(Feed)["on_tick"])((tick,))


@pytest.mark.parametrize("codec", ["msgpack", "binary_wire"])
def test_damaged_histories_get_the_python_errors(tmp_path: Path, codec: str) -> None:
    """Calls whose history is damaged (every byte of it and its head flipped in
    turn, cut short, another Ext type): the C dispatch declines them and the
    Python dispatch names the error, as when it reads them alone; the calls
    after go on in C."""
    h = ac.MessageHistory([(1, 5), (2, 9)], [10, 20, 30])
    hist = h.to_bytes()
    tick = Tick("A", 1.0, 1)
    if codec == "msgpack":
        good = MP_ENC.encode((msgspec.msgpack.Ext(HISTORY_EXT, hist), "on_tick", tick))
        extra = [MP_ENC.encode((msgspec.msgpack.Ext(HISTORY_EXT, hist[:-9]), "on_tick", tick)),
                 MP_ENC.encode((msgspec.msgpack.Ext(5, hist), "on_tick", tick))]
        head = 3
    else:
        good = wire_call(h.wire_bytes(), tick)
        cut = h.wire_bytes()[:-9]
        extra = [wire_call(cut[:4] + struct.pack("<H", len(cut) - 6) + cut[6:], tick)]
        head = 7
    bad: list[bytes] = []
    start = good.index(hist)
    for k in range(start - head, start + len(hist)):
        b = bytearray(good)
        b[k] ^= 0xFF
        bad.append(bytes(b))
    bad += extra
    outcomes: dict[bool, list[Any]] = {}
    for native in (True, False):
        rec = Recorder()
        with ac.open_queue(tmp_path / f"q-{native}") as q:
            a = q.appender()
            for b in bad:
                a.append(b)
                a.append(good)
            reader = q.tailer().method_reader(rec, history=True, on_error=rec.error)
            if native:
                reader.read_available()
            else:
                t = q.tailer()
                while (ex := t.read_nowait()) is not None:
                    reader._process_general(ex.payload, ex.index)
        outcomes[native] = rec.got
    assert outcomes[True] == outcomes[False]
    kinds = [r[0] for r in outcomes[True]]
    # each damaged call is a call (a flip in a value) or an error, and each good one a call
    assert len(kinds) == 2 * len(bad) and kinds[1::2] == ["call"] * len(bad)
    # the Ext head, both counts, the cut and the other type at least
    assert kinds.count("error") >= 7


@pytest.mark.parametrize("history", [True, None, False])
@pytest.mark.parametrize("codec", ["msgpack", "binary_wire"])
def test_random_corruption_same_outcome(tmp_path: Path, codec: str,
                                        history: bool | None) -> None:
    """Random byte damage anywhere in history calls: the C path (one excerpt,
    then Python for what it declines) and the Python path alone agree on
    every excerpt: the same call and history, or the same named error; for a
    reader tracking every history, only the carried ones (``None``), or none."""
    rnd = random.Random(11)
    payloads = []
    for i in range(400):
        raw = raw_history(rnd.randrange(0, 4), rnd.randrange(0, 5), rnd)
        plain = rnd.random() < 0.3  # a call without a history
        if codec == "msgpack":
            p = bytearray(MP_ENC.encode(("on_tick", Tick("S", 1.5, i)) if plain else
                                        (msgspec.msgpack.Ext(HISTORY_EXT, raw), "on_tick",
                                         Tick("S", 1.5, i))))
        else:
            p = bytearray(wire_call(b"" if plain else
                                    ac.MessageHistory.from_bytes(raw).wire_bytes(),
                                    Tick("S", 1.5, i)))
        if plain and rnd.random() < 0.5:  # half of them intact
            payloads.append(bytes(p))
            continue
        for _ in range(rnd.randrange(1, 4)):
            k = rnd.randrange(len(p))
            p[k] = rnd.randrange(256) if rnd.random() < 0.5 else p[k] ^ (1 << rnd.randrange(8))
        if rnd.random() < 0.2:
            del p[rnd.randrange(1, len(p)):]
        payloads.append(bytes(p))
    results: dict[bool, list[Any]] = {}
    for native in (True, False):
        rec = Recorder()
        with ac.open_queue(tmp_path / f"r-{native}") as q:
            reader = q.tailer().method_reader(rec, history=history, on_error=rec.error)
            for i, p in enumerate(payloads):
                if native:
                    reader.process(p, i)
                else:
                    reader._process_general(p, i)
        results[native] = rec.got
    assert results[True] == results[False]
    assert {r[0] for r in results[True]} >= {"call", "error"}


def test_a_sync_handlers_message_is_its_threads(tmp_path: Path) -> None:
    """Two threads dispatching at once each write their own message's history;
    after the handler returns, nothing is current; a task the handler starts
    does not inherit the message (as Java's thread-local MessageHistory)."""
    for name in ("a", "b"):
        write_input(tmp_path / name, 2000, True)
    results: dict[str, list[Any]] = {}

    def run(name: str) -> None:
        _echo, outs = run_echo(tmp_path / name, tmp_path / f"{name}-out", True)
        results[name] = outs

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("a", "b"):
        with ac.open_queue(tmp_path / name) as q:
            indices = [ex.index for ex in q.tailer()][:2000]
        assert [h.sources[-1] for _, h in results[name]] == [(3, i) for i in indices]
    assert _history.current_history() is None

    spawned: list[Any] = []

    class Spawner:
        def on_tick(self, tick: Tick) -> None:
            spawned.append(("in handler", _history.current_history() is not None))

            async def later() -> None:
                spawned.append(("in task", _history.current_history()))

            asyncio.get_running_loop().create_task(later())

        def on_end(self, n: int) -> None:
            pass

    async def main() -> None:
        with ac.open_queue(tmp_path / "a") as q:
            reader = q.tailer().method_reader(Spawner(), history=True)
            reader.read_one()
            await asyncio.sleep(0)

    asyncio.run(main())
    assert spawned == [("in handler", True), ("in task", None)]


def test_service_stop_from_a_handler_stops_the_c_dispatch(tmp_path: Path) -> None:
    """A handler that stops its service in the middle of a batch dispatched in
    C: the service handles no input after it."""
    write_input(tmp_path / "in", 500, True)
    seen: list[int] = []
    svc: ac.Service | None = None

    class Stopper:
        def __init__(self, out: Out) -> None:
            self.out = out

        def on_tick(self, tick: Tick) -> None:
            seen.append(tick.seq)
            self.out.on_echo(tick)
            if tick.seq == 123:
                assert svc is not None
                svc.stop()

        def on_end(self, n: int) -> None:
            seen.append(-1)

    svc = ac.Service("stopper", Stopper, [ac.ServiceInput(tmp_path / "in", 3, (Feed,))],
                     [ac.ServiceOutput("out", tmp_path / "out", Out, 4)], stateless=True)
    stats = asyncio.run(svc.run(until_end=True))
    assert seen == list(range(124))
    assert stats.inputs_handled == 124 and stats.outputs_written == 124
    with ac.open_queue(tmp_path / "out") as q:
        hs = [call_history(ex.payload) for ex in q.tailer()]
    assert len(hs) == 124 and all(h is not None and h.sources[-1][0] == 3 for h in hs)


@pytest.mark.parametrize("codec", ["msgpack", "binary_wire"])
@pytest.mark.parametrize("history", [None, False])
def test_readers_not_tracking_every_call_match_python(tmp_path: Path, history: bool | None,
                                                      codec: str) -> None:
    """A reader of a queue without a sourceId, of calls that carry a history
    (written through a handle with one) and calls that do not: with
    ``history=None`` the calls carrying one are tracked (their sources, then
    this read), with ``history=False`` none is; the C dispatch and the Python
    one agree, on what handlers see and on what their writers write."""
    src = tmp_path / "in"
    with ac.open_queue(src):
        pass  # the queue records no sourceId
    with ac.open_queue(src, source_id=5) as q5, ac.open_queue(src) as q0:
        w5 = q5.appender().method_writer(Feed, codec=codec)
        w0 = q0.appender().method_writer(Feed, codec=codec)
        for i in range(200):
            (w5 if i % 2 else w0).on_tick(Tick("X", float(i), i))
    got: dict[bool, Any] = {}
    for native in (True, False):
        with ac.open_queue(src) as q, ac.open_queue(tmp_path / f"o-{native}",
                                                    source_id=4) as out:
            assert q.source_id == 0
            echo = Echo(out.appender().method_writer(Out, codec=codec))
            t = q.tailer()
            reader = t.method_reader(echo, history=history)
            if native:
                assert reader.read_available() == 200
            else:
                while (ex := t.read_nowait()) is not None:
                    reader._process_general(ex.payload, ex.index)
            with out.tailer() as ot:
                outs = [call_history(ex.payload) for ex in ot]
        got[native] = echo.seen, [(h.sources, len(h.timings)) for h in outs if h]
        assert len(outs) == 200
        for k, h in enumerate(outs):
            assert h is not None
            if history is None and k % 2:  # carried: its writer's source-less history, this read
                assert len(h.sources) == 1 and h.sources[0][0] == 0 and len(h.timings) == 3
            else:  # not tracked: the writer's own first hop
                assert h.sources == [] and len(h.timings) == 1
    assert got[True] == got[False]
