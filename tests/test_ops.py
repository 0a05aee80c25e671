"""Queue operations as a library: stats, check/repair, unlock, retention, file
listeners, payload decoding and the dump.

Expected values come from the format reference (``shared/reference``) and the
Java fixtures' README, or from what the test itself wrote.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from queue_meta import dead_pid, meta_get, meta_set

import aiochronicle as ac
from aiochronicle import _cli
from aiochronicle._format import _render
from aiochronicle._objects import _queue
from aiochronicle._objects._queue import cycles_of
from aiochronicle._tools import _dump, _listeners, _salvage

DAY = 86_400_000
START = 19_000 * DAY  # cycle 19000 = 2022-01-08
UNLOCKED = -(1 << 63)
LONG_TEXT = "a much longer item that will need encoding as variable length text"


def wire_text(s: str) -> bytes:
    raw = s.encode()
    assert len(raw) < 32
    return bytes([0xE0 + len(raw)]) + raw


def make_queue(path: Path, cycles: int = 3, per_cycle: int = 10,
               clock: ac.SetTimeProvider | None = None) -> ac.SetTimeProvider:
    """TEST_DAILY (index every excerpt, 8 per index page): ``cycles`` days of
    ``per_cycle`` excerpts "c<cycle>-<n>".  Returns the clock, left on the last day."""
    clock = clock or ac.SetTimeProvider(START)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_DAILY, time_provider=clock) as q:
        a = q.appender()
        for c in range(cycles):
            if c:
                clock.advance_millis(DAY)
            for i in range(per_cycle):
                a.append_text(f"c{c}-{i}")
    return clock


def read_all(path: Path) -> list[tuple[int, bytes]]:
    with ac.open_queue(path, read_only=True) as q:
        return [(e.index, e.payload) for e in q.tailer()]


def cycle_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.cq4"))


def u32(path: Path, off: int) -> int:
    with open(path, "rb") as f:
        f.seek(off)
        return int(struct.unpack("<I", f.read(4))[0])


def put(path: Path, off: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)


def data_positions(path: Path) -> list[int]:
    """Header positions of the data excerpts of one cycle file (read with the dump walker)."""
    with _dump.FileWindow(str(path)) as f:
        return [d.pos for d in _dump.walk_documents(f, 0, 4) if d.kind == "data"]


def end_position(path: Path) -> int:
    with _dump.FileWindow(str(path)) as f:
        docs = list(_dump.walk_documents(f, 0, 4))
    return docs[-1].pos


# --------------------------------------------------------------------------
# parse_index, decoding
# --------------------------------------------------------------------------


def test_parse_index_hex_and_decimal() -> None:
    assert _cli.parse_index("0x4a0500000000") == 0x4A0500000000
    assert _cli.parse_index("0X4A05_0000_0003") == 0x4A0500000003
    assert _cli.parse_index("81415400062976") == 81415400062976
    for bad in ("zz", "", "-1", "0x", str(1 << 63)):
        with pytest.raises(ValueError):
            _cli.parse_index(bad)


def test_decode_payloads() -> None:
    # Java writeText: E0+len (reference §9.1)
    d = _render.decode_payload(b"\xe3one")
    assert (d.kind, d.value, d.line) == ("text", "one", "one")
    long = b"\xb8\x42" + LONG_TEXT.encode()
    assert _render.decode_payload(long).value == LONG_TEXT
    # a method-writer event with two arguments (reference §10.1, MethodWriterTest)
    ev = b"\xb9\x05event\x82\x08\x00\x00\x00\xe3two\xe3two"
    d = _render.decode_payload(ev)
    assert d.kind == "wire"
    assert d.value == {"event": ["two", "two"]}
    assert d.line == "event: [ two, two ]"
    # message history first (reference §10.3: BA 80 00 = field number -1, 81 len16, 86 ...)
    hist = b"\x86" + struct.pack("<BiqBqq", 1, 1, 2, 1, 3, 4)
    d = _render.decode_payload(b"\xba\x80\x00\x81" + struct.pack("<H", len(hist)) + hist
                             + b"\xb9\x03say\xe2hi")
    assert d.kind == "wire" and d.value["say"] == "hi"  # type: ignore[index]
    assert d.line.startswith("history: !history 0101000000") and d.line.endswith("; say: hi")
    # raw text and binary
    assert _render.decode_payload(b"one").kind == "utf8"
    d = _render.decode_payload(b"\x00\x01\xff")
    assert (d.kind, d.value) == ("hex", "0001ff")
    # forced modes fall back to hex when the bytes are not theirs
    assert _render.decode_payload(b"\xe3one", "hex").value == "e36f6e65"
    assert _render.decode_payload(b"one", "wire").kind == "hex"
    assert _render.decode_payload(b"\xe3one", "text").value == "one"
    with pytest.raises(ValueError):
        _render.get_decoder("nope")


def test_registered_decoder_is_tried_first_in_auto() -> None:
    def upper(payload: bytes) -> _render.DecodedPayload | None:
        if not payload.startswith(b"UP:"):
            return None
        s = payload[3:].decode().upper()
        return _render.DecodedPayload("upper", s, s, s)

    _render.register_decoder("test-upper", upper, auto=True)
    try:
        assert _render.decode_payload(b"UP:abc").value == "ABC"
        assert _render.decode_payload(b"UP:abc", "test-upper").kind == "upper"
        assert "test-upper" in _render.decoder_names()
        assert _render.decode_payload(b"\xe3one").kind == "text"
    finally:
        _render._NAMED.pop("test-upper")
        _render._AUTO.remove(upper)


# --------------------------------------------------------------------------
# dump
# --------------------------------------------------------------------------


def test_dump_java_v5_fixture(extract_fixture: Callable[..., Path]) -> None:
    qdir = extract_fixture("cqv5-sample-input.tar.bz2") / "qv5"
    out = io.StringIO()
    shown = _dump.dump_path(out, str(qdir), decoder=_render.get_decoder())
    text = out.getvalue()
    assert shown == 4
    # positions and contents from the fixture README
    assert "# position: 65800, header: 0, index: 0x4a0500000000\n--- !!data #binary\none\n" \
        in text
    assert "# position: 65828, header: 3, index: 0x4a0500000003\n" in text
    assert LONG_TEXT in text
    assert "header: !SCQStore {" in text and "indexCount: 4096," in text
    assert "index2index: [" in text and "# ... 4095 zeros" in text
    assert "listing.highestCycle: 18949" in text
    assert "chronicle.write.lock: -9223372036854775808" in text
    # a range shows only those data documents
    out = io.StringIO()
    shown = _dump.dump_path(out, str(qdir), decoder=_render.get_decoder(),
                            from_index=0x4A0500000001, to_index=0x4A0500000002)
    assert shown == 2
    assert "two" in out.getvalue() and "three" in out.getvalue()
    assert "one" not in out.getvalue() and "SCQStore" not in out.getvalue()


def test_dump_old_header_then_eof(java_fixtures: Path) -> None:
    out = io.StringIO()
    path = java_fixtures / "cq4-header-then-eof" / "20170320.cq4"
    shown = _dump.dump_path(out, str(path), decoder=_render.get_decoder())
    assert shown == 0
    text = out.getvalue()
    assert "recovery: !TimedStoreRecovery" in text
    assert "# position: 442, header: -1 # EOF" in text  # EOF word at 0x1BA


def test_dump_rejects_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "20220101F.cq4"
    bad.write_bytes(b"\x12\x34\x56\x78" * 64)
    with pytest.raises(ac.ChronicleError):
        _dump.dump_path(io.StringIO(), str(bad), decoder=_render.get_decoder())
    with pytest.raises(ac.NotAQueueError):
        _dump.dump_path(io.StringIO(), str(tmp_path / ".."), decoder=_render.get_decoder())


# --------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------


def test_stats_counts_and_named_tailer_lag(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    clock = make_queue(qdir)
    with ac.open_queue(qdir, time_provider=clock) as q:
        t = q.tailer("audit")
        for _ in range(13):  # all of cycle 0, three of cycle 1
            assert t.read_nowait() is not None
        expected_next = q.roll_cycle.to_index(19001, 3)
        assert t.index == expected_next
    s = ac.queue_stats(str(qdir))
    assert s.roll_cycle == "TEST_DAILY"
    assert [c.cycle for c in s.cycles] == [19000, 19001, 19002]
    assert [c.excerpts for c in s.cycles] == [10, 10, 10]
    assert [c.eof for c in s.cycles] == [True, True, False]
    rc = ac.RollCycles.TEST_DAILY
    assert s.first_index == rc.to_index(19000, 0)
    assert s.last_index == rc.to_index(19002, 9)
    assert s.cycles[1].first_index == rc.to_index(19001, 0)
    assert s.cycles[1].last_index == rc.to_index(19001, 9)
    assert s.total_excerpts == 30
    (audit,) = s.tailers
    # the queue was closed cleanly: the 13th excerpt, in hand until then, is done
    assert audit.name == "audit" and audit.index == expected_next
    assert audit.lag_messages == 17
    # bytes: from the header of c1-3 to the end of cycle 1, plus cycle 2's documents
    c1, c2 = cycle_files(qdir)[1:]
    pos = data_positions(c1)[3]
    assert audit.lag_bytes >= (end_position(c1) - pos) + (end_position(c2)
                                                          - data_positions(c2)[0])
    assert audit.lag_bytes < (end_position(c1) - pos) + end_position(c2)
    assert s.to_dict()["total_excerpts"] == 30
    assert s.locks[0].key == "chronicle.write.lock"


def test_stats_of_java_fixtures(extract_fixture: Callable[..., Path]) -> None:
    root = extract_fixture("cqv5-sample-input.tar.bz2")
    s = ac.queue_stats(str(root / "qv5"))
    assert (s.total_excerpts, s.first_index, s.last_index) == (4, 0x4A0500000000,
                                                                0x4A0500000003)
    extract_fixture("cqv4-sample-input.tar.bz2")
    s = ac.queue_stats(str(root / "cqv4"))
    assert s.roll_cycle == "DAILY" and s.total_excerpts == 4
    assert s.last_index == 0x4A0C00000003


def test_open_existing_queue_errors(tmp_path: Path) -> None:
    with pytest.raises(ac.NoSuchQueueError) as missing:
        _queue.open_existing_queue(str(tmp_path / "missing"))
    assert isinstance(missing.value, FileNotFoundError)  # as it was before it was named
    with pytest.raises(ac.NotAQueueError):
        _queue.open_existing_queue(str(tmp_path))
    # the tools that open a queue's files themselves say the same
    missing_path = str(tmp_path / "missing")
    for tool in (ac.lock_states, ac.unlock_queue,
                 lambda p: _dump.dump_path(io.StringIO(), p, decoder=_render.get_decoder())):
        with pytest.raises(ac.NoSuchQueueError, match="no such queue"):
            tool(missing_path)
    assert not (tmp_path / "missing").exists()


# --------------------------------------------------------------------------
# check and repair
# --------------------------------------------------------------------------


def damage(qdir: Path) -> dict[str, object]:
    """Break a 3-cycle TEST_DAILY queue in every way check knows."""
    f0, f1, f2 = cycle_files(qdir)
    # cycle 0: its EOF marker is gone (header 0xC0000000 -> 0)
    eof_pos = end_position(f0)
    assert u32(f0, eof_pos) == 0xC0000000
    put(f0, eof_pos, bytes(8))
    # cycle 1: a hole and a wrong entry in the index (TEST_DAILY indexes every excerpt);
    # the first index page is the metadata document right before the first excerpt
    pos1 = data_positions(f1)
    with ac.open_queue(qdir, read_only=True) as q:
        st = cycles_of(q).acquire(19001)
        assert st is not None
        i2i = st.file.load64(st.layout.i2i_off)
        page = _salvage.index_array(st, _salvage.index_array(st, i2i, "index2index").values[0],
                                    "index")
        cycles_of(q).release(st)
    assert page is not None and page.values[:3] == tuple(pos1[:3])
    put(f1, page.value_offset(1), bytes(8))  # hole at sequence 1
    put(f1, page.value_offset(2), struct.pack("<q", pos1[5]))  # sequence 2 -> wrong place
    # cycle 2: writePosition left behind, and a writer died mid-excerpt at the end
    pos2 = data_positions(f2)
    with ac.open_queue(qdir, read_only=True) as q:
        st = cycles_of(q).acquire(19002)
        assert st is not None
        wp_off = st.layout.wp_off
        cycles_of(q).release(st)
    put(f2, wp_off, struct.pack("<q", pos2[4]))
    end2 = end_position(f2)
    put(f2, end2, struct.pack("<I", 0x80000010) + b"partial!")
    # metadata: listing and a dead writer's lock
    meta_set(qdir, "listing.highestCycle", 19001)
    meta_set(qdir, "chronicle.write.lock", dead_pid())
    return {"eof_pos": eof_pos, "end2": end2}


def test_check_clean_queue_and_fixtures(tmp_path: Path,
                                        extract_fixture: Callable[..., Path]) -> None:
    make_queue(tmp_path / "q")
    assert ac.check_queue(str(tmp_path / "q")) == []
    root = extract_fixture("cqv5-sample-input.tar.bz2")
    assert ac.check_queue(str(root / "qv5")) == []
    extract_fixture("cqv4-sample-input.tar.bz2")
    assert ac.check_queue(str(root / "cqv4")) == []


def test_check_finds_damage_and_repair_fixes_it(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    make_queue(qdir)
    before = read_all(qdir)
    where = damage(qdir)
    calls: list[tuple[int, int]] = []
    findings = ac.check_queue(str(qdir), progress=lambda d, t: calls.append((d, t)))
    kinds = {(f.kind, Path(f.path).name) for f in findings}
    f0, f1, f2 = (p.name for p in cycle_files(qdir))
    assert ("missing-eof", f0) in kinds
    assert ("index-hole", f1) in kinds
    assert ("bad-index-entry", f1) in kinds
    assert ("stale-write-position", f2) in kinds
    assert ("incomplete-header", f2) in kinds
    assert ("listing-out-of-date", "metadata.cq4t") in kinds
    assert ("stale-lock", "metadata.cq4t") in kinds
    assert all(f.repairable for f in findings if f.severity != "info")
    assert calls and calls[-1][0] == calls[-1][1]
    incomplete = next(f for f in findings if f.kind == "incomplete-header")
    assert incomplete.offset == where["end2"] and incomplete.severity == "error"
    # nothing changed by checking
    assert u32(cycle_files(qdir)[2], int(where["end2"])) == 0x80000010  # type: ignore[arg-type]

    backup = tmp_path / "backup"
    done = ac.repair_queue(str(qdir), backup_dir=str(backup))
    assert {f.kind for f in done if f.repaired} >= {
        "missing-eof", "index-hole", "bad-index-entry", "stale-write-position",
        "incomplete-header", "listing-out-of-date", "stale-lock"}
    assert ac.check_queue(str(qdir)) == []
    # the backup holds the damaged files, still sparse
    backed = sorted(p.name for p in backup.iterdir())
    assert backed == sorted([f0, f1, f2, "metadata.cq4t"])
    bst = os.stat(backup / f0)
    assert bst.st_size == os.path.getsize(qdir / f0)
    assert bst.st_blocks * 512 < bst.st_size
    assert u32(backup / f2, int(where["end2"])) == 0x80000010  # type: ignore[arg-type]
    # the repaired queue reads as before and takes new excerpts after the last
    assert u32(cycle_files(qdir)[0], int(where["eof_pos"])) == 0xC0000000  # type: ignore[arg-type]
    assert read_all(qdir) == before
    assert meta_get(qdir, "chronicle.write.lock") == UNLOCKED
    assert meta_get(qdir, "listing.highestCycle") == 19002
    clock = ac.SetTimeProvider(START + 2 * DAY)
    with ac.open_queue(qdir, time_provider=clock) as q:
        idx = q.appender().append_text("after")
        assert idx == before[-1][0] + 1
        t = q.tailer()
        assert t.move_to_index(ac.RollCycles.TEST_DAILY.to_index(19001, 2))
        assert t.read_nowait().payload == wire_text("c1-2")  # type: ignore[union-attr]
    assert read_all(qdir)[-1][1] == wire_text("after")


def test_repair_refuses_while_a_live_writer_holds_the_lock(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    make_queue(qdir, cycles=1)
    meta_set(qdir, "chronicle.write.lock", os.getpid())
    with pytest.raises(ac.QueueBusyError):
        ac.repair_queue(str(qdir), lock_timeout=0.2)
    assert meta_get(qdir, "chronicle.write.lock") == os.getpid()
    (held,) = ac.check_queue(str(qdir))
    assert held.kind == "lock-held" and not held.repairable
    with pytest.raises(ValueError, match="not repairable"):
        held.repair(None)  # type: ignore[arg-type]  # (refused before the context is used)
    assert not held.repaired


def test_unfinished_file_is_reported(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    make_queue(qdir, cycles=1)
    # a creator that died after claiming the header (reference §4.1), an hour
    # ago (a younger file may still be written: see test_unwritten_cycle.py)
    bad = qdir / "20220109T1.cq4"
    bad.write_bytes(struct.pack("<I", 0x80000000) + bytes(4092))
    os.utime(bad, (time.time() - 3600, time.time() - 3600))
    findings = ac.check_queue(str(qdir))
    assert [(f.kind, Path(f.path).name) for f in findings if f.severity != "info"] == [
        ("listing-out-of-date", "metadata.cq4t"), ("unfinished-file", bad.name)]
    ac.repair_queue(str(qdir))
    assert not bad.exists()
    assert list(qdir.glob("20220109T1.cq4-*.discard"))


# --------------------------------------------------------------------------
# unlock
# --------------------------------------------------------------------------


def test_unlock_dead_live_and_forced(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    make_queue(qdir, cycles=1)
    pid = dead_pid()
    meta_set(qdir, "chronicle.write.lock", pid)
    states = {s.key: s for s in ac.lock_states(str(qdir))}
    assert states["chronicle.write.lock"].holder == pid
    assert not states["chronicle.write.lock"].alive
    res = ac.unlock_queue(str(qdir))
    assert [(s.key, r) for s, r in res] == [("chronicle.write.lock", True)]
    assert meta_get(qdir, "chronicle.write.lock") == UNLOCKED
    # a live holder: refused, then forced
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        meta_set(qdir, "chronicle.append.lock", sleeper.pid)
        with pytest.raises(ac.QueueBusyError, match=str(sleeper.pid)):
            ac.unlock_queue(str(qdir))
        assert meta_get(qdir, "chronicle.append.lock") == sleeper.pid
        ac.unlock_queue(str(qdir), force=True)
        assert meta_get(qdir, "chronicle.append.lock") == UNLOCKED
    finally:
        sleeper.kill()
        sleeper.wait()


# --------------------------------------------------------------------------
# retention and file listeners
# --------------------------------------------------------------------------


def test_retention_by_age_keeps_current_and_needed(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    clock = make_queue(qdir, cycles=5, per_cycle=2)
    files = cycle_files(qdir)
    with ac.open_queue(qdir, time_provider=clock) as q:
        plan = ac.Retention(q, max_age="12h").plan()
        assert [d.action for d in plan] == ["delete", "delete", "delete", "keep", "keep"]
        plan = ac.Retention(q, max_size=1).plan()
        assert [d.action for d in plan] == ["delete"] * 4 + ["keep"]
        assert plan[-1].reason == "the current cycle"
        # a named tailer positioned in cycle 2 needs cycles 2.. ; one open file blocks too
        t = q.tailer("slow")
        t.move_to_index(q.roll_cycle.to_index(19002, 1))
        plan = ac.Retention(q, max_age=43200).plan()
        assert [d.action for d in plan] == ["delete", "delete", "keep", "keep", "keep"]
        assert "named tailer 'slow' still needs it" in plan[2].reason
        with open(files[1], "rb"):
            plan = ac.Retention(q, max_age=43200).plan()
        assert [d.action for d in plan] == ["delete", "keep", "keep", "keep", "keep"]
        assert plan[1].reason.startswith("open in process")
        removed: list[ac.RetentionDecision] = []
        decisions = ac.Retention(q, max_age=43200, on_removed=removed.append).apply()
        assert [d.done for d in decisions] == [True, True, False, False, False]
        assert [d.cycle for d in removed] == [19000, 19001]
        assert not files[0].exists() and not files[1].exists() and files[2].exists()
        assert q.cycles()[0] == 19002
        meta = cycles_of(q).meta
        assert meta is not None and meta.get("listing.lowestCycle") == 19002
        t.move_to_index(q.roll_cycle.to_index(19002, 1))
        assert t.read_nowait() is not None


def test_retention_by_size_dry_run_and_move(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    make_queue(qdir, cycles=4, per_cycle=2)
    files = cycle_files(qdir)
    one = os.stat(files[0]).st_blocks * 512
    r = ac.Retention(str(qdir), max_size=2 * one + one // 2, move_to=str(tmp_path / "old"))
    plan = r.apply(dry_run=True)
    assert [d.action for d in plan] == ["move", "move", "keep", "keep"]
    assert all(f.exists() for f in files)
    out = r.apply()
    assert [d.done for d in out] == [True, True, False, False]
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == [f.name for f in files[:2]]
    assert [p.name for p in cycle_files(qdir)] == [f.name for f in files[2:]]
    with pytest.raises(ValueError):
        ac.Retention(str(qdir))


def test_files_open_by_processes_sees_other_process(tmp_path: Path) -> None:
    target = tmp_path / "x.cq4"
    target.write_bytes(b"x")
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print('ok', flush=True);"
         " time.sleep(30)", str(target)], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ok\n"
        found = _listeners.files_open_by_processes([str(target)], include_self=False)
        assert found == {str(target): [child.pid]}
    finally:
        child.kill()
        child.wait()
    assert _listeners.files_open_by_processes([str(target)]) == {}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_acquired(self, cycle: int, path: str) -> None:
        assert os.path.basename(path).endswith(".cq4")
        self.events.append(("acquired", cycle))

    def on_released(self, cycle: int, path: str) -> None:
        self.events.append(("released", cycle))


def test_store_file_listener_and_retention_on_roll(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(qdir, roll_cycle=ac.RollCycles.TEST_DAILY, time_provider=clock) as q:
        rec = Recorder()
        assert isinstance(rec, ac.StoreFileListener)
        remove = ac.add_store_file_listener(q, rec, background=False)
        gone: list[int] = []
        ac.add_store_file_listener(
            q, ac.Retention(q, max_age=0.001, on_removed=lambda d: gone.append(d.cycle)),
            background=False)
        a = q.appender()
        a.append_text("day 0")
        assert ("acquired", 19000) in rec.events
        clock.advance_millis(DAY + 5000)
        a.append_text("day 1")  # rolls: cycle 19000 is released, then removed
        assert rec.events[-1] == ("released", 19000) or ("released", 19000) in rec.events
        assert gone == [19000]
        assert [p.name for p in cycle_files(qdir)] == ["20220109T1.cq4"]
        remove()
        n = len(rec.events)
        clock.advance_millis(DAY)
        a.append_text("day 2")
        assert len(rec.events) == n
    rec2 = Recorder()
    with ac.open_queue(qdir, time_provider=clock) as q:
        ac.add_store_file_listener(q, rec2, background=False)
        q.appender().append_text("day 2 again")
        assert rec2.events == [("acquired", 19002)]
    assert rec2.events == [("acquired", 19002), ("released", 19002)]  # on close


def test_store_file_listener_background_thread(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(qdir, roll_cycle=ac.RollCycles.TEST_DAILY, time_provider=clock) as q:
        rec = Recorder()
        remove = ac.add_store_file_listener(q, rec)
        a = q.appender()
        a.append_text("x")
        clock.advance_millis(DAY)
        a.append_text("y")
        remove.flush()  # type: ignore[attr-defined]
        assert ("acquired", 19000) in rec.events and ("released", 19000) in rec.events
        assert ("acquired", 19001) in rec.events
        remove()


LIVE_WRITER = """
import sys, time
import aiochronicle as ac
with ac.open_queue(sys.argv[1], roll_cycle=ac.RollCycles.TEST_SECONDLY) as q:
    a = q.appender()
    print("go", flush=True)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        for _ in range(50):
            a.append(b"x" * 20)
        time.sleep(0.001)
"""


def test_check_while_another_process_appends(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with ac.open_queue(qdir, roll_cycle=ac.RollCycles.TEST_SECONDLY) as q:
        q.appender().append(b"first")
    w = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, str(qdir)], stdout=subprocess.PIPE)
    try:
        assert w.stdout is not None and w.stdout.readline() == b"go\n"
        for _ in range(5):
            bad = [f for f in ac.check_queue(str(qdir)) if f.severity != "info"]
            assert bad == []
    finally:
        w.wait(timeout=30)
    assert ac.check_queue(str(qdir)) == []
