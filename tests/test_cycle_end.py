"""The end of a cycle without a readable EOF marker, when later cycles exist
(issue 31): a cycle file libchronicle renamed into place but never wrote, a
cycle whose writer died before its EOF (libchronicle patches only the three
cycles behind the newest), and an EOF marker damaged by a flipped bit.

A forward reader passes such a cycle in the same read call once it provably
ended (a later cycle holds data, no writer can still be inside it, nothing
was written after the end), so a read-until-None loop and ``tail`` without
``-f`` see every later excerpt; while a live writer may still write it, the
reader waits there (nothing is skipped).  The queues are built from the bytes
libchronicle writes (``tests/libchronicle_format.py``) and, for the EOF
flips, by this library in Java's layout.
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from libchronicle_format import (
    FILE_SIZE,
    HDR_EOF,
    LibchronicleStyleWriter,
    _key_offset,
)

import aiochronicle as ac
from aiochronicle._monitor_cli import top_rows
from aiochronicle._tools._retention import human_size
from aiochronicle.metrics import QueueCollector

HOUR = 3_600_000
DAY = 86_400_000
FIRST = 18949 * 24  # a FAST_HOURLY cycle (2021-11-18 00:00)
FORMAT = "yyyyMMdd-HH'F'"
STRFTIME = "%Y%m%d-%HF"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def zero_filled(w: LibchronicleStyleWriter, cycle: int, seconds_old: float) -> Path:
    """The file libchronicle leaves when its writer dies between the rename and
    the first write: made as ``<name>.<pid>.tmp`` of FILE_SIZE bytes, renamed."""
    path = w.path_of(cycle)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.truncate(FILE_SIZE)
    os.rename(tmp, path)
    age(path, seconds_old)
    return path


def excerpts(q: Path, **kw: object) -> list[bytes]:
    """What a read-until-None loop of a fresh tailer reads."""
    with ac.open_queue(q, read_only=True, **kw) as queue:  # type: ignore[arg-type]
        return [ex.payload for ex in iter(queue.tailer().read_nowait, None)]


def drop_eof(path: Path) -> int:
    """Clear the EOF word libchronicle wrote at the end of ``path``'s data (its
    writer died before the roll); returns where it was."""
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        pos = 0
        while True:
            word = struct.unpack_from("<I", mm, pos)[0]
            if word == HDR_EOF:
                struct.pack_into("<I", mm, pos, 0)
                return pos
            assert word != 0
            pos = (pos + 4 + (word & 0x3FFFFFFF) + 3) & ~3


# --------------------------------------------------------------------------
# a zero-filled cycle file between written ones
# --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["middle", "first"])
def test_a_dead_zero_filled_cycle_is_passed_in_one_read(tmp_path: Path, where: str) -> None:
    q = tmp_path / "q"
    w = LibchronicleStyleWriter(q, FORMAT, HOUR, FIRST, STRFTIME)
    first = FIRST + 1 if where == "first" else FIRST
    for i in range(5):
        w.append(b"a%d" % i, first)
    for i in range(3):
        w.append(b"c%d" % i, FIRST + 2)
    w.close()
    dead = zero_filled(w, FIRST if where == "first" else FIRST + 1, seconds_old=60)
    want = [b"a%d" % i for i in range(5)] + [b"c%d" % i for i in range(3)]
    assert excerpts(q) == want  # the queue's timeout is 10 s: its creator is gone
    with ac.open_queue(q, read_only=True) as queue:
        assert [ex.payload for ex in queue.tailer()] == want
        t, got = queue.tailer(), []
        while batch := t.read_many(max_count=100):
            got += batch.payloads()
        assert got == want
    r = cli("tail", str(q))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(want)
    # a file still young may yet be written: the reader stops before it
    if where == "middle":
        age(dead, -3600)
        assert excerpts(q) == want[:5]


def test_dump_describes_a_zero_filled_cycle_and_goes_on(tmp_path: Path) -> None:
    q = tmp_path / "q"
    w = LibchronicleStyleWriter(q, FORMAT, HOUR, FIRST, STRFTIME)
    w.append(b"before", FIRST)
    w.append(b"after", FIRST + 2)
    w.close()
    dead = zero_filled(w, FIRST + 1, seconds_old=60)
    r = cli("dump", str(q), "--skip-table-store")
    assert r.returncode == 0, r.stderr
    assert f"# file: {dead}\n# size: {FILE_SIZE} bytes" in r.stdout
    assert "the file's header was never written (6" in r.stdout  # 60 s, or a moment more
    assert "s old: its creator died): readers pass the cycle by" in r.stdout
    assert r.stdout.count("--- !!data") == 2 and "after" in r.stdout
    age(dead, -3600)
    r = cli("dump", str(dead))
    assert r.returncode == 0, r.stderr
    assert "no header yet" in r.stdout and "its creator may still be writing it" in r.stdout


def test_disk_use_counts_blocks_not_the_size_of_a_zero_filled_file(tmp_path: Path) -> None:
    q = tmp_path / "q"
    w = LibchronicleStyleWriter(q, FORMAT, HOUR, FIRST, STRFTIME)
    w.append(b"x" * 100, FIRST)
    w.close()
    zero_filled(w, FIRST + 1, seconds_old=60)
    files = sorted(q.glob("*.cq4"))
    blocks = sum(os.stat(p).st_blocks * 512 for p in files)
    assert blocks < FILE_SIZE  # (sparse: the premise)
    s = ac.queue_stats(str(q))
    assert s.disk_bytes == blocks
    assert s.file_bytes == 2 * FILE_SIZE
    assert s.to_dict()["file_bytes"] == 2 * FILE_SIZE
    r = cli("stats", str(q))
    assert r.returncode == 0, r.stderr
    assert f"{human_size(blocks)} allocated on disk, files' apparent size " \
           f"{human_size(2 * FILE_SIZE)}" in r.stdout
    fams = {f.name: f for f in QueueCollector([str(q)]).collect()}
    assert fams["aiochronicle_disk_bytes"].samples[0].value == blocks
    assert fams["aiochronicle_file_size_bytes"].samples[0].value == 2 * FILE_SIZE
    assert "disk allocated" in top_rows([], None)[0][0]  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# a cycle without its EOF, later cycles written
# --------------------------------------------------------------------------


def missing_eof_queue(q: Path, later: int) -> tuple[LibchronicleStyleWriter, list[bytes]]:
    """Cycles of 10 excerpts each; the second lost its EOF; ``later`` after it."""
    w = LibchronicleStyleWriter(q, FORMAT, HOUR, FIRST, STRFTIME)
    want = []
    for c in range(later + 2):
        for i in range(10):
            want.append(b"c%d-%d" % (c, i))
            w.append(want[-1], FIRST + c)
    w.close()
    drop_eof(w.path_of(FIRST + 1))
    age(w.path_of(FIRST + 1), 60)
    return w, want


@pytest.mark.parametrize("later", [1, 4])
def test_a_cycle_without_its_eof_is_passed_once_it_ended(tmp_path: Path, later: int) -> None:
    q = tmp_path / "q"
    w, want = missing_eof_queue(q, later)
    assert excerpts(q) == want
    with ac.open_queue(q, read_only=True) as queue:
        t = queue.tailer()
        got = []
        while (ex := t.read_blocking(timeout=30)) is not None and len(got) < len(want):
            got.append(ex.payload)
            if len(got) == len(want):
                break
        assert got == want
    r = cli("tail", str(q))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(want)
    r = cli("check", str(q))
    assert f"warning: missing-eof: {w.path_of(FIRST + 1).name}" in r.stdout, r.stdout
    r = cli("repair", "--yes", "--no-backup", str(q))
    assert r.returncode == 3, r.stdout + r.stderr  # the headerless-file warnings stay
    assert f"repaired: missing-eof: {w.path_of(FIRST + 1).name}" in r.stdout
    assert "missing-eof" not in cli("check", str(q)).stdout
    assert excerpts(q) == want


def test_a_cycle_a_live_writer_may_still_write_is_waited_for(tmp_path: Path) -> None:
    """The write lock is held by a live process and the cycle changed just now:
    the reader stops at its end (an excerpt written there next is read), and
    passes it only once the file stood unchanged for the queue's timeout."""
    q = tmp_path / "q"
    w, want = missing_eof_queue(q, later=4)
    end = w.path_of(FIRST + 1)
    meta = q / "metadata.cq4t"
    image = bytearray(meta.read_bytes())
    struct.pack_into("<q", image, _key_offset(bytes(image), "chronicle.write.lock"), os.getpid())
    meta.write_bytes(image)
    age(end, 0)
    with ac.open_queue(q, read_only=True, timeout=600) as queue:
        t = queue.tailer()
        assert [ex.payload for ex in iter(t.read_nowait, None)] == want[:20]
        for _ in range(3000):  # asked again on later polls: still nothing to pass
            assert t.read_nowait() is None
        # the writer was still there: its next excerpt in that cycle is read
        with open(end, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
            pos = next(p for p in range(0, 4096, 4) if struct.unpack_from("<I", mm, p)[0] == 0)
            mm[pos + 4:pos + 8] = b"late"
            struct.pack_into("<I", mm, pos, 4)
        ex = t.read_nowait()
        assert ex is not None and ex.payload == b"late"
        assert ex.index == ((FIRST + 1) << 32) | 10
        assert t.read_nowait() is None
        age(end, 3600)  # no writer touched it for the timeout: it ended
        ex = t.read_blocking(timeout=60)
        assert ex is not None and ex.payload == want[20]
    with ac.open_queue(q, read_only=True, timeout=600) as queue:
        got = [ex.payload for ex in iter(queue.tailer().read_nowait, None)]
    assert got == [*want[:20], b"late", *want[20:]]


@pytest.mark.parametrize("cleared", [0, 4])
def test_bytes_after_the_end_of_a_headerless_cycle_are_an_error(tmp_path: Path,
                                                                cleared: int) -> None:
    """An unwritten header with bytes after it in a libchronicle file (no
    writePosition or index to prove them uncommitted; the first header too,
    which would make the file look never written): a named error that names
    the cycle and the index, never a silent skip."""
    q = tmp_path / "q"
    w, want = missing_eof_queue(q, later=4)
    path = w.path_of(FIRST + 1)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        pos = 0
        for _ in range(cleared):
            pos = (pos + 4 + struct.unpack_from("<I", mm, pos)[0] + 3) & ~3
        struct.pack_into("<I", mm, pos, 0)  # excerpt `cleared`'s header zeroed
    age(path, 60)
    with ac.open_queue(q, read_only=True) as queue:
        t = queue.tailer()
        got = []
        with pytest.raises(ac.CorruptQueueError) as err:
            while (ex := t.read_nowait()) is not None:
                got.append(ex.payload)
        assert got == want[:10 + cleared]
    assert f"cycle {FIRST + 1}" in str(err.value)
    assert f"index {((FIRST + 1) << 32) + cleared:#x}" in str(err.value)


# --------------------------------------------------------------------------
# an EOF marker damaged by a flipped bit
# --------------------------------------------------------------------------


def test_a_flipped_bit_in_an_eof_marker_never_hides_later_cycles(tmp_path: Path) -> None:
    """Every single-bit flip of the EOF word between two cycles: forward
    readers (read_nowait, read_many, read_blocking, ``tail``) read every
    excerpt of both cycles or raise CorruptQueueError; none stops early or
    waits for ever."""
    src = tmp_path / "q"
    clock = ac.SetTimeProvider(1_700_000_000_000)
    want = []
    with ac.open_queue(src, roll_cycle=ac.RollCycles.DAILY, time_provider=clock) as queue:
        a = queue.appender()
        for c in range(2):
            for i in range(40):
                want.append(b"c%d-%d" % (c, i) * (1 + i % 5))
                a.append(want[-1])
            clock.advance_millis(DAY)
    first = sorted(src.glob("*.cq4"))[0]
    image = first.read_bytes()
    eof = image.rfind(struct.pack("<I", HDR_EOF))
    assert eof > 0
    passed = errors = 0
    for bit in range(32):
        with open(first, "r+b") as f:
            f.seek(eof)
            f.write(struct.pack("<I", HDR_EOF ^ (1 << bit)))
        try:
            with ac.open_queue(src, read_only=True) as queue:
                assert [ex.payload for ex in iter(queue.tailer().read_nowait, None)] == want
                t, got = queue.tailer(), []
                while batch := t.read_many(max_count=1000):
                    got += batch.payloads()
                assert got == want
                t = queue.tailer()
                for w_ in want:
                    ex = t.read_blocking(timeout=30)
                    assert ex is not None and ex.payload == w_, bit
            passed += 1
        except ac.CorruptQueueError as exc:
            assert "cycle" in str(exc), exc
            errors += 1
        if bit in (0, 30):
            r = cli("tail", str(src))
            assert r.returncode == 0, r.stderr
            assert len(r.stdout.splitlines()) == len(want), bit
    with open(first, "r+b") as f:
        f.seek(eof)
        f.write(struct.pack("<I", HDR_EOF))
    assert passed + errors == 32
    assert passed >= 31  # only a cleared top bit turns the word into something else
