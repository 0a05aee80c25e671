"""Writers in separate PID namespaces (containers) on one queue directory.

A writer runs under ``unshare --pid --fork`` (its own PID namespace, as a container
without ``--pid=host``), with a PID that no process has here. Its write lock must
never be taken for a dead process's: the lock word carries its namespace's tag
(``_writelock``), so a holder of another namespace is looked for there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from skips import skip

import aiochronicle as ac
from aiochronicle._format._tablestore import TableStore
from aiochronicle._storage._writelock import (
    WRITE_LOCK,
    free_dead_lock,
    holder_alive,
    lock_holder,
    lock_tag,
    namespace_tag,
    pid_alive,
)

K = 2000

INNER = textwrap.dedent(
    """
    import os, sys, aiochronicle as ac
    q = ac.open_queue(sys.argv[1], lock_timeout=60.0)
    app = q.appender()
    app.append(b"inner-hello")
    print("PID", os.getpid(), flush=True)
    assert sys.stdin.readline() == "go\\n"
    for i in range(@N@):
        app.append(b"inner-%d" % i)
    print("WROTE", flush=True)
    assert sys.stdin.readline() == "hold\\n"
    with app.writing_document() as doc:       # holds the write lock until the block ends
        doc.write(b"inner-held")
        print("HOLDING", q.table_store_get("chronicle.write.lock"), flush=True)
        assert sys.stdin.readline() == "release\\n"
    print("RELEASED", flush=True)
    q.close()
    """).replace("@N@", str(K))


def _free_pid() -> int:
    """A PID no process has here (the namespace's writer gets it)."""
    for pid in range(30_000, 1_000, -7):
        if not pid_alive(pid):
            return pid
    raise AssertionError("no free PID")


def _start_inner(path: Path, pid: int) -> subprocess.Popen[str]:
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        skip("pidns", "no unshare")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        skip("pidns", probe.stderr.strip())
    # the shell is PID 1 there; the PID after ns_last_pid goes to the writer it forks
    script = (f"echo {pid - 1} > /proc/sys/kernel/ns_last_pid && "
              f'"$0" -c "$1" "$2"; rc=$?; exit $rc')
    return subprocess.Popen([unshare, "--pid", "--fork", "--mount-proc", "sh", "-c", script,
                             sys.executable, INNER, str(path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _line(proc: subprocess.Popen[str], word: str) -> list[str]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(word):
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"expected {word}, got {line!r}: {err}")
    return line.split()


def _send(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(text + "\n")
    proc.stdin.flush()


@pytest.mark.slow
def test_a_writer_in_another_pid_namespace_keeps_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        q.appender().append(b"outer-hello")
    pid = _free_pid()
    inner = _start_inner(path, pid)
    try:
        (_, inner_pid) = _line(inner, "PID")
        # its PID there names no process here: a PID check would call it dead
        assert int(inner_pid) == pid and not pid_alive(pid)
        # both write at once: none lost, none doubled, one order
        _send(inner, "go")
        with ac.open_queue(path, lock_timeout=60.0) as q, q.appender() as app:
            for i in range(K):
                app.append(b"outer-%d" % i)
        _line(inner, "WROTE")
        _send(inner, "hold")
        (_, value) = _line(inner, "HOLDING")
        held = int(value)
        assert lock_holder(held) == pid and lock_tag(held) not in (0, namespace_tag())
        assert holder_alive(held)
        # a queue opened here while it holds the lock: not forced at open, nor after
        # lock_timeout (a live holder), nor by the dead-holder check
        with ac.open_queue(path, lock_timeout=0.3) as q, q.appender() as app:
            assert q.table_store_get(WRITE_LOCK) == held
            with pytest.raises(ac.WriteLockTimeoutError):
                app.append(b"outer-while-held")
            assert q.table_store_get(WRITE_LOCK) == held
            _send(inner, "release")
            _line(inner, "RELEASED")
            app.append(b"outer-after")
        assert inner.wait(timeout=60) == 0
    finally:
        if inner.poll() is None:
            inner.kill()
        inner.communicate()
    with ac.open_queue(path, read_only=True) as q:
        tailer = q.tailer()
        got = [bytes(e.payload) for e in iter(tailer.read_nowait, None)]
    want = {b"outer-hello", b"inner-hello", b"inner-held", b"outer-after",
            *(b"inner-%d" % i for i in range(K)), *(b"outer-%d" % i for i in range(K))}
    assert len(got) == len(want) and set(got) == want
    # each writer's own excerpts stay in its order
    for who in (b"inner-", b"outer-"):
        mine = [g for g in got if g.startswith(who) and g[len(who):].isdigit()]
        assert mine == [who + b"%d" % i for i in range(K)]
    # once its namespace is gone, a lock its writer left is a dead holder's here
    # (this process sees every namespace from the host's initial one)
    meta = TableStore(os.path.join(path, "metadata.cq4t"), read_only=False, timeout=2.0)
    try:
        meta.set(WRITE_LOCK, held)
        if os.stat("/proc/self/ns/pid").st_ino == 0xEFFFFFFC:
            assert free_dead_lock(meta, WRITE_LOCK, held) is True
        else:
            assert free_dead_lock(meta, WRITE_LOCK, held) is False
            meta.set(WRITE_LOCK, -(1 << 63))
    finally:
        meta.close()
