"""Queues in the layout libchronicle writes: cycle files without a header
document or index pages (data from offset 0) and a table store exactly as long
as its content.  They are built by ``tests/libchronicle_format.py`` from the
format facts, and read here through the API and every reading command of the
CLI, also while another process appends to them; appending to them is refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from libchronicle_format import FILE_SIZE, LibchronicleStyleWriter, metadata_bytes, text_payload

import aiochronicle as ac

HOUR = 3_600_000
FIRST = 18949 * 24  # a FAST_HOURLY cycle (2021-11-18 00:00)
FORMAT = "yyyyMMdd-HH'F'"
STRFTIME = "%Y%m%d-%HF"
WRITER = Path(__file__).with_name("libchronicle_format.py")


def run(*args: str, stdin: str = "", timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)


def build(path: Path) -> list[tuple[int, bytes]]:
    """Three hourly cycles with a gap of one hour: raw and BinaryWire text payloads."""
    w = LibchronicleStyleWriter(path, FORMAT, HOUR, FIRST, STRFTIME)
    written = []
    try:
        for cycle, n in ((FIRST, 300), (FIRST + 1, 2), (FIRST + 3, 40)):
            for i in range(n):
                payload = text_payload(f"t{cycle}-{i}") if i % 3 == 0 else b"r%d-%d" % (cycle, i)
                written.append((w.append(payload, cycle), payload))
    finally:
        w.close()
    return written


@pytest.fixture
def lcq(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    q = tmp_path / "lcq"
    return q, build(q)


def test_the_built_queue_has_libchronicle_layout(lcq: tuple[Path, list[tuple[int, bytes]]]
                                                 ) -> None:
    q, written = lcq
    files = sorted(p.name for p in q.iterdir())
    assert files == ["20211118-00F.cq4", "20211118-01F.cq4", "20211118-03F.cq4",
                     "metadata.cq4t"]
    assert (q / "metadata.cq4t").stat().st_size == 440  # FAST_HOURLY: 7 padding bytes
    first = (q / "20211118-00F.cq4").read_bytes()
    assert len(first) == FILE_SIZE
    # the first excerpt's header at offset 0, its payload right after it
    assert first[:4] == len(written[0][1]).to_bytes(4, "little")
    assert first[4:4 + len(written[0][1])] == written[0][1]
    assert written[0][0] == FIRST << 32


def test_table_store_matches_the_golden_vector(java_fixtures: Path) -> None:
    """For FAST_DAILY libchronicle's metadata.cq4t equals the first 432 bytes
    of Java's (the vector libchronicle's own tests compare with)."""
    golden = (java_fixtures / "metadata-cq4t-excerpt-cycle18941.bin").read_bytes()
    assert metadata_bytes("yyyyMMdd'F'", 86_400_000, 18941) == golden


def test_read_forward_backward_and_by_index(lcq: tuple[Path, list[tuple[int, bytes]]]
                                           ) -> None:
    q, written = lcq
    for read_only in (True, False):
        with ac.open_queue(q, read_only=read_only) as queue:
            assert queue.roll_cycle is ac.RollCycles.FAST_HOURLY
            assert [(e.index, e.payload) for e in queue.tailer()] == written
            back = queue.tailer(direction=ac.TailerDirection.BACKWARD).to_end()
            assert [(e.index, e.payload) for e in back] == written[::-1]
            assert queue.first_index == written[0][0]
            assert queue.last_index == written[-1][0]
            assert queue.entry_count() == len(written)
            t = queue.tailer()
            for index, payload in written[::37] + written[-3:]:
                assert t.move_to_index(index)
                ex = t.read_nowait()
                assert ex is not None and (ex.index, ex.payload) == (index, payload)
            # past the end of a cycle, and the next index to be written
            assert not t.move_to_index((FIRST << 32) + 300 + 1)
            assert not t.move_to_index(written[-1][0] + 1)
            batch = queue.tailer().read_many(max_count=100)
            assert [(e.index, e.payload) for e in batch] == written[:100]
            first = queue.tailer().read_nowait()
            assert first is not None and first.text == f"t{FIRST}-0"  # prefix 0xE9 dropped


def test_append_is_refused_with_a_named_error(lcq: tuple[Path, list[tuple[int, bytes]]]
                                              ) -> None:
    q, written = lcq
    last = q / "20211118-03F.cq4"
    before = last.read_bytes()
    clock = ac.SetTimeProvider((FIRST + 3) * HOUR + 10)
    with ac.open_queue(q, time_provider=clock) as queue:
        a = queue.appender()
        with pytest.raises(ac.HeaderlessCycleError) as err:
            a.append(b"x")
        assert "no header document" in str(err.value) and "libchronicle" in str(err.value)
        assert str(last) in str(err.value)
        with pytest.raises(ac.HeaderlessCycleError):
            a.write_at(written[-1][0] + 1, b"x")
    assert last.read_bytes() == before
    assert len(list(q.glob("*.cq4"))) == 3
    # the CLI: a queue whose newest cycle (ahead of the clock) libchronicle wrote
    future = q.parent / "future"
    w = LibchronicleStyleWriter(future, FORMAT, HOUR, 1_140_000, STRFTIME)  # in 2100
    w.append(b"from libchronicle")
    w.close()
    r = run("write", str(future), "-q", stdin="refused\n")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot append to" in r.stderr and "no header document" in r.stderr
    assert len(list(future.glob("*.cq4"))) == 1
    r = run("repair", str(q), "--yes", "--no-backup")
    assert r.returncode == 3 and "nothing to repair" in r.stdout, r.stdout + r.stderr


def test_cli_reads_it(lcq: tuple[Path, list[tuple[int, bytes]]]) -> None:
    q, written = lcq
    r = run("tail", str(q))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(written)
    assert lines[0] == f"{written[0][0]:#x}: t{FIRST}-0"
    assert lines[1] == f"{written[1][0]:#x}: r{FIRST}-1"
    r = run("tail", str(q), "-n", hex(written[-2][0]))
    assert r.stdout.splitlines() == lines[-2:]
    r = run("tail", str(q), "-k", "-x", "2")
    assert r.stdout.splitlines() == lines[::-1][:2]
    r = run("tail", str(q), "--named", "reader", "-x", "5")
    assert r.returncode == 0, r.stderr
    r = run("tail", str(q), "--named", "reader", "-x", "1")
    assert r.stdout.splitlines() == lines[5:6]

    r = run("dump", str(q), "--skip-table-store")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("# no header document, written by libchronicle") == 3
    assert r.stdout.count("--- !!data") == len(written)
    assert f"t{FIRST + 3}-39" in r.stdout
    r = run("dump", str(q), "--from", hex(written[301][0]), "--to", hex(written[302][0]))
    assert r.stdout.count("--- !!data") == 2

    r = run("stats", str(q))
    assert r.returncode == 0, r.stderr
    assert f"{len(written)} in 3 cycles" in r.stdout

    r = run("check", str(q))
    assert r.returncode == 3, r.stdout + r.stderr  # warnings only
    assert r.stdout.count("warning: headerless-file:") == 3
    assert "0 errors, 3 warnings" in r.stdout


def test_live_while_another_process_appends(tmp_path: Path) -> None:
    """``tail -f`` started before the queue exists waits for it, then follows a
    libchronicle-style writer in another process across rolls; an API tailer in
    this process reads the same excerpts live."""
    q = tmp_path / "later" / "lcq"
    count, per_cycle = 3000, 1000
    tail = subprocess.Popen([sys.executable, "-m", "aiochronicle", "tail", "-f", str(q),
                             "-x", str(count)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert tail.stderr is not None
    waiting = tail.stderr.readline()  # said once, before anything exists
    assert "waiting for a queue to appear at" in waiting and not q.parent.exists()
    writer = subprocess.Popen([sys.executable, str(WRITER), str(q), FORMAT, str(HOUR),
                               str(FIRST), str(count), str(per_cycle), STRFTIME],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline() == "ready\n"
        got: list[tuple[int, bytes]] = []
        with ac.open_queue(q, read_only=True) as queue:
            t = queue.tailer()
            writer.stdin.write("go\n")
            writer.stdin.flush()
            while len(got) < count:
                ex = t.read_blocking(timeout=60)
                assert ex is not None, f"stuck after {len(got)} excerpts"
                got.append((ex.index, ex.payload))
        assert writer.stdout.readline() == "done\n"
        expected = [(((FIRST + i // per_cycle) << 32) | (i % per_cycle), b"live %d" % i)
                    for i in range(count)]
        assert got == expected
        out, err = tail.communicate(timeout=60)
    finally:
        for p in (tail, writer):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert tail.returncode == 0, err
    assert "waiting" not in err
    assert out.splitlines() == [f"{i:#x}: live {n}" for n, (i, _) in enumerate(expected)]
