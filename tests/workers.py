"""Processes used by the multi-process tests (run as ``python tests/workers.py ROLE ...``).

Every message written here is self-checking: writer id, incarnation, sequence
number and a CRC32 of the body, so a reader can tell a torn or foreign payload
from a real one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import struct
import sys
import time
import zlib
from typing import Any

import aiochronicle as ac
from aiochronicle._core._native import ffi, lib
from aiochronicle._objects._appender import Appender
from aiochronicle._objects._queue import cycles_of
from aiochronicle._waiting._notify import NOTIFY_KEY, PARKED_KEY
from aiochronicle._waiting._pauser import wait_state

HEAD = struct.Struct("<IIQI")  # writer, incarnation, n, crc32(body)
ACK = struct.Struct("<IIQq")  # writer, incarnation, n, index


def make_message(writer: int, incarnation: int, n: int, body_len: int) -> bytes:
    rnd = random.Random((writer << 40) ^ (incarnation << 20) ^ n)
    body = rnd.randbytes(body_len)
    return HEAD.pack(writer, incarnation, n, zlib.crc32(body)) + body


def parse_message(payload: bytes) -> tuple[int, int, int]:
    """(writer, incarnation, n); raises ValueError for anything not written by make_message."""
    if len(payload) < HEAD.size:
        raise ValueError(f"short payload {payload[:32]!r}")
    writer, inc, n, crc = HEAD.unpack_from(payload)
    if zlib.crc32(payload[HEAD.size:]) != crc:
        raise ValueError(f"torn payload writer={writer} inc={inc} n={n}")
    return writer, inc, n


def open_q(path: str, **kw: object) -> ac.Queue:
    # a short header timeout (what the crash campaigns wait on a dead writer's
    # unfinished excerpt), but a long lock timeout: a dead holder's lock is freed by the
    # liveness check at once, and a live one may be descheduled for seconds on a loaded
    # machine (the niced portable pass of scripts/test.sh), which is not a failure
    opts: dict[str, object] = {"block_size": 256 << 10, "timeout": 0.5, "lock_timeout": 60.0}
    if os.environ.get("ROLL"):
        opts["roll_cycle"] = ac.RollCycles.by_name(os.environ["ROLL"])
    opts.update(kw)
    return ac.open_queue(path, **opts)  # type: ignore[arg-type]


def writer(path: str, wid: int, count: int) -> None:
    """Append ``count`` small messages, one excerpt per append."""
    with open_q(path) as q:
        app = q.appender()
        for n in range(count):
            app.append(make_message(wid, 0, n, 8))


def tailer(path: str, expected: int, timeout: float) -> None:
    """Read live until ``expected`` excerpts; print a digest of the order seen."""
    digest = hashlib.sha256()
    last: dict[int, int] = {}
    prev_index = None
    dense = True
    count = 0
    deadline = time.monotonic() + timeout
    parent = os.getppid()
    with open_q(path, read_only=True) as q:
        rc = q.roll_cycle
        t = q.tailer()
        while count < expected:
            ex = t.read_nowait()
            if ex is None:
                if time.monotonic() > deadline or os.getppid() != parent:
                    break
                continue
            w, _inc, n = parse_message(ex.payload)
            if last.get(w, -1) + 1 != n:
                raise SystemExit(f"writer {w}: got {n} after {last.get(w, -1)}")
            last[w] = n
            if prev_index is not None:
                same = rc.to_cycle(ex.index) == rc.to_cycle(prev_index)
                if (same and ex.index != prev_index + 1) or (
                        not same and rc.to_sequence(ex.index) != 0):
                    dense = False
            prev_index = ex.index
            digest.update(struct.pack("<q", ex.index) + ex.payload[:HEAD.size])
            count += 1
    print(json.dumps({"count": count, "digest": digest.hexdigest(), "dense": dense,
                      "last": {str(k): v for k, v in last.items()}}))


def live_tailer(path: str, stop_file: str) -> None:
    """Read live until ``stop_file`` exists and the excerpt at the index written
    in it has been read (or, with an empty file, the queue is drained); print
    the count and a digest of (index, message head) in the order read.

    Reading on after the stop until that index is what a live reader does: a
    cycle file left half-created by a killed writer makes a tailer wait (up to
    the queue's timeout) before it moves on, so "nothing right now" at the
    moment of the stop does not mean the tailer has seen everything.  Waiting
    is bounded: 60 s after the stop it reports what it has.
    """
    digest = hashlib.sha256()
    count = 0
    parent = os.getppid()
    last_read = -1
    deadline = None
    with open_q(path, read_only=True) as q:
        t = q.tailer()
        while True:
            ex = t.read_nowait()
            if ex is None:
                if os.getppid() != parent:
                    raise SystemExit("the test process is gone")
                if os.path.exists(stop_file):
                    with open(stop_file) as fh:
                        text = fh.read().strip()
                    target = int(text, 0) if text else None
                    if deadline is None:
                        deadline = time.monotonic() + 60
                    if target is None or last_read >= target or time.monotonic() > deadline:
                        ex = t.read_nowait()
                        if ex is None:
                            break
                    else:
                        time.sleep(0.001)
                        continue
                else:
                    time.sleep(0.0005)
                    continue
            last_read = ex.index
            if ex.payload != b"final":
                parse_message(ex.payload)
            digest.update(struct.pack("<q", ex.index) + ex.payload[:HEAD.size])
            count += 1
    print(json.dumps({"count": count, "digest": digest.hexdigest()}))


def crash_writer(path: str, wid: int, incarnation: int, ack_path: str, seed: int,
                 ready: Any = None) -> None:
    """Append forever (until killed), logging every index an append returned."""
    rnd = random.Random(seed)
    sizes = [0, 8, 100, 1000, 20_000, 200_000, 600_000]
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    with open_q(path) as q:
        app = q.appender()
        n = 0
        while True:
            if n == 1 and ready is not None:
                ready.send(True)
            msg = make_message(wid, incarnation, n, rnd.choice(sizes))
            how = rnd.random()
            if how < 0.1:
                with app.writing_document() as doc:
                    half = len(msg) // 2
                    doc.write(msg[:half])
                    doc.write(msg[half:])
                index = doc.index
                assert index is not None
            elif how < 0.15:
                app.append_metadata(b"meta")
                continue
            else:
                index = app.append(msg)
            os.write(ack, ACK.pack(wid, incarnation, n, index))
            n += 1


def peer_writer(path: str, wid: str, count: int, pause_every: int) -> None:
    """Append raw ``<wid>:<n>`` excerpts, as the Java interop ``append`` does, sleeping
    1 ms every ``pause_every`` messages (0: never) so that a run spans several cycles."""
    with open_q(path, block_size=64 << 20, timeout=10.0) as q:
        app = q.appender()
        print("READY", flush=True)
        for n in range(count):
            app.append(f"{wid}:{n}".encode())
            if pause_every and n % pause_every == pause_every - 1:
                time.sleep(0.001)
    print("END", count, flush=True)


def peer_tailer(path: str, expected: int, timeout: float) -> None:
    """Tail live until ``expected`` excerpts; print ``DIGEST count sha256`` over (index
    as 8 little-endian bytes, payload) in the order read, as the Java ``follow`` does."""
    digest = hashlib.sha256()
    count = 0
    deadline = time.monotonic() + timeout
    with open_q(path, block_size=64 << 20, timeout=10.0) as q:
        t = q.tailer()
        while count < expected and time.monotonic() < deadline:
            ex = t.read_nowait()
            if ex is None:
                time.sleep(0.0001)
                continue
            digest.update(struct.pack("<q", ex.index) + ex.payload)
            count += 1
    print("DIGEST", count, digest.hexdigest(), flush=True)


def hold_lock(path: str) -> None:
    """Open a writing document (taking the write lock), write half of it, say so and
    wait to be killed."""
    with open_q(path, block_size=64 << 20, timeout=10.0) as q:
        doc = q.appender().writing_document()
        doc.write(b"half written")
        print("LOCKED", os.getpid(), flush=True)
        time.sleep(600)


def reader_parked(q: ac.Queue) -> bool:
    """A reader of the queue (in any process) has announced its park (armed the
    notify value, or set its loop's bit in ``aiochronicle.notify.parked``): a
    commit from now on wakes it, so an append then is neither lost nor ahead
    of the park."""
    meta = cycles_of(q).meta
    assert meta is not None
    off = meta.offset(NOTIFY_KEY)
    if off is not None and lib.cq_notify_until(
            ffi.cast("int64_t *", meta.file.ptr(off)))[0] != 0:
        return True  # a thread on the futex (or a task through the helper thread)
    # a task on its loop's socket: the slot's bit in aiochronicle.notify.parked
    return bool(meta.get(PARKED_KEY, 0))


def append_when_parked(path: str, notify: bool = True, ready: Any = None,
                       appended_at: Any = None) -> None:
    """Append ``b"wake up"`` once a reader is parked (:func:`reader_parked`);
    ``notify=False``: with an appender that never notifies.  ``ready`` is set
    when the appender exists; ``appended_at`` (a shared double) gets the
    ``time.monotonic()`` of the append, so a test can time the wake-up alone,
    not this process's start (a spawn takes seconds on a loaded machine)."""
    with ac.open_queue(path) as q:
        a = q.appender() if notify else Appender(cycles_of(q), q)
        if ready is not None:
            ready.set()
        deadline = time.monotonic() + 60
        while not reader_parked(q):
            assert time.monotonic() < deadline, "no reader parked"
            time.sleep(0.001)
        if appended_at is not None:
            appended_at.value = time.monotonic()
        a.append(b"wake up")


async def parked(pauser: ac.Pauser, timeout: float = 20.0) -> None:
    """Return once a task of this loop is parked on ``pauser`` (await
    ``tailer.read()`` or ``apause()`` has registered its park)."""
    deadline = time.monotonic() + timeout
    while not wait_state(pauser).parks:
        assert time.monotonic() < deadline, "nothing parked"
        await asyncio.sleep(0.001)


def main() -> None:
    role = sys.argv[1]
    if role == "writer":
        writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif role == "tailer":
        tailer(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif role == "live-tailer":
        live_tailer(sys.argv[2], sys.argv[3])
    elif role == "crash-writer":
        crash_writer(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
                     int(sys.argv[6]))
    elif role == "peer-writer":
        peer_writer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif role == "peer-tailer":
        peer_tailer(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
    elif role == "hold-lock":
        hold_lock(sys.argv[2])
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
