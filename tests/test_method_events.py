"""The rest of Java's method layer: generic events (the event name as data),
metadata handlers, and a default handler for unknown events, in every codec."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest
from loops import KINDS, loop_factory

import aiochronicle as ac

CODECS = ["msgpack", "json", "binary_wire"]


class Price(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    qty: int


class Prices(Protocol):
    def onPrice(self, price: Price) -> None: ...  # (Java's names)

    def onClose(self, symbol: str, last: bool) -> None: ...

    def heartbeat(self) -> None: ...


class Gateway(Protocol):
    """A gateway's outbound side: any event, by name."""

    def send(self, event: str, price: Price) -> None: ...

    def send2(self, event: str, symbol: str, last: bool) -> None: ...

    def send0(self, event: str) -> None: ...


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def onPrice(self, price: Price) -> None:
        self.calls.append(("onPrice", (price,)))

    def onClose(self, symbol: str, last: bool) -> None:
        self.calls.append(("onClose", (symbol, last)))

    def heartbeat(self) -> None:
        self.calls.append(("heartbeat", ()))


P = Price("EURUSD", 1.0841, 1.0843, 1_000_000)


@pytest.mark.parametrize("codec", CODECS)
def test_a_generic_event_writes_what_the_named_method_writes(tmp_path: Path,
                                                             codec: str) -> None:
    with ac.open_queue(tmp_path / "typed") as q, q.appender() as app:
        w = app.method_writer(Prices, codec=codec)
        w.onPrice(P)
        w.onClose("EURUSD", True)
        w.heartbeat()
        typed = [bytes(e.payload) for e in q.tailer()]
    with ac.open_queue(tmp_path / "generic") as q, q.appender() as app:
        g = app.method_writer(Gateway, codec=codec, generic_event="send")
        g2 = app.method_writer(Gateway, codec=codec, generic_event="send2")
        g0 = app.method_writer(Gateway, codec=codec, generic_event="send0")
        g.send("onPrice", P)
        g2.send2("onClose", "EURUSD", True)
        g0.send0("heartbeat")
        with pytest.raises(TypeError, match="event name"):
            g.send(b"onPrice", P)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="event argument"):
            g2.send2("onClose", "EURUSD")  # type: ignore[call-arg]
        generic = [bytes(e.payload) for e in q.tailer()]
        rec = Recorder()
        assert q.tailer().method_reader(rec).read_available() == 3
    assert generic[:2] == typed[:2]
    # an event without arguments: Java's generic event writes its name alone, a
    # typed method an empty text after it (BinaryWire); both read the same
    assert typed[2] == generic[2] + (b"\xe0" if codec == "binary_wire" else b"")
    assert rec.calls == [("onPrice", (P,)), ("onClose", ("EURUSD", True)), ("heartbeat", ())]


def test_generic_binary_wire_bytes() -> None:
    """BinaryWire facts: an event name is ``B9`` + stop-bit length + its bytes, a
    text under 32 bytes ``E0 + length`` + its bytes, ``true`` is ``B1``; several
    arguments sit in a ``82`` length-prefixed block (4-byte little-endian length);
    Java's generic event without arguments writes its name alone."""
    import tempfile
    with tempfile.TemporaryDirectory() as d, ac.open_queue(d) as q, q.appender() as app:
        g2 = app.method_writer(Gateway, codec="binary_wire", generic_event="send2")
        g0 = app.method_writer(Gateway, codec="binary_wire", generic_event="send0")
        g2.send2("onClose", "EURUSD", True)
        g0.send0("hello")
        got = [bytes(e.payload) for e in q.tailer()]
    body = b"\xe6EURUSD\xb1"
    assert got[0] == b"\xb9\x07onClose\x82" + len(body).to_bytes(4, "little") + body
    assert got[1] == b"\xb9\x05hello"  # no argument: the name alone


def test_a_generic_event_needs_a_method_of_the_interface(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q, q.appender() as app, \
            pytest.raises(TypeError, match="no method 'nope'"):
        app.method_writer(Gateway, generic_event="nope")


@pytest.mark.parametrize("codec", CODECS)
def test_the_default_handler_gets_unknown_events(tmp_path: Path, codec: str) -> None:
    with ac.open_queue(tmp_path) as q, q.appender() as app:
        w = app.method_writer(Prices, codec=codec)
        w.onPrice(P)
        w.onClose("EURUSD", True)
        w.heartbeat()
        known: list[Price] = []

        class OnlyPrices:
            def onPrice(self, price: Price) -> None:
                known.append(price)

        unknown: list[tuple[Any, Any]] = []
        r = q.tailer().method_reader(OnlyPrices(),
                                     default_handler=lambda e, a: unknown.append((e, a)))
        assert r.read_available() == 3
        assert known == [P]
        assert unknown[0] == ("onClose", ["EURUSD", True])
        assert unknown[1][0] == "heartbeat" and unknown[1][1] in (None, "")
        assert r.statistics().unknown == 2
        # a router: no typed handler at all, every event by name
        routed: list[tuple[Any, Any]] = []
        router = q.tailer().method_reader(default_handler=lambda e, a: routed.append((e, a)))
        assert router.read_available() == 3
        assert [e for e, _ in routed] == ["onPrice", "onClose", "heartbeat"]
        assert routed[0][1] == msgspec.to_builtins(P)
        # without one, unknown events are skipped as before
        assert q.tailer().method_reader(OnlyPrices()).read_available() == 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("codec", CODECS)
def test_an_async_default_handler_runs_in_run(tmp_path: Path, codec: str, kind: str) -> None:
    async def main() -> list[tuple[Any, Any]]:
        got: list[tuple[Any, Any]] = []
        with ac.open_queue(tmp_path) as q, q.appender() as app:
            w = app.method_writer(Prices, codec=codec)
            readers: list[ac.MethodReader] = []

            async def default(event: Any, args: Any) -> None:
                await asyncio.sleep(0)
                got.append((event, args))
                if event == "stop":
                    readers[0].stop()

            readers.append(q.tailer().method_reader(Recorder(), default_handler=default))
            reader = readers[0]
            stop = app.method_writer(Gateway, codec=codec, generic_event="send0")
            w.onPrice(P)
            stop.send0("later")
            stop.send0("stop")
            await reader.run()
        return got

    loop = loop_factory(kind)()
    try:
        got = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [e for e, _ in got] == ["later", "stop"]


@pytest.mark.parametrize("codec", CODECS)
def test_metadata_handlers_get_the_calls_of_metadata_excerpts(tmp_path: Path,
                                                              codec: str) -> None:
    with ac.open_queue(tmp_path) as q, q.appender() as app:
        data = app.method_writer(Prices, codec=codec)
        meta = app.method_writer(Prices, codec=codec, metadata=True)
        data.onPrice(P)
        meta.onClose("EURUSD", False)   # no index: a metadata excerpt
        data.heartbeat()
        meta.heartbeat()
        assert len(list(q.tailer())) == 2  # tailers skip metadata
        rec, mrec = Recorder(), Recorder()
        with pytest.raises(ValueError, match="include_metadata"):
            q.tailer().method_reader(rec, metadata_handlers=[mrec])
        r = q.tailer(include_metadata=True).method_reader(rec, metadata_handlers=[mrec])
        r.read_available()
        assert rec.calls == [("onPrice", (P,)), ("heartbeat", ())]
        # the queue's own metadata (the codec record...) is no call of theirs
        assert ("onClose", ("EURUSD", False)) in mrec.calls and ("heartbeat", ()) in mrec.calls
        assert r.metadata_reader is not None


@pytest.mark.parametrize("kind", KINDS)
def test_metadata_handlers_while_run_waits(tmp_path: Path, kind: str) -> None:
    """Metadata calls that arrive while ``run()`` waits reach their handlers
    (the wait path of the reader, as well as its read path)."""
    async def main() -> tuple[Recorder, Recorder]:
        with ac.open_queue(tmp_path) as q, q.appender() as app:
            data = app.method_writer(Prices, codec="msgpack")
            meta = app.method_writer(Prices, codec="msgpack", metadata=True)
            mrec = Recorder()

            class Stopper(Recorder):
                def onClose(self, symbol: str, last: bool) -> None:
                    super().onClose(symbol, last)
                    if last:
                        reader.stop()

            rec = Stopper()
            reader = q.tailer(include_metadata=True).method_reader(
                rec, metadata_handlers=[mrec])
            meta.onClose("before", False)
            task = asyncio.ensure_future(reader.run())
            await asyncio.sleep(0)  # (a turn: run() reads what is there, then waits)
            meta.onClose("while", False)
            data.onPrice(P)
            data.onClose("EURUSD", True)
            await task
            return rec, mrec

    loop = loop_factory(kind)()
    try:
        rec, mrec = loop.run_until_complete(main())
    finally:
        loop.close()
    assert rec.calls == [("onPrice", (P,)), ("onClose", ("EURUSD", True))]
    assert mrec.calls == [("onClose", ("before", False)), ("onClose", ("while", False))]
