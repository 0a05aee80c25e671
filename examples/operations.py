"""Operating a queue from Python: stats, check and repair, lock recovery, retention.

Builds a small queue with one cycle file per (simulated) day, then walks through
what an operator does with it: look at it, find and repair damage, release a lock
a dead process left behind, and keep the disk in check with a retention policy
that runs every time the appender rolls to a new cycle.

Run it with ``python examples/operations.py [WORK_DIR]``.  Everything it does is
also on the command line: ``aiochronicle stats|check|repair|unlock|retention``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import aiochronicle as ac

DAY = 86_400_000


def build(path: str, clock: ac.SetTimeProvider) -> None:
    """Five days of ten excerpts each, and a named tailer halfway through."""
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_DAILY, time_provider=clock) as q:
        appender = q.appender()
        for day in range(5):
            if day:
                clock.advance_millis(DAY)
            for i in range(10):
                appender.append_text(f"day {day} message {i}")
        reporting = q.tailer("reporting")  # resumes where it stopped, across runs
        for _ in range(25):
            reporting.read_nowait()


def show_stats(path: str) -> None:
    stats = ac.queue_stats(path)
    print(f"{stats.total_excerpts} excerpts in {len(stats.cycles)} cycles "
          f"({stats.first_index:#x}..{stats.last_index:#x})")
    for t in stats.tailers:
        print(f"  named tailer {t.name}: next {t.index:#x}, {t.lag_messages} messages "
              f"({t.lag_bytes} bytes) behind")


def crash_a_writer(path: str) -> None:
    """What a writer killed at the wrong moment can leave: a lock held by a dead
    process (and, with older writers, a cycle without its EOF marker)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with ac.open_queue(path) as q:
        q.table_store_put("chronicle.write.lock", dead.pid)


def main() -> None:
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="aiochronicle-ops-")
    path = os.path.join(work, "queue")
    shutil.rmtree(path, ignore_errors=True)
    clock = ac.SetTimeProvider(19_000 * DAY)
    build(path, clock)

    print("== stats")
    show_stats(path)

    print("== check after a crash")
    crash_a_writer(path)
    for lock in ac.lock_states(path):
        print(f"  {lock.key}: holder {lock.holder}, alive: {lock.alive}")
    findings = ac.check_queue(path)
    for f in findings:
        print(f"  {f}")
    print("== repair (backing up first)")
    backup = os.path.join(work, "backup")
    for f in ac.repair_queue(path, backup_dir=backup):
        if f.repaired:
            print(f"  repaired {f.kind}: {f.fix}")
    print(f"  backup: {sorted(os.listdir(backup))}")
    print(f"  check now: {ac.check_queue(path) or 'clean'}")

    print("== retention: a dry run, then as a listener on the appender's rolls")
    # (the queue's clock decides the age of a cycle: here the simulated one)
    with ac.open_queue(path, time_provider=clock, read_only=True) as q:
        for d in ac.Retention(q, max_age="2d").plan():
            print(f"  {d.action:6} {os.path.basename(d.path)}: {d.reason}")

    removed: list[str] = []
    with ac.open_queue(path, time_provider=clock) as q:
        policy = ac.Retention(q, max_age="2d",
                              on_removed=lambda d: removed.append(os.path.basename(d.path)))
        # run inline (background=False) so this example can print right after the roll
        ac.add_store_file_listener(q, policy, background=False)
        appender = q.appender()
        for _ in range(3):
            clock.advance_millis(DAY)
            appender.append_text("a new day")  # rolls; the released cycle triggers retention
    print(f"  removed on roll: {removed}")
    show_stats(path)
    if len(sys.argv) <= 1:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
