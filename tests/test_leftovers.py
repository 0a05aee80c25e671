"""What writers leave behind: files a killed writer was building, the empty
next cycle a pretoucher makes, and the metadata mapping after ``close()``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import aiochronicle as ac

DAY = 86_400_000
T0 = 19_000 * DAY + DAY - 1_000  # one second before a FAST_DAILY roll


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], capture_output=True,
                          text=True, timeout=120)


# builds the next cycle's file aside, as a roll does, then waits: the real
# `.NAME.PID.creating` a writer killed in that window leaves behind
BUILDER = textwrap.dedent(
    """
    import sys, aiochronicle as ac
    from aiochronicle._objects._queue import cycles_of
    from aiochronicle._format._store import _build_aside
    path, cycle = sys.argv[1], int(sys.argv[2])
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY) as q:
        rc = q.roll_cycle
        tmp, f, _ = _build_aside(q.cycle_path(cycle), cycle, rc.index_count,
                                 rc.index_spacing, q.block_size, cycles_of(q).overlap)
        print(tmp, flush=True)
        sys.stdin.readline()  # killed here
    """
)


def test_check_lists_and_repair_removes_a_dead_writers_creating_file(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY,
                       time_provider=ac.SetTimeProvider(T0)) as q:
        app = q.appender()
        for i in range(3):
            app.append(b"m%d" % i)
    builder = subprocess.Popen([sys.executable, "-c", BUILDER, path, "19001"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout is not None
        tmp = builder.stdout.readline().strip()
        assert os.path.basename(tmp) == f".20220109F.cq4.{builder.pid}.creating"
        assert os.path.exists(tmp)
        # a live builder: reported, never removed
        r = cli("check", path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"info: creating-file: {os.path.basename(tmp)}: process {builder.pid} is " \
               "building 20220109F.cq4" in r.stdout
        r = cli("repair", "--yes", "--no-backup", path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert os.path.exists(tmp)
    finally:
        builder.send_signal(signal.SIGKILL)
        builder.wait(timeout=60)
    r = cli("check", path)
    assert r.returncode == 3, r.stdout + r.stderr  # warnings only
    assert f"warning: creating-file: {os.path.basename(tmp)}: process {builder.pid} died " \
           "building 20220109F.cq4" in r.stdout
    assert "[repair: remove it]" in r.stdout
    r = cli("repair", "--yes", "--no-backup", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not os.path.exists(tmp)
    r = cli("check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no problems found" in r.stdout
    with ac.open_queue(path, read_only=True) as q:
        assert [ex.payload for ex in q.tailer()] == [b"m0", b"m1", b"m2"]


def test_no_missing_eof_before_the_empty_cycle_a_pretoucher_made(tmp_path):
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY, time_provider=clock) as q:
        app = q.appender()
        app.append(b"before the roll")
        q.pretoucher(preroll=5).execute()
        assert q.cycles() == [19_000, 19_001]  # the next cycle's file, empty
        r = cli("check", path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "missing-eof" not in r.stdout
        # once the next cycle holds an excerpt the roll has closed the first
        clock.advance_millis(2_000)
        app.append(b"after the roll")
    r = cli("check", path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no problems found" in r.stdout


def _drop_eof(cycle_file: str) -> None:
    """Zero the EOF marker (the last document) of a closed cycle file."""
    with open(cycle_file, "r+b") as f:
        data = f.read()
        pos = (len(data.rstrip(b"\0")) - 1) & ~3
        while int.from_bytes(data[pos:pos + 4], "little") & 0xC000_0000 != 0xC000_0000:
            pos -= 4
        assert data[pos + 4:pos + 8] == b"\xc3EOF", data[pos:pos + 8]
        f.seek(pos)
        f.write(bytes(8))


def test_missing_eof_is_still_reported_when_data_follows_the_empty_cycle(tmp_path):
    """Only empty cycles at the end are skipped: a cycle without its EOF
    followed by an empty one and then one with data is still reported."""
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY, time_provider=clock) as q:
        app = q.appender()
        app.append(b"in 19000")
        q.pretoucher(preroll=5).execute()  # makes 19001, empty
        clock.advance_millis(DAY + 2_000)
        app.append(b"in 19002")  # the roll closes 19000 and 19001 with EOFs
        first = q.cycle_path(19_000)
        assert q.cycles() == [19_000, 19_001, 19_002]
    assert ac.check_queue(path) == []
    _drop_eof(first)
    assert [(f.kind, f.path) for f in ac.check_queue(path)] == [("missing-eof", first)]


CLOSE_UNMAPS = textwrap.dedent(
    """
    import os, sys, aiochronicle as ac
    from aiochronicle._objects._queue import cycles_of

    def meta_in_use():
        maps = [line for line in open("/proc/self/maps") if "metadata.cq4t" in line]
        fds = [fd for fd in os.listdir("/proc/self/fd")
               if os.path.realpath("/proc/self/fd/" + fd).endswith("metadata.cq4t")]
        return len(maps), len(fds)

    q = ac.open_queue(sys.argv[1])
    q.appender().append(b"x")
    t = q.tailer("named")
    assert t.read_nowait().payload == b"x"
    print(*meta_in_use())
    q.close()
    print(*meta_in_use())   # q, t and the appender are all still referenced
    # closed inside a `with` of the write lock (a store file listener may):
    # the lock is released on the way out, so the word stays mapped till then
    q = ac.open_queue(sys.argv[1])
    with cycles_of(q).write_lock:
        q.close()
    print(*meta_in_use())
    print(*[(s.key, s.locked) for s in ac.lock_states(sys.argv[1])])
    """
)


def test_close_unmaps_metadata_at_once(tmp_path):
    r = subprocess.run([sys.executable, "-c", CLOSE_UNMAPS, str(tmp_path / "q")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    before, after, in_lock, locks = r.stdout.splitlines()
    assert before == "1 1"
    assert after == "0 0"
    assert in_lock == "1 1"
    assert "('chronicle.write.lock', False)" in locks
