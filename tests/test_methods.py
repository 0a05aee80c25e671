"""Method writers and readers: every codec, dispatch rules, errors, async handlers,
and Java interop (BinaryWire bytes spelled out from the format notes, section 10)."""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import enum
import inspect
import logging
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest

import aiochronicle as ac
from aiochronicle._core._native import WriterMethod
from aiochronicle._messages._codecs import recorded_codec
from aiochronicle._objects._queue import cycles_of
from aiochronicle._waiting._pauser import wait_state

CODECS = ["msgpack", "json", "binary_wire"]


class Price(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    qty: int = 0


class PriceListener(Protocol):
    def on_price(self, price: Price) -> None: ...

    def on_pair(self, symbol: str, qty: int, venue: str = "any") -> None: ...

    @ac.method_id(7)
    def heartbeat(self) -> None: ...


class Recorder:
    """Implements PriceListener (structurally) and records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_price(self, price: Price) -> None:
        self.calls.append(("on_price", price))

    def on_pair(self, symbol: str, qty: int, venue: str = "any") -> None:
        self.calls.append(("on_pair", symbol, qty, venue))

    def heartbeat(self) -> None:
        self.calls.append(("heartbeat",))


P1 = Price("EURUSD", 1.1, 1.2, 5)
P2 = Price("GBPUSD", 1.3, 1.4, 7)


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[ac.Queue]:
    with ac.open_queue(tmp_path / "q") as q:
        yield q


# --------------------------------------------------------------------------
# Writing and reading
# --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(queue: ac.Queue, codec: str) -> None:
    w = queue.appender().method_writer(PriceListener, codec=codec)
    w.on_price(P1)
    w.on_pair("GBPUSD", 3)
    w.on_pair(symbol="USDJPY", qty=4, venue="EBS")
    w.heartbeat()
    assert queue.entry_count() == 4  # one excerpt per call
    rec = Recorder()
    reader = queue.tailer().method_reader(rec, interfaces=[PriceListener])
    assert reader.read_one()
    assert reader.read_available() == 3
    assert not reader.read_one()
    assert rec.calls == [("on_price", P1), ("on_pair", "GBPUSD", 3, "any"),
                         ("on_pair", "USDJPY", 4, "EBS"), ("heartbeat",)]
    assert reader.statistics() == ac.MethodReaderStatistics(4, 4, 0, 0, 0)
    assert queue.codec is ac.Codecs.get(codec)


class Side(enum.Enum):
    BUY = "BUY"
    SELL = "SELL"


class Fill(msgspec.Struct):
    venue: str
    qty: int
    price: float


class Execution(msgspec.Struct):
    order_id: int
    side: Side
    fills: list[Fill]
    parent: Fill | None = None
    tags: dict[str, str] = {}
    note: str | None = None


class Executions(Protocol):
    def on_execution(self, e: Execution, when: dt.datetime, ref: uuid.UUID) -> None: ...


@pytest.mark.parametrize("codec", CODECS)
def test_nested_types_round_trip(queue: ac.Queue, codec: str) -> None:
    e = Execution(1 << 40, Side.SELL, [Fill("X", 5, 1.25), Fill("Y", 300, 99.5)],
                  Fill("Z", 0, 0.0), {"desk": "fx"})
    when = dt.datetime(2021, 11, 18, 15, 45, 0, 123000)
    ref = uuid.UUID(int=12345678901234567890)
    queue.appender().method_writer(Executions, codec=codec).on_execution(e, when, ref)
    got: list[Any] = []

    class H:
        def on_execution(self, e: Execution, when: dt.datetime, ref: uuid.UUID) -> None:
            got.append((e, when, ref))

    errors: list[Exception] = []
    queue.tailer().method_reader(H(), on_error=lambda x, ex: errors.append(x)).read_available()
    assert errors == [] and got == [(e, when, ref)]


def test_missing_required_field_is_a_decode_error(queue: ac.Queue) -> None:
    # a Java-written Fill without its price
    queue.appender().append(b"\xb9\x06on_one\x82\x0e\x00\x00\x00\xc5venue\xe1X\xc3qty\xa1\x01")

    class H:
        def on_one(self, f: Fill) -> None:
            raise AssertionError("not called")

    errors: list[Exception] = []
    reader = queue.tailer().method_reader(H(), on_error=lambda x, ex: errors.append(x))
    assert reader.read_available() == 1
    assert len(errors) == 1 and "price" in str(errors[0])


def test_proxy_is_typed_as_the_interface(queue: ac.Queue) -> None:
    class Base:
        def on_text(self, text: str) -> None:
            raise AssertionError("the proxy replaces every method")

    w = queue.appender().method_writer(Base)
    assert isinstance(w, Base)
    w.on_text("x")
    assert "Base method writer" in repr(w) and "msgpack" in repr(w)
    with pytest.raises(TypeError):
        w.on_text()  # type: ignore[call-arg]  # the signature is the interface's
    with pytest.raises(TypeError, match="no public methods"):
        queue.appender().method_writer(int)


def test_default_codec(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "empty") as q:
        q.appender().method_writer(PriceListener)
        assert q.codec is ac.Codecs.MSGPACK  # an empty queue: msgpack, recorded
        with pytest.raises(ac.CodecMismatchError):
            q.appender().method_writer(PriceListener, codec="json")
    with ac.open_queue(tmp_path / "java") as q:
        # the default does not depend on what the queue holds: msgpack still
        q.appender().append_text("written before, e.g. by Java")
        q.appender().method_writer(PriceListener).heartbeat()
        assert q.codec is ac.Codecs.MSGPACK
        last = q.tailer()
        assert last.move_to_index(q.last_index)
        ex = last.read_nowait()
        assert ex is not None and ex.payload[:1] in (b"\x92", b"\x93")  # a msgpack call
    with ac.open_queue(tmp_path / "java2") as q:
        q.appender().append_text("written before, e.g. by Java")
        q.appender().method_writer(PriceListener, codec="binary_wire").heartbeat()
        assert q.codec is ac.Codecs.BINARY_WIRE
    with ac.open_queue(tmp_path / "raw") as q:
        ac.set_queue_codec(q, "raw")
        with pytest.raises(ValueError, match="cannot hold method calls"):
            q.appender().method_writer(PriceListener)


def test_mixed_codecs_in_one_queue(queue: ac.Queue) -> None:
    """A reader recognises each excerpt's framing by its first byte."""
    a = queue.appender()
    a.append(msgspec.msgpack.encode(["on_price", P1]))
    a.append(msgspec.json.encode(["on_pair", ["X", 1, "Y"]]))
    a.append(b"\xb9\x09heartbeat\xe0")
    rec = Recorder()
    assert queue.tailer().method_reader(rec).read_available() == 3
    assert rec.calls == [("on_price", P1), ("on_pair", "X", 1, "Y"), ("heartbeat",)]


def test_method_names_and_ids_do_not_collide(queue: ac.Queue) -> None:
    class Iface(Protocol):
        def a(self, x: int) -> None: ...  # "a" is also the msgpack byte of the int 97

        @ac.method_id(97)
        def other(self, x: str) -> None: ...

    w = queue.appender().method_writer(Iface)
    w.a(1)
    w.other("s")
    got: list[Any] = []

    class H(Iface):
        def a(self, x: int) -> None:
            got.append(("a", x))

        def other(self, x: str) -> None:
            got.append(("other", x))

    errors: list[Exception] = []
    queue.tailer().method_reader(H(), on_error=lambda e, ex: errors.append(e)).read_available()
    assert got == [("a", 1), ("other", "s")] and errors == []


def test_several_handlers_are_called_in_order(queue: ac.Queue) -> None:
    queue.appender().method_writer(PriceListener).on_price(P1)
    a, b = Recorder(), Recorder()
    order: list[str] = []

    class Other:
        def on_price(self, price: Price) -> None:
            order.append("other")

    reader = queue.tailer().method_reader(a, Other(), b)
    reader.read_available()
    assert a.calls == b.calls == [("on_price", P1)] and order == ["other"]


def test_encoding_failure_writes_nothing(queue: ac.Queue) -> None:
    w = queue.appender().method_writer(PriceListener)
    with pytest.raises(TypeError):
        w.on_price(object())  # type: ignore[arg-type]
    assert queue.last_index is None
    with ac.open_queue(queue.path + "-bw") as q2:
        w2 = q2.appender().method_writer(PriceListener, codec="binary_wire")
        with pytest.raises(ac.CodecError):
            w2.on_pair("X", "not an int")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            w2.on_pair("X", 1 << 70)
        assert q2.last_index is None
        w2.on_pair("X", 1)
        assert q2.entry_count() == 1


# --------------------------------------------------------------------------
# Dispatch rules
# --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_unknown_methods_are_skipped_and_counted(queue: ac.Queue, codec: str) -> None:
    w = queue.appender().method_writer(PriceListener, codec=codec)
    w.on_price(P1)
    w.heartbeat()
    w.on_pair("X", 1)

    class OnlyPairs:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_pair(self, symbol: str, qty: int, venue: str = "any") -> None:
            self.seen.append(symbol)

    h = OnlyPairs()
    reader = queue.tailer().method_reader(h)
    assert reader.read_available() == 3
    assert h.seen == ["X"]
    assert reader.statistics().unknown == 2 and reader.statistics().dispatched == 1


@pytest.mark.parametrize("codec", CODECS)
def test_bad_messages_go_to_the_error_handler(queue: ac.Queue, codec: str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    w = queue.appender().method_writer(PriceListener, codec=codec)
    w.on_price(P1)
    a = queue.appender()
    a.append(ac.Codecs.get(codec).encode(["on_price", {"symbol": 1}]) if codec != "binary_wire"
             else b"\xb9\x08on_price\x82\x09\x00\x00\x00\xc6symbol\xa1\x01")
    a.append(b"")  # empty: stored as one padding byte, an excerpt with no call in it
    a.append(b"\x93\xc7\x01\x00\x00")  # msgpack with a bad history ext
    a.append(b"\xb9\x08on_price\x82\xff\xff\x00\x00")  # truncated
    a.append(b"\xe3one")  # Java writeText: not a method call
    w.on_price(P1)
    errors: list[tuple[Exception, ac.Excerpt]] = []
    rec = Recorder()
    reader = queue.tailer().method_reader(rec, on_error=lambda e, ex: errors.append((e, ex)))
    assert reader.read_available() == 7
    assert rec.calls == [("on_price", P1), ("on_price", P1)]  # one bad message stops nothing
    assert len(errors) == 4 and reader.statistics().errors == 4
    assert all(isinstance(ex, ac.Excerpt) for _, ex in errors)
    # the default error handler logs and goes on
    caplog.set_level(logging.WARNING, "aiochronicle.methods")
    rec2 = Recorder()
    assert queue.tailer().method_reader(rec2).read_available() == 7
    assert len(rec2.calls) == 2
    assert sum("could not be decoded" in r.message for r in caplog.records) == 4


def test_handler_exceptions_propagate(queue: ac.Queue) -> None:
    w = queue.appender().method_writer(PriceListener)
    w.heartbeat()
    w.heartbeat()

    class Boom:
        n = 0

        def heartbeat(self) -> None:
            self.n += 1
            if self.n == 1:
                raise RuntimeError("handler bug")

    h = Boom()
    reader = queue.tailer().method_reader(h, interfaces=[PriceListener])
    with pytest.raises(RuntimeError, match="handler bug"):
        reader.read_one()
    assert reader.read_one() and h.n == 2  # the next message follows


@pytest.mark.parametrize("how", ["read_one", "read_available", "run"])
def test_a_raising_handler_consumes_only_its_own_call(queue: ac.Queue, how: str,
                                                      run: Callable[[Awaitable[Any]], Any],
                                                      ) -> None:
    """One-argument msgpack calls are dispatched in C (native/hot.c): a handler
    raising mid-batch has consumed its call and no other; an argument that
    does not decode goes to the error handler; the counters add up."""
    w = queue.appender().method_writer(PriceListener)
    for i in range(6):
        w.on_price(Price("S", 1.0, 2.0, i))
        if i == 2:
            queue.appender().append(ac.Codecs.MSGPACK.encode(["on_price", {"symbol": 1}]))

    class Boom:
        def __init__(self) -> None:
            self.seen: list[int] = []

        def on_price(self, price: Price) -> None:
            self.seen.append(price.qty)
            if price.qty in (1, 4):
                raise RuntimeError(price.qty)

    h = Boom()
    errors: list[Exception] = []
    reader = queue.tailer().method_reader(h, on_error=lambda e, ex: errors.append(e))
    raised = []
    for _ in range(20):
        try:
            if how == "read_one":
                if not reader.read_one():
                    break
            elif how == "read_available":
                if not reader.read_available():
                    break
            elif not run(reader.run(until_end=True)):
                break
        except RuntimeError as exc:
            raised.append(exc.args[0])
    assert h.seen == [0, 1, 2, 3, 4, 5] and raised == [1, 4]
    assert len(errors) == 1
    stats = reader.statistics()
    assert (stats.read, stats.dispatched, stats.errors) == (7, 6, 1)


@pytest.mark.parametrize("codec", CODECS)
def test_calls_by_position_are_encoded_in_c_as_python_encodes_them(queue: ac.Queue,
                                                                  codec: str) -> None:
    """A call with every argument by position is encoded and appended in C
    (WriterMethod); by keyword, with a default left out, or through the class
    it is the Python method: the excerpts are the same bytes."""
    w = queue.appender().method_writer(PriceListener, codec=codec)
    proxy = type(w)
    assert all(isinstance(vars(proxy)[m], WriterMethod)
               for m in ("on_price", "on_pair", "heartbeat"))
    pairs: list[tuple[Callable[[], None], Callable[[], None]]] = [
        (lambda: w.on_price(P1), lambda: w.on_price(price=P1)),
        (lambda: w.on_pair("X", 3, "v"), lambda: w.on_pair(symbol="X", qty=3, venue="v")),
        (lambda: w.on_pair("X", 3, "any"), lambda: w.on_pair("X", 3)),
        (lambda: w.heartbeat(), lambda: proxy.heartbeat(w)),
        (lambda: w.on_price(P2), lambda: proxy.on_price(w, P2)),
    ]
    for native, python in pairs:
        native()
        python()
    t = queue.tailer()
    got = [bytes(ex.payload) for ex in iter(t.read_nowait, None)]
    assert len(got) == 2 * len(pairs)
    assert got[0::2] == got[1::2]
    assert len(set(got[0::2])) == len(pairs)
    assert list(inspect.signature(w.on_pair).parameters) == ["symbol", "qty", "venue"]
    assert w.on_pair.__name__ == "on_pair"
    with pytest.raises(TypeError):
        w.on_pair("X", 1, "v", "extra")  # type: ignore[call-arg]
    rec = Recorder()
    assert queue.tailer().method_reader(rec).read_available() == len(got)
    assert rec.calls[:2] == [("on_price", P1)] * 2


def test_calls_go_through_an_appender_whose_append_does_more(tmp_path: Path) -> None:
    """With a Python clock the appender's append() reads it first: the method
    writer's C path appends through that append()."""

    class Clock:
        def __init__(self) -> None:
            self.reads = 0

        def current_time_millis(self) -> int:
            self.reads += 1
            return 1_700_000_000_000

    clock = Clock()
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        w = q.appender().method_writer(PriceListener)
        w.on_price(P1)
        before = clock.reads
        for _ in range(5):
            w.on_price(P1)
        assert clock.reads - before >= 5
        rec = Recorder()
        assert q.tailer().method_reader(rec).read_available() == 6


def test_a_handler_reading_on_in_read_one_reads_the_next_call(queue: ac.Queue) -> None:
    """read_one() consumes its excerpt before calling the handler, so a handler
    that reads on (the same reader) gets the next call, never the same one."""
    w = queue.appender().method_writer(PriceListener)
    for i in range(4):
        w.on_price(Price("S", 1.0, 2.0, i))
    seen: list[int] = []

    class Nested:
        def on_price(self, price: Price) -> None:
            seen.append(price.qty)
            if price.qty == 0:
                assert reader.read_one()

    reader = queue.tailer().method_reader(Nested())
    while reader.read_one():
        pass
    assert seen == [0, 1, 2, 3]


def test_named_tailer_resumes_after_the_last_call_handled(queue: ac.Queue) -> None:
    w = queue.appender().method_writer(PriceListener)
    for i in range(5):
        w.on_pair("X", i)
    rec = Recorder()
    reader = queue.tailer("svc").method_reader(rec)
    assert reader.read_one() and reader.read_one()
    rec2 = Recorder()
    assert queue.tailer("svc").method_reader(rec2).read_available() == 3  # no read-ahead
    assert [c[2] for c in rec.calls + rec2.calls] == [0, 1, 2, 3, 4]


def test_read_ahead_keeps_what_it_took(queue: ac.Queue) -> None:
    w = queue.appender().method_writer(PriceListener)
    for i in range(10):
        w.on_pair("X", i)
    rec = Recorder()
    tailer = queue.tailer()
    reader = tailer.method_reader(rec)
    assert reader.read_available(limit=3) == 3
    assert tailer.index > queue.first_index + 3  # the tailer ran ahead ...
    assert reader.read_available() == 7  # ... the reader still hands out every call
    assert [c[2] for c in rec.calls] == list(range(10))
    exact = queue.tailer()
    r2 = exact.method_reader(Recorder(), batch=False)
    assert r2.read_one() and exact.index == queue.first_index + 1


class Venue(msgspec.Struct):
    name: str


class Filtered:
    """Java's MethodFilterOnFirstArg."""

    def __init__(self) -> None:
        self.got: list[tuple[str, Price]] = []

    def ignore_method_based_on_first_arg(self, method: str, first: Any) -> bool:
        return method == "routed" and first != "mine"

    def routed(self, account: str, price: Price) -> None:
        self.got.append((account, price))


class Router(Protocol):
    def routed(self, account: str, price: Venue) -> None: ...


@pytest.mark.parametrize("codec", CODECS)
def test_filter_on_first_argument_before_full_decode(queue: ac.Queue, codec: str) -> None:
    # the second argument is a Venue, which would not decode as a Price: a call
    # filtered out on its first argument must not get as far as decoding it
    w = queue.appender().method_writer(Router, codec=codec)
    w.routed("other", Venue("X"))
    w.routed("mine", Venue("X"))
    h = Filtered()
    errors: list[Exception] = []
    reader = queue.tailer().method_reader(h, on_error=lambda e, ex: errors.append(e))
    assert reader.read_available() == 2
    assert h.got == [] and reader.statistics().ignored == 1
    assert len(errors) == 1  # "mine" passed the filter, then its Venue failed as a Price


def test_reader_level_filter(queue: ac.Queue) -> None:
    w = queue.appender().method_writer(PriceListener)
    for sym in ("A", "B", "A"):
        w.on_pair(sym, 1)
    rec = Recorder()
    reader = queue.tailer().method_reader(rec, ignore_first_arg=lambda m, a: a == "A")
    reader.read_available()
    assert rec.calls == [("on_pair", "B", 1, "any")]
    assert reader.statistics().ignored == 2


class PriceV2(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    qty: int = 0
    venue: str = "unknown"


class PriceListenerV2(Protocol):
    def on_price(self, price: PriceV2) -> None: ...

    def on_pair(self, symbol: str, qty: int, venue: str = "any",
                urgent: bool = False) -> None: ...


@pytest.mark.parametrize("codec", CODECS)
def test_schema_evolution(queue: ac.Queue, codec: str) -> None:
    old = queue.appender().method_writer(PriceListener, codec=codec)
    new = queue.appender().method_writer(PriceListenerV2, codec=codec)
    old.on_price(P1)
    new.on_price(PriceV2("EURUSD", 1.1, 1.2, 5, "LMAX"))
    old.on_pair("X", 1)
    new.on_pair("Y", 2, "EBS", True)  # one more argument than the old reader knows

    class NewReader:
        def __init__(self) -> None:
            self.got: list[Any] = []

        def on_price(self, price: PriceV2) -> None:
            self.got.append(price)

        def on_pair(self, symbol: str, qty: int, venue: str = "any",
                    urgent: bool = False) -> None:
            self.got.append((symbol, qty, venue, urgent))

    old_reader, new_reader = Recorder(), NewReader()
    assert queue.tailer().method_reader(old_reader).read_available() == 4
    assert queue.tailer().method_reader(new_reader).read_available() == 4
    assert old_reader.calls == [("on_price", P1), ("on_price", P1),
                                ("on_pair", "X", 1, "any"), ("on_pair", "Y", 2, "EBS")]
    assert new_reader.got == [PriceV2("EURUSD", 1.1, 1.2, 5), PriceV2("EURUSD", 1.1, 1.2, 5,
                                                                     "LMAX"),
                              ("X", 1, "any", False), ("Y", 2, "EBS", True)]


# --------------------------------------------------------------------------
# async handlers
# --------------------------------------------------------------------------


class AsyncRecorder:
    def __init__(self) -> None:
        self.calls: list[Any] = []

    async def on_price(self, price: Price) -> None:
        await asyncio.sleep(0)
        self.calls.append(price)

    def on_pair(self, symbol: str, qty: int, venue: str = "any") -> None:
        self.calls.append(symbol)


@pytest.mark.parametrize("codec", CODECS)
def test_async_handlers(queue: ac.Queue, codec: str, run: Callable[[Awaitable[Any]], Any]) -> None:
    w = queue.appender().method_writer(PriceListener, codec=codec)
    w.on_price(P1)
    w.on_pair("X", 1)

    async def main() -> None:
        h = AsyncRecorder()
        reader = queue.tailer().method_reader(h)
        with pytest.raises(TypeError, match="async handlers"):
            reader.read_one()
        assert await reader.aread_one()
        assert await reader.run(until_end=True) == 1
        assert h.calls == [P1, "X"]
        assert not await reader.aread_one()

    run(main())


def test_run_waits_for_new_calls_and_stops(queue: ac.Queue,
                                           run: Callable[[Awaitable[Any]], Any]) -> None:
    async def main() -> None:
        w = queue.appender().method_writer(PriceListener)
        h = AsyncRecorder()
        reader = queue.tailer(pauser=ac.Pauser.busy()).method_reader(h)
        task = asyncio.create_task(reader.run())
        await asyncio.sleep(0)  # one turn: run() reads to the end and waits
        assert not task.done() and h.calls == []
        w.on_price(P1)
        for _ in range(1000):
            if h.calls:
                break
            await asyncio.sleep(0.005)
        assert h.calls == [P1]
        reader.stop()
        assert await asyncio.wait_for(task, 5) == 1

    run(main())


@pytest.mark.parametrize("pauser", ["busy", "balanced", "notify"])
def test_stop_from_another_thread_ends_a_waiting_run(queue: ac.Queue,
                                                     run: Callable[[Awaitable[Any]], Any],
                                                     pauser: str) -> None:
    """run() waits in its own task (no Task per wait): a notify park is the
    only future, and stop() from any thread ends the wait, spin or park."""

    async def main() -> None:
        w = queue.appender().method_writer(PriceListener)
        rec = Recorder()
        p = getattr(ac.Pauser, pauser)()
        reader = queue.tailer(pauser=p).method_reader(rec, interfaces=[PriceListener])
        task = asyncio.create_task(reader.run())
        w.on_price(P1)
        for _ in range(2000):
            if rec.calls and (pauser != "notify" or wait_state(p).parks):
                break
            await asyncio.sleep(0.002)
        assert rec.calls == [("on_price", P1)]
        if pauser == "notify":  # parked now: nothing but this test's and run()'s task
            assert asyncio.all_tasks() == {task, asyncio.current_task()}
        stopper = threading.Thread(target=reader.stop)
        stopper.start()
        assert await asyncio.wait_for(task, 10) == 1
        stopper.join()
        w.on_price(P2)  # written after the stop: left to the next run
        assert await asyncio.wait_for(reader.run(until_end=True), 10) == 1
        assert rec.calls == [("on_price", P1), ("on_price", P2)]

    run(main())


def test_run_ends_when_the_tailer_closes(queue: ac.Queue,
                                         run: Callable[[Awaitable[Any]], Any]) -> None:
    async def main() -> None:
        tailer = queue.tailer()
        reader = tailer.method_reader(Recorder())
        task = asyncio.create_task(reader.run())
        await asyncio.sleep(0)  # one turn: run() reaches its wait
        tailer.close()
        assert await asyncio.wait_for(task, 5) == 0

    run(main())


def test_async_for_yields_method_calls(queue: ac.Queue,
                                       run: Callable[[Awaitable[Any]], Any]) -> None:
    async def main() -> None:
        w = queue.appender().method_writer(PriceListener)
        w.on_price(P1)
        w.on_pair("X", 2)
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, w.heartbeat)
        reader = queue.tailer().method_reader(AsyncRecorder(), Recorder(),
                                              interfaces=[PriceListener])
        got = []
        async for call in reader:
            got.append(call)
            if call.method == "heartbeat":
                reader.stop()
        assert [(c.method, c.args) for c in got] == [
            ("on_price", (P1,)), ("on_pair", ("X", 2, "any")), ("heartbeat", ())]
        assert got[0].index == queue.first_index and got[0].history is None

    run(main())


def test_cancelling_run_loses_nothing(queue: ac.Queue,
                                      run: Callable[[Awaitable[Any]], Any]) -> None:
    async def main() -> None:
        w = queue.appender().method_writer(PriceListener)
        rec = Recorder()
        reader = queue.tailer().method_reader(rec, interfaces=[PriceListener])
        task = asyncio.create_task(reader.run())
        await asyncio.sleep(0)  # one turn: run() reaches its wait
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        w.heartbeat()
        assert await reader.run(until_end=True) == 1
        assert rec.calls == [("heartbeat",)]

    run(main())


class Ticks(Protocol):
    def tick(self, n: int) -> None: ...

    def slow(self, n: int) -> None: ...


class TickRecorder:
    """Records the calls, each with whether it ran in a task (run()'s) or in
    the event loop's own callback (a notify wake-up handled there); sets
    ``burst_done`` at each multiple of ``burst``; raises at ``fail_at``,
    stops ``reader`` at ``stop_at``, cancels ``task`` at ``cancel_at``."""

    def __init__(self, burst: int, *, fail_at: int = -1, stop_at: int = -1,
                 cancel_at: int = -1) -> None:
        self.burst = burst
        self.fail_at = fail_at
        self.stop_at = stop_at
        self.cancel_at = cancel_at
        self.reader: ac.MethodReader | None = None
        self.task: asyncio.Task[int] | None = None
        self.calls: list[tuple[str, int]] = []
        #: the calls that ran in the loop's callback (no current task): none
        self.in_callback: set[int] = set()
        #: the tasks the calls ran in
        self.tasks: set[asyncio.Task[Any] | None] = set()
        self.burst_done = asyncio.Event()

    def _record(self, name: str, n: int) -> None:
        self.calls.append((name, n))
        self.tasks.add(asyncio.current_task())
        if asyncio.current_task() is None:
            self.in_callback.add(n)
        if n == self.fail_at:
            raise RuntimeError(f"handler failed at {n}")
        if n == self.stop_at and self.reader is not None:
            self.reader.stop()
        if n == self.cancel_at and self.task is not None:
            self.task.cancel()
        if (n + 1) % self.burst == 0:
            self.burst_done.set()

    def tick(self, n: int) -> None:
        self._record("tick", n)


class AsyncTickRecorder(TickRecorder):
    """TickRecorder whose ``slow`` is async: it gives the loop a turn first."""

    async def slow(self, n: int) -> None:
        await asyncio.sleep(0)
        self._record("slow", n)


async def _write_bursts(w: Ticks, rec: TickRecorder, bursts: int, *,
                        slow_every: int = 0, until: int | None = None) -> None:
    """Write ``bursts`` bursts of ``rec.burst`` calls (0, 1, ...), each once the
    reader has handled the one before (so the reader is parked when it comes):
    ``slow`` for every ``slow_every``-th, else ``tick``; stops after the burst
    holding ``until``."""
    n = 0
    for _ in range(bursts):
        rec.burst_done.clear()
        for _ in range(rec.burst):
            (w.slow if slow_every and n % slow_every == 0 else w.tick)(n)
            n += 1
        if until is not None and n > until:
            return
        await asyncio.wait_for(rec.burst_done.wait(), 10)


def _notify_reader(queue: ac.Queue, rec: TickRecorder, every: int,
                   name: str | None = None) -> ac.MethodReader:
    t = queue.tailer(name, pauser=ac.Pauser.notify(min_park=10, max_park=10))
    t.checkpoint_every = every
    reader = t.method_reader(rec, interfaces=[Ticks])
    rec.reader = reader
    return reader


@pytest.mark.parametrize("kind", ["sync", "mixed"])
def test_notify_run_handles_wakeups_in_run_task(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any], kind: str) -> None:
    """A parked run() on Pauser.notify() handles what a wake-up finds in the
    task that awaits run() (the waiter's drain; never in the loop's
    callback): every call once, in order, across wake-ups, checkpoint_every
    cuts (7 of a burst of 20) and async handlers."""
    bursts, burst = 12, 20

    async def main() -> None:
        rec = AsyncTickRecorder(burst) if kind == "mixed" else TickRecorder(burst)
        reader = _notify_reader(queue, rec, every=7)
        task = asyncio.create_task(reader.run())
        w = queue.appender().method_writer(Ticks)
        await _write_bursts(w, rec, bursts, slow_every=9 if kind == "mixed" else 0)
        reader.stop()
        assert await asyncio.wait_for(task, 10) == bursts * burst
        names = ["slow" if kind == "mixed" and n % 9 == 0 else "tick"
                 for n in range(bursts * burst)]
        assert rec.calls == list(zip(names, range(bursts * burst), strict=True))
        assert not rec.in_callback and rec.tasks == {task}  # all in run()'s task

    run(main())


def test_notify_run_raises_a_handler_exception_from_a_wakeup(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any]) -> None:
    """A sync handler that raises on a wake-up (in run()'s task): await run()
    raises it; the calls after it stay for the next run(), in order."""
    burst, fail_at = 20, 45

    async def main() -> None:
        rec = TickRecorder(burst, fail_at=fail_at)
        reader = _notify_reader(queue, rec, every=64)
        task = asyncio.create_task(reader.run())
        w = queue.appender().method_writer(Ticks)
        await _write_bursts(w, rec, 3, until=fail_at)
        with pytest.raises(RuntimeError, match=f"failed at {fail_at}"):
            await asyncio.wait_for(task, 10)
        assert not rec.in_callback and rec.tasks == {task}
        failed = rec.calls[-1]
        assert failed == ("tick", fail_at)
        assert await reader.run(until_end=True) == 3 * burst - fail_at - 1
        assert rec.calls == [("tick", n) for n in range(3 * burst)]

    run(main())


@pytest.mark.parametrize("named", [False, True])
def test_notify_run_stopped_from_a_handler_on_a_wakeup(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any], named: bool) -> None:
    """stop() from a handler run on a wake-up: run() returns after
    that call; the rest is left to the next read (a named tailer's saved
    index is that of the last call handled)."""
    burst, stop_at = 20, 33

    async def main() -> None:
        rec = TickRecorder(burst, stop_at=stop_at)
        reader = _notify_reader(queue, rec, every=64, name="t1" if named else None)
        task = asyncio.create_task(reader.run())
        w = queue.appender().method_writer(Ticks)
        await _write_bursts(w, rec, 3, until=stop_at)
        assert await asyncio.wait_for(task, 10) == stop_at + 1
        assert not rec.in_callback and rec.tasks == {task}
        assert rec.calls == [("tick", n) for n in range(stop_at + 1)]
        if named:
            again = TickRecorder(burst)
            assert queue.tailer("t1").method_reader(again, interfaces=[Ticks]) \
                .read_available() == 2 * burst - stop_at - 1
            assert again.calls == [("tick", n) for n in range(stop_at + 1, 2 * burst)]
        else:
            assert await reader.run(until_end=True) == 2 * burst - stop_at - 1
            assert rec.calls == [("tick", n) for n in range(2 * burst)]

    run(main())


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


def test_notify_run_handlers_on_a_wakeup_see_run_tasks_context(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any]) -> None:
    """Handlers called on a wake-up see the context variables of the task
    that awaits run() (not those of whoever made the loop's waker)."""

    class Seen(TickRecorder):
        def tick(self, n: int) -> None:
            self.calls.append((_REQUEST.get(), n))
            if asyncio.current_task() is None:
                self.in_callback.add(n)
            if (n + 1) % self.burst == 0:
                self.burst_done.set()

    async def reading(reader: ac.MethodReader) -> int:
        _REQUEST.set("run's own")
        return await reader.run()

    async def main() -> None:
        rec = Seen(10)
        reader = _notify_reader(queue, rec, every=64)
        _REQUEST.set("main's")
        # another tailer parks first, from main's context: it makes the loop's
        # waker (whose reader callback runs in the context it was made in)
        first = queue.tailer(pauser=ac.Pauser.notify(min_park=10, max_park=10))
        first_read = asyncio.create_task(first.read())
        while first.pauser.count_paused == 0:
            await asyncio.sleep(0)
        task = asyncio.create_task(reading(reader))
        w = queue.appender().method_writer(Ticks)
        await _write_bursts(w, rec, 3)
        reader.stop()
        assert await asyncio.wait_for(task, 10) == 30
        assert (await first_read).index == queue.first_index
        assert not rec.in_callback
        assert rec.calls == [("run's own", n) for n in range(30)]

    run(main())


def test_notify_run_cancelled_with_an_awaitable_held_loses_nothing(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any]) -> None:
    """run() cancelled (by a handler on a wake-up) while an async
    handler's awaitable is held for it: the next run() awaits it first, so
    every call is made once, in order."""
    burst, cancel_at = 20, 28  # 29 is slow (29 % 29 == 0)

    async def main() -> None:
        rec = AsyncTickRecorder(burst, cancel_at=cancel_at)
        reader = _notify_reader(queue, rec, every=64)
        task = rec.task = asyncio.create_task(reader.run())
        w = queue.appender().method_writer(Ticks)
        await _write_bursts(w, rec, 2, slow_every=29, until=cancel_at)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        assert not rec.in_callback
        assert rec.calls[-1] == ("tick", cancel_at)
        assert await reader.run(until_end=True) == 2 * burst - cancel_at - 2
        names = ["slow" if n % 29 == 0 else "tick" for n in range(2 * burst)]
        assert rec.calls == list(zip(names, range(2 * burst), strict=True))

    run(main())


# --------------------------------------------------------------------------
# Java interop (BinaryWire)
# --------------------------------------------------------------------------


class CAPTData(msgspec.Struct):
    value: int = 0


class Handler(Protocol):
    def handle(self, data: Any) -> None: ...  # declared as a base type: Java writes it typed


class EventListener(Protocol):
    def event(self, a: str, b: str) -> None: ...


class Numbered(Protocol):
    @ac.method_id(200)
    def tick(self, n: int) -> None: ...


def _payloads(q: ac.Queue) -> list[bytes]:
    return [ex.payload for ex in q.tailer()]


def test_java_method_writer_bytes(queue: ac.Queue) -> None:
    a = queue.appender()
    a.method_writer(Handler, codec="binary_wire").handle(CAPTData(0))
    a.method_writer(EventListener, codec="binary_wire").event("two", "two")
    a.method_writer(Numbered, codec="binary_wire").tick(100)
    got = _payloads(queue)
    # W-test ClassAliasPoolTest: 1f 00 00 00 | b9 06 "handle" | b6 08 "CAPTData" |
    # 82 08 00 00 00 | c5 "value" a1 00
    assert got[0] == (b"\xb9\x06handle" + b"\xb6\x08CAPTData" + b"\x82\x08\x00\x00\x00"
                      + b"\xc5value\xa1\x00")
    assert len(got[0]) == 0x1F
    # W-test MethodWriterTest: 14 00 00 00 | b9 05 "event" | 82 08 00 00 00 | e3 two e3 two
    assert got[1] == b"\xb9\x05event\x82\x08\x00\x00\x00\xe3two\xe3two"
    assert len(got[1]) == 0x14
    # @MethodId(200): BA + stop-bit 200 (c8 01), then the int compacted
    assert got[2] == b"\xba\xc8\x01\xa1\x64"


class JavaSide:
    """A handler for calls as Java writes them."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def handle(self, data: CAPTData) -> None:
        self.got.append(data)

    def event(self, a: str, b: str) -> None:
        self.got.append((a, b))

    @ac.method_id(200)
    def tick(self, n: int) -> None:
        self.got.append(n)

    def to(self, who: str) -> Greeter:
        self.got.append(("to", who))
        return Greeter(self.got)


class Greeter:
    def __init__(self, got: list[Any]) -> None:
        self.got = got

    def say(self, text: str) -> None:
        self.got.append(("say", text))


JAVA_HISTORY = (b"\xba\x80\x00\x81\x27\x00\x86\x01" + b"\x01\x00\x00\x00"
                + b"\x02\x00\x00\x00\x00\x00\x00\x00" + b"\x03"
                + (1111).to_bytes(8, "little") + (2222).to_bytes(8, "little")
                + (120962203520100).to_bytes(8, "little"))


def test_reader_dispatches_java_written_calls(queue: ac.Queue) -> None:
    a = queue.appender()
    a.append(b"\xb9\x06handle\xb6\x08CAPTData\x82\x08\x00\x00\x00\xc5value\xa1\x00")
    a.append(b"\xb9\x05event\x82\x08\x00\x00\x00\xe3two\xe3two")
    a.append(b"\xba\xc8\x01\xa1\x64")
    a.append(JAVA_HISTORY + b"\xb9\x05event\x82\x08\x00\x00\x00\xe3one\xe3two")  # history first
    a.append(b"\xb9\x06handle\x82\x07\x00\x00\x00\xc5value\x07" + b"\x8f\x8f\x8f")  # raw int, pad
    a.append(b"\xb9\x06handle\x82\x07\x00\x00\x00\xc5value\x07" + b"\x8e\x02\x00\x00\x00\0\0")
    a.append(b"\xb9\x02to\xe3one\xb9\x03say\xe2hi")  # a chained call: to("one").say("hi")
    a.append(b"\xb9\x07unknown\xe0\xb9\x05event\x82\x06\x00\x00\x00\xe1a\xe1b\xe1c")
    h = JavaSide()
    errors: list[Exception] = []
    reader = queue.tailer().method_reader(h, on_error=lambda e, ex: errors.append(e))
    assert reader.read_available() == 8
    assert errors == []
    assert h.got == [CAPTData(0), ("two", "two"), 100, ("one", "two"), CAPTData(7), CAPTData(7),
                     ("to", "one"), ("say", "hi"), ("a", "b")]
    assert reader.statistics().unknown == 1


class Greeting(Protocol):
    def say(self, text: str) -> None: ...


class To(Protocol):
    def to(self, who: str) -> Greeting: ...


def test_chained_calls_are_one_excerpt(queue: ac.Queue) -> None:
    """Java's chained method writer: to("one").say("hi") is one excerpt with two events."""
    w = queue.appender().method_writer(To, codec="binary_wire")
    pending = w.to("one")
    assert queue.last_index is None  # nothing is written until the chain ends
    pending.say("hi")
    assert _payloads(queue) == [b"\xb9\x02to\xe3one\xb9\x03say\xe2hi"]
    h = JavaSide()
    queue.tailer().method_reader(h).read_available()
    assert h.got == [("to", "one"), ("say", "hi")]
    with ac.open_queue(queue.path + "-mp") as q2:
        with pytest.raises(TypeError, match="binary_wire"):
            q2.appender().method_writer(To, codec="msgpack")
        assert recorded_codec(cycles_of(q2).meta) is None  # nothing recorded by the failure
        q2.appender().method_writer(To).to("x").say("y")  # the default for chains
        assert q2.codec is ac.Codecs.BINARY_WIRE


def test_java_bytes_round_trip_through_python_writer(queue: ac.Queue) -> None:
    """What Python writes in BinaryWire mode, Java's reader shape reads back the same."""
    w = queue.appender().method_writer(PriceListener, codec="binary_wire")
    w.on_price(Price("EURUSD", 1.5, 100.0, 2))
    payload = _payloads(queue)[0]
    assert payload == (b"\xb9\x08on_price\x82\x21\x00\x00\x00" + b"\xc6symbol\xe6EURUSD"
                       + b"\xc3bid\x92\x96\x01" + b"\xc3ask\xa1\x64" + b"\xc3qty\xa1\x02")
    rec = Recorder()
    queue.tailer().method_reader(rec).read_available()
    assert rec.calls == [("on_price", Price("EURUSD", 1.5, 100.0, 2))]


# --------------------------------------------------------------------------
# Typing
# --------------------------------------------------------------------------


def test_mypy_sees_the_proxy_as_the_interface() -> None:
    root = Path(__file__).resolve().parents[1]
    target = root / "tests" / "typing" / "check_method_writer.py"
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", str(target)],
                         capture_output=True, text=True, cwd=root, timeout=300)
    # only this file's lines: the package itself is checked by the main mypy run
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("tests/typing/")]
    notes = [ln for ln in lines if "Revealed type" in ln]
    errors = [ln for ln in lines if ": error:" in ln]
    assert notes and all("check_method_writer.Quotes" in n for n in notes[:1]), out.stdout
    assert 'Revealed type is "aiochronicle._objects._queue.MethodReader"' in out.stdout
    # exactly the deliberate mistakes are reported, on the lines marked "# E:"
    marked = [i + 1 for i, ln in enumerate(target.read_text().splitlines()) if "# E:" in ln]
    got = sorted(int(e.split(":")[1]) for e in errors)
    assert got == marked, out.stdout


# --------------------------------------------------------------------------
# The three-service pipeline example
# --------------------------------------------------------------------------


def test_pipeline_example(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "examples" / "pipeline" / "run.py"),
                          str(tmp_path / "p"), "--ticks", "2000", "--rate", "20000"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "strategy: read 2,000 ticks" in out.stdout
    # the runner's log stream: each line prefixed with the service's name
    routed = [ln for ln in out.stdout.splitlines() if ln.startswith("router   | router:")]
    # feed (10) -> gateway -> md (1) -> strategy -> orders (2) -> router
    assert routed and "sources per order [(10, 1, 2)]" in routed[0]
    assert "end to end" in out.stdout


def test_binary_wire_read_one_dispatches_in_c_as_python_does(queue: ac.Queue) -> None:
    """read_one() takes a common BinaryWire call (by event name or by method id)
    in C, as it does msgpack's: the same calls and counts as the Python path,
    the excerpt consumed before its handler runs (a handler that raises finds
    it consumed), and a call C declines goes to Python."""
    w = queue.appender().method_writer(PriceListener, codec="binary_wire")
    w.on_price(Price("A", 1.0, 2.0, 3))
    w.heartbeat()  # by method id
    w.on_price(Price("B", 1.5, 2.5))  # its handler raises
    w.on_pair("C", 4)
    queue.appender().append(b"\xb9\x04nope\xe1x")  # an event no handler has
    w.heartbeat()

    class Handler(Recorder):
        def on_price(self, price: Price) -> None:
            super().on_price(price)
            if price.symbol == "B":
                raise RuntimeError("B")

    def read_all(native: bool) -> tuple[list[tuple[Any, ...]], ac.MethodReaderStatistics]:
        h = Handler()
        r = queue.tailer().method_reader(h, interfaces=[PriceListener])
        if not native:
            r._fast_wire_names = {}  # the Python path, to compare with
            r._fast_wire_ids = {}
        in_c = r._fast_done[1]  # calls the C dispatch handled
        n = 0
        while True:
            try:
                if not r.read_one():
                    break
            except RuntimeError as e:
                assert str(e) == "B"
            n += 1
        assert n == 6
        # A, the heartbeats, B and C in C; nope declined (to Python)
        assert r._fast_done[1] - in_c == (5 if native else 0)
        return h.calls, r.statistics()

    calls, stats = read_all(native=True)
    assert calls == read_all(native=False)[0]
    assert [c[1].symbol if c[0] == "on_price" else c[0] for c in calls] == [
        "A", "heartbeat", "B", "on_pair", "heartbeat"]
    assert stats.read == 6 and stats.dispatched == 5 and stats.unknown == 1


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("outer", ["read_one", "aread_one", "read_available", "run"])
def test_a_handler_reading_its_own_reader_reads_on_or_raises_never_twice(
        queue: ac.Queue, codec: str, outer: str) -> None:
    """A handler of read_one() or aread_one() that reads on (read_one(),
    read_available()) gets the next excerpts, on every codec and dispatch path
    (C, Python); a handler of a batch read (read_available(), run()) that reads
    its own reader gets ReentrantReadError.  Either way every excerpt is handled
    once, in order.  (A batch read handled them twice and out of order; a
    BinaryWire read_one() recursed without end.)"""
    w = queue.appender().method_writer(PriceListener, codec=codec)
    for sym in "ABCDEFGH":
        w.on_price(Price(sym, 1.0, 2.0))
    inner_reads = ["read_one", "read_available"]
    raised: list[str] = []
    batch = outer in ("read_available", "run")

    class Handler(Recorder):
        def on_price(self, price: Price) -> None:
            super().on_price(price)
            if price.symbol not in "BF":
                return
            inner = inner_reads.pop(0)
            if batch:
                with pytest.raises(ac.ReentrantReadError):
                    getattr(reader, inner)()
                raised.append(inner)
            elif inner == "read_one":
                assert reader.read_one()  # C: read inside, and handled once
            else:
                assert reader.read_available() == 2  # G and H

    h = Handler()
    reader = queue.tailer().method_reader(h)

    async def read_async() -> None:
        if outer == "aread_one":
            while await reader.aread_one():
                pass
        else:
            await reader.run(until_end=True)

    if outer == "read_one":
        while reader.read_one():
            pass
    elif outer == "read_available":
        while reader.read_available():
            pass
    else:
        asyncio.run(read_async())
    assert [c[1].symbol for c in h.calls] == list("ABCDEFGH")
    assert raised == (["read_one", "read_available"] if batch else [])
    assert reader.statistics().dispatched == 8


def test_an_async_handler_awaiting_its_own_reader_raises(queue: ac.Queue) -> None:
    """The async reads too: an async handler that awaits aread_one() or run()
    of the reader running it gets ReentrantReadError; every excerpt is handled
    once, in order."""
    w = queue.appender().method_writer(PriceListener)
    for sym in "ABCD":
        w.on_price(Price(sym, 1.0, 2.0))
    seen: list[str] = []
    raised: list[str] = []

    class Handler:
        async def on_price(self, price: Price) -> None:
            seen.append(price.symbol)
            if price.symbol == "B":
                with pytest.raises(ac.ReentrantReadError):
                    await reader.aread_one()
                raised.append("aread_one")
            if price.symbol == "C":
                with pytest.raises(ac.ReentrantReadError):
                    await reader.run(until_end=True)
                raised.append("run")

    reader = queue.tailer().method_reader(Handler())
    asyncio.run(reader.run(until_end=True))
    assert seen == list("ABCD") and raised == ["aread_one", "run"]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("history", [False, True])
@pytest.mark.parametrize("outer", ["read_available", "run", "run_parked"])
def test_stop_in_a_handler_ends_the_batch_after_its_excerpt(
        queue: ac.Queue, codec: str, history: bool, outer: str) -> None:
    """stop() from a handler: no handler of a later excerpt runs, also within
    a batch the reader had already read (run() dispatched the rest of its
    batch, up to checkpoint_every excerpts, on every codec); the next run()
    goes on from the excerpt after it, and a stopped reader's read_one()
    still reads."""
    w = queue.appender().method_writer(PriceListener, codec=codec)
    syms = [f"S{k}" for k in range(40)]

    def write_all() -> None:
        for sym in syms:
            w.on_price(Price(sym, 1.0, 2.0))

    seen: list[str] = []

    class Handler:
        def on_price(self, price: Price) -> None:
            seen.append(price.symbol)
            if price.symbol in ("S4", "S21"):
                reader.stop()

    reader = queue.tailer().method_reader(Handler(), history=history)

    async def run_parked() -> int:
        # run() parks first; the excerpts come in one commit burst while it waits
        task = asyncio.ensure_future(reader.run())
        await asyncio.sleep(0.05)
        write_all()
        return await asyncio.wait_for(task, 30)

    if outer == "run_parked":
        first = asyncio.run(run_parked())
    else:
        write_all()
        first = (reader.read_available() if outer == "read_available"
                 else asyncio.run(reader.run()))
    assert seen == syms[:5] and first == 5
    if outer == "read_available":
        assert reader.read_available() == 17
    else:
        assert asyncio.run(reader.run()) == 17
    assert seen == syms[:22]
    assert reader.read_one()  # nothing of the stop is left over
    assert seen == syms[:23]


def test_run_cancelled_on_its_batch_path_keeps_the_async_call(
        queue: ac.Queue, run: Callable[[Awaitable[Any]], Any]) -> None:
    """run() over excerpts already there (its batch path), cancelled by a
    handler: the next async handler's call is held for the next run(), not
    started and cancelled at its first await (it was lost)."""
    w = queue.appender().method_writer(PriceListener)
    for sym in "ABCDE":
        w.on_price(Price(sym, 1.0, 2.0))
    seen: list[str] = []

    async def main() -> None:
        class Handler:
            async def on_price(self, price: Price) -> None:
                if price.symbol == "B":
                    task.cancel()  # lands at run()'s next await, after this call
                else:
                    await asyncio.sleep(0)
                seen.append(price.symbol)

        reader = queue.tailer().method_reader(Handler())
        task = asyncio.create_task(reader.run(until_end=True))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["A", "B"]
        # C's held call is finished first; run() counts what it read itself (D, E),
        # as after a cancellation in the drain
        assert await reader.run(until_end=True) == 2
        assert seen == ["A", "B", "C", "D", "E"]

    run(main())
