"""Codecs: msgpack, JSON, BinaryWire, raw and text; the codec a queue records.

BinaryWire expectations are spelled out from the format notes (section 9.3:
Java's number compaction) or checked against the existing ``WireWriter``; they
are never produced by the code under test alone.
"""

from __future__ import annotations

import datetime as dt
import enum
import math
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiochronicle as ac
from aiochronicle._format._render import decode_auto
from aiochronicle._format._wire import (
    EmptyBody,
    HistoryBytes,
    PlainReader,
    Typed,
    WireError,
    WireWriter,
)
from aiochronicle._messages._codecs import (
    CODEC_KEY,
    decode_payload,
    payload_decoder,
    recorded_codec,
    writer_for,
)
from aiochronicle._objects._queue import cycles_of


class Side(enum.Enum):
    BUY = "BUY"
    SELL = "SELL"


class Leg(msgspec.Struct):
    venue: str
    qty: int


class Order(msgspec.Struct):
    symbol: str
    price: float
    qty: int
    side: Side
    legs: list[Leg] = []
    note: str | None = None


ORDER = Order("EURUSD", 1.1, 1_000_000, Side.BUY, [Leg("X", 1), Leg("Y", 2)], "hi")


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [ac.Codecs.MSGPACK, ac.Codecs.JSON, ac.Codecs.BINARY_WIRE])
def test_struct_round_trip(codec: ac.Codec) -> None:
    data = codec.encode(ORDER)
    assert isinstance(data, bytes)
    assert codec.decode(data, Order) == ORDER
    assert codec.decode(memoryview(data), Order) == ORDER  # any buffer, no copy needed


def test_msgpack_is_msgspec_msgpack() -> None:
    data = ac.Codecs.MSGPACK.encode(ORDER)
    assert msgspec.msgpack.decode(data, type=Order) == ORDER
    assert ac.Codecs.JSON.encode(ORDER) == msgspec.json.encode(ORDER)


def test_raw_and_text() -> None:
    assert ac.Codecs.RAW.encode(b"\x00\x01") == b"\x00\x01"
    assert ac.Codecs.RAW.decode(bytearray(b"ab")) == b"ab"
    with pytest.raises(ac.CodecError):
        ac.Codecs.RAW.encode("text")
    # Java's writeText: E0+len for short strings, B8 + stop-bit length for long ones
    assert ac.Codecs.TEXT.encode("one") == b"\xe3one"
    long = "x" * 40
    assert ac.Codecs.TEXT.encode(long) == b"\xb8\x28" + long.encode()
    assert ac.Codecs.TEXT.decode(b"\xe3one") == "one"
    assert ac.Codecs.TEXT.decode(b"plain utf-8 \xc3\xa9") == "plain utf-8 é"
    with pytest.raises(ac.CodecError):
        ac.Codecs.TEXT.decode(b"\xff\xfe")


def test_codec_lookup() -> None:
    assert ac.Codecs.get("msgpack") is ac.Codecs.MSGPACK
    assert ac.Codecs.get("binary-wire") is ac.Codecs.BINARY_WIRE
    assert ac.Codecs.get("BinaryWire") is ac.Codecs.BINARY_WIRE
    assert ac.Codecs.get(3) is ac.Codecs.JSON
    assert len({c.code for c in ac.Codecs.all()}) == 5
    with pytest.raises(ValueError, match="no codec"):
        ac.Codecs.get("pickle")


@pytest.mark.parametrize("codec", [ac.Codecs.MSGPACK, ac.Codecs.JSON, ac.Codecs.BINARY_WIRE])
def test_decode_errors_are_codec_errors(codec: ac.Codec) -> None:
    with pytest.raises(ac.CodecError):
        codec.decode(b"\xc1\xff\x00garbage", Order)
    with pytest.raises(ac.CodecError):
        codec.decode(codec.encode({"symbol": 1}), Order)


# --------------------------------------------------------------------------
# Schema evolution
# --------------------------------------------------------------------------


class PriceV1(msgspec.Struct):
    symbol: str
    bid: float


class PriceV2(msgspec.Struct):
    symbol: str
    bid: float
    ask: float = math.nan
    venue: str = "none"


@pytest.mark.parametrize("codec", [ac.Codecs.MSGPACK, ac.Codecs.JSON, ac.Codecs.BINARY_WIRE])
def test_schema_evolution(codec: ac.Codec) -> None:
    old = codec.encode(PriceV1("EURUSD", 1.5))
    new = codec.encode(PriceV2("EURUSD", 1.5, 1.6, "LMAX"))
    v2 = codec.decode(old, PriceV2)  # a newer reader fills the added fields from defaults
    assert (v2.symbol, v2.bid, v2.venue) == ("EURUSD", 1.5, "none") and math.isnan(v2.ask)
    assert codec.decode(new, PriceV1) == PriceV1("EURUSD", 1.5)  # an older one drops them


# --------------------------------------------------------------------------
# BinaryWire values as Java writes them
# --------------------------------------------------------------------------


def _bw(t: Any, v: Any) -> bytes:
    w = WireWriter(small_raw=False)
    writer_for(t)(w, v)
    return w.getvalue()


@pytest.mark.parametrize(("value", "expected"), [
    # section 9.3 of the format notes: writeNumber(long)
    (0, "a1 00"), (255, "a1 ff"), (256, "a5 00 01"), (32767, "a5 ff 7f"),
    (32768, "a2 00 80"), (65536, "a6 00 00 01 00"), ((1 << 31), "a3 00 00 00 80"),
    (-1, "a4 ff"), (-129, "a5 7f ff"), (-32769, "a6 ff 7f ff ff"),
    (1 << 40, "90 00 00 80 53"),  # exactly a float32: written as FLOAT32
    ((1 << 40) + 1, "a7 01 00 00 00 00 01 00 00"),
])
def test_binary_wire_longs(value: int, expected: str) -> None:
    assert _bw(int, value).hex(" ") == expected


@pytest.mark.parametrize(("value", "expected"), [
    (100.0, "a1 64"),  # integral doubles are compacted as integers
    (1.5, "92 96 01"),  # fixed point, 2 decimals: stop-bit 150
    (1.1, "92 6e"),
    (0.0001, "94 01"),
    (-2.0, "a4 fe"),
    (0.1 + 0.2, "91 34 33 33 33 33 33 d3 3f"),  # neither fixed point nor float32
])
def test_binary_wire_doubles(value: float, expected: str) -> None:
    assert _bw(float, value).hex(" ") == expected


def test_binary_wire_scalars() -> None:
    assert _bw(str, "two") == b"\xe3two"
    assert _bw(bool, True) == b"\xb1"
    assert _bw(bytes, b"ab") == b"\x80\x03\x8aab"
    assert _bw(int | None, None) == b"\xbb"
    assert _bw(Side, Side.SELL) == b"\xe4SELL"
    u = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    assert _bw(uuid.UUID, u) == b"\xa0" + bytes.fromhex("7766554433221100ffeeddccbbaa9988")
    assert _bw(dt.date, dt.date(2021, 11, 18)) == b"\xb3\x0a2021-11-18"
    assert _bw(list[int], [1, 2]) == b"\x82\x04\x00\x00\x00\xa1\x01\xa1\x02"
    assert _bw(dict[str, int], {"a": 1}) == b"\x82\x04\x00\x00\x00\xc1a\xa1\x01"
    with pytest.raises(ac.CodecError):
        _bw(int, "not an int")


def test_binary_wire_struct_is_an_untyped_marshallable() -> None:
    got = _bw(Leg, Leg("X", 1))
    assert got == b"\x82\x0e\x00\x00\x00" + b"\xc5venue\xe1X" + b"\xc3qty\xa1\x01"
    # declared as something else: typed with the class alias, as Java's object(Class, v)
    got = _bw(Any, Leg("X", 1))
    assert got[:5] == b"\xb6\x03Leg" and got[5:] == _bw(Leg, Leg("X", 1))


def test_binary_wire_document_encoding() -> None:
    # writeDocument: the fields at the top level, no length prefix
    assert ac.Codecs.BINARY_WIRE.encode(Leg("X", 1)) == b"\xc5venue\xe1X\xc3qty\xa1\x01"
    assert ac.Codecs.BINARY_WIRE.encode("one") == b"\xe3one"
    assert ac.Codecs.BINARY_WIRE.decode(b"\xe3one") == "one"
    assert ac.Codecs.BINARY_WIRE.decode(b"\xc5venue\xe1X\xc3qty\xa1\x01", Leg) == Leg("X", 1)


def test_binary_wire_lax_numbers() -> None:
    """BinaryWire loses static types: the reader coerces to the declared ones."""
    doc = b"\xc6symbol\xe6EURUSD" + b"\xc3bid\xa1\x64"  # bid: 100 (a double sent compacted)
    assert ac.Codecs.BINARY_WIRE.decode(doc, PriceV1) == PriceV1("EURUSD", 100.0)

    class Big(msgspec.Struct):
        n: int

    # a long 2^40 arrives as FLOAT32
    assert ac.Codecs.BINARY_WIRE.decode(b"\xc1n\x90\x00\x00\x80\x53", Big) == Big(1 << 40)


# --------------------------------------------------------------------------
# The plain reader and the generic writer (_wire)
# --------------------------------------------------------------------------


def test_plain_reader_values() -> None:
    def read(data: bytes) -> object:
        v, end = PlainReader(data).value(0, len(data))
        assert end == len(data)
        return v

    assert read(b"\xe3one") == "one"
    assert read(b"\x7f") == 127  # old raw small ints
    assert read(b"\xa6\x00\x00\x01\x00") == 65536
    assert read(b"\x92\x96\x01") == 1.5
    assert read(b"\xbb") is None
    assert read(b"\xb8\x80\x00") is None  # null text: stop-bit -1
    assert read(b"\x82\x04\x00\x00\x00\xa1\x01\xa1\x02") == [1, 2]
    assert read(b"\x82\x04\x00\x00\x00\xc1a\xa1\x01") == {"a": 1}
    assert isinstance(read(b"\x82\x00\x00\x00\x00"), EmptyBody)
    assert read(b"\x80\x03\x8aab") == b"ab"
    h = read(b"\x81\x03\x00\x86\x01\x02")
    assert isinstance(h, HistoryBytes) and h == b"\x01\x02"
    t = read(b"\xb6\x03Leg\x82\x04\x00\x00\x00\xc1a\xa1\x01")
    assert t == Typed("Leg", {"a": 1})
    assert read(b"\x8f\x8f\xe1x") == "x"  # padding skipped


@pytest.mark.parametrize("data", [b"\xe5ab", b"\x82\x10\x00\x00\x00\xa1", b"\xa7\x01",
                                  b"\xc3qty", b"\x87", b"\xb6\x03Le"])
def test_plain_reader_errors(data: bytes) -> None:
    with pytest.raises(WireError):
        PlainReader(data).value(0, len(data))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_object_value_ints_match_int_compact(n: int) -> None:
    assert (WireWriter(small_raw=False).object_value(n).getvalue()
            == WireWriter(small_raw=False).int_compact(n).getvalue())
    data = WireWriter(small_raw=False).object_value(n).getvalue()
    v, _ = PlainReader(data).value(0, len(data))
    # FLOAT32 for longs that survive a float round trip (Long.MAX saturates, as in Java)
    assert v == n or (isinstance(v, float) and min(int(v), (1 << 63) - 1) == n)


_plain_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 31), 1 << 31)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40)
    | st.binary(min_size=1, max_size=40),
    lambda children: st.lists(children, min_size=1, max_size=4)
    | st.dictionaries(st.text("abcxyz", min_size=1, max_size=5), children, min_size=1,
                      max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(_plain_values)
def test_object_value_round_trips(value: Any) -> None:
    data = WireWriter(small_raw=False).object_value(value).getvalue()
    got, end = PlainReader(data).value(0, len(data))
    assert end == len(data)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) or isinstance(b, float):
            return float(a) == float(b)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return bool(a == b)

    assert same(value, got)


# --------------------------------------------------------------------------
# The codec a queue records
# --------------------------------------------------------------------------


def test_opening_a_queue_does_not_create_the_codec_key(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        q.appender().append_text("hello")
        before = (tmp_path / "metadata.cq4t").read_bytes()
        assert q.codec is ac.Codecs.BINARY_WIRE  # no record: BinaryWire
        assert recorded_codec(cycles_of(q).meta) is None
        assert q.tailer().method_reader(_Sink()).read_available() == 1
    with ac.open_queue(tmp_path) as q:
        assert q.codec is ac.Codecs.BINARY_WIRE
    assert (tmp_path / "metadata.cq4t").read_bytes() == before
    assert CODEC_KEY.encode() not in before


def test_codec_record(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        assert ac.set_queue_codec(q, "json") is ac.Codecs.JSON
        assert ac.set_queue_codec(q, ac.Codecs.JSON) is ac.Codecs.JSON  # idempotent
        with pytest.raises(ac.CodecMismatchError, match="carries json"):
            ac.set_queue_codec(q, "msgpack")
        assert q.table_store_get(CODEC_KEY) == ac.Codecs.JSON.code
    with ac.open_queue(tmp_path) as q:
        assert q.codec is ac.Codecs.JSON
    with ac.open_queue(tmp_path, read_only=True) as q:
        assert q.codec is ac.Codecs.JSON
        with pytest.raises(ac.ReadOnlyQueueError):
            ac.set_queue_codec(q, "json")


def test_codec_record_race(tmp_path: Path) -> None:
    """Two processes setting different codecs: exactly one wins."""
    with ac.open_queue(tmp_path):
        pass
    script = ("import sys, aiochronicle as ac\n"
              "q = ac.open_queue(sys.argv[1])\n"
              "try:\n"
              "    ac.set_queue_codec(q, 'msgpack')\n"
              "except ac.CodecMismatchError:\n"
              "    sys.exit(3)\n")
    child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    mine_ok = True
    with ac.open_queue(tmp_path) as q:
        try:
            ac.set_queue_codec(q, "json")
        except ac.CodecMismatchError:
            mine_ok = False
    code = child.wait(timeout=60)
    assert code in (0, 3)
    assert mine_ok != (code == 0)


class _Sink:
    def anything(self, x: Any) -> None:
        pass


# --------------------------------------------------------------------------
# Payloads as the dump tool shows them
# --------------------------------------------------------------------------


def test_decode_payload_follows_the_recorded_codec(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path) as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        a.append(ac.Codecs.MSGPACK.encode(Leg("X", 1)))
        a.append(msgspec.msgpack.encode(["on_leg", {"venue": "X", "qty": 1}]))
        got = [decode_payload(q.codec, ex.payload) for ex in q.tailer()]
        assert got == ["venue: X, qty: 1", "on_leg: {venue: X, qty: 1}"]
        assert payload_decoder(q.codec)(b"\xc1").kind == "hex"  # not msgpack: shown as auto


def test_json_and_text_queues_render(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "j") as q:
        ac.set_queue_codec(q, "json")
        assert decode_payload(q.codec, b'["on_x",[1,"a b"]]') == 'on_x: [1, a b]'
        assert decode_payload(q.codec, b'{"k": true}') == "k: true"
    with ac.open_queue(tmp_path / "t") as q:
        ac.set_queue_codec(q, "text")
        assert decode_payload(q.codec, b"\xe3one") == "one"


def test_auto_decoder_knows_msgpack_calls() -> None:
    """``--decode auto`` shows msgpack method calls without being told the codec,
    and leaves other payloads to the other decoders."""
    call = msgspec.msgpack.encode(["on_price", {"symbol": "EURUSD", "bid": 1.5}])
    got = decode_auto(call)
    assert got.kind == "msgpack" and got.line == "on_price: {symbol: EURUSD, bid: 1.5}"
    assert decode_auto(b"\xe3one").kind == "text"
    assert decode_auto(b"\x92\x01").kind != "msgpack"  # looks like msgpack, is not a call


_prices = st.builds(lambda m, k: round(m, k),
                    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), st.integers(0, 7))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.floats(), _prices, st.integers(-(1 << 53), 1 << 53).map(float)))
def test_fast_double_writer_matches_java_compaction(d: float) -> None:
    """The inlined float writer of Struct fields writes what ``float64`` writes."""
    assert _bw(float, d) == WireWriter(small_raw=False).float64(d).getvalue()


@settings(max_examples=200, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.text(max_size=40))
def test_fast_int_and_text_writers(n: int, s: str) -> None:
    assert _bw(int, n) == WireWriter(small_raw=False).int_compact(n).getvalue()
    assert _bw(str, s) == WireWriter(small_raw=False).text(s).getvalue()
