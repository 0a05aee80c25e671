"""Queue, Appender and Tailer API tests.

The specification is Java Chronicle Queue v5 (``chronicle-queue-format.md``
sections 2-4, 6 and 7).  Expected values are computed independently of the code
under test: indices from the roll-cycle arithmetic (``cycle << 32 | seq`` for
every roll cycle used here), payloads from what the test appended, cycle numbers
from the fixed clock.  The clock is always a ``SetTimeProvider`` so no test
depends on the wall clock (or on running across midnight).
"""

from __future__ import annotations

import mmap
import os
import random
import re
import struct
import subprocess
import sys
import warnings
from array import array
from pathlib import Path

import pytest
from rawfile import HDR_META, HDR_NOT_COMPLETE, LENGTH_MASK, raw_documents

import aiochronicle as ac

DAY = 86_400_000
HOUR = 3_600_000
DAY0 = 19_675  # 2023-11-14 (UTC): FAST_DAILY / DAILY / TEST*_DAILY cycle number
T0 = DAY0 * DAY + 12 * HOUR  # noon, far from any roll
SMALL = 256 << 10  # mapping chunk used by most tests (files are sparse)



def ix(cycle: int, seq: int) -> int:
    """Index for every roll cycle with cycleShift 32 (reference §2.1/§2.2)."""
    return (cycle << 32) | seq


def text_wire(s: str) -> bytes:
    """BinaryWire text < 32 UTF-8 bytes: STRING_0 + len, then UTF-8 (reference §9.5)."""
    raw = s.encode()
    assert len(raw) < 32
    return bytes([0xE0 + len(raw)]) + raw


def open_q(path: Path | str, **kw: object) -> ac.Queue:
    kw.setdefault("block_size", SMALL)
    kw.setdefault("time_provider", ac.SetTimeProvider(T0))
    return ac.open_queue(path, **kw)  # type: ignore[arg-type]


def read_all(t: ac.Tailer) -> list[ac.Excerpt]:
    out = []
    while (ex := t.read_nowait()) is not None:
        out.append(ex)
    return out


# ---------------------------------------------------------------------------
# append / read round trips
# ---------------------------------------------------------------------------


def test_round_trip_of_every_payload_type(tmp_path: Path) -> None:
    buf = bytearray(b"0123456789")
    with open_q(tmp_path / "q") as q:
        assert q.roll_cycle.name == "FAST_DAILY"
        a = q.appender()
        assert a.last_index_appended == -1
        sent = [
            (b"plain bytes", b"plain bytes"),
            ("h\u00e9llo \u20ac", "h\u00e9llo \u20ac".encode()),  # str goes in as UTF-8
            (bytearray(b"a bytearray"), b"a bytearray"),
            (memoryview(buf)[2:7], b"23456"),
            (b"", b"\x8f"),  # Java pads an empty excerpt with one PADDING byte (§3)
            ("", b"\x8f"),
            (bytes(range(256)) * 3, bytes(range(256)) * 3),
        ]
        indices = []
        for payload, _ in sent:
            indices.append(a.append(payload))
            assert a.last_index_appended == indices[-1]
        indices.append(a.append_text("msg-1"))
        assert a.cycle == DAY0
        assert indices == [ix(DAY0, i) for i in range(len(sent) + 1)]

        got = read_all(q.tailer())
        assert [e.index for e in got] == indices
        assert [e.payload for e in got] == [want for _, want in sent] + [b"\xe5msg-1"]
        assert all(type(e.payload) is bytes for e in got)
        assert got[4].text == got[5].text == ""  # padding only: no text

        # the padded empty excerpt really is one 0x8F byte in the file (length 1)
        docs = [d for d in raw_documents(q.cycle_path(DAY0)) if d[0] == "data"]
        assert docs[4][2] == b"\x8f" and docs[5][2] == b"\x8f"
        assert docs[0][2] == b"plain bytes"


def test_append_rejects_other_types(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        with pytest.raises(TypeError):
            a.append(12345)  # type: ignore[arg-type]
        assert a.append(b"ok") == ix(DAY0, 0)


def test_indices_dense_and_read_nowait_picks_up_later_appends(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        t = q.tailer()
        assert t.read_nowait() is None  # empty queue
        first = [a.append(f"m{i}".encode()) for i in range(10)]
        assert first == [ix(DAY0, i) for i in range(10)]
        got = read_all(t)
        assert [(e.index, e.payload) for e in got] == [(ix(DAY0, i), f"m{i}".encode())
                                                       for i in range(10)]
        assert t.read_nowait() is None
        assert t.read_nowait() is None
        assert t.index == ix(DAY0, 10)
        assert a.append(b"late-1") == ix(DAY0, 10)
        assert a.append(b"late-2") == ix(DAY0, 11)
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 10), b"late-1")
        assert list(t) == [ac.Excerpt(ix(DAY0, 11), b"late-2")]
        assert list(t) == []  # iteration stops at the current end
        a.append(b"later")
        assert list(t) == [ac.Excerpt(ix(DAY0, 12), b"later")]


def test_tailer_created_on_empty_queue_reads_first_excerpt(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        t_start = q.tailer()
        t_end = q.tailer().to_end()
        assert q.first_index is None and q.last_index is None
        assert q.first_cycle is None and q.last_cycle is None and q.cycles() == []
        assert q.entry_count() == 0
        assert t_start.read_nowait() is None and t_end.read_nowait() is None
        q.appender().append(b"first")
        assert t_start.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"first")
        assert t_end.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"first")


def test_two_tailers_are_independent(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(6):
            a.append(bytes([i]))
        t1, t2 = q.tailer(), q.tailer()
        assert [t1.read_nowait().payload for _ in range(4)] == [b"\0", b"\1", b"\2", b"\3"]
        assert t2.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"\0")
        assert t1.index == ix(DAY0, 4) and t2.index == ix(DAY0, 1)
        t2.to_end()
        assert t1.read_nowait() == ac.Excerpt(ix(DAY0, 4), b"\4")
        assert t2.read_nowait() is None
        t1.close()
        assert t2.move_to_index(ix(DAY0, 5))
        assert t2.read_nowait() == ac.Excerpt(ix(DAY0, 5), b"\5")


def test_to_start_and_to_end(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(5):
            a.append(b"x%d" % i)
        t = q.tailer()
        assert t.to_end() is t
        assert t.index == ix(DAY0, 5)  # FORWARD toEnd: the next index to be written
        assert t.read_nowait() is None
        a.append(b"x5")
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 5), b"x5")
        assert t.to_start() is t
        assert t.index == ix(DAY0, 0)
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"x0")
        assert t.cycle == DAY0

        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert tb.index == ix(DAY0, 5)  # BACKWARD toEnd: the last excerpt
        tb.to_end()
        assert tb.read_nowait() == ac.Excerpt(ix(DAY0, 5), b"x5")


# ---------------------------------------------------------------------------
# move_to_index / move_to_cycle / directions
# ---------------------------------------------------------------------------


def test_move_to_every_index_with_many_index_pages(tmp_path: Path) -> None:
    # TEST4_DAILY: indexCount 32, spacing 4 -> one secondary index page per 128
    # excerpts; 1000 excerpts use 8 pages and leave the last one partly full.
    n = 1000
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST4_DAILY) as q:
        a = q.appender()
        last = a.append_many([struct.pack("<I", s) for s in range(n)])
        assert last == ix(DAY0, n - 1)
        t = q.tailer()
        order = list(range(n))
        rnd = random.Random(7)
        shuffled = order[:]
        rnd.shuffle(shuffled)
        for seqs in (order, order[::-1], shuffled):
            for s in seqs:
                assert t.move_to_index(ix(DAY0, s)), s
                assert t.index == ix(DAY0, s)
                ex = t.read_nowait()
                assert ex is not None
                assert ex.index == ix(DAY0, s)
                assert struct.unpack("<I", ex.payload)[0] == s
        # the tailer keeps reading forward from a looked-up position
        assert t.move_to_index(ix(DAY0, 500))
        assert [struct.unpack("<I", e.payload)[0] for e in read_all(t)] == list(range(500, n))


def test_move_to_index_random_over_a_million_excerpts(tmp_path: Path) -> None:
    # Legacy DAILY: indexCount 8192, spacing 64 -> 512 Ki excerpts per secondary
    # index page, so 1,000,000 excerpts span two pages.
    n = 1_000_000
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.DAILY) as q:
        a = q.appender()
        last = a.append_many([struct.pack("<Q", s) for s in range(n)])
        assert last == ix(DAY0, n - 1)
        assert q.excerpts_in_cycle(DAY0) == n
        t = q.tailer()
        rnd = random.Random(20_000)
        seqs = [0, n - 1, 64 * 8192 - 1, 64 * 8192, 64 * 8192 + 1,
                *rnd.sample(range(n), 20_000)]
        for s in seqs:
            i = ix(DAY0, s)
            assert t.move_to_index(i), s
            ex = t.read_nowait()
            assert ex is not None and ex.index == i
            assert ex.payload == struct.pack("<Q", s)
        # every excerpt, once, in order, via the batch reader
        t.to_start()
        seen = 0
        while len(b := t.read_many()):
            assert b.indices == array("q", range(ix(DAY0, seen), ix(DAY0, seen + len(b))))
            assert b[0].payload == struct.pack("<Q", seen)
            seen += len(b)
        assert seen == n
        assert not t.move_to_index(ix(DAY0, n + 1))


def test_move_to_next_index_to_write_returns_false_but_stays(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(3):
            a.append(b"e%d" % i)
        t = q.tailer()
        assert not t.move_to_index(ix(DAY0, 3))  # exactly the next index to be written
        assert t.index == ix(DAY0, 3)
        assert t.read_nowait() is None
        a.append(b"e3")
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 3), b"e3")
        assert t.read_nowait() is None
        assert not t.move_to_index(ix(DAY0, 10))  # beyond the next index: not there
        assert t.move_to_index(ix(DAY0, 1))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 1), b"e1")


def test_move_to_index_in_missing_cycle_is_false(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"only")
        t = q.tailer()
        assert not t.move_to_index(ix(DAY0 - 1, 0))
        assert not t.move_to_index(ix(DAY0 + 1, 0))
        assert not t.move_to_index(ix(DAY0 - 400, 7))
        assert not t.move_to_index(-1)
        assert t.move_to_index(ix(DAY0, 0))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"only")


def test_move_to_cycle(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(4):
            a.append(b"c%d" % i)
        t = q.tailer()
        read_all(t)
        assert t.move_to_cycle(DAY0)
        assert t.index == ix(DAY0, 0)
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"c0")
        assert not t.move_to_cycle(DAY0 + 1)
        assert not t.move_to_cycle(DAY0 - 1)


def test_backward_reading_within_a_cycle(tmp_path: Path) -> None:
    n = 300  # TEST4_DAILY: crosses three index pages
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST4_DAILY) as q:
        a = q.appender()
        a.append_many([b"b%d" % s for s in range(n)])
        t = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert t.direction == ac.TailerDirection.BACKWARD
        # from a looked-up index: that excerpt first, then the earlier ones
        assert t.move_to_index(ix(DAY0, 130))
        got = [t.read_nowait() for _ in range(5)]
        assert [e.index for e in got] == [ix(DAY0, s) for s in (130, 129, 128, 127, 126)]
        assert [e.payload for e in got] == [b"b%d" % s for s in (130, 129, 128, 127, 126)]
        b = t.read_many(max_count=3)
        assert b.indices == array("q", [ix(DAY0, s) for s in (125, 124, 123)])
        # forward again from where it is
        t.direction = ac.TailerDirection.FORWARD
        ex = t.read_nowait()
        assert ex is not None and ex.index == ix(DAY0, 122)
        assert t.read_nowait().index == ix(DAY0, 123)
        # a fresh BACKWARD tailer starts at the last excerpt and reads everything reversed
        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        got = read_all(tb)
        assert [e.index for e in got] == [ix(DAY0, s) for s in range(n - 1, -1, -1)]
        assert [e.payload for e in got] == [b"b%d" % s for s in range(n - 1, -1, -1)]
        assert tb.read_nowait() is None


def test_backward_tailer_can_be_repositioned_after_reaching_the_start(tmp_path: Path) -> None:
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST4_DAILY) as q:
        q.appender().append_many([b"b%d" % s for s in range(300)])
        t = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert len(read_all(t)) == 300
        assert t.read_nowait() is None  # before the first excerpt
        assert t.move_to_index(ix(DAY0, 130))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 130), b"b130")
        read_all(t)
        assert t.move_to_cycle(DAY0)
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"b0")
        read_all(t)
        t.to_end()
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 299), b"b299")


@pytest.mark.parametrize("order", ["direction_then_to_end", "to_end_then_direction"])
def test_backward_after_to_end(tmp_path: Path, order: str) -> None:
    # Java: tailer.direction(BACKWARD).toEnd() and tailer.toEnd().direction(BACKWARD)
    # both read the last excerpt first (StoreTailer.inACycleNotForward: "after toEnd()
    # call, index is past the end of the queue so try to go back one").
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for s in range(5):
            a.append(b"r%d" % s)
        t = q.tailer()
        if order == "direction_then_to_end":
            t.direction = ac.TailerDirection.BACKWARD
            t.to_end()
        else:
            t.to_end()
            t.direction = ac.TailerDirection.BACKWARD
        got = read_all(t)
        assert [e.index for e in got] == [ix(DAY0, s) for s in range(4, -1, -1)]


def test_direction_none_peeks_without_moving(tmp_path: Path) -> None:
    # Java: with TailerDirection.NONE a positioned tailer re-reads the excerpt at its
    # index on every read (index += direction.add() == 0; reference §7.2/§7.3).
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for s in range(4):
            a.append(b"n%d" % s)
        t = q.tailer()
        t.direction = ac.TailerDirection.NONE
        assert t.move_to_index(ix(DAY0, 2))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 2), b"n2")
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 2), b"n2")
        assert t.index == ix(DAY0, 2)


# ---------------------------------------------------------------------------
# writing_document
# ---------------------------------------------------------------------------


def test_writing_document_commit(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"before")
        watcher = q.tailer()
        assert watcher.read_nowait() is not None
        with a.writing_document() as dc:
            dc.write(b"part1-")
            dc.write("part2-")
            dc.write(bytearray(b"part3-"))
            dc.write_text("msg-1")
            # the header stays 0 while the payload is written: nothing visible yet
            assert watcher.read_nowait() is None
        assert dc.index == ix(DAY0, 1)
        assert a.last_index_appended == ix(DAY0, 1)
        assert watcher.read_nowait() == ac.Excerpt(ix(DAY0, 1),
                                                   b"part1-part2-part3-" + text_wire("msg-1"))
        with a.writing_document() as dc:
            pass  # nothing written: padded like append(b"")
        assert dc.index == ix(DAY0, 2)
        assert watcher.read_nowait() == ac.Excerpt(ix(DAY0, 2), b"\x8f")


def test_writing_document_rollback_and_exception(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"kept-0")
        with a.writing_document() as dc:
            dc.write(b"discarded by rollback_on_close" * 10)
            dc.rollback_on_close()
        assert dc.index is None

        class Boom(Exception):
            pass

        with pytest.raises(Boom), a.writing_document() as dc2:
            dc2.write(b"discarded by exception" * 10)
            raise Boom
        assert dc2.index is None
        assert a.last_index_appended == ix(DAY0, 0)
        # the next excerpt gets the index the rolled-back ones would have had
        assert a.append(b"kept-1") == ix(DAY0, 1)
        with a.writing_document() as dc3:
            dc3.write(b"kept-2")
        assert dc3.index == ix(DAY0, 2)
        got = read_all(q.tailer())
        assert [(e.index, e.payload) for e in got] == [
            (ix(DAY0, 0), b"kept-0"), (ix(DAY0, 1), b"kept-1"), (ix(DAY0, 2), b"kept-2")]
        # nothing of the rolled-back bytes is left in the file
        raw = Path(q.cycle_path(DAY0)).read_bytes()
        assert b"discarded" not in raw
        assert q.entry_count() == 3


def test_metadata_excerpts(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"d0")
        a.append_metadata(b"m0")
        a.append_metadata(b"m1")
        assert a.last_index_appended == ix(DAY0, 0)
        with a.writing_document(metadata=True) as dc:
            dc.write(b"m2")
        assert dc.index is None
        assert a.append(b"d1") == ix(DAY0, 1)  # metadata takes no sequence number
        assert a.last_index_appended == ix(DAY0, 1)
        assert [(e.index, e.payload) for e in read_all(q.tailer())] == [
            (ix(DAY0, 0), b"d0"), (ix(DAY0, 1), b"d1")]
        assert q.excerpts_in_cycle(DAY0) == 2
        assert q.count_excerpts(ix(DAY0, 0), ix(DAY0, 2)) == 2
        # with include_metadata they are delivered in file order; the cycle file's own
        # header/index documents are metadata too, so keep only the user's ones
        tm = q.tailer(include_metadata=True)
        seen = [e.payload for e in read_all(tm)
                if not e.payload.startswith((b"\xb9\x06header", b"\xb9\x0bindex2index",
                                             b"\xb9\x05index"))]
        assert seen == [b"d0", b"m0", b"m1", b"m2", b"d1"]
        # in the file: two data and three user metadata documents
        kinds = [(k, p) for k, _, p in raw_documents(q.cycle_path(DAY0))
                 if p in (b"d0", b"m0", b"m1", b"m2", b"d1")]
        assert kinds == [("data", b"d0"), ("meta", b"m0"), ("meta", b"m1"), ("meta", b"m2"),
                         ("data", b"d1")]


def test_read_many_on_include_metadata_tailer_matches_read_nowait(tmp_path: Path) -> None:
    # include_metadata asks for metadata excerpts; the batch reader must not drop them
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"d0")
        a.append_metadata(b"m0")
        a.append(b"d1")
        single = read_all(q.tailer(include_metadata=True))
        assert [e.payload for e in single][-3:] == [b"d0", b"m0", b"d1"]
        t = q.tailer(include_metadata=True)
        batched: list[ac.Excerpt] = []
        while len(b := t.read_many()):
            batched.extend(b)
        assert [e.payload for e in batched] == [e.payload for e in single]


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------


def test_append_many_and_append_packed(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        msgs = [b"m%d" % i * (i % 5) for i in range(50)]  # includes empty payloads
        last = a.append_many(msgs)
        assert last == ix(DAY0, 49)
        assert a.last_index_appended == last
        assert a.append_many(iter([b"g0", b"g1"])) == ix(DAY0, 51)  # any iterable
        assert a.append_many([]) == ix(DAY0, 51)  # nothing appended
        data = b"alphabetagamma"
        last = a.append_packed(data, [0, 5, 9, 9, 14])  # "alpha", "beta", "", "gamma"
        assert last == ix(DAY0, 55)
        last = a.append_packed(bytearray(b"xyz"), array("q", [0, 1, 3]))
        assert last == ix(DAY0, 57)
        with pytest.raises(ValueError):
            a.append_packed(b"short", [0, 10])
        assert a.last_index_appended == ix(DAY0, 57)
        got = read_all(q.tailer())
        want = [m or b"\x8f" for m in msgs] + [b"g0", b"g1", b"alpha", b"beta", b"\x8f",
                                               b"gamma", b"x", b"yz"]
        assert [e.payload for e in got] == want
        assert [e.index for e in got] == [ix(DAY0, i) for i in range(len(want))]


def test_append_many_large_batch_crosses_chunks(tmp_path: Path) -> None:
    # 20,000 excerpts of 100 bytes = ~2 MB: the batch has to grow the 256 KiB-chunked file
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        msgs = [struct.pack("<I", i) * 25 for i in range(20_000)]
        assert a.append_many(msgs) == ix(DAY0, 19_999)
        t = q.tailer()
        n = 0
        while len(b := t.read_many()):
            assert b.payloads() == msgs[n:n + len(b)]
            n += len(b)
        assert n == 20_000


def test_read_many_equals_read_nowait(tmp_path: Path) -> None:
    rnd = random.Random(3)
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST4_DAILY) as q:
        a = q.appender()
        msgs = [rnd.randbytes(rnd.choice([0, 1, 7, 100, 3000])) for _ in range(700)]
        for i, m in enumerate(msgs):
            a.append(m)
            if i % 97 == 0:
                a.append_metadata(b"meta")  # skipped by both
        single = read_all(q.tailer())
        assert len(single) == 700
        for max_count, max_bytes in ((1, 1 << 20), (7, 1 << 20), (65536, 5000), (50, 2000),
                                     (65536, 1 << 20)):
            t = q.tailer()
            batched: list[ac.Excerpt] = []
            while len(b := t.read_many(max_count=max_count, max_bytes=max_bytes)):
                assert len(b) <= max_count
                assert len(b.offsets) == len(b) + 1 and len(b.indices) == len(b)
                pay = b.payloads()
                assert pay == [b[i].payload for i in range(len(b))]
                assert [ex.index for ex in b] == list(b.indices)
                batched.extend(b)
            assert batched == single, (max_count, max_bytes)
            assert t.read_nowait() is None


# ---------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------


def test_payload_bigger_than_a_mapping_chunk(tmp_path: Path) -> None:
    big = bytes(range(256)) * (3 * 4096)  # 3 MiB, 12 chunks of 256 KiB
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"small-0")
        assert a.append(big) == ix(DAY0, 1)
        with a.writing_document() as dc:
            for k in range(12):
                dc.write(bytes([k]) * (100 << 10))  # 1.2 MB written piece by piece
        assert dc.index == ix(DAY0, 2)
        a.append(b"small-3")
        t = q.tailer()
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"small-0")
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 1), big)
        ex = t.read_nowait()
        assert ex is not None and ex.index == ix(DAY0, 2)
        assert ex.payload == b"".join(bytes([k]) * (100 << 10) for k in range(12))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 3), b"small-3")
        # read_many with a buffer smaller than the excerpt still delivers it, alone
        t2 = q.tailer()
        assert t2.move_to_index(ix(DAY0, 1))
        b = t2.read_many(max_bytes=1 << 20)
        assert len(b) == 1 and b[0] == ac.Excerpt(ix(DAY0, 1), big)
        b = t2.read_many(max_bytes=4 << 20)
        assert b.indices == array("q", [ix(DAY0, 2), ix(DAY0, 3)])
        assert b.payloads()[1] == b"small-3"
        # a fresh queue object (new mapping) reads the same
    with open_q(tmp_path / "q") as q2:
        t = q2.tailer()
        assert t.move_to_index(ix(DAY0, 1))
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 1), big)


def test_message_too_large_writes_nothing(tmp_path: Path) -> None:
    limit = (1 << 30) - 1  # header length field: 30 bits (reference §3)
    # 1 GiB sources that cost nothing: bytes(n) is calloc'ed and an anonymous mapping is
    # zero-filled on demand (bytearray(n) would memset and touch a whole GiB)
    huge = bytes(1 << 30)
    anon = mmap.mmap(-1, 1 << 30)
    view = memoryview(anon)
    try:
        with open_q(tmp_path / "q") as q:
            a = q.appender()
            a.append(b"a")
            size_before = os.path.getsize(q.cycle_path(DAY0))
            with pytest.raises(ac.MessageTooLargeError):
                a.append(huge)
            with pytest.raises(ac.MessageTooLargeError):
                a.append(view)
            with pytest.raises(ac.MessageTooLargeError):
                a.append_packed(view, [0, 1 << 30])
            with pytest.raises(ac.MessageTooLargeError), a.writing_document() as dc:
                dc.write(b"abc")
                dc.write(view[:limit - 2])  # 3 + limit - 2 = limit + 1 bytes
            assert issubclass(ac.MessageTooLargeError, ac.ChronicleError)
            assert os.path.getsize(q.cycle_path(DAY0)) == size_before  # nothing grew
            # the rejected payloads left no trace: same next index, a tailer sees a then b
            assert a.append(b"b") == ix(DAY0, 1)
            got = read_all(q.tailer())
            assert [(e.index, e.payload) for e in got] == [(ix(DAY0, 0), b"a"),
                                                           (ix(DAY0, 1), b"b")]
    finally:
        view.release()
        anon.close()


# ---------------------------------------------------------------------------
# lifecycle
# ---------------------------------------------------------------------------


def test_use_after_close_raises(tmp_path: Path) -> None:
    q = open_q(tmp_path / "q")
    a = q.appender()
    a.append(b"x")
    t = q.tailer()
    assert not q.closed
    q.close()
    assert q.closed
    q.close()  # idempotent
    with pytest.raises(ac.QueueClosedError):
        q.appender()
    with pytest.raises(ac.QueueClosedError):
        q.tailer()
    with pytest.raises(ac.QueueClosedError):
        a.append(b"y")
    with pytest.raises(ac.QueueClosedError):
        a.append_many([b"y", b"z"])
    with pytest.raises(ac.QueueClosedError):
        a.writing_document()
    with pytest.raises(ac.QueueClosedError):
        t.read_nowait()
    with pytest.raises(ac.QueueClosedError):
        t.read_many()
    with pytest.raises(ac.QueueClosedError):
        t.move_to_index(ix(DAY0, 0))
    with pytest.raises(ac.QueueClosedError):
        t.to_start()
    with pytest.raises(ac.QueueClosedError):
        q.table_store_get("listing.highestCycle")
    with pytest.raises(ac.QueueClosedError):
        q.table_store_put("k", 1)
    assert issubclass(ac.QueueClosedError, ac.ChronicleError)


def test_closed_appender_and_tailer_raise(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"x")
        a.close()
        with pytest.raises(ac.QueueClosedError):
            a.append(b"y")
        t = q.tailer()
        t.close()
        with pytest.raises(ac.QueueClosedError):
            t.read_nowait()
        # the queue itself is still usable
        assert q.appender().append(b"y") == ix(DAY0, 1)
    assert q.closed


_AFTER_CLOSE_SCRIPT = """
import sys, aiochronicle as ac
q = ac.open_queue(sys.argv[1], time_provider=ac.SetTimeProvider({t0}), block_size={small})
q.appender().append(b"x")
q.close()
expr = sys.argv[2]
try:
    eval(expr)
except ac.QueueClosedError:
    print("QueueClosedError")
except Exception as exc:
    print(type(exc).__name__)
else:
    print("no error")
"""


@pytest.mark.parametrize("expr", ["q.first_index", "q.last_index", "q.cycles()",
                                  "q.first_cycle", "q.entry_count()",
                                  "q.count_excerpts(0, 1 << 62)"])
def test_queue_queries_after_close_raise_instead_of_crashing(tmp_path: Path, expr: str) -> None:
    # run in a child: a use-after-unmap would kill the test session with SIGSEGV
    script = _AFTER_CLOSE_SCRIPT.format(t0=T0, small=SMALL)
    r = subprocess.run([sys.executable, "-c", script, str(tmp_path / "q"), expr],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{expr} after close: exit code {r.returncode} {r.stderr[-500:]}"
    assert r.stdout.strip() == "QueueClosedError"


async def test_async_context_manager(tmp_path: Path) -> None:
    async with open_q(tmp_path / "q") as q:
        async with q.appender() as a:
            assert a.append(b"async") == ix(DAY0, 0)
        async with q.tailer() as t:
            assert t.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"async")
    assert q.closed


# ---------------------------------------------------------------------------
# reopening, metadata, named tailers, read-only
# ---------------------------------------------------------------------------


def test_roll_cycle_mismatch_keeps_stored_cycle(tmp_path: Path) -> None:
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.FAST_DAILY) as q:
        q.appender().append(b"daily")
    with pytest.warns(ac.RollCycleMismatchWarning):
        q2 = open_q(tmp_path / "q", roll_cycle=ac.RollCycles.HOURLY)
    with q2:
        assert q2.roll_cycle.name == "FAST_DAILY"
        assert q2.roll_cycle.length_ms == DAY
        assert q2.roll_cycle.format == "yyyyMMdd'F'"
        # still writes to the same daily file, continuing the sequence
        assert q2.appender().append(b"more") == ix(DAY0, 1)
        assert sorted(os.listdir(tmp_path / "q")) == ["20231114F.cq4", "metadata.cq4t"]
        assert [e.payload for e in read_all(q2.tailer())] == [b"daily", b"more"]
    # no warning when nothing (or the same cycle) is asked for
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with open_q(tmp_path / "q") as q3:
            assert q3.roll_cycle.name == "FAST_DAILY"
        with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.FAST_DAILY) as q4:
            assert q4.entry_count() == 2


def test_settings_fixed_at_open_are_read_only(tmp_path: Path) -> None:
    """The roll cycle, epoch, path... a queue was opened with are properties: the
    files on disk were named and indexed with them, so they cannot be changed."""
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.FAST_HOURLY, source_id=3) as q:
        assert q.path == str(tmp_path / "q")
        assert q.roll_cycle is ac.RollCycles.FAST_HOURLY
        assert q.source_id == 3 and not q.read_only
        for name, value in (("roll_cycle", ac.RollCycles.DAILY), ("epoch", 1), ("path", "x"),
                            ("read_only", True), ("source_id", 4), ("block_size", 1 << 20),
                            ("week_rule", "ISO"), ("time_provider", ac.SetTimeProvider(0))):
            with pytest.raises(AttributeError):
                setattr(q, name, value)
        assert q.roll_cycle is ac.RollCycles.FAST_HOURLY and q.source_id == 3
    # the source id stored by the first opener is adopted by a later one
    with open_q(tmp_path / "q") as again:
        assert again.source_id == 3
        assert again.roll_cycle.name == "FAST_HOURLY"


def test_table_store_keys_are_case_insensitive(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        assert q.table_store_get("my.Counter") is None
        q.table_store_put("my.Counter", 42)
        assert q.table_store_get("my.counter") == 42
        assert q.table_store_get("MY.COUNTER") == 42
        q.table_store_put("MY.counter", 43)
        assert q.table_store_get("my.Counter") == 43
        q.appender().append(b"x")
        assert q.table_store_get("LISTING.HIGHESTCYCLE") == DAY0
        assert q.table_store_get("listing.lowestcycle") == DAY0
    with open_q(tmp_path / "q") as q:
        assert q.table_store_get("My.Counter") == 43
        keys = [k for k in _raw_table_keys(tmp_path / "q" / "metadata.cq4t")
                if k.lower() == "my.counter"]
        assert keys == ["my.Counter"]  # one record, spelled as first written


def test_table_store_put_keeps_the_maximum(tmp_path: Path) -> None:
    # Java SingleChronicleQueue.tableStorePut: setMaxValue (plain set only for
    # Long.MIN_VALUE) - reference §5.4 "arbitrary | caller | setMaxValue".
    with open_q(tmp_path / "q") as q:
        q.table_store_put("hwm", 100)
        q.table_store_put("hwm", 50)
        assert q.table_store_get("hwm") == 100
        q.table_store_put("hwm", 150)
        assert q.table_store_get("hwm") == 150


def _raw_table_keys(path: Path) -> list[str]:
    """Event names of the data records of a metadata.cq4t, read without the library."""
    data = path.read_bytes()
    h = int.from_bytes(data[0:4], "little")
    pos = (4 + (h & LENGTH_MASK) + 3) & ~3
    keys = []
    while pos + 4 <= len(data):
        h = int.from_bytes(data[pos:pos + 4], "little")
        if h == 0 or h & HDR_NOT_COMPLETE:
            break
        n = h & LENGTH_MASK
        body = data[pos + 4:pos + 4 + n]
        if not h & HDR_META and body[0] == 0xB9:
            keys.append(body[2:2 + body[1]].decode("latin-1"))
        pos = (pos + 4 + n + 3) & ~3
    return keys


def test_named_tailer_resumes_after_reopen(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(6):
            a.append(b"n%d" % i)
        t = q.tailer("svc")
        got = [t.read_nowait() for _ in range(3)]
        assert [e.index for e in got] == [ix(DAY0, i) for i in range(3)]
        # at least once: while n2 is in hand the stored position stays at it (a
        # crash now reads it again); the next read, or a clean close, marks it
        # done and stores the next index, as Java does when its reading
        # document closes (reference §7.4)
        assert q.table_store_get("index.svc") == ix(DAY0, 2)
        other = q.tailer("other")  # a different name starts at the beginning
        assert other.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"n0")
    with open_q(tmp_path / "q") as q:
        assert q.table_store_get("index.svc") == ix(DAY0, 3)
        t = q.tailer("svc")
        assert t.index == ix(DAY0, 3)
        assert t.read_nowait() == ac.Excerpt(ix(DAY0, 3), b"n3")
        b = t.read_many(max_count=2)
        assert b.payloads() == [b"n4", b"n5"]
        assert q.table_store_get("index.svc") == ix(DAY0, 4)  # the batch is in hand
        assert t.read_nowait() is None
        assert q.table_store_get("index.svc") == ix(DAY0, 6)  # asking again: all done
        q.appender().append(b"n6")
    with open_q(tmp_path / "q") as q:
        t = q.tailer("svc")
        assert list(t) == [ac.Excerpt(ix(DAY0, 6), b"n6")]
        assert q.tailer("other").read_nowait() == ac.Excerpt(ix(DAY0, 1), b"n1")
        unnamed = q.tailer()
        assert unnamed.read_nowait() == ac.Excerpt(ix(DAY0, 0), b"n0")


def test_read_only_queue(tmp_path: Path) -> None:
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        for i in range(3):
            a.append(b"ro%d" % i)
        # a writer and a read-only reader at the same time
        with open_q(tmp_path / "q", read_only=True) as ro:
            with pytest.raises(ac.ReadOnlyQueueError):
                ro.appender()
            with pytest.raises(ac.ReadOnlyQueueError):
                ro.table_store_put("k", 1)
            with pytest.raises(ac.ReadOnlyQueueError):
                ro.tailer("named")  # a named tailer needs writable metadata (§7.4)
            t = ro.tailer()
            assert [(e.index, e.payload) for e in read_all(t)] == [
                (ix(DAY0, i), b"ro%d" % i) for i in range(3)]
            a.append(b"ro3")
            assert t.read_nowait() == ac.Excerpt(ix(DAY0, 3), b"ro3")
            assert ro.last_index == ix(DAY0, 3)
            assert ro.table_store_get("listing.highestCycle") == DAY0
    with pytest.raises(ac.NoSuchQueueError, match="no queue directory at"):
        open_q(tmp_path / "does-not-exist", read_only=True)
    assert not (tmp_path / "does-not-exist").exists()


def test_first_last_index_count_and_entry_count(tmp_path: Path) -> None:
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_DAILY) as q:
        a = q.appender()
        assert q.first_index is None and q.last_index is None
        a.append_many([b"e%d" % i for i in range(40)])
        assert q.first_index == ix(DAY0, 0)
        assert q.last_index == ix(DAY0, 39)
        assert q.first_cycle == q.last_cycle == DAY0
        assert q.cycles() == [DAY0]
        assert q.entry_count() == 40
        assert q.excerpts_in_cycle(DAY0) == 40
        assert q.excerpts_in_cycle(DAY0 + 1) == 0
        assert q.count_excerpts(ix(DAY0, 0), ix(DAY0, 40)) == 40
        assert q.count_excerpts(ix(DAY0, 5), ix(DAY0, 6)) == 1
        assert q.count_excerpts(ix(DAY0, 5), ix(DAY0, 5)) == 0
        assert q.count_excerpts(ix(DAY0, 10), ix(DAY0, 30)) == 20
        assert q.cycle_path(DAY0) == os.path.join(str(tmp_path / "q"), "20231114T1.cq4")


def test_count_excerpts_swaps_reversed_arguments(tmp_path: Path) -> None:
    # Java SingleChronicleQueue.countExcerpts swaps fromIndex/toIndex when from > to.
    with open_q(tmp_path / "q") as q:
        q.appender().append_many([b"x"] * 10)
        assert q.count_excerpts(ix(DAY0, 8), ix(DAY0, 2)) == 6


def test_index_full_cycle(tmp_path: Path) -> None:
    # TEST_DAILY: indexCount 8, spacing 1 -> at most 8*8*1 = 64 excerpts per cycle
    # (reference §2.1 maxMessagesPerCycle 0x40; SCQIndexing "Unable to index").
    with open_q(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_DAILY) as q:
        a = q.appender()
        assert a.append_many([b"f%d" % i for i in range(64)]) == ix(DAY0, 63)
        t = q.tailer()
        for s in random.Random(64).sample(range(64), 64):
            assert t.move_to_index(ix(DAY0, s))
            assert t.read_nowait() == ac.Excerpt(ix(DAY0, s), b"f%d" % s)
        with pytest.raises(ac.ChronicleError):
            a.append(b"one too many")
        # the 8 secondary index pages are all present in the file
        pages = [p for k, _, p in raw_documents(q.cycle_path(DAY0))
                 if k == "meta" and p.startswith(b"\xb9\x05index")]
        assert len(pages) == 8


def test_appender_index_matches_roll_cycle_arithmetic(tmp_path: Path) -> None:
    # the library's arithmetic agrees with cycle << 32 | seq for these cycles
    for rc in (ac.RollCycles.FAST_DAILY, ac.RollCycles.DAILY, ac.RollCycles.TEST4_DAILY):
        assert rc.to_index(DAY0, 5) == ix(DAY0, 5)
        assert rc.to_cycle(ix(DAY0, 5)) == DAY0 and rc.to_sequence(ix(DAY0, 5)) == 5
        assert rc.current_cycle(T0, 0) == DAY0
    with open_q(tmp_path / "q") as q:
        assert q.current_cycle() == DAY0


def test_reprs_say_what_and_where(tmp_path: Path) -> None:
    """What a user sees in a debugger or a log line: path, name, position, state."""
    with open_q(tmp_path / "q") as q:
        a = q.appender()
        a.append(b"x")
        a.append(b"yy")
        t = q.tailer("risk")
        assert repr(t) == f"<Tailer {str(tmp_path / 'q')!r} name='risk' index={ix(DAY0, 0):#x}>"
        t.direction = ac.TailerDirection.BACKWARD
        assert repr(t).endswith(" BACKWARD>")
        with a.writing_document() as dc:
            dc.write(b"abc")
            assert repr(dc) == "<DocumentContext 3 bytes open>"
        assert repr(dc) == f"<DocumentContext 3 bytes committed at {ix(DAY0, 2):#x}>"
        dc = a.writing_document()
        dc.write(b"z")
        dc.close(rollback=True)
        assert repr(dc) == "<DocumentContext 1 bytes rolled back>"
        batch = q.tailer().read_many()
        assert repr(batch) == f"<Batch 3 excerpts, 6 bytes, {ix(DAY0, 0):#x}..{ix(DAY0, 2):#x}>"
        assert repr(q.tailer().to_end().read_many()) == "<Batch empty>"
        assert "stopped" in repr(q.pretoucher())
        t.close()
        assert repr(t).endswith(" closed>")


@pytest.mark.parametrize(("options", "error", "words"), [
    ({"roll_cycle": "NOT_A_CYCLE"}, ac.UnknownRollCycleError, "unknown roll cycle"),
    ({"roll_cycle": 3600}, TypeError, "roll_cycle must be a RollCycle"),
    ({"time_provider": 5}, TypeError, "current_time_millis"),
    ({"timeout": -1}, ValueError, "timeout must be 0 or more"),
    ({"timeout": float("nan")}, ValueError, "timeout must be 0 or more"),
    ({"lock_timeout": -0.5}, ValueError, "lock_timeout must be 0 or more"),
    ({"sync_interval": -1}, ValueError, "sync_interval must be 0 or more"),
    ({"source_id": -5}, ValueError, "source_id must be in 0..2**31-1"),
    ({"source_id": 1 << 31}, ValueError, "source_id must be in 0..2**31-1"),
    ({"index_count": 0}, ValueError, "index_count must be a positive integer"),
    ({"index_spacing": 0}, ValueError, "index_spacing must be a positive integer"),
    ({"epoch": -1}, ValueError, "epoch must be 0 or more"),
    ({"block_size": 1000}, ValueError, "block_size must be a multiple of 4096"),
    ({"sync_every": 0}, ValueError, "sync_every must be at least 1"),
    ({"week_rule": "MARS"}, ValueError, "week_rule must be one of"),
])
def test_bad_settings_are_refused_before_anything_is_created(
        tmp_path: Path, options: dict[str, object], error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=re.escape(words)):
        ac.open_queue(tmp_path / "q", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "q").exists()


def test_roll_cycle_by_name(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q", roll_cycle="fast_hourly") as q:
        assert q.roll_cycle is ac.RollCycles.FAST_HOURLY


def test_batches_stay_intact_after_later_reads(tmp_path: Path) -> None:
    """read_many reuses its buffers between calls: a batch already returned (a
    small one, copied out, or a large one that took the buffers) never changes."""
    small, large = (16, 3), (2_000, 200)  # 200 x 2 kB: over the 256 KiB hand-off
    rounds = [small, small, large, small, large, large, small, small]
    with open_q(tmp_path / "q") as q:
        a, t = q.appender(), q.tailer()
        batches = []
        for round_, (size, count) in enumerate(rounds):
            for i in range(count):
                a.append(bytes([round_]) * size + b"%d" % i)
            got = 0  # (a batch may stop short at a remap or the first file)
            while got < count:
                b = t.read_many()
                assert len(b)
                batches.append((b, round_, size, got))
                got += len(b)
            assert got == count
            assert len(t.read_many()) == 0  # an empty poll in between
        assert any(len(b.data) >= 256 << 10 for b, *_ in batches)  # a hand-off happened
        for b, round_, size, first in batches:
            expected = [bytes([round_]) * size + b"%d" % i for i in range(first, first + len(b))]
            assert b.payloads() == expected
            assert list(b.offsets) == [sum(len(p) for p in expected[:k])
                                       for k in range(len(expected) + 1)]
        with pytest.raises(ValueError):
            t.read_many(max_count=0)


def test_close_releases_cycle_files_at_once(tmp_path: Path) -> None:
    """After close(), nothing of the queue's cycle files stays mapped or open in
    a process with no other thread, even while the user still holds its
    appender, tailers (a named one read from) and a reader's batch (they used
    to keep them until garbage collection), so retention can delete them.
    Run in a child process: this one has the test session's threads."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, sys, threading
        import aiochronicle as ac
        from aiochronicle._tools._listeners import files_open_by_processes
        assert threading.active_count() == 1
        with ac.open_queue(sys.argv[1], time_provider=ac.SetTimeProvider(1_700_000_000_000)) as q:
            app = q.appender()
            for i in range(5):
                app.append(b"r%d" % i)
            named = q.tailer("svc")
            assert named.read_nowait() is not None
            plain = q.tailer()
            batch = plain.read_many()
            files = [q.cycle_path(c) for c in q.cycles()]
            assert files_open_by_processes(files).get(files[0]) == [os.getpid()]
        assert len(batch) == 5
        assert files_open_by_processes(files) == {}, files_open_by_processes(files)
        for call in (named.read_nowait, lambda: app.append(b"late")):
            try:
                call()
            except ac.QueueClosedError:
                pass
            else:
                raise AssertionError("no QueueClosedError")
        assert named.index > 0 and app.last_index_appended >= 0  # still answer, no crash
        print("released")
    """)
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "released", r.stdout + r.stderr


def test_named_tailer_keeps_the_excerpt_in_hand_when_a_block_fails(tmp_path: Path) -> None:
    """A ``with`` block that ends with an exception leaves the excerpt in hand
    unhandled (read again next time, as after a crash); a clean exit or an
    explicit close() marks it done."""
    with open_q(tmp_path / "q") as q:
        app = q.appender()
        idx = [app.append(b"e%d" % i) for i in range(3)]
    with pytest.raises(RuntimeError), open_q(tmp_path / "q") as q:
        assert q.tailer("job").read_nowait() == ac.Excerpt(idx[0], b"e0")
        raise RuntimeError("the handler failed")
    with open_q(tmp_path / "q") as q:
        t = q.tailer("job")
        assert t.read_nowait() == ac.Excerpt(idx[0], b"e0")  # again
        with pytest.raises(RuntimeError), t:
            assert t.read_nowait() == ac.Excerpt(idx[1], b"e1")
            raise RuntimeError("failed again")
        assert q.table_store_get("index.job") == idx[1]
        t2 = q.tailer("job")
        assert t2.read_nowait() == ac.Excerpt(idx[1], b"e1")
        t2.close()
        assert q.table_store_get("index.job") == idx[2]


def test_new_durations_are_seconds_and_the_old_millisecond_names_still_work(
        tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "a", sync=ac.SyncMode.ASYNC, sync_interval=0.25) as q:
        assert q.sync_interval == 0.25 and q.options.sync_interval == 0.25
        assert q.pretoucher(preroll=1.5).preroll == 1.5
        with pytest.warns(DeprecationWarning, match="preroll in seconds"):
            assert q.pretoucher(preroll_ms=1500).preroll == 1.5
    with pytest.warns(DeprecationWarning, match="sync_interval in seconds"), \
            ac.open_queue(tmp_path / "b", sync=ac.SyncMode.ASYNC, sync_interval_ms=250) as q:
        assert q.sync_interval == 0.25
        with pytest.warns(DeprecationWarning, match="read sync_interval"):
            assert q.sync_interval_ms == 250
    with pytest.raises(TypeError, match="not both"):
        ac.open_queue(tmp_path / "c", sync_interval=1.0, sync_interval_ms=1000)
    opts = ac.QueueOptions(roll_cycle="HOURLY", source_id=7)
    assert opts.roll_cycle is ac.RollCycles.HOURLY
    with ac.Queue(tmp_path / "d", opts) as q:
        assert q.roll_cycle is ac.RollCycles.HOURLY and q.source_id == 7
