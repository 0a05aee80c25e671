"""Recovery from the states a killed process can leave behind, one window at a time."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import time

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

T0 = 1_637_251_500_000
UNLOCKED = -(1 << 63)


def _child(code: str, path: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter that SIGKILLs itself where the code says."""
    prelude = textwrap.dedent(
        f"""
        import os, signal, aiochronicle as ac
        from aiochronicle._objects._queue import cycles_of
        clock = ac.SetTimeProvider({T0})
        q = ac.open_queue({path!r}, time_provider=clock, block_size=256 << 10)
        app = q.appender()
        def die():
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60)


def _open(path: str, clock: ac.SetTimeProvider | None = None, **kw: object) -> ac.Queue:
    return ac.open_queue(path, time_provider=clock or ac.SetTimeProvider(T0),
                         block_size=256 << 10, **kw)  # type: ignore[arg-type]


def _payloads(q: ac.Queue) -> list[bytes]:
    return [ex.payload for ex in q.tailer()]


def test_killed_holding_the_lock_mid_payload(tmp_path):
    path = str(tmp_path / "q")
    r = _child(
        """
        for i in range(3):
            app.append(b"ok-%d" % i)
        doc = app.writing_document()
        doc.write(b"half written " * 1000)
        die()
        """, path)
    assert r.returncode == -9, r.stderr
    with _open(path) as q:
        assert cycles_of(q).meta is not None
        holder = cycles_of(q).meta.get("chronicle.write.lock")
        # opening the queue already released the dead holder's lock (as Java does)
        assert holder == UNLOCKED
        t0 = time.monotonic()
        i = q.appender().append(b"next")
        assert time.monotonic() - t0 < 5
        assert q.roll_cycle.to_sequence(i) == 3
        assert _payloads(q) == [b"ok-0", b"ok-1", b"ok-2", b"next"]


def test_dead_lock_holder_found_while_appending(tmp_path):
    path = str(tmp_path / "q")
    with _open(path) as q:
        app = q.appender()
        app.append(b"a")
        r = _child("app.append(b'b'); cycles_of(q).write_lock.acquire(); die()", path)
        assert r.returncode == -9, r.stderr
        assert cycles_of(q).meta is not None
        assert cycles_of(q).meta.get("chronicle.write.lock") not in (UNLOCKED, os.getpid())
        app.append(b"c")  # waits, sees a dead PID, takes the lock over
        assert _payloads(q) == [b"a", b"b", b"c"]


def test_commit_without_write_position_or_index_update(tmp_path):
    """Killed after the header commit, before writePosition and the index slot."""
    path = str(tmp_path / "q")
    rc = ac.RollCycles.TEST4_DAILY  # index spacing 4: many index slots
    with _open(path, roll_cycle=rc) as q:
        app = q.appender()
        idx = [app.append(b"m%d" % i) for i in range(9)]
        st = app._store
        assert st is not None
        lay = st.layout
        f = st.file
        # rewind writePosition to excerpt 3 as if 4..8 never updated it
        pos3 = st.seek(3)[1]
        f.store64(lay.wp_off, pos3)
        f.store64(lay.wp_seq_off, (pos3 << 32) | 3)
        # punch the index slot of sequence 8 (spacing 4: slot 2 of page 0)
        i2i = f.load64(lay.i2i_off)
        from aiochronicle._format._wire import parse_document
        word = f.load32(i2i)
        doc = parse_document(f.view(0, i2i + 4 + (word & 0x3FFFFFFF)), i2i + 4,
                             i2i + 4 + (word & 0x3FFFFFFF))
        page = doc["index2index"].as_array().values[0]
        word = f.load32(page)
        pdoc = parse_document(f.view(0, page + 4 + (word & 0x3FFFFFFF)), page + 4,
                              page + 4 + (word & 0x3FFFFFFF))
        arr = pdoc["index"].as_array()
        assert arr.values[2] == st.seek(8)[1]
        f.store64(arr.value_offset(2), 0)
    with _open(path) as q:
        app = q.appender()
        nxt = app.append(b"m9")
        assert nxt == idx[-1] + 1
        t = q.tailer()
        for i, index in enumerate([*idx, nxt]):
            assert t.move_to_index(index)
            ex = t.read_nowait()
            assert ex is not None and ex.payload == b"m%d" % i


def test_header_left_incomplete_by_an_old_protocol_writer(tmp_path):
    path = str(tmp_path / "q")
    with _open(path) as q:
        app = q.appender()
        app.append(b"one")
        st = app._store
        assert st is not None
        end = st.end()[0]
        # an old-style writer marked its header in progress and died
        st.file.write(end, struct.pack("<I", 0x80000000 | 12) + b"garbage-----")
        t = q.tailer()
        assert t.read_nowait().payload == b"one"  # type: ignore[union-attr]
        assert t.read_nowait() is None  # not complete: not readable
    with _open(path) as q:
        q.appender().append(b"two")  # takes the slot over
        assert _payloads(q) == [b"one", b"two"]


def test_cycle_file_whose_creator_died(tmp_path):
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(T0)
    with _open(path, clock, timeout=0.3) as q:
        q.appender().append(b"day1")
        nxt = q.cycle_path(q.current_cycle() + 1)
    # a creator won the header CAS and died before publishing the header
    with open(nxt, "wb") as f:
        f.write(struct.pack("<I", 0x80000000))
        f.truncate(1 << 20)
    clock.advance_millis(86_400_000)
    with _open(path, clock, timeout=0.3) as q:
        assert [ex.payload for ex in q.tailer()] == [b"day1"]  # absent for tailers
        q.appender().append(b"day2")
        assert _payloads(q) == [b"day1", b"day2"]
        discarded = [n for n in os.listdir(path) if n.endswith(".discard")]
        assert len(discarded) == 1


def test_missing_eof_is_normalised_by_the_next_appender(tmp_path):
    path = str(tmp_path / "q")
    r = _child("app.append(b'day1'); die()", path)
    assert r.returncode == -9, r.stderr
    clock = ac.SetTimeProvider(T0 + 3 * 86_400_000)
    with _open(path, clock) as q:
        t = q.tailer()
        assert t.read_nowait().payload == b"day1"  # type: ignore[union-attr]
        assert t.read_nowait() is None
        q.appender().append(b"day4")
        assert t.read_nowait().payload == b"day4"  # type: ignore[union-attr]
        first = q.cycles()[0]
        with open(q.cycle_path(first), "rb") as f:
            data = f.read()
        assert b"\x00\x00\x00\xc0\xc3EOF" in data


def test_truncated_table_store_lock_value_is_not_a_crash(tmp_path):
    path = str(tmp_path / "q")
    with _open(path) as q:
        q.appender().append(b"x")
    # a writer's PID left in the lock after a crash, on a queue nobody has open
    r = _child("app.append(b'y'); cycles_of(q).write_lock.acquire(); die()", path)
    assert r.returncode == -9
    with _open(path, read_only=True) as q:
        assert _payloads(q) == [b"x", b"y"]
