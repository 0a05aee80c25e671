"""A cycle file whose header is not written yet: libchronicle renames a new
all-zero file into place before it writes the header, and a writer that dies
in between leaves it so for good.

Readers never wait for such a file: ``read_nowait()`` returns None at once
(nothing yet), ``async for`` waits with its pauser and keeps the event loop
running; a later cycle is not skipped to while the file may still be written
(younger than the queue's ``timeout``), and is once it is older (its creator is
gone).  ``check`` reports the first kind as info and the second as a warning
that ``repair`` fixes by moving the file aside.

The file's age is set with ``os.utime`` (never waited for).  The reading cases
run in a child process whose queue ``timeout`` is 600 s against a 60 s
deadline: a reader that waited for the header would miss the deadline.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import aiochronicle as ac

DAY = 86_400_000
START = 1_700_000_000_000
PER_CYCLE = 5


def make_queue(path: Path, cycles: int = 3) -> list[Path]:
    """A queue of ``cycles`` daily cycles of PER_CYCLE excerpts ``c<cycle>-<i>``;
    returns its cycle files, oldest first."""
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(path, time_provider=clock) as q:
        a = q.appender()
        for c in range(cycles):
            for i in range(PER_CYCLE):
                a.append(b"c%d-%d" % (c, i))
            if c + 1 < cycles:
                clock.advance_millis(DAY)
    return sorted(path.glob("*.cq4"))


def unwrite(cq4: Path, age: float) -> None:
    """Make ``cq4`` what a creator that has not written the header yet leaves:
    80 MiB of zeros, last changed ``age`` seconds ago (negative: in the future,
    so the file counts as just made however slow this machine is)."""
    os.truncate(cq4, 0)
    os.truncate(cq4, 83_754_496)
    t = time.time() - age
    os.utime(cq4, (t, t))


CHILD = textwrap.dedent("""
    import asyncio, os, sys, time
    import aiochronicle as ac

    path, unwritten = sys.argv[1], sys.argv[2]
    START, DAY = int(sys.argv[3]), int(sys.argv[4])

    def age_it():
        # the creator is gone: the file is older than the queue's timeout
        t = time.time() - 3600
        os.utime(unwritten, (t, t))

    def write_into(cycle, payload):
        # a writer whose clock is in `cycle` (in another queue object)
        clock = ac.SetTimeProvider(START + cycle * DAY)
        with ac.open_queue(path, timeout=600, time_provider=clock) as w:
            w.appender().append(payload)
""")


def run_child(body: str, qdir: Path, unwritten: Path) -> str:
    script = CHILD + textwrap.dedent(body) + "\nprint('OK')\n"
    proc = subprocess.run([sys.executable, "-c", script, str(qdir), str(unwritten),
                           str(START), str(DAY)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("OK"), proc.stdout
    return proc.stdout


def expected(cycles: range) -> list[bytes]:
    return [b"c%d-%d" % (c, i) for c in cycles for i in range(PER_CYCLE)]


def test_read_nowait_reads_an_unwritten_newest_cycle_as_nothing_yet(tmp_path: Path) -> None:
    files = make_queue(tmp_path / "q")
    unwrite(files[-1], age=-3600)
    run_child(f"""
        q = ac.open_queue(path, timeout=600)
        t = q.tailer()
        got = [ex.payload for ex in iter(t.read_nowait, None)]
        assert got == {expected(range(2))!r}, got
        assert t.read_nowait() is None
        age_it()
        assert t.read_nowait() is None  # nothing after it either
        # a writer moves the dead file aside and writes the cycle anew
        write_into(2, b"again")
        assert t.read_nowait().payload == b"again"
        q.close()
    """, tmp_path / "q", files[-1])
    assert list((tmp_path / "q").glob(files[-1].name + "-*.discard"))


def test_a_later_cycle_waits_until_the_unwritten_one_is_dead(tmp_path: Path) -> None:
    files = make_queue(tmp_path / "q", cycles=3)
    unwrite(files[1], age=-3600)
    run_child(f"""
        q = ac.open_queue(path, timeout=600)
        t = q.tailer()
        got = [ex.payload for ex in iter(t.read_nowait, None)]
        assert got == {expected(range(1))!r}, got  # its creator may still write it
        age_it()
        got = [ex.payload for ex in iter(t.read_nowait, None)]
        assert got == {expected(range(2, 3))!r}, got  # it never will: passed by
        q.close()
    """, tmp_path / "q", files[1])


def test_async_for_parks_at_an_unwritten_cycle_and_the_loop_runs(tmp_path: Path) -> None:
    files = make_queue(tmp_path / "q")
    unwrite(files[-1], age=-3600)
    run_child(f"""
        async def main():
            q = ac.open_queue(path, timeout=600)
            got, reached = [], asyncio.Event()

            async def consume():
                async for ex in q.tailer(pauser=ac.Pauser.balanced()):
                    got.append(ex.payload)
                    if len(got) == {2 * PER_CYCLE}:
                        reached.set()
                    if ex.payload == b"again":
                        return

            task = asyncio.ensure_future(consume())
            await reached.wait()
            for _ in range(200):  # other tasks run while the tailer waits
                await asyncio.sleep(0)
            assert not task.done()
            age_it()
            await asyncio.to_thread(write_into, 2, b"again")
            await asyncio.wait_for(task, 50)
            assert got == {expected(range(2))!r} + [b"again"], got
            q.close()

        asyncio.run(main())
    """, tmp_path / "q", files[-1])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], capture_output=True,
                          text=True, timeout=120)


def test_check_and_repair_tell_a_pending_file_from_a_dead_one(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    files = make_queue(qdir)
    unwrite(files[-1], age=-3600)
    # just made: its creator may be writing it; nothing to repair
    r = cli("check", str(qdir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"info: pending-file: {files[-1].name}" in r.stdout
    found = {(f.kind, Path(f.path).name) for f in ac.check_queue(str(qdir))}
    assert ("pending-file", files[-1].name) in found
    assert not any(f.repairable for f in ac.check_queue(str(qdir)))
    # its creator is gone: a warning, and repair moves the file aside
    unwrite(files[-1], age=3600)
    r = cli("check", str(qdir))
    assert r.returncode != 0
    assert f"warning: unfinished-file: {files[-1].name}" in r.stdout
    r = cli("repair", "--yes", str(qdir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert not files[-1].exists()
    assert list(qdir.glob(files[-1].name + "-*.discard"))
    assert cli("check", str(qdir)).returncode == 0
    with ac.open_queue(qdir) as q:
        assert [ex.payload for ex in q.tailer()] == expected(range(2))


def test_check_reports_a_dead_file_whatever_its_age_at_the_second_look(tmp_path: Path) -> None:
    """``check`` looks at a live queue's last cycle twice, 20 ms apart, and
    reports what both looks found: a file left without its header is one
    finding, though its age (in the message) has moved on by the second
    look.  The file's age steps through a second in 20 ms steps, so that at
    one of them the two looks straddle a change of the whole second shown."""
    qdir = tmp_path / "q"
    files = make_queue(qdir)
    unwrite(files[-1], age=3600)
    for k in range(50):
        t = time.time() - 3600 - k * 0.02
        os.utime(files[-1], (t, t))
        found = {(f.kind, Path(f.path).name) for f in ac.check_queue(str(qdir))}
        assert ("unfinished-file", files[-1].name) in found, (k, found)
