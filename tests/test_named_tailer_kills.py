"""Named tailers are at least once: a process killed at any step of handling an
excerpt reads that excerpt again when it restarts, never skips one.

Real processes, SIGKILLed by themselves at a chosen step (after the read,
in the middle of handling, after handling and before the next read), for the
sync ``read_nowait`` loop, ``async for`` and a method reader.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest

import aiochronicle as ac

N = 24

CONSUMER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import aiochronicle as ac

    path, log, style, kill_at, phase = (sys.argv[1], sys.argv[2], sys.argv[3],
                                        int(sys.argv[4]), sys.argv[5])
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    steps = 0

    def handle(n: int) -> None:
        global steps
        if steps == kill_at and phase == "read":
            os.kill(os.getpid(), signal.SIGKILL)
        os.write(fd, b"start %d\\n" % n)
        if steps == kill_at and phase == "handling":
            os.kill(os.getpid(), signal.SIGKILL)
        os.write(fd, b"done %d\\n" % n)
        if steps == kill_at and phase == "handled":
            os.kill(os.getpid(), signal.SIGKILL)
        steps += 1

    class Handler:
        def item(self, n: int) -> None:
            handle(n)

    with ac.open_queue(path) as q:
        t = q.tailer("worker")
        if style == "sync":
            while (ex := t.read_nowait()) is not None:
                handle(int(ex.payload))
        elif style == "async":
            async def main() -> None:
                async for ex in t.until_end():
                    handle(int(ex.payload))
            asyncio.run(main())
        else:
            t.method_reader(Handler()).read_available()
    os.write(fd, b"finished\\n")
    """
)


def _write_items(path: str, style: str) -> None:
    class Items:
        def item(self, n: int) -> None: ...

    with ac.open_queue(path) as q:
        app = q.appender()
        if style == "methods":
            w = app.method_writer(Items)
            for n in range(N):
                w.item(n)
        else:
            for n in range(N):
                app.append(b"%d" % n)


@pytest.mark.parametrize("style", ["sync", "async", "methods"])
def test_named_tailer_killed_at_every_step_never_skips(tmp_path, style):
    path = str(tmp_path / "q")
    log = str(tmp_path / "log")
    _write_items(path, style)
    rnd = random.Random(style)
    kills = 0
    for _run in range(60):
        phase = rnd.choice(["read", "handling", "handled"])
        kill_at = rnd.randrange(0, 4)
        r = subprocess.run([sys.executable, "-c", CONSUMER, path, log, style, str(kill_at),
                            phase], capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            break
        assert r.returncode == -9, r.stderr[-3000:]
        kills += 1
        with open(log, "a") as f:
            f.write("killed\n")
    else:
        pytest.fail("the consumer never finished")
    assert kills >= 3
    runs: list[list[tuple[str, int]]] = [[]]
    with open(log) as f:
        for line in f:
            word, *rest = line.split()
            if word in ("killed", "finished"):
                runs.append([])
            else:
                runs[-1].append((word, int(rest[0])))
    done = [n for run in runs for w, n in run if w == "done"]
    assert sorted(set(done)) == list(range(N))  # every item handled
    last_done = -1
    for run in runs:
        starts = [n for w, n in run if w == "start"]
        if starts:
            # a restart resumes at the excerpt in hand when the process died
            # (handled or not), never after it
            assert last_done <= starts[0] <= last_done + 1, (starts[0], last_done)
            assert starts == list(range(starts[0], starts[0] + len(starts)))
        dones = [n for w, n in run if w == "done"]
        if dones:
            last_done = dones[-1]
    assert os.path.getsize(log) > 0
