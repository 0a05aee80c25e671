"""The write lock under stalled holders: a writer SIGSTOPped while it holds
``chronicle.write.lock`` (mid-excerpt) and resumed after ``lock_timeout``, in
every unlock mode, with real processes.

Forced unlocking (``UnlockMode.ALWAYS``) must never let two writers write the
same bytes: the stalled writer finds out before it commits
(``WriteLockLostError``) and nothing acknowledged is lost or torn.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import aiochronicle as ac
from aiochronicle._format._tablestore import TableStore
from aiochronicle._objects._queue import cycles_of
from aiochronicle._storage._writelock import (
    APPEND_LOCK,
    WRITE_LOCK,
    free_dead_lock,
    lock_value,
    release_lock,
    take_lock,
)

STALLED_DOC = textwrap.dedent(
    """
    import os, sys, time, aiochronicle as ac
    path, mode, ready = sys.argv[1], sys.argv[2], sys.argv[3]
    with ac.open_queue(path, unlock_mode=ac.UnlockMode(mode), lock_timeout=0.5) as q:
        app = q.appender()
        try:
            with app.writing_document() as dc:
                dc.write(b"A" * 64)
                open(ready, "w").close()        # the parent stops us about here
                for _ in range(40):
                    time.sleep(0.005)
                    dc.write(b"A" * 64)
            print("COMMITTED", dc.index, flush=True)
        except ac.WriteLockLostError as exc:
            print("LOST", exc, flush=True)
    """
)


def _wait_for(path: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.002)


def _payloads(path: str) -> list[bytes]:
    with ac.open_queue(path, read_only=True) as q:
        return [ex.payload for ex in q.tailer()]


@pytest.mark.parametrize("mode", list(ac.UnlockMode))
def test_holder_stopped_mid_document_then_resumed(tmp_path, mode):
    path = str(tmp_path / "q")
    ready = str(tmp_path / "ready")
    with ac.open_queue(path) as q:
        q.appender().append(b"first")
    child = subprocess.Popen([sys.executable, "-c", STALLED_DOC, path, mode.value, ready],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(ready, child)
        child.send_signal(signal.SIGSTOP)
        acked = []
        with ac.open_queue(path, unlock_mode=mode, lock_timeout=0.5) as q:
            app = q.appender()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "forcing ... away"
                for i in range(20):
                    msg = b"B%03d" % i * 10
                    try:
                        acked.append((app.append(msg), msg))
                    except ac.WriteLockTimeoutError:
                        assert mode is not ac.UnlockMode.ALWAYS
                        break
        child.send_signal(signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err[-3000:]
    got = _payloads(path)
    if mode is ac.UnlockMode.ALWAYS:
        # the stalled writer learnt it lost the lock and published nothing;
        # every acknowledged excerpt is intact, at its index
        assert out.startswith("LOST"), out
        assert len(acked) == 20
        assert got == [b"first"] + [m for _, m in acked]
        with ac.open_queue(path, read_only=True) as q:
            t = q.tailer()
            for index, msg in acked:
                assert t.move_to_index(index)
                ex = t.read_nowait()
                assert ex is not None and ex.payload == msg
    else:
        # a live holder keeps the lock: the waiter gave up, the holder committed
        assert acked == []
        assert out.startswith("COMMITTED"), out
        assert got == [b"first", b"A" * 64 * 41]
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "check", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


STRESS_WRITER = textwrap.dedent(
    """
    import os, sys, time, warnings, aiochronicle as ac
    path, wid, count, acks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    done = sys.argv[5]
    warnings.simplefilter("ignore", RuntimeWarning)
    lost = 0
    with ac.open_queue(path, unlock_mode=ac.UnlockMode.ALWAYS, lock_timeout=0.15,
                       roll_cycle=ac.RollCycles.FAST_DAILY) as q, open(acks, "w") as log:
        app = q.appender()
        n = 0
        # at least `count` excerpts, and on until the parent has done its stops
        while n < count or not os.path.exists(done):
            time.sleep(0.0005)
            msg = b"w%d-%05d|" % (wid, n) + bytes([65 + wid]) * (20 + n % 200)
            while True:
                try:
                    if n % 3 == 0:
                        with app.writing_document() as dc:
                            dc.write(msg[:10])
                            time.sleep(0.002)
                            dc.write(msg[10:])
                        index = dc.index
                    else:
                        index = app.append(msg)
                    break
                except (ac.WriteLockLostError, ac.WriteLockTimeoutError):
                    lost += 1
            log.write("%d %s\\n" % (index, msg.hex()))
            log.flush()
            n += 1
    print("lost", lost)
    """
)


def test_forced_unlock_with_stopped_writers_loses_and_tears_nothing(tmp_path):
    """Three writers in UnlockMode.ALWAYS, stopped and resumed at random while
    they write: every acknowledged excerpt is read back once, intact, at its
    index; nothing else is there; `check` finds the queue sound."""
    path = str(tmp_path / "q")
    count = 250
    done = str(tmp_path / "done")
    procs = []
    for w in range(3):
        acks = str(tmp_path / f"acks{w}")
        procs.append((subprocess.Popen(
            [sys.executable, "-c", STRESS_WRITER, path, str(w), str(count), acks, done],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), acks))
    rnd = random.Random(13)
    stops = 0
    # until every writer has acknowledged an excerpt (all three are writing)
    deadline = time.monotonic() + 120
    while not all(os.path.exists(acks) and os.path.getsize(acks) for _, acks in procs):
        assert all(p.poll() is None for p, _ in procs), [p.communicate() for p, _ in procs]
        assert time.monotonic() < deadline, "the writers never started"
        time.sleep(0.01)
    watcher = ac.open_queue(path, read_only=True)
    try:
        deadline = time.monotonic() + 120
        # the writers write on until this has stopped and resumed one 12 times
        while stops < 12:
            assert time.monotonic() < deadline, "too slow"
            live = {p.pid: p for p, _ in procs if p.poll() is None}
            assert len(live) == 3, [p.communicate() for p, _ in procs if p.poll() is not None]
            time.sleep(rnd.uniform(0.02, 0.1))
            # mostly stop the writer holding the lock (mid-excerpt), else any
            holder = (watcher.table_store_get("chronicle.write.lock") or 0) & 0xFFFFFFFF
            victim = live.get(holder) if rnd.random() < 0.8 else None
            if victim is None:
                victim = rnd.choice(list(live.values()))
            try:
                victim.send_signal(signal.SIGSTOP)
            except ProcessLookupError:
                continue
            stops += 1
            time.sleep(rnd.uniform(0.2, 0.5))
            victim.send_signal(signal.SIGCONT)
        open(done, "w").close()
        for p, _ in procs:
            p.wait(timeout=120)
    finally:
        watcher.close()
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
    acked: dict[int, bytes] = {}
    for p, acks in procs:
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err[-3000:]
        with open(acks) as f:
            for line in f:
                index, hexmsg = line.split()
                assert int(index) not in acked, "two writers acknowledged one index"
                acked[int(index)] = bytes.fromhex(hexmsg)
    assert len(acked) >= 3 * count
    with ac.open_queue(path, read_only=True) as q:
        got = [(ex.index, ex.payload) for ex in q.tailer()]
    assert got == sorted(acked.items())
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "check", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_lock_timeout_restarts_when_the_lock_changes_hands(tmp_path):
    """A waiter with UnlockMode.ALWAYS must not force the lock away from a live
    holder that has held it for less than lock_timeout, even when the lock went
    from one holder to another without the waiter ever seeing it free."""
    path = str(tmp_path / "q")
    lock_timeout = 2.0
    # each holder keeps the lock an eighth of the timeout (a stall of 7/8 of it
    # on a loaded machine still hands over in time); together they hold it for
    # 1.5 timeouts, which a waiter whose timeout did not restart would force
    hold = lock_timeout / 8
    handovers = 12
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                for _ in range(2)]
    try:
        with ac.open_queue(path, unlock_mode=ac.UnlockMode.ALWAYS,
                           lock_timeout=lock_timeout) as q:
            q.appender().append(b"x")
            q.table_store_put("chronicle.write.lock", sleepers[0].pid)
            child = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(
                    """
                    import sys, warnings, aiochronicle as ac
                    warnings.simplefilter("error", RuntimeWarning)
                    with ac.open_queue(sys.argv[1], unlock_mode=ac.UnlockMode.ALWAYS,
                                       lock_timeout=float(sys.argv[2])) as q:
                        print("waiting", flush=True)
                        print(q.appender().append(b"waiter"))
                    """), path, str(lock_timeout)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert child.stdout is not None
            assert child.stdout.readline() == "waiting\n"  # about to meet the held lock
            # hand the lock between two live processes, each holding it `hold`
            for n in range(handovers):
                time.sleep(hold)  # how long a holder holds: the thing under test
                assert child.poll() is None, child.communicate()
                # a plain store (table_store_put only ever raises a value)
                cycles_of(q).meta.set("chronicle.write.lock", sleepers[(n + 1) % 2].pid)
            time.sleep(hold)
            assert child.poll() is None, child.communicate()
            assert q.table_store_get("chronicle.write.lock") == sleepers[handovers % 2].pid
            q.table_store_put("chronicle.write.lock", -(1 << 63))
            _out, err = child.communicate(timeout=30)
        assert child.returncode == 0, err[-3000:]
        assert _payloads(path) == [b"x", b"waiter"]
    finally:
        for s in sleepers:
            s.kill()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_taking_a_lock_by_force_in_one_place(tmp_path):
    """``_writelock.take_lock`` (repair's write lock, a sink's append lock):
    a free or absent lock is taken, a dead holder's is taken over, a live
    holder's (this process's too) is not; ``release_lock`` frees only our own
    and creates no key; ``free_dead_lock`` frees only a dead holder's."""
    unlocked = -(1 << 63)
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        q.appender().append(b"x")
    me = lock_value()  # this PID, tagged with its PID namespace
    meta = TableStore(os.path.join(path, "metadata.cq4t"), read_only=False, timeout=2.0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # absent: not created by a release, created (ours) by a take
        assert meta.get(APPEND_LOCK) is None
        assert release_lock(meta, APPEND_LOCK) is False and meta.get(APPEND_LOCK) is None
        assert take_lock(meta, APPEND_LOCK) is None and meta.get(APPEND_LOCK) == me
        # held by this process: a live holder, not taken again
        assert take_lock(meta, APPEND_LOCK) == os.getpid()
        assert free_dead_lock(meta, APPEND_LOCK, me) is False and meta.get(APPEND_LOCK) == me
        assert release_lock(meta, APPEND_LOCK) is True and meta.get(APPEND_LOCK) == unlocked
        # a dead holder's: freed, or taken over
        dead = _dead_pid()
        meta.set(WRITE_LOCK, dead)
        assert free_dead_lock(meta, WRITE_LOCK, dead) is True
        assert meta.get(WRITE_LOCK) == unlocked
        meta.set(WRITE_LOCK, dead)
        assert take_lock(meta, WRITE_LOCK) is None and meta.get(WRITE_LOCK) == me
        assert release_lock(meta, WRITE_LOCK) and meta.get(WRITE_LOCK) == unlocked
        # a live holder's: kept, and who holds it is said
        meta.set(WRITE_LOCK, sleeper.pid)
        assert free_dead_lock(meta, WRITE_LOCK, sleeper.pid) is False
        assert take_lock(meta, WRITE_LOCK, timeout=0.05) == sleeper.pid
        assert release_lock(meta, WRITE_LOCK) is False
        assert meta.get(WRITE_LOCK) == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()
        meta.close()
