"""Writers killed with SIGKILL at random points never break the queue.

Three writer processes append messages of mixed sizes (up to 600 kB, so kills
land mid-payload too) through ``append``, ``writing_document`` and
``append_metadata`` on a roll cycle of one second (so kills land in rolls and
file creation too), while two tailer processes read live.  The test kills a
random writer at a random moment, replacing it each time: 240 kills in all, as
four campaigns of 60 on four queues (each with its own seed), which run side by
side on the pytest-xdist workers (a campaign mostly waits on its writers).  Each
campaign then checks:

* every message whose append returned an index is in the queue exactly once,
  at that index;
* nothing else is there but complete messages a writer was in the middle of
  appending when it was killed (at most one per kill), never a torn payload;
* the live tailers read without error and saw the same order;
* a new appender can append afterwards.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import random
import shutil
import struct
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

import pytest
import workers
from workers import ACK, HEAD, open_q, parse_message

WORKERS = os.path.join(os.path.dirname(__file__), "workers.py")
CAMPAIGNS = 4
KILLS = 60
"""Kills per campaign (``CAMPAIGNS`` of them: 240 kills in all)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(__file__), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["ROLL"] = "TEST_SECONDLY"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("campaign", range(CAMPAIGNS))
def test_random_sigkill_of_writers(tmp_path, campaign):
    path = str(tmp_path / "q")
    ack_path = str(tmp_path / "acks")
    env = _env()
    os.environ["ROLL"] = "TEST_SECONDLY"
    try:
        with open_q(path):
            pass
    finally:
        del os.environ["ROLL"]
    rnd = random.Random(20261122 + campaign)
    incarnation = 0
    # writers are forks of this process, which has opened the queue already (every
    # module an appender needs imported): a replacement is appending within
    # milliseconds of the kill.  (Children of a fork server took about half a
    # second each to start appending while the other writers wrote on: the same 60
    # kills took eight times the time and ten times the CPU.)  A writer touches
    # nothing of pytest's, and dies by SIGKILL: no exit handler runs.
    ctx = mp.get_context("fork")
    os.environ["ROLL"] = "TEST_SECONDLY"

    def spawn(wid: int) -> tuple[BaseProcess, Connection]:
        nonlocal incarnation
        incarnation += 1
        ready_r, ready_w = ctx.Pipe(duplex=False)
        p = ctx.Process(target=workers.crash_writer,
                        args=(path, wid, incarnation, ack_path, rnd.getrandbits(32), ready_w))
        p.start()
        ready_w.close()
        return p, ready_r

    stop_file = str(tmp_path / "stop")
    tailers = [subprocess.Popen([sys.executable, WORKERS, "live-tailer", path, stop_file],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        writers = {w: spawn(w) for w in range(3)}
        kills = 0
        deadline = time.monotonic() + 600
        while kills < KILLS and time.monotonic() < deadline:
            wid = rnd.randrange(3)
            p, ready = writers[wid]
            # kill only once it is appending, at a random moment after that
            assert ready.poll(60), f"writer {wid} never became ready"
            ready.recv()
            time.sleep(rnd.uniform(0.0, 0.03))
            assert p.is_alive(), f"writer {wid} died by itself (exit code {p.exitcode})"
            p.kill()
            p.join()
            ready.close()
            kills += 1
            writers[wid] = spawn(wid)
        for p, ready in writers.values():
            p.kill()
            p.join()
            ready.close()
    finally:
        del os.environ["ROLL"]
    assert kills >= KILLS

    # a new appender takes over whatever the dead left behind
    with open_q(path, roll_cycle=None) as q:
        final_index = q.appender().append(b"final")
        assert final_index >= 0

    # every acknowledged message is there, once, at its index
    acks = {}
    with open(ack_path, "rb") as f:
        raw = f.read()
    for off in range(0, len(raw) - len(raw) % ACK.size, ACK.size):
        w, inc, n, index = ACK.unpack_from(raw, off)
        acks[(w, inc, n)] = index
    assert len(acks) > 1000, "the writers hardly wrote anything"

    found: dict[tuple[int, int, int], int] = {}
    order = []
    digest = hashlib.sha256()
    with open_q(path, read_only=True) as q:
        t = q.tailer()
        while True:
            ex = t.read_nowait()
            if ex is None:
                break
            digest.update(struct.pack("<q", ex.index) + ex.payload[:HEAD.size])
            if ex.payload == b"final":
                assert ex.index == final_index
                continue
            key = parse_message(ex.payload)  # raises on a torn payload
            assert key not in found, f"duplicate {key}"
            found[key] = ex.index
            order.append(ex.index)
        assert t.index == final_index + 1
    missing = [k for k in acks if k not in found]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
    wrong = [(k, acks[k], found[k]) for k in acks if acks[k] != found[k]]
    assert not wrong, f"messages at other indices than acknowledged: {wrong[:5]}"
    extra = [k for k in found if k not in acks]
    assert len(extra) <= kills, f"{len(extra)} unacknowledged messages for {kills} kills"
    # an unacknowledged message can only be the one its writer was appending
    # when killed: the last of its incarnation
    last_n: dict[tuple[int, int], int] = {}
    for w, inc, n in found:
        last_n[(w, inc)] = max(last_n.get((w, inc), -1), n)
    for w, inc, n in extra:
        assert n == last_n[(w, inc)], f"unacknowledged {(w, inc, n)} is not its writer's last"
    assert order == sorted(order)
    print(f"kills={kills} acked={len(acks)} found={len(found)} extra={len(extra)} "
          f"cycles={len(os.listdir(path))} files={sorted(os.listdir(path))[-3:]}")

    # the live tailers read everything without an error, in the same order
    with open(stop_file, "w") as fh:
        fh.write(hex(final_index))
    for tp in tailers:
        out, err = tp.communicate(timeout=120)
        assert tp.returncode == 0, err[-3000:]
        report = json.loads(out)
        assert report == {"count": len(found) + 1, "digest": digest.hexdigest()}
    # passed: the campaign's queue (about 2 GB of cycle files) goes now, not with
    # pytest's temporary directories three runs later (each pass runs four)
    shutil.rmtree(path)
