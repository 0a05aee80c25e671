"""BinaryWire method calls in C (``aiochronicle._core._hot.WireEncoder`` / ``WireDecoder``,
native/wirecall.c and native/wire.c) against the pure-Python path they replace: the
same bytes for every value, the same error for every value they cannot write, the
same decoded calls (and the same errors) for every payload, well-formed, unusual
(padding, reordered fields, Java's boxed number forms) or corrupt; and they run
under AddressSanitizer."""

from __future__ import annotations

import asyncio
import math
import random
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec
import pytest
from test_hot_path import LOAD_SANITIZED, sanitized_hot

import aiochronicle as ac
from aiochronicle._core import (
    _hot,
    _native,  # noqa: F401  (loads _hot from _cq's file)
)
from aiochronicle._format._wire import WireWriter
from aiochronicle._messages._codecs import wire_call_decoder
from aiochronicle._messages._methods import interface_methods
from aiochronicle._messages._methodwriter import _wire_encoder

ROOT = Path(__file__).resolve().parents[1]


class Leg(msgspec.Struct, rename="camel"):
    venue: str
    px: float
    is_live: bool  # isLive on the wire


class Order(msgspec.Struct):
    symbol: str
    qty: int
    px: float
    note: str | None
    blob: bytes
    leg: Leg
    tag: int | None = None
    ratio: float | None = None
    flag: bool | None = None
    raw: bytes | None = None


class Empty(msgspec.Struct):
    pass


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    size: int
    ts: int


class Calls(Protocol):
    def quote(self, q: Quote) -> None: ...

    def order(self, o: Order) -> None: ...

    def many(self, a: int, b: float, c: str, d: bool, e: bytes, f: str | None) -> None: ...

    def one_int(self, n: int) -> None: ...

    def one_float(self, x: float) -> None: ...

    def one_text(self, s: str) -> None: ...

    def nothing(self) -> None: ...

    def empty(self, e: Empty, n: int) -> None: ...

    @ac.method_id(9)
    def numbered(self, n: int, s: str) -> None: ...


class Recorder:
    """Records every call of ``Calls`` as a repr (NaNs compare equal that way)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def quote(self, q: Quote) -> None:
        self.calls.append(repr(("quote", q)))

    def order(self, o: Order) -> None:
        self.calls.append(repr(("order", o)))

    def many(self, a: int, b: float, c: str, d: bool, e: bytes, f: str | None) -> None:
        self.calls.append(repr(("many", a, b, c, d, e, f)))

    def one_int(self, n: int) -> None:
        self.calls.append(repr(("one_int", n)))

    def one_float(self, x: float) -> None:
        self.calls.append(repr(("one_float", x)))

    def one_text(self, s: str) -> None:
        self.calls.append(repr(("one_text", s)))

    def nothing(self) -> None:
        self.calls.append("nothing")

    def empty(self, e: Empty, n: int) -> None:
        self.calls.append(repr(("empty", e, n)))

    def numbered(self, n: int, s: str) -> None:
        self.calls.append(repr(("numbered", n, s)))


INTS = [0, 1, 127, 128, 255, 256, 32767, 32768, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1,
        2**32, 2**40, 2**53 + 1, 2**62, 2**63 - 1, -1, -128, -129, -32768, -32769, -2**31,
        -2**31 - 1, -2**40, -2**63, 1717986918400]
FLOATS = [0.0, -0.0, 1.5, 0.1, 1.08421, -1.08424, 100.0, 255.0, 256.0, 65535.0, 65536.0,
          65537.0, 2.0**32 - 1, 2.0**32, 2.0**33 + 1, -127.0, -128.0, -129.0, -32768.0,
          -32769.0, -(2.0**31), -(2.0**31) - 1, -(2.0**40) - 1, 1e12, -1e12, 1e12 + 0.5, 1e-7,
          123.456789, 0.000001, 1234567.125, 3.4e38, 3.5e38, 1e300, -1e300, 5e-324,
          2.0**63, -(2.0**63), 2.0**64, 2.0**53 + 2, 1e15 + 0.5, math.nan, -math.nan, math.inf,
          -math.inf, 34359738.36, -34359738.37, 4398046.511104]
TEXTS = ["", "a", "EURUSD", "x" * 31, "x" * 32, "y" * 200, "\u00e9", "\u20ac" * 11, "\U0001d11e",
         "a\U0001f600b" * 20, "\ud800", "\x00", "\u00ff\u0100", "mixed \u00e9\u20ac\U0001d11e " * 9]
BLOBS = [b"", b"\x00", b"x" * 254, b"x" * 255, b"z" * 70_000, bytes(range(256))]

# values the C encoder leaves to Python (which writes them or raises the same error)
ODD_INTS: list[Any] = [True, 2**63, -2**63 - 1, 2**70, 1.0, "1", None]
ODD_FLOATS: list[Any] = [True, 3, -(2**70), 2**1100, "1.0", None]
ODD_TEXTS: list[Any] = [b"bytes", 1, None]
ODD_BLOBS: list[Any] = [bytearray(b"ba"), memoryview(b"mv"), "text", None]


class Text(str):
    pass


def random_float(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.3:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(0, 8))
    if pick < 0.5:
        return float(rng.randrange(-2**40, 2**40))
    if pick < 0.8:
        return struct.unpack("<d", rng.randbytes(8))[0]
    return struct.unpack("<f", rng.randbytes(4))[0]


def random_int(rng: random.Random) -> int:
    return rng.choice([rng.randrange(-300, 300), rng.randrange(-2**63, 2**63),
                       rng.randrange(-2**33, 2**33), rng.choice(INTS)])


def random_text(rng: random.Random) -> str:
    if rng.random() < 0.4:
        return rng.choice(TEXTS)
    alphabet = "abcXYZ09 \u00e9\u00ff\u0100\u20ac\U0001d11e"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 60)))


def random_calls(rng: random.Random, n: int) -> Iterator[tuple[str, tuple[Any, ...]]]:
    for _ in range(n):
        kind = rng.randrange(8)
        leg = Leg(random_text(rng), random_float(rng), rng.random() < 0.5)
        if kind == 0:
            yield "quote", (Quote(random_text(rng), random_float(rng), random_float(rng),
                                  random_int(rng), random_int(rng)),)
        elif kind == 1:
            yield "order", (Order(random_text(rng), random_int(rng), random_float(rng),
                                  rng.choice([None, random_text(rng)]), rng.choice(BLOBS[:4]),
                                  leg, rng.choice([None, random_int(rng)]),
                                  rng.choice([None, random_float(rng)]),
                                  rng.choice([None, True, False]),
                                  rng.choice([None, b"r", b""])),)
        elif kind == 2:
            yield "many", (random_int(rng), random_float(rng), random_text(rng),
                           rng.random() < 0.5, rng.choice(BLOBS[:4]),
                           rng.choice([None, random_text(rng)]))
        elif kind == 3:
            yield "one_int", (random_int(rng),)
        elif kind == 4:
            yield "one_float", (random_float(rng),)
        elif kind == 5:
            yield "one_text", (random_text(rng),)
        elif kind == 6:
            yield "nothing", ()
        else:
            yield "numbered", (random_int(rng), random_text(rng))


def edge_calls() -> Iterator[tuple[str, tuple[Any, ...]]]:
    for i in INTS:
        yield "one_int", (i,)
        yield "one_float", (i,)  # an int where a float is declared: written as its float
    for f in FLOATS:
        yield "one_float", (f,)
        yield "quote", (Quote("Q", f, -f, 1, 2),)
    for t in TEXTS:
        yield "one_text", (t,)
        yield "many", (1, 2.5, t, True, b"", t)
    for b in BLOBS:
        yield "many", (0, 0.0, "", False, b, None)
    yield "nothing", ()
    yield "empty", (Empty(), 1)


def odd_calls() -> Iterator[tuple[str, tuple[Any, ...]]]:
    leg = Leg("v", 1.0, True)
    for v in ODD_INTS:
        yield "one_int", (v,)
        yield "quote", (Quote("Q", 1.0, 2.0, v, 3),)
    for v in ODD_FLOATS:
        yield "one_float", (v,)
    for v in ODD_TEXTS:
        yield "one_text", (v,)
    yield "one_text", (Text("a str subclass"),)
    for v in ODD_BLOBS:
        yield "many", (1, 1.0, "s", True, v, None)
    yield "many", (1, 1.0, "s", 1, b"", None)  # an int for a bool
    yield "order", (Order("S", 1, 1.0, None, b"", leg, tag=2**64),)  # beyond int64, nested
    yield "quote", ("not a Quote",)
    yield "order", (Quote("Q", 1.0, 2.0, 3, 4),)  # another Struct: written typed


def _outcome(fn: Callable[..., bytes], *args: Any) -> bytes | str:
    """What ``fn(*args)`` returns, or the exception it raises as text."""
    try:
        return fn(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


SPECS = interface_methods(Calls)


@pytest.fixture(scope="module")
def encoders() -> dict[str, Any]:
    return {name: _wire_encoder(spec) for name, spec in SPECS.items()}


def test_the_c_codec_covers_these_types(encoders: dict[str, Any]) -> None:
    for name, enc in encoders.items():
        assert type(enc) is _hot.WireEncoder, name
        assert wire_call_decoder(list(SPECS[name].types)) is not None, name

    class Other(Protocol):
        def anything(self, x: Any) -> None: ...

        def items(self, x: list[int]) -> None: ...

        def mapping(self, x: dict[str, int]) -> None: ...

    for spec in interface_methods(Other).values():
        assert type(_wire_encoder(spec)) is not _hot.WireEncoder
        assert wire_call_decoder(list(spec.types)) is None


def all_calls() -> list[tuple[str, tuple[Any, ...]]]:
    return list(edge_calls()) + list(random_calls(random.Random(15), 1500))


HISTORY = bytes.fromhex("ba8000811300860101000000020000000000000003")


@pytest.mark.parametrize("history", [(), (HISTORY,)])
def test_encoder_writes_the_python_bytes(encoders: dict[str, Any],
                                         history: tuple[bytes, ...]) -> None:
    calls = all_calls() + list(odd_calls())
    odd = 0
    for name, args in calls:
        enc = encoders[name]
        fast = _outcome(enc, args, *history)
        slow = _outcome(enc.fallback, args, *history)
        assert fast == slow, (name, args)
        odd += isinstance(slow, str)
    assert odd >= 15  # the values Python refuses were tried too


def test_floats_and_longs_as_java_compacts_them() -> None:
    # each against WireWriter.float64 / int_compact, the Python spelling of Java's rules
    rng = random.Random(7)
    floats = FLOATS + [random_float(rng) for _ in range(20_000)]
    ints = INTS + [random_int(rng) for _ in range(5_000)]
    one_float = _wire_encoder(SPECS["one_float"])
    one_int = _wire_encoder(SPECS["one_int"])
    head = len(b"\xb9\x09one_float")
    for f in floats:
        assert one_float((f,))[head:] == WireWriter(small_raw=False).float64(f).getvalue(), f
    head = len(b"\xb9\x07one_int")
    for i in ints:
        assert one_int((i,))[head:] == WireWriter(small_raw=False).int_compact(i).getvalue(), i


def unusual_payloads() -> list[bytes]:
    """Calls as other writers may spell them: padding, reordered and missing
    fields, Java's boxed number forms, long names; and corrupt ones."""
    w = WireWriter(small_raw=False)

    def call(name: str, body: Callable[[WireWriter], object]) -> bytes:
        w.buf.clear()
        w.event_name(name)
        body(w)
        return w.getvalue()

    def quote(fields: list[tuple[str, Callable[[WireWriter], object]]]) -> Callable[[WireWriter],
                                                                                 object]:
        def write(w: WireWriter) -> None:
            with w.marshallable():
                for k, put in fields:
                    w.field(k)
                    put(w)
        return write

    base = [("symbol", lambda w: w.text("EURUSD")), ("bid", lambda w: w.float64(1.5)),
            ("ask", lambda w: w.float64(2.25)), ("size", lambda w: w.int_compact(10)),
            ("ts", lambda w: w.int_compact(2**40))]
    out = [
        call("quote", quote(base)),
        call("quote", quote(base[::-1])),  # any field order
        call("quote", quote(base[:4])),  # a missing field: an error
        call("quote", quote([*base, ("extra", lambda w: w.int_compact(1))])),  # unknown field
        call("quote", quote([*base, ("size", lambda w: w.int_compact(11))])),  # repeated field
        call("quote", quote([("symbol", lambda w: w.null()), *base[1:]])),  # null str: an error
        call("quote", quote([*base[:3], ("size", lambda w: w.int64(10)),  # boxed Long
                             ("ts", lambda w: w.float32(2.0**40))])),  # a long as FLOAT32
        call("quote", quote([*base[:3], ("size", lambda w: w.float64(10.5)),  # not integral
                             base[4]])),
        call("quote", quote([*base[:3], ("size", lambda w: w.raw(b"\x91" + struct.pack(
            "<d", 1e30))), base[4]])),  # saturates at the top
        call("quote", quote([*base[:3], ("size", lambda w: w.raw(b"\x91" + struct.pack(
            "<d", -1e30))), base[4]])),  # a big negative int
        call("quote", quote([("symbol", lambda w: w.raw(b"\xb2\x05" + b"12:00")),
                             *base[1:]])),  # TIME text where a str is declared
        call("quote", quote([("symbol", lambda w: w.raw(b"\xe2\xed\xa0")), *base[1:]])),
        call("quote", quote([("symbol", lambda w: w.raw(b"\xe2\xc3\x28")), *base[1:]])),
        call("one_text", lambda w: w.raw(b"\xe6\xed\xa0\xb4\xed\xb4\x9e")),  # a surrogate pair
        call("one_int", lambda w: w.raw(b"\x8f\x8f\x05")),  # padding before the value
        call("one_int", lambda w: w.raw(b"\x8e\x02\x00\x00\x00\x00\x00\x05\x8f\x8f")),
        call("one_int", lambda w: w.raw(b"\xbe\x02hi\x05")),  # a comment
        call("one_int", lambda w: w.raw(b"\x05\xb9\x07one_int\x06")),  # two events
        call("one_int", lambda w: w.raw(b"\x05\xe0")),  # trailing junk
        call("one_int", lambda w: w.raw(b"\xbb")),  # null
        call("one_float", lambda w: w.raw(b"\x92\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01")),
        call("one_float", lambda w: w.raw(b"\x96\xff\xff\xff\xff\xff\xff\xff\xff\x7f")),
        call("one_float", lambda w: w.raw(b"\x94\xff\xff\xff\xff\xff\xff\xff\xff\x80\x00")),
        call("one_float", lambda w: w.raw(b"\x92\x80\x00")),  # -1 / 100
        call("one_text", lambda w: w.raw(b"\xb8\x80\x00")),  # null text by length -1
        call("one_text", lambda w: w.raw(b"\xb8\x05abc")),  # truncated
        call("many", lambda w: w.raw(b"\x80\x02\x01\x02")),  # too few values
        call("many", lambda w: w.raw(b"\x05")),  # one value for six
        call("nothing", lambda w: w.raw(b"\xe0\x8f\x8f\x8f")),
        call("nothing", lambda w: w.raw(b"\xbb")),
        bytes.fromhex("ba0982080000000105e3616263"),  # method id 9, (5, "abc")
        HISTORY + call(
            "one_int", lambda w: w.int_compact(5)),  # with history first
        b"\xb9", b"\xb9\x07one_int", b"\xb9\x7fone_int\x05", b"\xba", b"\xba\x09", b"\x92",
    ]
    enc = _wire_encoder(SPECS["order"])
    order = enc((Order("S", 5, 1.25, "n", b"blob", Leg("X", 2.5, True), 7, 0.5, False, b""),))
    out += [order, order[:-3], order + b"\x8f"]
    # every prefix and single-byte change of two calls
    rng = random.Random(3)
    for good in (out[0], order):
        out += [good[:k] for k in range(len(good))]
        for _ in range(300):
            b = bytearray(good)
            b[rng.randrange(len(b))] = rng.randrange(256)
            out.append(bytes(b))
    return out


def test_decoder_reads_what_the_python_reader_reads(tmp_path: Path,
                                                    encoders: dict[str, Any]) -> None:
    calls = all_calls()
    payloads = [encoders[name](args) for name, args in calls] + unusual_payloads()
    with ac.open_queue(tmp_path / "q") as q:
        app = q.appender()
        for p in payloads:
            app.append(p)
        results = []
        # the C path and the Python path (a reader that tracks history never
        # takes the C path), each reading ahead in batches and one by one
        for kw in ({}, {"history": True}, {"batch": False}, {"batch": False, "history": True}):
            rec, errors = Recorder(), []
            reader = q.tailer().method_reader(
                rec, on_error=lambda exc, ex, errors=errors: errors.append(
                    f"{ex.index}: {type(exc).__name__}: {exc}"), interfaces=[Calls], **kw)
            assert reader.read_available() == len(payloads)
            results.append((rec.calls, errors, reader.statistics()))
    assert results[0] == results[1]
    assert results[2] == results[3]
    calls_seen, errors, stats = results[0]
    assert len(calls_seen) >= len(calls) and len(errors) >= 50
    assert stats.dispatched == len(calls_seen)

    # and the C decoder took the well-formed calls itself, but for an int | None
    # sent as a float (msgspec's conversion), which it leaves to Python
    decoders = {name: wire_call_decoder(list(spec.types)) for name, spec in SPECS.items()}
    for (name, args), p in zip(calls, payloads, strict=False):
        pos = 2 + p[1] if p[0] == 0xB9 else 2
        got = decoders[name](p, pos)  # type: ignore[misc]
        declines = (name == "order" and args[0].tag is not None
                    and WireWriter(small_raw=False).int_compact(args[0].tag).buf[0] == 0x90)
        assert (got is None) == declines, p.hex()


SANITIZED_RUN = LOAD_SANITIZED + textwrap.dedent(
    """
    import random
    sys.path.insert(0, sys.argv[2])
    import test_wire_fast as t
    from aiochronicle._messages._codecs import wire_call_decoder
    from aiochronicle._messages._methodwriter import _wire_encoder
    assert type(_wire_encoder(t.SPECS["order"])) is hot.WireEncoder
    encs = {n: _wire_encoder(s) for n, s in t.SPECS.items()}
    decs = {n: wire_call_decoder(list(s.types)) for n, s in t.SPECS.items()}
    rng = random.Random(int(sys.argv[3]))
    n = 0
    calls = list(t.random_calls(rng, 400)) + list(t.edge_calls()) + list(t.odd_calls())
    for name, args in calls:
        try:
            p = encs[name](args)
        except Exception:
            continue
        pos = 2 + p[1] if p[0] == 0xB9 else 2
        for m in range(40):
            b = bytearray(p)
            if m:
                for _ in range(rng.randrange(1, 4)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                if m % 7 == 0:
                    b = b[:rng.randrange(len(b))]
            for dec in decs.values():
                dec(bytes(b), pos)
                dec(memoryview(bytes(b))[1:], max(0, pos - 1))
            n += 1
    for dec in decs.values():
        for pos in (-1, 0, 10**6):
            assert dec(b"\\xb9\\x01x\\x05", pos) is None
    print("ok", n)
    """
)


@pytest.mark.checkout
def test_c_codec_under_address_sanitizer(tmp_path: Path) -> None:
    """The C codec built with ASan/UBSan, fed the calls above and mutations of them."""
    so, env = sanitized_hot(tmp_path)
    r = subprocess.run([sys.executable, "-c", SANITIZED_RUN, str(so), str(ROOT / "tests"), "5"],
                       capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-5000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error:" not in out, out[-5000:]
    assert r.stdout.split()[0] == "ok" and int(r.stdout.split()[1]) > 10_000


@pytest.mark.parametrize("codec", ["binary_wire", "msgpack"])
def test_async_for_yields_the_calls_the_fast_path_dispatched(tmp_path: Path, codec: str) -> None:
    sent = [("quote", (Quote("A", 1.5, 2.5, 3, 4),)), ("one_int", (7,)), ("nothing", ()),
            ("numbered", (9, "nine")), ("one_text", ("done",))]
    with ac.open_queue(tmp_path / "q") as q:
        w = q.appender().method_writer(Calls, codec=codec)
        for name, args in sent:
            getattr(w, name)(*args)
        rec = Recorder()
        reader = q.tailer().method_reader(rec, interfaces=[Calls])

        async def main() -> list[ac.MethodCall]:
            got = []
            async for call in reader:
                got.append(call)
                if call.method == "one_text":
                    reader.stop()
            return got

        got = asyncio.run(main())
        assert [(c.method, c.args, c.history) for c in got] == [(n, a, None) for n, a in sent]
        assert [c.index for c in got] == list(range(q.first_index, q.first_index + len(sent)))
        assert len(rec.calls) == len(sent)
