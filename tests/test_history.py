"""Message history: Java's byte layout (golden bytes from Chronicle Wire's
MessageHistoryTest, as quoted in the format notes section 10.3), when it is
written, what handlers see, and how it is carried through a chain of services."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest

import aiochronicle as ac
from aiochronicle._format._wire import WireError

NOW = 120962203520100  # the fixed nanoTime of Java's SetTimeMessageHistory

# MessageHistoryTest.testReadMarshallable: one source (1, 2), timings 1111 and 2222, then
# the writer's own timing
ONE_SOURCE = bytes.fromhex(
    "ba8000" "812700" "86" "01" "01000000" "0200000000000000"
    "03" "5704000000000000" "ae08000000000000" "640c2cb5036e0000")
# MessageHistoryTest.checkToString / testWriteHistoryAsBytes: sources (1, 0xff) and
# (2, 0xfff), timings 1e18 and 1e18 + 10000, then the writer's own
TWO_SOURCES = bytes.fromhex(
    "ba8000" "813300" "86" "02" "01000000" "02000000" "ff00000000000000" "ff0f000000000000"
    "03" "000064a7b3b6e00d" "102764a7b3b6e00d" "640c2cb5036e0000")
# the same history, self-describing (history.self.describing), without the writer's timing
SELF_DESCRIBING = bytes.fromhex(
    "b907686973746f7279" "814b00"
    "c7736f7572636573" "8216000000" "a101afff00000000000000" "a102afff0f000000000000"
    "c774696d696e6773" "821b000000" "a7000064a7b3b6e00d" "a7102764a7b3b6e00d"
    "a7640c2cb5036e0000")


def test_binary_form_matches_java() -> None:
    h = ac.MessageHistory([(1, 2)], [1111, 2222])
    assert h.wire_bytes(NOW) == ONE_SOURCE
    h2 = ac.MessageHistory([(1, 0xFF), (2, 0xFFF)], [10**18, 10**18 + 10_000])
    assert h2.wire_bytes(NOW) == TWO_SOURCES
    assert len(b"\x00\x00\x00\x00" + TWO_SOURCES) - 4 == 0x39  # the excerpt length Java wrote


def test_parse_both_forms() -> None:
    raw = ONE_SOURCE[7:]
    h = ac.MessageHistory.from_bytes(raw)
    assert h.sources == [(1, 2)] and h.timings == [1111, 2222, NOW]
    assert h.latencies_ns() == [1111, NOW - 2222]
    assert h.last_source_id == 1 and h.last_source_index == 2
    assert ac.MessageHistory().last_source_id == -1
    with pytest.raises(WireError):
        ac.MessageHistory.from_bytes(raw[:-1])
    plain = ac.Codecs.BINARY_WIRE.decode(SELF_DESCRIBING)
    h2 = ac.MessageHistory.from_plain(plain["history"])
    assert h2 == ac.MessageHistory([(1, 0xFF), (2, 0xFFF)], [10**18, 10**18 + 10_000, NOW])
    assert h2.to_dict() == {"sources": [1, 0xFF, 2, 0xFFF],
                            "timings": [10**18, 10**18 + 10_000, NOW]}
    assert "1=0xff" in repr(h2)
    with pytest.raises(WireError):
        ac.MessageHistory.from_plain({"sources": [1], "timings": []})


def test_limits() -> None:
    h = ac.MessageHistory([(i, i) for i in range(128)])
    with pytest.raises(ValueError, match="128"):
        h.add_source(1, 1)
    with pytest.raises(ValueError):
        ac.MessageHistory(timings=range(255)).to_bytes(NOW)


class Tick(msgspec.Struct):
    symbol: str
    seq: int


class Ticks(Protocol):
    def on_tick(self, tick: Tick) -> None: ...


class Orders(Protocol):
    def on_order(self, symbol: str, seq: int) -> None: ...


CODECS = ["msgpack", "json", "binary_wire"]


def _payload(q: ac.Queue) -> bytes:
    ex = q.tailer().read_nowait()
    assert ex is not None
    return ex.payload


@pytest.mark.parametrize("codec", CODECS)
def test_written_only_when_the_source_id_is_set(tmp_path: Path, codec: str) -> None:
    with ac.open_queue(tmp_path / "a") as q:
        q.appender().method_writer(Ticks, codec=codec).on_tick(Tick("X", 1))
        plain = _payload(q)
        with pytest.raises(ValueError, match="source_id"):
            q.appender().method_writer(Ticks, record_history=True)
    with ac.open_queue(tmp_path / "b", source_id=7) as q:
        q.appender().method_writer(Ticks, codec=codec).on_tick(Tick("X", 1))
        with_history = _payload(q)
        q.appender().method_writer(Ticks, record_history=False).on_tick(Tick("X", 1))
        assert [ex.payload for ex in q.tailer()][1] == plain
    assert len(with_history) > len(plain)
    if codec == "binary_wire":
        # written first, as Java: FIELD_NUMBER -1, BYTES_LENGTH16, HISTORY_MESSAGE
        assert with_history.startswith(b"\xba\x80\x00\x81")
        assert with_history[6] == 0x86
        assert with_history[7] == 0 and with_history[8] == 1  # no source; one timing: now
        assert with_history.endswith(plain)
    elif codec == "msgpack":
        assert with_history[:4] == bytes([0x93, 0xC7, 10, 72])  # [history ext, method, args]
    else:
        assert with_history.startswith(b'[{"sources":[],"timings":[')


def test_the_sourceid_is_kept_in_the_metadata(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path, source_id=5):
        pass
    with ac.open_queue(tmp_path) as q:
        assert q.source_id == 5


@pytest.mark.parametrize("codec", CODECS)
def test_chain_of_three_services(tmp_path: Path, codec: str) -> None:
    """gateway -> q1 -> strategy -> q2 -> router: the router sees every hop."""
    with (ac.open_queue(tmp_path / "q1", source_id=1) as q1,
          ac.open_queue(tmp_path / "q2", source_id=2) as q2):
        gateway = q1.appender().method_writer(Ticks, codec=codec)
        orders = q2.appender().method_writer(Orders, codec=codec)
        assert ac.current_history() is None

        class Strategy:
            def on_tick(self, tick: Tick) -> None:
                h = ac.current_history()
                assert h is not None and h.sources == [(1, q1.last_index)]
                orders.on_order(tick.symbol, tick.seq)

        seen: list[ac.MessageHistory] = []

        class Router:
            def on_order(self, symbol: str, seq: int) -> None:
                h = ac.current_history()
                assert h is not None
                seen.append(h.copy())

        gateway.on_tick(Tick("EURUSD", 1))
        assert q1.tailer().method_reader(Strategy()).read_available() == 1
        assert ac.current_history() is None  # only while a handler runs
        assert q2.tailer().method_reader(Router()).read_available() == 1
        (h,) = seen
        assert h.sources == [(1, q1.last_index), (2, q2.last_index)]
        # written, read by the strategy, written again, read by the router
        assert len(h.timings) == 4
        assert all(d >= 0 for d in h.latencies_ns())


def test_java_history_reaches_the_handler(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path, source_id=9) as q:
        a = q.appender()
        a.append(TWO_SOURCES + b"\xb9\x07on_tick\x82\x0f\x00\x00\x00\xc6symbol\xe1X\xc3seq\xa1\x01")
        a.append(SELF_DESCRIBING + b"\xb9\x07on_tick\x82\x0f\x00\x00\x00\xc6symbol\xe1Y"
                 b"\xc3seq\xa1\x02")
        got: list[tuple[str, ac.MessageHistory | None]] = []

        class H:
            def on_tick(self, tick: Tick) -> None:
                got.append((tick.symbol, ac.current_history()))

        assert q.tailer().method_reader(H()).read_available() == 2
        for (sym, h), index in zip(got, [q.first_index, q.last_index], strict=True):
            assert h is not None
            # Java's sources, then this reader's (queue sourceId, index read)
            assert h.sources == [(1, 0xFF), (2, 0xFFF), (9, index)], sym
            assert h.timings[:3] == [10**18, 10**18 + 10_000, NOW]
            assert len(h.timings) == 4


def test_reader_history_switch(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path, source_id=3) as q:
        q.appender().method_writer(Ticks).on_tick(Tick("X", 1))
        got: list[ac.MessageHistory | None] = []

        class H:
            def on_tick(self, tick: Tick) -> None:
                got.append(ac.current_history())

        q.tailer().method_reader(H(), history=False).read_available()
        q.tailer().method_reader(H()).read_available()
        assert got[0] is None and got[1] is not None
        assert got[1].sources == [(3, q.first_index)]
    # source_id 0, no history in the message: nothing tracked unless asked
    with ac.open_queue(tmp_path / "zero") as q:
        q.appender().method_writer(Ticks).on_tick(Tick("X", 1))
        got.clear()
        q.tailer().method_reader(H()).read_available()
        q.tailer().method_reader(H(), history=True).read_available()
        assert got[0] is None
        assert got[1] is not None and got[1].sources == [(0, q.first_index)]


def test_async_handlers_see_their_own_history(tmp_path: Path) -> None:
    """Concurrent readers in one loop: each handler sees its message's history."""

    async def main() -> None:
        with (ac.open_queue(tmp_path / "a", source_id=1) as qa,
              ac.open_queue(tmp_path / "b", source_id=2) as qb):
            for q in (qa, qb):
                w = q.appender().method_writer(Ticks)
                for i in range(20):
                    w.on_tick(Tick("X", i))
            mismatches: list[Any] = []

            def handler(expect: int) -> object:
                class H:
                    async def on_tick(self, tick: Tick) -> None:
                        await asyncio.sleep(0)
                        h = ac.current_history()
                        if h is None or h.last_source_id != expect:
                            mismatches.append((expect, h))

                return H()

            n = await asyncio.gather(
                qa.tailer().method_reader(handler(1)).run(until_end=True),
                qb.tailer().method_reader(handler(2)).run(until_end=True))
            assert n == [20, 20] and mismatches == []
            calls = [c async for c in _first(qa.tailer().method_reader(handler(1)))]
            assert calls[0].history is not None and calls[0].history.sources[-1][0] == 1

    asyncio.run(main())


async def _first(reader: ac.MethodReader) -> Any:
    async for call in reader:
        yield call
        return


def test_history_written_from_a_handler_carries_the_incoming_one(tmp_path: Path) -> None:
    with (ac.open_queue(tmp_path / "in", source_id=1) as qin,
          ac.open_queue(tmp_path / "out", source_id=2) as qout):
        qin.appender().append(ONE_SOURCE + b"\xb9\x07on_tick\x82\x0f\x00\x00\x00"
                              b"\xc6symbol\xe1X\xc3seq\xa1\x01")
        out = qout.appender().method_writer(Orders, codec="binary_wire")

        class Relay:
            def on_tick(self, tick: Tick) -> None:
                out.on_order(tick.symbol, tick.seq)

        qin.tailer().method_reader(Relay()).read_available()
        payload = _payload(qout)
        n = payload[7]
        assert payload[:3] == b"\xba\x80\x00" and n == 2
        ids = struct.unpack_from("<2i", payload, 8)
        idx = struct.unpack_from("<2q", payload, 16)
        assert ids == (1, 1) and idx == (2, qin.first_index)
        t = payload[32]
        timings = struct.unpack_from(f"<{t}q", payload, 33)
        # Java's three, this reader's, this writer's
        assert t == 5 and timings[:3] == (1111, 2222, NOW) and timings[3] <= timings[4]
