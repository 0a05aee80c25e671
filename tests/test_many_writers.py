"""Many appenders in many processes: nothing lost, nothing duplicated, one order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from workers import make_message, open_q, parse_message

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

WORKERS = os.path.join(os.path.dirname(__file__), "workers.py")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(__file__), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_four_writer_processes_two_live_tailers(tmp_path):
    path = str(tmp_path / "q")
    writers, per_writer = 4, 250_000
    total = writers * per_writer
    with open_q(path):
        pass  # metadata.cq4t exists before the race
    env = _env()
    tailers = [subprocess.Popen([sys.executable, WORKERS, "tailer", path, str(total), "600"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env) for _ in range(2)]
    procs = [subprocess.Popen([sys.executable, WORKERS, "writer", path, str(w), str(per_writer)],
                              stderr=subprocess.PIPE, text=True, env=env)
             for w in range(writers)]
    for p in procs:
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, err
    reports = []
    for t in tailers:
        out, err = t.communicate(timeout=900)
        assert t.returncode == 0, err
        reports.append(json.loads(out))

    # both live tailers saw every message, in the same total order
    assert reports[0]["count"] == total
    assert reports[0] == reports[1]
    assert reports[0]["dense"]
    assert reports[0]["last"] == {str(w): per_writer - 1 for w in range(writers)}

    # and the queue on disk says the same to a fresh reader
    seen: dict[int, int] = {}
    with open_q(path, read_only=True) as q:
        assert q.entry_count() == total
        t = q.tailer()
        while True:
            batch = t.read_many(65536, 4 << 20)
            if not len(batch):
                break
            for payload in batch.payloads():
                w, _, n = parse_message(payload)
                assert seen.get(w, -1) + 1 == n
                seen[w] = n
    assert seen == {w: per_writer - 1 for w in range(writers)}


def test_threads_of_one_process_share_the_lock(tmp_path):
    path = str(tmp_path / "q")
    count, nthreads = 20_000, 4
    with open_q(path) as q:
        def run(wid: int) -> None:
            app = q.appender()
            for n in range(count):
                app.append(make_message(wid, 0, n, 4))

        threads = [threading.Thread(target=run, args=(w,)) for w in range(nthreads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        last: dict[int, int] = {}
        indices = []
        for ex in q.tailer():
            w, _, n = parse_message(ex.payload)
            assert last.get(w, -1) + 1 == n
            last[w] = n
            indices.append(ex.index)
        assert last == {w: count - 1 for w in range(nthreads)}
        assert indices == list(range(indices[0], indices[0] + count * nthreads))


def test_append_lock_held_by_live_process_refuses_appends(tmp_path):
    path = str(tmp_path / "q")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open_q(path) as q:
            q.appender().append(b"before")
            assert cycles_of(q).meta is not None
            cycles_of(q).meta.set("chronicle.append.lock", holder.pid)
            app = q.appender()
            try:
                app.append(b"refused")
            except ac.AppendLockedError as exc:
                assert str(holder.pid) in str(exc)
            else:
                raise AssertionError("append went through a held append lock")
            # metadata excerpts are still allowed, as in Java
            app.append_metadata(b"m")
    finally:
        holder.kill()
        holder.wait()
    # the holder is dead now: appends go through again
    with open_q(path) as q:
        assert q.appender().append(b"after") >= 0
        assert [ex.payload for ex in q.tailer()] == [b"before", b"after"]


def test_write_lock_of_dead_process_is_recovered(tmp_path):
    path = str(tmp_path / "q")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with open_q(path) as q:
        q.appender().append(b"one")
        assert cycles_of(q).meta is not None
        cycles_of(q).meta.set("chronicle.write.lock", dead.pid)
        assert q.appender().append(b"two") >= 0
        assert cycles_of(q).meta.get("chronicle.write.lock") == -(1 << 63)


def test_write_lock_of_live_process_times_out_then_modes(tmp_path):
    path = str(tmp_path / "q")
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open_q(path, lock_timeout=0.3) as q:
            q.appender().append(b"one")
            assert cycles_of(q).meta is not None
            cycles_of(q).meta.set("chronicle.write.lock", holder.pid)
            try:
                q.appender().append(b"two")
            except ac.WriteLockTimeoutError as exc:
                assert str(holder.pid) in str(exc)
            else:
                raise AssertionError("appended while a live process held the lock")
        with open_q(path, lock_timeout=0.3, unlock_mode=ac.UnlockMode.ALWAYS) as q:
            import warnings
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert q.appender().append(b"forced") >= 0
            assert any("forcing" in str(w.message) for w in caught)
            assert [ex.payload for ex in q.tailer()] == [b"one", b"forced"]
    finally:
        holder.kill()
        holder.wait()
