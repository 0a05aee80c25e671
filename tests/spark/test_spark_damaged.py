"""Damaged queues read by the three readers: the JVM reader (``engine=jvm``), the
Python data source (``engine=python``) and the library's tailer.  On every damage
they agree: the same rows, or each its named error (CorruptQueueException in the
JVM, naming the cycle and the index; CorruptQueueError in Python), never fewer rows
in silence (issue 31).

The queue is built once a module (3 cycles x 1,000 excerpts of 64 B, TEST_SECONDLY),
copied for each case and damaged in its sealed middle cycle.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000
PER_CYCLE = 1_000
META = 0x40000000
LENGTH = 0x3FFFFFFF


def _payload(cycle: int, i: int) -> bytes:
    return struct.pack("<II", cycle, i) + bytes([i % 251]) * 56


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, bytes]]]:
    path = tmp_path_factory.mktemp("damaged") / "q"
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_SECONDLY, time_provider=clock) as q:
        a = q.appender()
        for c in range(3):
            for i in range(PER_CYCLE):
                a.append(_payload(c, i))
            clock.advance_millis(1000)  # the next cycle: this one gets its EOF marker
    with ac.open_queue(path, read_only=True) as q:
        rows = [(ex.index, ex.payload) for ex in q.tailer()]
    assert len(rows) == 3 * PER_CYCLE
    return path, rows


def _headers(f: Path) -> list[tuple[int, int]]:
    """(position, header word) of every document up to the end of the data."""
    raw = f.read_bytes()
    out, pos = [], 0
    while pos + 4 <= len(raw):
        w = int.from_bytes(raw[pos:pos + 4], "little")
        if w in (0, 0xC0000000):
            break
        out.append((pos, w))
        pos = (pos + 4 + (w & LENGTH) + 3) & ~3
    return out


def _put(f: Path, pos: int, value: int, size: int = 4) -> None:
    with open(f, "r+b") as fh:
        fh.seek(pos)
        fh.write(value.to_bytes(size, "little"))


def _index_page(f: Path) -> tuple[int, int, int]:
    """(index2index document, index page document, the page's values[0])."""
    docs = [p for p, w in _headers(f) if w & META][1:]
    raw = f.read_bytes()
    return docs[0], docs[1], raw.index(b"\x8d", docs[1] + 4) + 17


def _data(f: Path) -> list[int]:
    return [p for p, w in _headers(f) if not w & META]


def _zero(f: Path) -> None:
    _put(f, _data(f)[500], 0)


def _not_complete(f: Path) -> None:
    _put(f, _data(f)[500], 0x80000000 | 64)


def _enlarged(f: Path) -> None:
    _put(f, _data(f)[500], 64 + 2 * 68)  # lands on the header of excerpt 503


def _shifted_index(f: Path) -> None:
    _, _, values = _index_page(f)
    raw = f.read_bytes()
    for k in range(PER_CYCLE // 4):
        at = values + 8 * k
        _put(f, at, int.from_bytes(raw[at:at + 8], "little") + 68, 8)


def _truncated(f: Path) -> None:
    os.truncate(f, _data(f)[500])


def _flips(seed: int) -> Callable[[Path], None]:
    """Eight random bit flips in the index: in the index page's fields and used entries,
    and in the index2index document's (never their header words, which are part of
    the chain of headers: a flip there is damage to the data)."""
    def damage(f: Path) -> None:
        rnd = random.Random(seed)
        i2i, page, values = _index_page(f)
        spans = [(i2i + 4, i2i + 64), (page + 4, values + 8 * (PER_CYCLE // 4))]
        raw = bytearray(f.read_bytes())
        for _ in range(8):
            lo, hi = spans[rnd.random() < 0.85]
            raw[rnd.randrange(lo, hi)] ^= 1 << rnd.randrange(8)
        f.write_bytes(bytes(raw))
    return damage


# damage -> None (every row is read: the data is intact) or what the error says
CASES: dict[str, tuple[Callable[[Path], None], str | None]] = {
    "header-zero": (_zero, "corrupt excerpt header"),
    "header-not-complete": (_not_complete, "corrupt excerpt header"),
    "length-enlarged": (_enlarged, "corrupt excerpt header"),
    "index-shifted": (_shifted_index, None),
    "middle-cycle-truncated": (_truncated, "truncated"),
    **{f"index-flips-{s}": (_flips(s), None) for s in (1, 2)},
}


def _library(path: Path) -> list[tuple[int, bytes]]:
    with ac.open_queue(path, read_only=True) as q:
        return [(ex.index, ex.payload) for ex in q.tailer()]


def _spark(spark: Any, path: Path, engine: str, **options: str) -> list[tuple[int, bytes]]:
    reader = spark.read.format("chronicle").option("engine", engine)
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load(str(path)).select("index", "payload")
    return sorted((r[0], bytes(r[1])) for r in df.collect())


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_three_readers_agree_on_a_damaged_queue(
        spark: Any, pristine: tuple[Path, list[tuple[int, bytes]]], tmp_path: Path,
        case: str) -> None:
    base, rows = pristine
    path = tmp_path / "q"
    shutil.copytree(base, path)
    damage, error = CASES[case]
    middle = sorted(path.glob("*.cq4"))[1]
    damage(middle)
    cycle = ac.RollCycles.TEST_SECONDLY.to_cycle(rows[PER_CYCLE][0])
    readers: dict[str, Callable[[], list[tuple[int, bytes]]]] = {
        "library": lambda: _library(path),
        # partitions that start from index entries in the middle of a cycle too
        "jvm": lambda: _spark(spark, path, "jvm", partitionSize="300"),
        "python": lambda: _spark(spark, path, "python"),
    }
    for name, read in readers.items():
        if error is None:
            assert read() == rows, name  # every row, each at its own index
            continue
        with pytest.raises(Exception, match=error) as err:
            got = read()
            print(f"{name} read {len(got)} rows")  # shown when it did not raise
        text = str(err.value)
        if name == "library":
            assert err.type is ac.CorruptQueueError
        elif name.startswith("jvm"):
            assert "CorruptQueueException" in text, text[:2000]
            # the cycle and the index of the first excerpt it could not read, in hex
            assert f"cycle {cycle}" in text and "at index 0x" in text, text[:2000]
            assert f"index {(cycle << 32) | 500:#x}" in text, text[:2000]
        else:
            assert "CorruptQueueError" in text, text[:2000]
