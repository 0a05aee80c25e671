"""Tests for aiochronicle._format._wire against bytes written by Java Chronicle Queue.

Expected bytes come from the Java-written fixtures in tests/fixtures/java
(extracted into a temporary directory) or are spelled out literally from the
format notes; they are never produced by the code under test.
"""

from __future__ import annotations

import contextlib
import random
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from aiochronicle._format._wire import (
    Document,
    Value,
    WireError,
    WireWriter,
    decode_stop_bit,
    encode_stop_bit,
    parse_document,
    parse_value,
    parse_values,
)

LONG_TEXT = "a much longer item that will need encoding as variable length text"
META = 0x40000000
I64_MIN = -(1 << 63)


# --------------------------------------------------------------------------
# Fixture loading
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def qv5(tmp_path_factory: pytest.TempPathFactory, java_fixtures: Path) -> Path:
    """The 5.20 sample queue, extracted (sparse) into a temporary directory."""
    archive = java_fixtures / "cqv5-sample-input.tar.bz2"
    dest = tmp_path_factory.mktemp("qv5")
    subprocess.run(["tar", "--sparse", "-xjf", str(archive), "-C", str(dest)], check=True)
    return dest / "qv5"


def read_prefix(path: Path, n: int) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


@pytest.fixture(scope="module")
def cq4(qv5: Path) -> bytes:
    """First 0x10200 bytes of qv5/20211118F.cq4 (header, index2index, index, data)."""
    return read_prefix(qv5 / "20211118F.cq4", 0x10200)


@pytest.fixture(scope="module")
def meta520(qv5: Path) -> bytes:
    return read_prefix(qv5 / "metadata.cq4t", 0x400)


@pytest.fixture(scope="module")
def meta525(java_fixtures: Path) -> bytes:
    path = java_fixtures / "cq5.25ea1-named-tailer" / "metadata.cq4t"
    return read_prefix(path, 0x400)


@pytest.fixture(scope="module")
def old2017(java_fixtures: Path) -> bytes:
    path = java_fixtures / "cq4-header-then-eof" / "20170320.cq4"
    return read_prefix(path, 0x400)


def word(buf: bytes, pos: int) -> int:
    return int.from_bytes(buf[pos : pos + 4], "little")


def frame(pos: int, meta: bool, body: Callable[[WireWriter], object], **kw: bool) -> bytes:
    """Header word + body built by ``body`` on a writer based at ``pos + 4``."""
    w = WireWriter(pos + 4, **kw)
    body(w)
    return struct.pack("<I", len(w.buf) | (META if meta else 0)) + w.getvalue()


# --------------------------------------------------------------------------
# 1. Parse the 5.20 cq4 header
# --------------------------------------------------------------------------


def test_parse_cq4_header(cq4: bytes) -> None:
    assert word(cq4, 0) == 0x400000C0
    doc = parse_document(cq4, 4, 0xC4)
    assert doc.keys() == ["header"]
    header = doc["header"]
    assert header.type_name == "SCQStore"
    assert header.kind == "document"
    store = header.as_document()
    assert store.keys() == ["writePosition", "indexing", "dataFormat"]

    wp = store["writePosition"]
    assert wp.kind == "int64_array"
    arr = wp.as_array()
    assert arr.capacity == 2 and arr.used == 2
    assert list(arr.values) == [0x10124, 0x0001012400000003]
    assert wp.offset == arr.offset == 0x30
    assert arr.values_offset == 0x40
    assert cq4[0x40:0x48] == (0x10124).to_bytes(8, "little")

    indexing = store["indexing"]
    assert indexing.type_name == "SCQSIndexing"
    ix = indexing.as_document()
    assert ix["indexCount"].as_int() == 4096
    assert ix["indexSpacing"].as_int() == 256
    assert ix["index2Index"].as_int() == 0xC4
    assert ix["index2Index"].offset == 0x98
    assert ix["index2Index"].code == 0xA7
    assert ix["lastIndex"].as_int() == 256
    assert ix["lastIndex"].offset == 0xB0
    assert store["dataFormat"].as_int() == 1
    # case-sensitive lookup
    assert store.get("dataformat") is None
    assert "dataFormat" in store and "nope" not in store
    with pytest.raises(KeyError):
        store["nope"]


def test_parse_with_base_and_memoryview(cq4: bytes) -> None:
    view = memoryview(cq4)[4:0xC4]
    doc = parse_document(view, 0, 0xC0, base=4)
    ix = doc["header"].as_document()["indexing"].as_document()
    assert ix["index2Index"].offset == 0x98
    assert doc == parse_document(cq4, 4, 0xC4)


# --------------------------------------------------------------------------
# 2./3. Rebuild the cq4 header, index2index and index documents
# --------------------------------------------------------------------------


def build_cq4_header(w: WireWriter) -> dict[str, int]:
    offsets: dict[str, int] = {}
    w.event_name("header")
    w.type_prefix("SCQStore")
    store = w.begin_length32()
    w.field("writePosition")
    offsets["writePosition"] = w.int128_for_binding(0x10124, 0x0001012400000003)
    w.field("indexing")
    w.type_prefix("SCQSIndexing")
    indexing = w.begin_length32()
    w.field("indexCount").int_compact(4096)
    w.field("indexSpacing").int_compact(256)
    w.field("index2Index")
    offsets["index2Index"] = w.int64_for_binding(0xC4)
    w.field("lastIndex")
    offsets["lastIndex"] = w.int64_for_binding(256)
    w.end_length32(indexing)
    w.field("dataFormat").int_compact(1)
    w.end_length32(store)
    return offsets


def test_rebuild_cq4_header(cq4: bytes) -> None:
    w = WireWriter(base=4)
    offsets = build_cq4_header(w)
    assert len(w.buf) == 192
    assert w.pos == 0xC4
    assert w.getvalue() == cq4[4:0xC4]
    assert offsets == {"writePosition": 0x40, "index2Index": 0x98, "lastIndex": 0xB0}


def test_rebuild_index2index_and_index(cq4: bytes) -> None:
    assert word(cq4, 0xC4) == 0x40008020
    w = WireWriter(base=0xC8)
    w.event_name("index2index")
    cap_offset = w.int64_array(4096, [0x80E8])
    assert cap_offset == 0xD8
    assert len(w.buf) == 0x8020
    assert w.getvalue() == cq4[0xC8:0x80E8]

    assert word(cq4, 0x80E8) == 0x4000801C
    w = WireWriter(base=0x80EC)
    w.event_name("index")
    assert w.int64_array(4096, [0x10108]) == 0x80F8
    assert w.pos == 0x10108
    assert w.getvalue() == cq4[0x80EC:0x10108]

    doc = parse_document(cq4, 0x80EC, 0x10108)
    arr = doc["index"].as_array()
    assert arr.capacity == 4096 and arr.used == 1
    assert arr.values[0] == 0x10108 and not any(arr.values[1:])
    assert arr.value_offset(0) == 0x8108


def test_rebuild_data_excerpts(cq4: bytes) -> None:
    """The four 5.20 text excerpts from the README, with 4-byte header alignment."""
    out = bytearray()
    pos = 0x10108
    for text in ("one", "two", "three", LONG_TEXT):
        pos += -pos & 3
        out += bytes(pos - 0x10108 - len(out))

        def body(w: WireWriter, t: str = text) -> None:
            w.text(t)

        f = frame(pos, False, body)
        out += f
        pos += len(f)
    assert bytes(out) == cq4[0x10108:pos]
    assert cq4[0x10128:0x1012A] == b"\xb8\x42"
    vals = parse_values(cq4, 0x10128, 0x10128 + 68)
    assert [v.as_str() for v in vals] == [LONG_TEXT]
    assert vals[0].offset == 0x1012A


# --------------------------------------------------------------------------
# 4. Table store (metadata.cq4t)
# --------------------------------------------------------------------------


def build_table_header(w: WireWriter) -> None:
    w.event_name("header")
    with w.marshallable("STStore"):
        w.field("wireType").type_prefix("WireType").text("BINARY_LIGHT")
        w.field("metadata")
        with w.marshallable("SCQMeta"):
            w.field("roll")
            with w.marshallable_typed("SCQSRoll"):
                w.field("length").int_compact(86400000)
                w.field("format").text("yyyyMMdd'F'")
                w.field("epoch").int_compact(0)
            w.field("deltaCheckpointInterval").int_compact(64)
            w.field("sourceId").int_compact(0)
        w.align_to(4)


def build_table_store(records: list[tuple[str, int]], small_raw: bool) -> bytes:
    out = bytearray(frame(0, True, build_table_header, small_raw=small_raw))
    for key, value in records:

        def record(w: WireWriter, k: str = key, v: int = value) -> None:
            w.event_name(k)
            w.int64_for_binding(v)
            w.align_to(4)

        out += frame(len(out), False, record, small_raw=small_raw)
    return bytes(out)


RECORDS_520 = [
    ("chronicle.write.lock", I64_MIN),
    ("chronicle.lastIndexReplicated", -1),
    ("chronicle.lastAcknowledgedIndexReplicated", -1),
]


def test_rebuild_table_store_520(meta520: bytes) -> None:
    assert word(meta520, 0) == 0x400000AC
    w = WireWriter(4)
    build_table_header(w)
    assert w.getvalue() == meta520[4:0xB0]

    records = [
        ("listing.highestCycle", 18949),
        ("listing.lowestCycle", 18949),
        ("listing.modCount", 1),
        *RECORDS_520,
    ]
    expected = build_table_store(records, small_raw=True)
    assert len(expected) == 0x1B0
    assert expected == meta520[: len(expected)]
    assert not any(meta520[0x1B0:])

    # the first record on its own, as in the brief
    w = WireWriter(0xB4)
    w.event_name("listing.highestCycle")
    assert w.int64_for_binding(18949) == 0xD0
    w.align_to(4)
    assert struct.pack("<I", len(w.buf)) + w.getvalue() == meta520[0xB0:0xD8]
    assert word(meta520, 0xB0) == 0x24


def test_rebuild_table_store_excerpt_18941(java_fixtures: Path) -> None:
    path = java_fixtures / "metadata-cq4t-excerpt-cycle18941.bin"
    data = path.read_bytes()
    records = [
        ("listing.highestCycle", 18941),
        ("listing.lowestCycle", 18941),
        ("listing.modCount", 1),
        *RECORDS_520,
    ]
    assert build_table_store(records, small_raw=True) == data


def test_rebuild_table_store_525(meta525: bytes) -> None:
    tailer = 84512071483394
    records = [
        ("listing.highestCycle", 19677),
        ("listing.lowestCycle", 19677),
        ("listing.modCount", 3),
        ("chronicle.write.lock", I64_MIN),
        ("chronicle.append.lock", I64_MIN),
        ("chronicle.lastIndexReplicated", -1),
        ("chronicle.lastAcknowledgedIndexReplicated", -1),
        ("chronicle.lastIndexMSynced", -1),
        ("index.replicated:tailerOne", tailer),
        ("index.replicated:tailerTwo", tailer),
        ("index.replicated:tailerThree", tailer),
    ]
    expected = build_table_store(records, small_raw=False)
    assert expected[:4] == b"\xb0\x00\x00\x40"
    assert expected == meta525[: len(expected)]
    assert not any(meta525[len(expected) :])


def test_parse_table_records(meta520: bytes, meta525: bytes) -> None:
    doc = parse_document(meta520, 0xB4, 0xD8)
    v = doc["listing.highestCycle"]
    assert (v.as_int(), v.offset, v.code) == (18949, 0xD0, 0xA7)
    doc = parse_document(meta520, 0x124, 0x148)
    assert doc["chronicle.write.lock"].as_int() == I64_MIN
    # 5.25ea1 named tailer record at 0x208
    assert word(meta525, 0x208) == 0x2C
    doc = parse_document(meta525, 0x20C, 0x238)
    v = doc["index.replicated:tailerOne"]
    assert v.as_int() == 0x4CDD00000002
    assert v.offset == 0x230


# --------------------------------------------------------------------------
# 5. Parse headers from other versions
# --------------------------------------------------------------------------


def check_table_header(doc: Document) -> None:
    header = doc["header"]
    assert header.type_name == "STStore"
    st = header.as_document()
    wt = st["wireType"]
    assert (wt.type_name, wt.as_str()) == ("WireType", "BINARY_LIGHT")
    meta = st["metadata"]
    assert meta.type_name == "SCQMeta"
    m = meta.as_document()
    roll = m["roll"]
    assert roll.type_name == "SCQSRoll"
    assert roll.to_python() == {"length": 86400000, "format": "yyyyMMdd'F'", "epoch": 0}
    assert m["deltaCheckpointInterval"].as_int() == 64
    assert m["sourceId"].as_int() == 0


def test_parse_table_headers(meta520: bytes, meta525: bytes) -> None:
    check_table_header(parse_document(meta520, 4, 0xB0))
    assert word(meta525, 0) == 0x400000B0
    doc = parse_document(meta525, 4, 0xB4)
    check_table_header(doc)
    roll = doc["header"].as_document()["metadata"].as_document()["roll"].as_document()
    assert roll["epoch"].code == 0xA1  # newer A1-style small ints
    assert roll["length"].code == 0xA6


def test_parse_2017_header(old2017: bytes) -> None:
    assert word(old2017, 0) == 0x400001B6
    assert word(old2017, 0x1BA) == 0xC0000000
    doc = parse_document(old2017, 4, 0x1BA)
    store = doc["header"]
    assert store.type_name == "SCQStore"
    s = store.as_document()
    assert s.keys() == [
        "wireType",
        "writePosition",
        "roll",
        "indexing",
        "lastAcknowledgedIndexReplicated",
        "recovery",
        "deltaCheckpointInterval",
        "lastIndexReplicated",
        "sourceId",
    ]
    assert s["wireType"].as_str() == "BINARY_LIGHT"
    assert list(s["writePosition"].as_array().values) == [0, 0]
    assert s["writePosition"].offset == 0x50
    assert s["roll"].to_python() == {"length": 86400000, "format": "yyyyMMdd", "epoch": 0}
    ix = s["indexing"].as_document()
    assert ix["indexCount"].as_int() == 8192
    assert ix["indexSpacing"].as_int() == 64
    assert ix["indexSpacing"].code == 0x40  # raw small int
    assert ix["index2Index"].as_int() == 0
    assert ix["index2Index"].offset == 0xF0
    assert ix["lastIndex"].as_int() == 0
    assert s["lastAcknowledgedIndexReplicated"].as_int() == -1
    rec = s["recovery"]
    assert rec.type_name == "TimedStoreRecovery"
    assert rec.as_document()["timeStamp"].as_int() == 0
    assert s["deltaCheckpointInterval"].as_int() == 0
    assert s["lastIndexReplicated"].as_int() == -1
    assert s["lastIndexReplicated"].offset == 0x1A8
    assert s["sourceId"].as_int() == 0


# --------------------------------------------------------------------------
# 6. Primitive encodings
# --------------------------------------------------------------------------


def enc(fn: Callable[[WireWriter], object], base: int = 0, small_raw: bool = True) -> bytes:
    w = WireWriter(base, small_raw=small_raw)
    fn(w)
    return w.getvalue()


def test_text_encoding() -> None:
    assert enc(lambda w: w.text("one")) == bytes.fromhex("e3") + b"one"
    assert enc(lambda w: w.text(LONG_TEXT)) == b"\xb8\x42" + LONG_TEXT.encode()
    assert enc(lambda w: w.text("")) == b"\xe0"
    assert enc(lambda w: w.text(None)) == b"\xbb"
    assert enc(lambda w: w.text("x" * 31)) == b"\xff" + b"x" * 31
    assert enc(lambda w: w.text("x" * 32)) == b"\xb8\x20" + b"x" * 32
    assert enc(lambda w: w.text("é")) == b"\xe2\xc3\xa9"
    # Java encodes each UTF-16 surrogate separately (3 bytes each)
    assert enc(lambda w: w.text("\U0001f600")) == bytes.fromhex("e6eda0bdedb880")
    v, _ = parse_value(bytes.fromhex("e6eda0bdedb880"), 0, 7)
    assert v.as_str() == "\U0001f600"
    v, _ = parse_value(b"\xe2\xc3\xa9", 0, 3)
    assert v.as_str() == "é"
    # STRING_ANY with stop-bit -1 is null
    v, _ = parse_value(b"\xb8\x80\x00", 0, 3)
    assert v.kind == "null"


def test_names() -> None:
    assert enc(lambda w: w.event_name("header")) == b"\xb9\x06header"
    assert enc(lambda w: w.field("epoch")) == b"\xc5epoch"
    long_name = "lastAcknowledgedIndexReplicated!!"  # 33 chars
    assert enc(lambda w: w.field(long_name)) == b"\xb7\x21" + long_name.encode()
    assert enc(lambda w: w.field("12")) == b"\xba\x0c"  # digits -> FIELD_NUMBER
    assert enc(lambda w: w.field_number(-1)) == b"\xba\x80\x00"
    assert enc(lambda w: w.type_prefix("SCQStore")) == b"\xb6\x08SCQStore"
    data = b"\xba\x80\x00\xe1x\xb7\x03abc\x01"
    doc = parse_document(data, 0, len(data))
    assert doc.keys() == [-1, "abc"]
    assert doc[-1].as_str() == "x"


@pytest.mark.parametrize(
    ("value", "hexbytes"),
    [
        (0, "00"),
        (1, "01"),
        (64, "40"),
        (127, "7f"),
        (128, "a180"),
        (255, "a1ff"),
        (256, "a50001"),
        (4096, "a50010"),
        (32767, "a5ff7f"),
        (32768, "a20080"),
        (65535, "a2ffff"),
        (65536, "a600000100"),
        (86400000, "a6005c2605"),
        (2**31 - 1, "a6ffffff7f"),
        (2**31, "a300000080"),
        (2**32 - 1, "a3ffffffff"),
        (-1, "a4ff"),
        (-128, "a480"),
        (-129, "a57fff"),
        (-32768, "a50080"),
        (-32769, "a6ff7fffff"),
        (-(2**31), "a600000080"),
        (2**40, "9000008053"),
        (400 << 32, "900000c853"),
        (2**32 + 1, "a70100000001000000"),
        (-(2**31) - 1, "a7ffffff7fffffffff"),
        (I64_MIN, "90000000df"),
        (2**63 - 1, "900000005f"),  # Java's saturating (long)(float) round trip
    ],
)
def test_int_compact_520(value: int, hexbytes: str) -> None:
    assert enc(lambda w: w.int_compact(value)).hex() == hexbytes
    v, _ = parse_value(bytes.fromhex(hexbytes), 0, len(hexbytes) // 2)
    if v.kind == "int":
        assert v.as_int() == value
    else:
        assert v.kind == "float"


def test_int_compact_525_style() -> None:
    assert enc(lambda w: w.int_compact(0), small_raw=False) == b"\xa1\x00"
    assert enc(lambda w: w.int_compact(64), small_raw=False) == b"\xa1\x40"
    assert enc(lambda w: w.int_compact(200), small_raw=False) == b"\xa1\xc8"
    assert enc(lambda w: w.int_compact(0, small_raw=False)) == b"\xa1\x00"
    assert enc(lambda w: w.int_compact(5, small_raw=True), small_raw=False) == b"\x05"


def test_fixed_ints() -> None:
    assert enc(lambda w: w.int64(-1)) == b"\xa7" + b"\xff" * 8
    assert enc(lambda w: w.int32(1)) == b"\xa6\x01\x00\x00\x00"
    with pytest.raises(ValueError):
        enc(lambda w: w.int64(2**63))
    with pytest.raises(ValueError):
        enc(lambda w: w.int_compact(-(2**63) - 1))


@pytest.mark.parametrize(
    ("value", "new_style", "old_style"),
    [
        (100.0, "a164", "64"),
        (0.0, "a100", "00"),
        (-0.0, "a100", "00"),
        (200.0, "a1c8", "a1c8"),
        (300.0, "a22c01", None),
        (70000.0, "9000b88847", None),
        (4294967296.0, "900000804f", None),
        (4294967295.0, "a3ffffffff", None),
        (-1.0, "a4ff", None),
        (-200.0, "a538ff", None),
        (-40000.0, "9000401cc7", None),
        (-3000000001.0, "91000020c00b5ae6c1", None),
        (1.5, "929601", None),
        (0.5, "9232", None),
        (0.1, "920a", None),
        (-1.5, "92958100", None),
        (1.2345, "94b960", None),
        (1e-6, "9601", None),
        (2.0**-20, "9000008035", None),
        (1 / 3, "91555555555555d53f", None),
        (1e20, "91408cb5781daf1544", None),
        (float("nan"), "900000c07f", None),
    ],
)
def test_float64(value: float, new_style: str, old_style: str | None) -> None:
    assert enc(lambda w: w.float64(value), small_raw=False).hex() == new_style
    assert enc(lambda w: w.float64(value), small_raw=True).hex() == (old_style or new_style)


def test_float_decoding() -> None:
    for hexbytes, expected in [
        ("929601", 1.5),
        ("94b960", 1.2345),
        ("9601", 1e-6),
        ("92958100", -1.5),
    ]:
        data = bytes.fromhex(hexbytes)
        v, end = parse_value(data, 0, len(data))
        assert (v.kind, v.as_float(), end) == ("float", expected, len(data))
    v, _ = parse_value(bytes.fromhex("9000008053"), 0, 5)
    assert v.as_int() == 2**40


def test_misc_values() -> None:
    assert enc(lambda w: w.bool(True)) == b"\xb1"
    assert enc(lambda w: w.bool(False)) == b"\xb0"
    assert enc(lambda w: w.null()) == b"\xbb"
    assert enc(lambda w: w.bytes_value(b"abc")) == b"\x80\x04\x8aabc"
    assert enc(lambda w: w.bytes_value(b"")) == b"\x80\x01\x8a"
    assert enc(lambda w: w.bytes_value(bytes(300))) == b"\x81\x2d\x01\x8a" + bytes(300)
    big = bytes(70000)
    assert enc(lambda w: w.bytes_value(big))[:6] == b"\x82\x71\x11\x01\x00\x8a"
    v, _ = parse_value(b"\x80\x04\x8aabc", 0, 6)
    assert (v.kind, v.value) == ("bytes", b"abc")
    doc = parse_document(b"\xc1a\xb1\xc1b\xb0\xc1c\xbb", 0, 9)
    assert doc.to_python() == {"a": True, "b": False, "c": None}


def test_padding_and_alignment() -> None:
    assert enc(lambda w: w.padding(3)) == b"\x8f\x8f\x8f"
    assert enc(lambda w: w.padding(5)) == b"\x8e\x00\x00\x00\x00"
    assert enc(lambda w: w.padding(6)) == b"\x8e\x01\x00\x00\x00\x00"
    assert enc(lambda w: w.align_to(8), base=16) == b""
    assert enc(lambda w: w.align_to(8, 1), base=15) == b""
    assert enc(lambda w: w.align_to(4), base=0xAE) == b"\x8f\x8f"
    # int128_for_binding from 0x29 (cq4 header): 8E 01 00 00 00 00 8D ...
    w = WireWriter(0x29)
    assert w.int128_for_binding(1, 2) == 0x40
    assert w.getvalue()[:7] == bytes.fromhex("8e01000000008d")
    # padding, comments are skipped before keys and values
    data = b"\x8f\xbe\x02hi\xc1a\x8e\x01\x00\x00\x00\x00\x8f\x05"
    doc = parse_document(data, 0, len(data))
    assert doc["a"].as_int() == 5
    assert doc["a"].offset == len(data) - 1


def test_sequences_and_history() -> None:
    # multi-argument method call: 14 00 00 00 | b9 05 "event" | 82 08 00 00 00 | e3 two e3 two
    body = bytes.fromhex("b905") + b"event" + bytes.fromhex("8208000000e3") + b"two\xe3two"
    doc = parse_document(body, 0, len(body))
    ev = doc["event"]
    assert ev.kind == "sequence"
    assert [x.as_str() for x in ev.value] == ["two", "two"]  # type: ignore[attr-defined]
    w = WireWriter()
    w.event_name("event")
    tok = w.begin_length32()
    w.text("two").text("two")
    w.end_length32(tok)
    assert w.getvalue() == body
    # history as bytes: ba 80 00 81 27 00 86 ...
    hist = bytes.fromhex("0101000000020000000000000003") + bytes(0x27 - 15)
    data = b"\xba\x80\x00\x81\x27\x00\x86" + hist
    doc = parse_document(data, 0, len(data))
    assert doc[-1].kind == "history"
    assert doc[-1].value == hist
    assert doc[-1].offset == 7


def test_stop_bit() -> None:
    cases = {
        0: "00",
        1: "01",
        127: "7f",
        128: "8001",
        300: "ac02",
        16384: "808001",
        -1: "8000",
        -2: "8100",
        -129: "808100",
    }
    for value, hexbytes in cases.items():
        assert encode_stop_bit(value).hex() == hexbytes
        assert decode_stop_bit(bytes.fromhex(hexbytes), 0) == (value, len(hexbytes) // 2)
    rng = random.Random(1234)
    for _ in range(2000):
        v = rng.randint(-(2**63), 2**63 - 1) >> rng.randint(0, 63)
        data = b"\x55" + encode_stop_bit(v)
        assert decode_stop_bit(data, 1) == (v, len(data))
    for v in (2**63 - 1, -(2**63)):
        assert decode_stop_bit(encode_stop_bit(v), 0)[0] == v
    with pytest.raises(WireError):
        decode_stop_bit(b"\x80\x80", 0)
    with pytest.raises(WireError):
        decode_stop_bit(b"\xff" * 12 + b"\x01", 0)
    with pytest.raises(ValueError):
        encode_stop_bit(2**63)


# --------------------------------------------------------------------------
# 7. Robustness: corrupt input only ever raises WireError
# --------------------------------------------------------------------------


def parse_ok(data: bytes, start: int = 0, end: int | None = None) -> None:
    end = len(data) if end is None else end
    try:
        doc = parse_document(data, start, end, base=1000)
    except WireError:
        pass
    else:
        check_offsets(doc, 1000, 1000 + end)
    for fn in (parse_values, parse_value):
        with contextlib.suppress(WireError):
            fn(data, start, end)


def check_offsets(doc: Document, lo: int, hi: int) -> None:
    for _, v in doc:
        check_value(v, lo, hi)


def check_value(v: Value, lo: int, hi: int) -> None:
    assert lo <= v.code_offset < v.end <= hi
    assert lo <= v.offset <= hi
    if isinstance(v.value, Document):
        check_offsets(v.value, lo, hi)
    elif isinstance(v.value, list):
        for item in v.value:
            check_value(item, lo, hi)


def test_truncations_and_mutations(cq4: bytes, meta520: bytes, old2017: bytes) -> None:
    samples = [cq4[4:0xC4], meta520[4:0xB0], old2017[4:0x1BA], meta520[0xB4:0xD8]]
    specials = (0x00, 0x7F, 0x80, 0x81, 0x82, 0x86, 0x8A, 0x8D, 0x8E, 0xB6, 0xB8, 0xBE, 0xFF)
    for body in samples:
        for end in range(len(body) + 1):
            parse_ok(body, 0, end)
        for i in range(len(body)):
            for b in specials:
                mutated = bytearray(body)
                mutated[i] = b
                parse_ok(bytes(mutated))


def test_deep_nesting_is_wire_error() -> None:
    with pytest.raises(WireError):
        parse_value(b"\xb6\x01a" * 5000 + b"\x00", 0, 15001)
    nested = b""
    for _ in range(300):
        nested = b"\x82" + struct.pack("<I", len(nested) + 2) + b"\xc1a" + nested
    with pytest.raises(WireError):
        parse_value(nested, 0, len(nested))


def test_bad_ranges() -> None:
    with pytest.raises(WireError):
        parse_document(b"\x00", 0, 5)
    with pytest.raises(WireError):
        parse_document(b"\xc1a", 0, 2)  # key without a value
    with pytest.raises(WireError):
        parse_document(b"\xe1x", 0, 2)  # value without a key
    with pytest.raises(WireError, match="0x3ef"):
        parse_document(b"\xc1a\x87", 0, 3, base=0x3ED)
    with pytest.raises(WireError):
        parse_value(b"\x8d" + struct.pack("<qq", 1 << 60, 0), 0, 17)


def test_random_bytes() -> None:
    rng = random.Random(20211118)
    alphabet = [*range(0x80, 0x100), 0x00, 0x01, 0x05, 0x20, 0x7F]
    for _ in range(3000):
        n = rng.randint(0, 48)
        data = bytes(rng.choice(alphabet) for _ in range(n))
        parse_ok(data)


try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    pass
else:

    @settings(max_examples=400, deadline=None, database=None)
    @given(st.binary(max_size=96))
    def test_hypothesis_random_bytes(data: bytes) -> None:
        parse_ok(data)

    @settings(max_examples=200, deadline=None, database=None)
    @given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8))
    def test_hypothesis_int_round_trip(values: list[int]) -> None:
        w = WireWriter()
        for i, v in enumerate(values):
            w.field(f"f{i}").int_compact(v)
        doc = parse_document(w.buf, 0, len(w.buf))
        for i, v in enumerate(values):
            got = doc[f"f{i}"]
            if got.kind == "int":
                assert got.as_int() == v
            else:  # FLOAT32 for large values exactly representable as float
                assert got.as_float() == float(v)
