"""Corrupt and foreign files: reading them either works or raises CorruptQueueError.

Start from a valid queue (written by aiochronicle, or the Java fixture), damage
it (truncation, garbage header words, lengths past the end of the file, random
bytes named like a cycle file, a text file as ``metadata.cq4t``, a zeroed first
header, flipped bytes in the header document, broken index pages, positions
near 2^64, bad roll settings and lock values in the metadata, random byte
flips), then open it read-only and writable and read it every way there is:
``cycles()``, ``first_index``/``last_index``, a ``read_nowait`` loop, ``move_to_index``,
``to_end``, ``read_many``, ``count_excerpts`` and a backward tailer.

Each of those either works or raises :class:`aiochronicle.CorruptQueueError` whose
``path`` names a file of the queue; never another exception type, never a
crash, and a reader never changes the size of a cycle file (not even in a
writable queue, and a writable open never grows metadata.cq4t for a key record
whose length runs past its end).

The damaged queues are read in a child process (this file run as a script,
``serve``), so a segfault or a hang fails the test instead of killing pytest.
One child serves every test of the module: it reads one job (a list of cases,
or a run of random flips) per line on stdin and answers one JSON line per
case, then a ``done`` line.  A child that crashes or hangs fails the test whose
job it was running and is replaced for the next one.

Byte offsets come from the format reference (shared/reference/chronicle-queue-
format.md §3-§5) by walking the file's headers here, not from the code under test.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import resource
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000  # 2021-11-18: FAST_DAILY cycle 18949
CYCLE = 18949
INDEX_BASE = CYCLE << 32  # FAST_DAILY: 32 sequence bits
JAVA_V5_BASE = 0x4A0500000000
JAVA_V4_BASE = 18956 << 32
BLOCK = 256 << 10
N_MSG = 300
OPEN_TIMEOUT = 0.01  # seconds a reader waits for a cycle file's first header
MAX_READS = 2 * N_MSG + 16
CASE_TIMEOUT = 20  # seconds one case may take in the child before it is declared hung
JOB_TIMEOUT = 120  # seconds one job (a test's cases) may take in all
FLIPS = 120  # random-flip iterations per test
# The child may not grow a file past this (RLIMIT_FSIZE): should a reader ever
# extend a file for a bogus header length again, it gets DiskFullError quickly
# instead of writing up to 1 GiB (and the size check reports it).
CHILD_FSIZE_LIMIT = 96 << 20
TABLE_CHUNK = 64 << 10  # what a writable table store maps and reserves at once

HDR_META = 0x40000000
HDR_NOT_COMPLETE = 0x80000000
HDR_EOF = 0xC0000000
LENGTH_MASK = 0x3FFFFFFF


V5_ARCHIVE = "cqv5-sample-input.tar.bz2"
V4_ARCHIVE = "cqv4-sample-input.tar.bz2"


def payload(i: int) -> bytes:
    return b"m%05d-" % i + b"x" * (i % 37)


def align4(n: int) -> int:
    return (n + 3) & ~3


# --------------------------------------------------------------------------
# what a damaged queue is read with (runs in the child)
# --------------------------------------------------------------------------


def exercise(qdir: str, read_only: bool, index_base: int) -> dict[str, Any]:
    """Open ``qdir`` and read it every way; record results and any error that is
    not a CorruptQueueError naming a file of the queue."""
    out: dict[str, Any] = {"errors": [], "corrupt": {}}
    qdir = os.path.abspath(qdir)

    def guard(op: str, fn: Any) -> Any:
        try:
            return fn()
        except ac.CorruptQueueError as exc:
            path = exc.path
            if not isinstance(path, str) or not os.path.abspath(path).startswith(qdir):
                out["errors"].append(f"{op}: CorruptQueueError without a path in the queue "
                                     f"(path={path!r}): {exc}")
            out["corrupt"][op] = exc.offset
            return _CORRUPT
        except Exception:
            out["errors"].append(f"{op}: {traceback.format_exc()}")
            return _CORRUPT

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a Chronicle 4 directory warns when opened writable
        q = guard("open", lambda: ac.open_queue(
            qdir, time_provider=ac.SetTimeProvider(T0), block_size=BLOCK,
            read_only=read_only, timeout=OPEN_TIMEOUT))
    if q is _CORRUPT:
        return out
    try:
        out["cycles"] = guard("cycles", q.cycles)
        first = guard("first_index", lambda: q.first_index)
        last = guard("last_index", lambda: q.last_index)
        out["first"] = first if first is not _CORRUPT else "corrupt"
        out["last"] = last if last is not _CORRUPT else "corrupt"

        def read_all() -> list[list[Any]]:
            t = q.tailer()
            got = []
            for _ in range(MAX_READS):
                ex = t.read_nowait()
                if ex is None:
                    break
                got.append([ex.index, ex.payload.hex()])
            return got

        got = guard("read", read_all)
        out["read"] = got if got is not _CORRUPT else "corrupt"

        def moves() -> list[list[Any]]:
            res = []
            t = q.tailer()
            for seq in (0, 1, 2, 150, 255, 256, 257, N_MSG - 1, N_MSG, N_MSG + 1000, 1 << 31):
                idx = index_base + seq
                rec: list[Any] = [seq]
                try:
                    found = t.move_to_index(idx)
                    rec.append(found)
                    if found:
                        ex = t.read_nowait()
                        rec.append(None if ex is None else [ex.index, ex.payload.hex()])
                except ac.CorruptQueueError as exc:
                    guard(f"move_to_index({seq})", lambda e=exc: _reraise(e))
                    rec.append("corrupt")
                res.append(rec)
            return res

        out["moves"] = guard("move_to_index", moves)

        def to_end() -> Any:
            t = q.tailer().to_end()
            ex = t.read_nowait()
            return None if ex is None else ex.index

        out["to_end"] = guard("to_end", to_end)

        def many() -> int:
            t = q.tailer().to_start()
            return len(t.read_many(max_count=64, max_bytes=1 << 12))

        out["read_many"] = guard("read_many", many)
        out["count"] = guard("count_excerpts",
                             lambda: q.count_excerpts(index_base, index_base + (1 << 31)))

        def backward() -> list[int]:
            t = q.tailer(direction=ac.TailerDirection.BACKWARD)
            res = []
            for _ in range(3):
                ex = t.read_nowait()
                if ex is None:
                    break
                res.append(ex.index)
            return res

        out["backward"] = guard("backward", backward)
    finally:
        guard("close", q.close)
    for key in ("cycles", "moves", "to_end", "read_many", "count", "backward"):
        if out.get(key) is _CORRUPT:
            out[key] = "corrupt"
    return out


class _Corrupt:
    def __repr__(self) -> str:
        return "corrupt"


_CORRUPT = _Corrupt()


def _reraise(exc: BaseException) -> Any:
    raise exc


# --------------------------------------------------------------------------
# damaging a copy of a pristine queue (runs in the child)
# --------------------------------------------------------------------------


class Cloner:
    """Copies a pristine queue directory fast: only the non-zero 64 KiB blocks are
    written and the rest is left as a hole (the Java cycle file is 80 MiB of
    mostly zeros)."""

    BLOCK_SIZE = 64 << 10

    def __init__(self, src: str) -> None:
        self.files: list[tuple[str, int, list[tuple[int, bytes]]]] = []
        for name in sorted(os.listdir(src)):
            path = os.path.join(src, name)
            size = os.path.getsize(path)
            blocks = []
            with open(path, "rb") as f:
                off = 0
                while chunk := f.read(self.BLOCK_SIZE):
                    if chunk.count(0) != len(chunk):
                        blocks.append((off, chunk))
                    off += len(chunk)
            self.files.append((name, size, blocks))

    def clone(self, dst: str) -> None:
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        for name, size, blocks in self.files:
            fd = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                for off, chunk in blocks:
                    os.pwrite(fd, chunk, off)
                os.ftruncate(fd, size)
            finally:
                os.close(fd)


def apply_mutations(qdir: str, mutations: list[list[Any]]) -> None:
    """``["truncate", file, n]``, ``["write", file, offset, hex]``,
    ``["replace", file, hex]``, ``["remove", file]``, ``["xor", file, offset, mask]``."""
    for m in mutations:
        op, name = m[0], m[1]
        path = os.path.join(qdir, name)
        if op == "truncate":
            os.truncate(path, m[2])
        elif op == "write":
            with open(path, "r+b") as f:
                f.seek(m[2])
                f.write(bytes.fromhex(m[3]))
        elif op == "xor":
            with open(path, "r+b") as f:
                f.seek(m[2])
                b = f.read(1)
                f.seek(m[2])
                f.write(bytes([(b[0] if b else 0) ^ m[3]]))
        elif op == "replace":
            with open(path, "wb") as f:
                f.write(bytes.fromhex(m[2]))
        elif op == "remove":
            os.unlink(path)
        else:
            raise ValueError(op)


def limit_child() -> None:
    """Bound what a reader that (wrongly) grows files can do in the child."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (CHILD_FSIZE_LIMIT, CHILD_FSIZE_LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill


def cycle_sizes(qdir: str) -> dict[str, int]:
    return {n: os.path.getsize(os.path.join(qdir, n)) for n in sorted(os.listdir(qdir))}


def exercise_checked(qdir: str, read_only: bool, index_base: int) -> dict[str, Any]:
    """``exercise`` under a watchdog, plus the rule that no cycle file grows."""
    before = cycle_sizes(qdir)
    faulthandler.dump_traceback_later(CASE_TIMEOUT, exit=True)
    t0 = time.monotonic()
    res = exercise(qdir, read_only, index_base)
    faulthandler.cancel_dump_traceback_later()
    res["seconds"] = time.monotonic() - t0
    res["sizes"] = after = cycle_sizes(qdir)
    for name, size in before.items():
        # a writable table store may complete a short file to its first 64 KiB chunk
        # (to add the keys it lacks); nothing else ever grows
        limit = max(size, TABLE_CHUNK) if name.endswith(".cq4t") and not read_only else size
        if after.get(name, 0) > limit:
            res["errors"].append(f"a reader grew {name}: {size} -> {after[name]} bytes")
    return res


class Child:
    """The child's state across jobs: pristine queues are loaded once."""

    def __init__(self) -> None:
        self.cloners: dict[str, Cloner] = {}

    def cloner(self, src: str) -> Cloner:
        if src not in self.cloners:
            self.cloners[src] = Cloner(src)
        return self.cloners[src]

    def cases(self, spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """One result per (case, mode)."""
        cloner = self.cloner(spec["pristine"])
        work = os.path.join(spec["workdir"], "case")
        for case in spec["cases"]:
            cloner.clone(work)
            apply_mutations(work, case["mutations"])
            for ro in case.get("modes", [True, False]):
                print(f"case {case['name']} read_only={ro}", file=sys.stderr, flush=True)
                res = exercise_checked(work, ro, spec["index_base"])
                res.update(name=case["name"], read_only=ro)
                yield res

    def flips(self, spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Seeded random byte flips, bounded in iterations and time: one summary."""
        rng = random.Random(spec["seed"])
        cloner = self.cloner(spec["pristine"])
        work = os.path.join(spec["workdir"], "flip")
        targets: list[list[Any]] = spec["targets"]  # [file, lo, hi, weight]
        weights = [t[3] for t in targets]
        deadline = time.monotonic() + spec["seconds"]
        done = corrupt = 0
        errors: list[str] = []
        for it in range(spec["iterations"]):
            if time.monotonic() > deadline:
                break
            cloner.clone(work)
            muts: list[list[Any]] = []
            for _ in range(rng.choice((1, 1, 2, 3, 8, 32))):
                name, lo, hi, _w = rng.choices(targets, weights)[0]
                off = rng.randrange(lo, hi)
                if rng.random() < 0.7:
                    muts.append(["xor", name, off, 1 << rng.randrange(8)])
                else:
                    muts.append(["write", name, off, bytes([rng.randrange(256)]).hex()])
            apply_mutations(work, muts)
            ro = spec["read_only"] if spec["read_only"] is not None else rng.random() < 0.5
            print(f"iteration {it} read_only={ro} mutations={muts}", file=sys.stderr, flush=True)
            res = exercise_checked(work, ro, spec["index_base"])
            done += 1
            corrupt += bool(res["corrupt"])
            for e in res["errors"]:
                errors.append(f"iteration {it} (read_only={ro}, mutations={muts}): {e}")
            if errors and spec.get("stop_on_error"):
                break
        yield {"iterations": done, "corrupt": corrupt, "errors": errors[:20],
               "n_errors": len(errors)}


def serve() -> int:
    """The child: one JSON job per line on stdin -> JSON result lines, then ``done``."""
    limit_child()
    child = Child()
    for line in sys.stdin:
        job = json.loads(line)
        for res in getattr(child, job["mode"])(job["spec"]):
            sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.write(json.dumps({"done": True}) + "\n")
        sys.stdout.flush()
    return 0


# --------------------------------------------------------------------------
# test side: pristine queues, their layout, running the child
# --------------------------------------------------------------------------


class Worker:
    """The parent's handle on the child that reads damaged queues (see ``serve``)."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0
        self.log = logdir / "worker-0.log"

    def _start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        self.log = self.logdir / f"worker-{self.started}.log"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-X", "faulthandler", __file__, "serve"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, bufsize=0)
        return self.proc

    def _log_tail(self, start: int) -> str:
        with open(self.log, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def run(self, mode: str, spec: dict[str, Any],
            timeout: float = JOB_TIMEOUT) -> list[dict[str, Any]]:
        """Run one job; fail the test on a crash, a hang or a non-zero exit."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None and proc.stdout is not None
        log_start = self.log.stat().st_size
        proc.stdin.write((json.dumps({"mode": mode, "spec": spec}) + "\n").encode())
        proc.stdin.flush()
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        out: list[dict[str, Any]] = []
        while True:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                proc.kill()
                self.stop()
                pytest.fail(f"the reading process hung (> {timeout}s); last output:\n"
                            f"{self._log_tail(log_start)}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                rc = proc.wait()
                self.stop()
                how = f"was killed by signal {-rc}" if rc < 0 else f"exited with {rc}"
                pytest.fail(f"the reading process {how} (a crash or a hang in the library); "
                            f"last output:\n{self._log_tail(log_start)}")
            *lines, buf = (buf + chunk).split(b"\n")
            for line in lines:
                rec = json.loads(line)
                if rec.get("done"):
                    return out
                out.append(rec)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(tmp_path_factory.mktemp("worker"))
    yield w
    w.stop()


def run_cases(worker: Worker, tmp_path: Path, pristine: Path, cases: list[dict[str, Any]],
              index_base: int = INDEX_BASE) -> dict[tuple[str, bool], dict[str, Any]]:
    results = worker.run("cases", {"pristine": str(pristine), "cases": cases,
                                   "index_base": index_base, "workdir": str(tmp_path)})
    by_case = {(r["name"], r["read_only"]): r for r in results}
    expected = sum(len(c.get("modes", [True, False])) for c in cases)
    assert len(by_case) == expected, "the child did not report every case"
    errors = [f"[{name} read_only={ro}] {e}" for (name, ro), r in by_case.items()
              for e in r["errors"]]
    assert not errors, ("exceptions other than CorruptQueueError, or files grown:\n"
                        + "\n".join(errors[:10]))
    return by_case


class Layout:
    """Where things are in a cycle file, found by walking its headers (reference §3-§4)."""

    def __init__(self, path: Path, align: int = 4) -> None:
        self.path = path
        self.size = path.stat().st_size
        with open(path, "rb") as f:
            buf = f.read(min(self.size, 4 << 20))
        self.buf = buf
        word = struct.unpack_from("<I", buf, 0)[0]
        assert word & HDR_META and not word & HDR_NOT_COMPLETE
        self.header_len = word & LENGTH_MASK
        self.header_end = 4 + self.header_len
        pos = align4(self.header_end) if align == 4 else self.header_end
        self.meta_docs: list[int] = []
        self.data: list[tuple[int, int]] = []  # (header position, payload length)
        while pos + 4 <= len(buf):
            h = struct.unpack_from("<I", buf, pos)[0]
            if h == 0 or h & HDR_NOT_COMPLETE:
                break
            n = h & LENGTH_MASK
            if h & HDR_META:
                self.meta_docs.append(pos)
            else:
                self.data.append((pos, n))
            pos = align4(pos + 4 + n) if align == 4 else pos + 4 + n
        self.end = pos
        # writePosition: field name, padding, I64_ARRAY 0x8D, capacity, used, values
        at = buf.find(b"writePosition", 4, self.header_end)
        self.wp_values = buf.index(0x8D, at) + 17 if at >= 0 else 0
        # the header's index2Index binding: field name, padding, INT64 code 0xA7, value
        at = buf.find(b"index2Index", 4, self.header_end)
        self.i2i_field = None
        if at >= 0:
            p = at + len(b"index2Index")
            while buf[p] == 0x8F:
                p += 1
            assert buf[p] == 0xA7
            self.i2i_field = p + 1

    def array(self, doc: int) -> tuple[int, int]:
        """(offset of the capacity long, capacity) of the I64 array in the index doc at ``doc``."""
        p = self.buf.index(0x8D, doc + 4)
        return p + 1, struct.unpack_from("<q", self.buf, p + 1)[0]

    @property
    def i2i_doc(self) -> int:
        assert self.i2i_field is not None
        return struct.unpack_from("<q", self.buf, self.i2i_field)[0]

    def i2i_values(self) -> int:
        cap_off, _ = self.array(self.i2i_doc)
        return cap_off + 16

    def page_values(self, n: int = 0) -> int:
        page = struct.unpack_from("<q", self.buf, self.i2i_values() + 8 * n)[0]
        cap_off, _ = self.array(page)
        return cap_off + 16


def u32(v: int) -> str:
    return struct.pack("<I", v & 0xFFFFFFFF).hex()


def u64(v: int) -> str:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF).hex()


@pytest.fixture(scope="module")
def lib_queue(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A FAST_DAILY queue of N_MSG excerpts written by aiochronicle."""
    d = tmp_path_factory.mktemp("pristine") / "q"
    with ac.open_queue(d, time_provider=ac.SetTimeProvider(T0), block_size=BLOCK) as q:
        a = q.appender()
        for i in range(N_MSG):
            a.append(payload(i))
    return d


@pytest.fixture(scope="module")
def lib_layout(lib_queue: Path) -> Layout:
    (cyc,) = lib_queue.glob("*.cq4")
    lay = Layout(cyc)
    assert len(lay.data) == N_MSG
    return lay


def _extract(tmp_path_factory: pytest.TempPathFactory, java_fixtures: Path, archive: str,
             sub: str) -> Path:
    src = java_fixtures / archive
    dest = tmp_path_factory.mktemp("java")
    subprocess.run(["tar", "--sparse", "--no-same-owner", "-xjf", str(src), "-C", str(dest)],
                   check=True, capture_output=True)
    return dest / sub


@pytest.fixture(scope="module")
def java_v5(tmp_path_factory: pytest.TempPathFactory, java_fixtures: Path) -> Path:
    return _extract(tmp_path_factory, java_fixtures, V5_ARCHIVE, "qv5")


@pytest.fixture(scope="module")
def java_v4(tmp_path_factory: pytest.TempPathFactory, java_fixtures: Path) -> Path:
    return _extract(tmp_path_factory, java_fixtures, V4_ARCHIVE, "cqv4")


def cycle_name(qdir: Path) -> str:
    (cyc,) = qdir.glob("*.cq4")
    return cyc.name


def expected_reads(n: int = N_MSG) -> list[list[Any]]:
    return [[INDEX_BASE + i, payload(i).hex()] for i in range(n)]


def assert_prefix_of_original(res: dict[str, Any]) -> None:
    """Whatever a reader returned is a prefix of what was written (no invented data)."""
    got = res["read"]
    if got == "corrupt":
        return
    assert got == expected_reads()[:len(got)], (res["name"], res["read_only"])


# --------------------------------------------------------------------------
# the pristine queue reads back (sanity of the harness itself)
# --------------------------------------------------------------------------


def assert_reads_everything(r: dict[str, Any], what: Any = None) -> None:
    """Every way of reading gives the pristine queue's answers."""
    what = what or (r["name"], r["read_only"])
    assert r["corrupt"] == {}, (what, r["corrupt"])
    assert r["read"] == expected_reads(), what
    assert r["first"] == INDEX_BASE and r["last"] == INDEX_BASE + N_MSG - 1, what
    assert r["count"] == N_MSG, what
    assert r["to_end"] is None, what
    assert r["read_many"] == 64, what
    assert r["backward"] == [INDEX_BASE + N_MSG - 1 - k for k in range(3)], what
    for rec in r["moves"]:
        seq = rec[0]
        if seq < N_MSG:
            assert rec[1:] == [True, [INDEX_BASE + seq, payload(seq).hex()]], (what, seq)
        else:
            assert rec[1] is False, (what, seq)


def test_pristine_queue_reads_everything(worker: Worker, tmp_path: Path,
                                         lib_queue: Path) -> None:
    res = run_cases(worker, tmp_path, lib_queue, [{"name": "pristine", "mutations": []}])
    cyc = lib_queue / cycle_name(lib_queue)
    for ro in (True, False):
        assert_reads_everything(res["pristine", ro])
        assert res["pristine", ro]["sizes"][cyc.name] == cyc.stat().st_size


# --------------------------------------------------------------------------
# truncation
# --------------------------------------------------------------------------


def test_truncated_cycle_file(worker: Worker, tmp_path: Path, lib_queue: Path,
                              lib_layout: Layout) -> None:
    """Cut anywhere: what is read is a prefix of what was written, in both
    modes, and the file keeps its size (a reader of a writable queue used to
    extend it and return the zeros it created as part of an excerpt)."""
    cyc = cycle_name(lib_queue)
    lay = lib_layout
    d0, n0 = lay.data[0]
    mid, nmid = lay.data[N_MSG // 2]
    last, nlast = lay.data[-1]
    # cuts inside an excerpt's payload: its header is complete, its bytes are missing
    mid_payload = {d0 + 4 + n0 - 1: 0, mid + 4 + nmid // 2: N_MSG // 2,
                   last + 4 + nlast - 1: N_MSG - 1}
    lengths = sorted({0, 1, 2, 3, 4, 5, 64, lay.header_end - 1, lay.header_end,
                      lay.header_end + 2, lay.i2i_doc + 2, lay.i2i_doc + 40,
                      lay.meta_docs[1] + 3, d0 - 1, d0, d0 + 2, d0 + 4, mid, mid + 1, mid + 3,
                      mid + 4, last + 4 + nlast, lay.end, lay.end + 2, lay.size - 1,
                      *mid_payload})
    cases = [{"name": f"truncate-{n:#x}", "mutations": [["truncate", cyc, n]]} for n in lengths]
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for n in lengths:
        for ro in (True, False):
            r = res[f"truncate-{n:#x}", ro]
            assert r["sizes"][cyc] == n, ("a reader changed the file's size", n, ro)
            assert_prefix_of_original(r)
            assert r["seconds"] < 15
            if n >= lay.end:
                assert r["read"] == expected_reads(), (n, ro)
            if n in mid_payload:  # the excerpts before it, then CorruptQueueError there
                k = mid_payload[n]
                assert r["read"] == "corrupt", (n, ro)
                assert r["corrupt"]["read"] == lay.data[k][0], (n, ro)


def test_truncated_java_cycle_file(worker: Worker, tmp_path: Path, java_v5: Path) -> None:
    cyc = cycle_name(java_v5)
    lay = Layout(java_v5 / cyc)
    assert len(lay.data) == 4
    points = {0, 3, 4, 0x40, lay.header_end - 1, lay.header_end, lay.i2i_doc + 1,
              lay.meta_docs[1] + 8, lay.data[0][0], lay.data[0][0] + 2, lay.data[0][0] + 5,
              lay.data[3][0] + 4 + 30, lay.end}
    cases = [{"name": f"truncate-{n:#x}", "mutations": [["truncate", cyc, n]]}
             for n in sorted(points)]
    res = run_cases(worker, tmp_path, java_v5, cases, index_base=JAVA_V5_BASE)
    for ro in (True, False):
        assert res[f"truncate-{lay.end:#x}", ro]["first"] == JAVA_V5_BASE
        assert res[f"truncate-{lay.end:#x}", ro]["last"] == JAVA_V5_BASE + 3
        for n in points:
            assert res[f"truncate-{n:#x}", ro]["sizes"][cyc] == n


def test_truncated_metadata(worker: Worker, tmp_path: Path, lib_queue: Path) -> None:
    size = (lib_queue / "metadata.cq4t").stat().st_size
    cases = [{"name": f"meta-truncate-{n}", "mutations": [["truncate", "metadata.cq4t", n]]}
             for n in (0, 1, 4, 8, 20, 100, 180, 200, 300, 500, size - 1)]
    run_cases(worker, tmp_path, lib_queue, cases)


# --------------------------------------------------------------------------
# bad header words
# --------------------------------------------------------------------------


def test_garbage_header_words(worker: Worker, tmp_path: Path, lib_queue: Path,
                              lib_layout: Layout) -> None:
    cyc = cycle_name(lib_queue)
    lay = lib_layout
    words = [0xFFFFFFFF, 0xDEADBEEF, HDR_NOT_COMPLETE, HDR_NOT_COMPLETE | 12, HDR_EOF, 0,
             HDR_META, HDR_META | 1, HDR_META | LENGTH_MASK, HDR_META | 0x1000, 1, 2, 3,
             LENGTH_MASK, 0x12345]
    cases = []
    for k in (0, 256, N_MSG // 2, N_MSG - 1):
        pos = lay.data[k][0]
        for w in words:
            cases.append({"name": f"data{k}-{w:#010x}",
                          "mutations": [["write", cyc, pos, u32(w)]]})
    for doc in lay.meta_docs[:2]:  # the index2index and the first index page
        for w in (0, HDR_NOT_COMPLETE, HDR_EOF, 5, HDR_META | 3, HDR_META | LENGTH_MASK):
            cases.append({"name": f"meta{doc:#x}-{w:#010x}",
                          "mutations": [["write", cyc, doc, u32(w)]]})
    # an EOF marker over the first excerpt, whose index entries and
    # writePosition record excerpts after it: damage, named at the marker
    # (it used to read as an empty cycle)
    cases.append({"name": "eof-first", "mutations": [["write", cyc, lay.data[0][0],
                                                      u32(HDR_EOF) + b"\xc3EOF".hex()]]})
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for ro in (True, False):
        r = res["eof-first", ro]
        assert r["read"] == "corrupt" and r["corrupt"]["read"] == lay.data[0][0], r
        # a header that is not (yet) complete before excerpts that are
        # (writePosition lies beyond it) is damage: a named error at that
        # header, never a silent end of the data
        for w in (0, HDR_NOT_COMPLETE, HDR_NOT_COMPLETE | 12):
            r = res[f"data{N_MSG // 2}-{w:#010x}", ro]
            assert r["read"] == "corrupt", (w, ro)
            assert r["corrupt"]["read"] == lay.data[N_MSG // 2][0], (w, ro)


def test_header_length_past_end_of_file(worker: Worker, tmp_path: Path, lib_queue: Path,
                                        lib_layout: Layout) -> None:
    """A complete header whose payload would run past the end of the file is
    corruption: a reader says so, at that header, and in a writable queue
    leaves the file alone (it used to grow it to the header's length, up to
    1 GiB, and return zeros as the payload)."""
    cyc = cycle_name(lib_queue)
    lay = lib_layout
    k = 100
    pos = lay.data[k][0]
    cases = []
    for n in (lay.size - pos - 4 + 1, lay.size, 1 << 24, LENGTH_MASK):
        for meta in (0, HDR_META):
            cases.append({"name": f"len-{meta | n:#x}",
                          "mutations": [["write", cyc, pos, u32(meta | n)]]})
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for case in cases:
        for ro in (True, False):
            r = res[case["name"], ro]
            assert r["read"] == "corrupt", (case["name"], ro)
            assert r["corrupt"]["read"] == pos, (case["name"], ro)
            assert r["sizes"][cyc] == lay.size, (case["name"], ro)


def test_zeroed_first_header(worker: Worker, tmp_path: Path, lib_queue: Path) -> None:
    """A cycle file whose first header word is 0 is one being created by a
    process that died: readers treat the cycle as absent, after a bounded wait."""
    cyc = cycle_name(lib_queue)
    cases = [{"name": "zero", "mutations": [["write", cyc, 0, u32(0)]]},
             {"name": "not-complete", "mutations": [["write", cyc, 0, u32(HDR_NOT_COMPLETE)]]},
             {"name": "meta-len0", "mutations": [["write", cyc, 0, u32(HDR_META)]]},
             {"name": "data-first", "mutations": [["write", cyc, 0, u32(0xC0)]]},
             {"name": "eof-first", "mutations": [["write", cyc, 0, u32(HDR_EOF)]]},
             {"name": "huge-header", "mutations": [["write", cyc, 0, u32(HDR_META | 0x3000)]]}]
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for ro in (True, False):
        r = res["not-complete", ro]
        assert r["first"] is None and r["read"] == [] and r["corrupt"] == {}, r
        assert r["seconds"] < 60 * OPEN_TIMEOUT + 5
        # a cleared first word with excerpts after it is no creator's work
        # (Java claims the first word first; libchronicle writes nothing
        # before it): nothing to read while the file is young, a named error
        # at its start once its creator counts as gone (which of the reads
        # comes after ``timeout`` depends on the machine), never excerpts
        r = res["zero", ro]
        assert r["first"] is None and r["read"] in ([], "corrupt"), r
        assert set(r["corrupt"].values()) <= {0}, r
        assert r["seconds"] < 60 * OPEN_TIMEOUT + 5
        for name in ("meta-len0", "data-first"):
            assert res[name, ro]["corrupt"], name


# --------------------------------------------------------------------------
# foreign files
# --------------------------------------------------------------------------


def test_random_bytes_named_like_a_cycle_file(worker: Worker, tmp_path: Path,
                                              lib_queue: Path) -> None:
    cyc = cycle_name(lib_queue)
    rng = random.Random(7)
    cases = []
    for size in (1, 3, 4, 7, 100, 4096, 70000, 327680):
        data = rng.randbytes(size)
        cases.append({"name": f"random-{size}", "mutations": [["replace", cyc, data.hex()]]})
        # a plausible first header word over random bytes reaches the header parser
        if size >= 8:
            head = struct.pack("<I", HDR_META | min(size - 4, 0x200))
            cases.append({"name": f"random-hdr-{size}",
                          "mutations": [["replace", cyc, (head + data[4:]).hex()]]})
    text = ("This is not a Chronicle Queue cycle file.\n" * 200).encode()
    cases.append({"name": "text", "mutations": [["replace", cyc, text.hex()]]})
    cases.append({"name": "metadata-as-cycle",
                  "mutations": [["replace", cyc, (lib_queue / "metadata.cq4t").read_bytes()
                                 .hex()]]})
    # and beside it a second, well-formed-looking name holding junk
    cases.append({"name": "junk-next-cycle",
                  "mutations": [["replace", "20211119F.cq4", rng.randbytes(5000).hex()]]})
    run_cases(worker, tmp_path, lib_queue, cases)


def test_random_cycle_file_without_metadata(worker: Worker, tmp_path: Path,
                                            lib_queue: Path) -> None:
    """No metadata.cq4t: a read-only open guesses the roll cycle from the file."""
    cyc = cycle_name(lib_queue)
    rng = random.Random(8)
    cases = [{"name": "valid", "modes": [True], "mutations": [["remove", "metadata.cq4t"]]}]
    for size in (0, 4, 100, 5000, 327680):
        cases.append({"name": f"random-{size}", "modes": [True],
                      "mutations": [["remove", "metadata.cq4t"],
                                    ["replace", cyc, rng.randbytes(size).hex()]]})
    cases.append({"name": "bad-name", "modes": [True],
                  "mutations": [["remove", "metadata.cq4t"],
                                ["replace", "not-a-date.cq4", rng.randbytes(64).hex()]]})
    res = run_cases(worker, tmp_path, lib_queue, cases)
    assert res["valid", True]["read"] == expected_reads()


def test_foreign_metadata_file(worker: Worker, tmp_path: Path, lib_queue: Path) -> None:
    cyc_bytes = next(lib_queue.glob("*.cq4")).read_bytes()
    rng = random.Random(9)
    contents = {
        "text": b"hello world\n" * 100,
        "yaml": b"--- !!meta-data\nheader: !STStore {}\n" * 20,
        "empty": b"",
        "zeros": bytes(65536),
        "random": rng.randbytes(65536),
        "cycle-file": cyc_bytes[:65536],
        "header-only": (lib_queue / "metadata.cq4t").read_bytes()[:200],
        "not-complete": struct.pack("<I", HDR_NOT_COMPLETE | 100) + bytes(1000),
        "meta-len0": struct.pack("<I", HDR_META) + bytes(1000),
        "meta-huge": struct.pack("<I", HDR_META | LENGTH_MASK) + bytes(1000),
    }
    cases = [{"name": k, "mutations": [["replace", "metadata.cq4t", v.hex()]]}
             for k, v in contents.items()]
    res = run_cases(worker, tmp_path, lib_queue, cases)
    # a cycle file's header is an `!SCQStore`, not a table store: named as corrupt
    # for a writer; a reader goes by the cycle files and reads everything
    for name in ("text", "yaml", "random", "meta-huge", "cycle-file"):
        assert "open" in res[name, False]["corrupt"], name
        assert res[name, True]["read"] == expected_reads(), name


def test_metadata_with_bad_roll_settings(worker: Worker, tmp_path: Path,
                                         lib_queue: Path) -> None:
    """A roll length <= 0 or a format with an unsupported letter is corruption
    (it used to escape as ValueError from make_roll_cycle)."""
    meta = (lib_queue / "metadata.cq4t").read_bytes()
    fmt = meta.index(b"yyyyMMdd'F'")
    length_at = meta.index(b"length") + len(b"length")
    assert meta[length_at] == 0xA6  # INT32 (reference §9)
    cases = [
        {"name": "format-D", "mutations": [["write", "metadata.cq4t", fmt + 6, b"D".hex()]]},
        {"name": "format-junk", "mutations": [["write", "metadata.cq4t", fmt, b"{".hex()]]},
        {"name": "length-0", "mutations": [["write", "metadata.cq4t", length_at + 1, u32(0)]]},
        {"name": "length-neg", "mutations": [["write", "metadata.cq4t", length_at + 1,
                                              u32(-1)]]},
    ]
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for case in cases:  # a reader goes by the cycle files instead
        assert "open" in res[case["name"], False]["corrupt"], case["name"]
        assert res[case["name"], True]["read"] == expected_reads(), case["name"]


def _table_value_offset(meta: bytes, key: bytes) -> int:
    """Offset of the INT64 value of ``key`` in a table store (reference §5.1)."""
    p = meta.index(key) + len(key)
    while meta[p] in (0x8E, 0x8F):  # PADDING32 (with a u32 length) or PADDING
        p += 1 if meta[p] == 0x8F else 5 + struct.unpack_from("<I", meta, p + 1)[0]
    assert meta[p] == 0xA7
    return p + 1


def test_metadata_lock_values(worker: Worker, tmp_path: Path, lib_queue: Path) -> None:
    """Lock values a writer can leave behind; opening writable checks the holder.
    A value whose low 32 bits are not a valid pid (above INT_MAX) is a dead
    holder (it used to raise OverflowError from os.kill)."""
    meta = (lib_queue / "metadata.cq4t").read_bytes()
    off = _table_value_offset(meta, b"chronicle.write.lock")
    values = (0, 1, os.getpid(), 0x7FFFFFFF, (5 << 32) | 1, -(1 << 63) + 1,
              -1, 0xFFFFFFFF, 1 << 31, (7 << 32) | 0x80000001)
    cases = [{"name": f"lock-{v & 0xFFFFFFFFFFFFFFFF:#x}",
              "mutations": [["write", "metadata.cq4t", off, u64(v)]]} for v in values]
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for case in cases:
        for ro in (True, False):
            assert res[case["name"], ro]["read"] == expected_reads(), (case["name"], ro)


def _table_records(meta: bytes) -> list[int]:
    """Header positions of the key records of a table store (reference §5.1)."""
    pos = align4(4 + (struct.unpack_from("<I", meta, 0)[0] & LENGTH_MASK))
    out = []
    while (word := struct.unpack_from("<I", meta, pos)[0]) and not word & HDR_NOT_COMPLETE:
        out.append(pos)
        pos = align4(pos + 4 + (word & LENGTH_MASK))
    return out


@pytest.mark.parametrize("read_only", [True, False])
def test_metadata_record_length_past_end_of_file(worker: Worker, tmp_path: Path,
                                                 lib_queue: Path, read_only: bool) -> None:
    """A key record whose length runs past the end of metadata.cq4t: opening
    writable says so (a reader uses the records before it), and leaves the
    file's size alone."""
    meta = (lib_queue / "metadata.cq4t").read_bytes()
    rec = _table_records(meta)[1]
    cases = [{"name": f"record-len-{n:#x}", "modes": [read_only],
              "mutations": [["write", "metadata.cq4t", rec, u32(n)]]}
             for n in (len(meta) - rec - 4 + 1, 5 << 20, 1 << 24, HDR_META | (1 << 24))]
    res = worker.run("cases", {"pristine": str(lib_queue), "cases": cases,
                               "index_base": INDEX_BASE, "workdir": str(tmp_path)})
    assert len(res) == len(cases)
    for r in res:
        assert r["sizes"]["metadata.cq4t"] == len(meta), (r["name"], "metadata.cq4t grew")
        if read_only:
            assert r["read"] == expected_reads() and not r["errors"], (r["name"], r["errors"])
        else:
            assert r["corrupt"].get("open") == rec, (r["name"], r["corrupt"], r["errors"])


# --------------------------------------------------------------------------
# the header document
# --------------------------------------------------------------------------


def _header_flip_cases(cyc: str, lay: Layout) -> list[dict[str, Any]]:
    """Every byte of the header document inverted, one at a time (single-bit flips
    are left to the random-flip tests)."""
    return [{"name": f"xorff-{off:#x}", "mutations": [["xor", cyc, off, 0xFF]]}
            for off in range(lay.header_end)]


def test_flipped_bytes_in_header_document(worker: Worker, tmp_path: Path, lib_queue: Path,
                                          lib_layout: Layout) -> None:
    cyc = cycle_name(lib_queue)
    run_cases(worker, tmp_path, lib_queue, _header_flip_cases(cyc, lib_layout))


def test_flipped_bytes_in_java_header_document(worker: Worker, tmp_path: Path,
                                               java_v5: Path) -> None:
    """A sample of the Java header's bytes (the library's header is the same
    layout and is covered byte by byte above)."""
    cyc = cycle_name(java_v5)
    cases = random.Random(12).sample(_header_flip_cases(cyc, Layout(java_v5 / cyc)), 64)
    for c in cases:
        c["modes"] = [True]
    run_cases(worker, tmp_path, java_v5, cases, index_base=JAVA_V5_BASE)


# --------------------------------------------------------------------------
# the index: move_to_index falls back to walking, or raises
# --------------------------------------------------------------------------


def _index_cases(cyc: str, lay: Layout) -> tuple[list[dict[str, Any]], set[str]]:
    """Index damage after which seeking must still give the right excerpts (the
    index is unusable, so the reader walks), and damage that may only be survived."""
    assert lay.i2i_field is not None
    i2i_doc = lay.i2i_doc
    i2i_cap_off, _ = lay.array(i2i_doc)
    i2i_vals = lay.i2i_values()
    page_vals = lay.page_values(0)
    page_doc = lay.meta_docs[1]
    page_cap_off, _ = lay.array(page_doc)
    fallback = {
        "i2i-field-0": [["write", cyc, lay.i2i_field, u64(0)]],
        "i2i-field-past-eof": [["write", cyc, lay.i2i_field, u64(lay.size + 4096)]],
        "i2i-field-2^62": [["write", cyc, lay.i2i_field, u64(1 << 62)]],
        "i2i-field-2^63": [["write", cyc, lay.i2i_field, u64(1 << 63)]],
        "i2i-field-at-header": [["write", cyc, lay.i2i_field, u64(4)]],
        "i2i-field-at-data": [["write", cyc, lay.i2i_field, u64(lay.data[3][0])]],
        "i2i-field-odd": [["write", cyc, lay.i2i_field, u64(i2i_doc + 1)]],
        "i2i-field-at-page": [["write", cyc, lay.i2i_field, u64(page_doc)]],
        "i2i-doc-not-event": [["write", cyc, i2i_doc + 4, "00"]],
        "i2i-cap-huge": [["write", cyc, i2i_cap_off, u64(1 << 40)]],
        "i2i-cap-0": [["write", cyc, i2i_cap_off, u64(0)]],
        "i2i-cap-neg": [["write", cyc, i2i_cap_off, u64(-8)]],
        "i2i-used-0": [["write", cyc, i2i_cap_off + 8, u64(0)]],
        "i2i-used-neg": [["write", cyc, i2i_cap_off + 8, u64(-1)]],
        "i2i-used-huge": [["write", cyc, i2i_cap_off + 8, u64(1 << 50)]],
        "i2i-slot0-0": [["write", cyc, i2i_vals, u64(0)]],
        "i2i-slot0-past-eof": [["write", cyc, i2i_vals, u64(lay.size * 2)]],
        "i2i-slot0-at-header": [["write", cyc, i2i_vals, u64(4)]],
        "i2i-slot0-2^63": [["write", cyc, i2i_vals, u64(1 << 63)]],
        "page-cap-huge": [["write", cyc, page_cap_off, u64(1 << 40)]],
        "page-entries-0": [["write", cyc, page_vals, u64(0) * 2]],
        "page-entry-past-eof": [["write", cyc, page_vals + 8, u64(lay.size + 100)]],
        "page-entry-at-meta": [["write", cyc, page_vals + 8, u64(page_doc)]],
        "page-entry-2^63": [["write", cyc, page_vals + 8, u64(1 << 63)]],
        "page-entries-at-i2i": [["write", cyc, page_vals, u64(i2i_doc) * 2]],
        "i2i-slot0-at-data": [["write", cyc, i2i_vals, u64(lay.data[5][0])]],
        "wp-past-eof": [["write", cyc, lay.wp_values,
                         u64(lay.size + 8) + u64((lay.size + 8) << 32 | 299)]],
        "wp-inconsistent": [["write", cyc, lay.wp_values, u64(lay.data[3][0]) + u64(99)]],
        "wp-at-meta": [["write", cyc, lay.wp_values,
                        u64(page_doc) + u64(page_doc << 32 | 299)]],
        "wp-zero": [["write", cyc, lay.wp_values, u64(0) * 2]],
        # positions near 2^64 used to wrap the core's `pos + 4 > map_len` checks
        # (array_at, index_floor, write_position): a read before the mapping
        "i2i-field-2^64-1": [["write", cyc, lay.i2i_field, u64(-1)]],
        "i2i-field-2^64-4": [["write", cyc, lay.i2i_field, u64(-4)]],
        "i2i-slot0-2^64-4": [["write", cyc, i2i_vals, u64(-4)]],
        "page-entry0-2^64-4": [["write", cyc, page_vals, u64(-4)]],
        "page-entry1-2^64-1": [["write", cyc, page_vals + 8, u64(-1)]],
        # a consistent pair (reference §4.2): the second long's high bits = the first's low bits
        "wp-2^64-4": [["write", cyc, lay.wp_values, u64(-4) + u64((0xFFFFFFFC << 32) | 5)]],
        "wp-2^64-4-seq299": [["write", cyc, lay.wp_values,
                              u64(-4) + u64((0xFFFFFFFC << 32) | 299)]],
    }
    survive = {
        # entries naming another excerpt cannot be told from right ones; entries
        # in the middle of a payload may look like a header: wrong answers or
        # CorruptQueueError, never a crash
        "page-entry-wrong-excerpt": [["write", cyc, page_vals + 8, u64(lay.data[7][0])]],
        "page-entry-mid-payload": [["write", cyc, page_vals + 8, u64(lay.data[200][0] + 4)]],
        "page-entry-odd": [["write", cyc, page_vals + 8, u64(lay.data[200][0] + 1)]],
        "wp-stale": [["write", cyc, lay.wp_values,
                      u64(lay.data[7][0]) + u64(lay.data[7][0] << 32 | 7)]],
        "wp-lying-seq": [["write", cyc, lay.wp_values,
                          u64(lay.data[7][0]) + u64(lay.data[7][0] << 32 | 1000)]],
    }
    cases = [{"name": k, "mutations": v} for k, v in {**fallback, **survive}.items()]
    return cases, set(fallback)


def test_corrupt_index_falls_back_to_walking(worker: Worker, tmp_path: Path, lib_queue: Path,
                                             lib_layout: Layout) -> None:
    cyc = cycle_name(lib_queue)
    cases, fallback = _index_cases(cyc, lib_layout)
    res = run_cases(worker, tmp_path, lib_queue, cases)
    for (name, _ro), r in res.items():
        if name in fallback:
            assert_reads_everything(r)


def test_corrupt_java_index(worker: Worker, tmp_path: Path, java_v5: Path) -> None:
    cyc = cycle_name(java_v5)
    lay = Layout(java_v5 / cyc)
    assert lay.i2i_field is not None
    i2i_cap_off, _ = lay.array(lay.i2i_doc)
    fallback = {
        "i2i-field-0": [["write", cyc, lay.i2i_field, u64(0)]],
        "i2i-field-past-eof": [["write", cyc, lay.i2i_field, u64(lay.size + 8)]],
        "i2i-field-2^64-1": [["write", cyc, lay.i2i_field, u64(-1)]],
        "i2i-cap-huge": [["write", cyc, i2i_cap_off, u64(1 << 40)]],
        "i2i-slot0-0": [["write", cyc, lay.i2i_values(), u64(0)]],
        "i2i-slot0-2^64-4": [["write", cyc, lay.i2i_values(), u64(-4)]],
        "page-entry0-0": [["write", cyc, lay.page_values(0), u64(0)]],
        "page-entry0-at-meta": [["write", cyc, lay.page_values(0), u64(lay.i2i_doc)]],
        "page-entry0-2^64-4": [["write", cyc, lay.page_values(0), u64(-4)]],
    }
    cases = [{"name": k, "mutations": v} for k, v in fallback.items()]
    res = run_cases(worker, tmp_path, java_v5, cases, index_base=JAVA_V5_BASE)
    for (name, ro), r in res.items():
        assert [i for i, _ in r["read"]] == [JAVA_V5_BASE + k for k in range(4)], (name, ro)
        assert r["last"] == JAVA_V5_BASE + 3, (name, ro)
        assert r["corrupt"] == {}, (name, ro)


# --------------------------------------------------------------------------
# appending to a queue whose index is damaged
# --------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["i2i-cap-huge", "i2i-slot1-at-data"])
def test_append_with_corrupt_index_never_duplicates(tmp_path: Path, lib_queue: Path,
                                                    lib_layout: Layout, damage: str) -> None:
    """Indexing is best effort once an excerpt is published: every append
    succeeds and writes its message exactly once, leaving holes in the index
    that lookups walk over.  (The append used to raise CorruptQueueError for a
    message it had written: a caller that retried wrote it twice.)"""
    qdir = tmp_path / "q"
    shutil.copytree(lib_queue, qdir)
    cyc = qdir / cycle_name(qdir)
    lay = lib_layout
    if damage == "i2i-cap-huge":  # index2index capacity larger than its document
        at, value = lay.array(lay.i2i_doc)[0], 1 << 40
    else:  # the page for seqs 256..511 is "already" at a data excerpt
        at, value = lay.i2i_values() + 8, lay.data[9][0]
    with open(cyc, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<q", value))
    new = [b"new%d" % i for i in range(N_MSG, 2 * 256 + 8)]  # seq 512 opens a new page
    with ac.open_queue(qdir, time_provider=ac.SetTimeProvider(T0), block_size=BLOCK,
                       timeout=OPEN_TIMEOUT) as q:
        a = q.appender()
        for i, msg in enumerate(new):
            assert a.append(msg) == INDEX_BASE + N_MSG + i  # never raises
        got = [(ex.index, ex.payload) for ex in q.tailer()]
        assert got == ([(INDEX_BASE + i, payload(i)) for i in range(N_MSG)]
                       + [(INDEX_BASE + N_MSG + i, m) for i, m in enumerate(new)])
        assert q.last_index == INDEX_BASE + len(got) - 1
        t = q.tailer()
        for seq in (0, 255, 256, N_MSG, 400, 511, 512, len(got) - 1):
            assert t.move_to_index(INDEX_BASE + seq), seq
            ex = t.read_nowait()
            assert ex is not None and ex.index == INDEX_BASE + seq, seq
        assert not t.move_to_index(INDEX_BASE + len(got) + 1)
    with open(cyc, "rb") as f:  # the damage is left alone
        f.seek(at)
        assert struct.unpack("<q", f.read(8))[0] == value


# --------------------------------------------------------------------------
# random byte flips (seeded, bounded in count and time)
# --------------------------------------------------------------------------


def _flip_spec(tmp_path: Path, pristine: Path, lay: Layout, seed: int, iterations: int,
               read_only: bool | None, index_base: int = INDEX_BASE, meta: bool = False,
               seconds: float = 60, stop_on_error: bool = True) -> dict[str, Any]:
    cyc = cycle_name(pristine)
    targets: list[list[Any]] = [
        [cyc, 0, lay.header_end, 3],  # header document
        [cyc, lay.header_end, lay.data[0][0], 2],  # index2index and the first index page
        [cyc, lay.data[0][0], lay.end + 8, 5],  # excerpts and the index pages among them
        [cyc, 0, lay.size, 1],  # anywhere
    ]
    if meta:
        targets = [["metadata.cq4t", 0, 600, 1]]
    return {"pristine": str(pristine), "seed": seed, "iterations": iterations,
            "seconds": seconds, "targets": targets, "read_only": read_only,
            "index_base": index_base, "stop_on_error": stop_on_error,
            "workdir": str(tmp_path)}


def _check_flips(result: list[Any], min_iterations: int) -> None:
    (summary,) = result
    assert summary["n_errors"] == 0, (
        f"{summary['n_errors']} exceptions other than CorruptQueueError, or files grown, "
        "e.g.:\n" + "\n".join(summary["errors"][:5]))
    assert summary["iterations"] >= min_iterations
    assert 0 < summary["corrupt"] < summary["iterations"]


@pytest.mark.parametrize("seed", [1, 2])
def test_random_flips_in_cycle_file(worker: Worker, tmp_path: Path, lib_queue: Path,
                                    lib_layout: Layout, seed: int) -> None:
    """Read-only and writable, at random."""
    spec = _flip_spec(tmp_path, lib_queue, lib_layout, seed, iterations=FLIPS, read_only=None)
    _check_flips(worker.run("flips", spec), min_iterations=FLIPS)


def test_random_flips_writable(worker: Worker, tmp_path: Path, lib_queue: Path,
                               lib_layout: Layout) -> None:
    """All writable: a reader of a writable queue never grows a cycle file (it
    used to, for a header length past the end of the file)."""
    spec = _flip_spec(tmp_path, lib_queue, lib_layout, 6, iterations=FLIPS, read_only=False)
    _check_flips(worker.run("flips", spec), min_iterations=FLIPS)


def test_random_flips_in_java_cycle_file(worker: Worker, tmp_path: Path, java_v5: Path) -> None:
    lay = Layout(java_v5 / cycle_name(java_v5))
    spec = _flip_spec(tmp_path, java_v5, lay, 3, iterations=FLIPS, read_only=None,
                      index_base=JAVA_V5_BASE)
    _check_flips(worker.run("flips", spec), min_iterations=FLIPS)


def test_random_flips_in_chronicle4_cycle_file(worker: Worker, tmp_path: Path,
                                               java_v4: Path) -> None:
    """A damaged `format` or `length` in a Chronicle 4 cycle header (the roll
    cycle is guessed from it) is corruption, not a ValueError."""
    lay = Layout(java_v4 / cycle_name(java_v4), align=1)
    spec = _flip_spec(tmp_path, java_v4, lay, 4, iterations=FLIPS, read_only=True,
                      index_base=JAVA_V4_BASE)
    _check_flips(worker.run("flips", spec), min_iterations=FLIPS)


def test_random_flips_in_metadata(worker: Worker, tmp_path: Path, lib_queue: Path,
                                  lib_layout: Layout) -> None:
    """Flipped roll settings are corruption (not ValueError), flipped lock values
    a dead holder (not OverflowError), a flipped header type a foreign file.
    Read-only here; writable below."""
    spec = _flip_spec(tmp_path, lib_queue, lib_layout, 5, iterations=2 * FLIPS, read_only=True,
                      meta=True)
    _check_flips(worker.run("flips", spec), min_iterations=2 * FLIPS)


def test_random_flips_in_metadata_writable(worker: Worker, tmp_path: Path, lib_queue: Path,
                                           lib_layout: Layout) -> None:
    spec = _flip_spec(tmp_path, lib_queue, lib_layout, 5, iterations=FLIPS, read_only=False,
                      meta=True)
    _check_flips(worker.run("flips", spec), min_iterations=FLIPS)


if __name__ == "__main__":
    assert sys.argv[1:] == ["serve"], sys.argv
    sys.exit(serve())


def _not_a_file(where: Path, maker: str) -> Path:
    """Put a directory or a FIFO at ``where``."""
    if maker == "dir":
        where.mkdir()
    else:
        os.mkfifo(where)
    return where


def test_things_that_are_not_queue_files_get_named_errors(tmp_path: Path) -> None:
    """A file where the queue directory should be, a directory or a FIFO where a
    cycle file should be: named errors, never an OSError from deep inside mmap."""
    afile = tmp_path / "afile"
    afile.write_bytes(b"not a queue")
    with pytest.raises(ac.NotAQueueError, match="is a file, not a queue directory"):
        ac.open_queue(afile)
    with pytest.raises(ValueError, match="empty"):
        ac.open_queue("")
    clock = ac.SetTimeProvider(19_675 * 86_400_000 + 1)  # 2023-11-14: 20231114F.cq4
    for maker in ("dir", "fifo"):
        qdir = tmp_path / maker
        qdir.mkdir()
        where = _not_a_file(qdir / "20231114F.cq4", maker)
        with ac.open_queue(qdir, time_provider=clock) as q:
            with pytest.raises(ac.CorruptQueueError) as err:
                q.appender().append(b"x")
            assert err.value.path == str(where)
        with ac.open_queue(qdir, read_only=True) as q, pytest.raises(ac.CorruptQueueError):
            q.tailer().read_nowait()


@pytest.mark.parametrize("maker", ["dir", "fifo"])
def test_a_table_store_that_is_not_a_file(tmp_path: Path, maker: str) -> None:
    qdir = tmp_path / "q"
    qdir.mkdir()
    meta = _not_a_file(qdir / "metadata.cq4t", maker)
    for read_only in (False, True):
        with pytest.raises(ac.CorruptQueueError) as err:
            ac.open_queue(qdir, read_only=read_only)
        assert err.value.path == str(meta)


def test_damaged_length_in_an_older_cycle_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    """A bit flipped in the length of a cycle file's index2index document (not
    the last cycle) made the walk land past the real next header, on zeros:
    readers read 40 of 120 excerpts and reported nothing.  An unwritten header
    before the last committed excerpt is now a CorruptQueueError, and repair
    gets every excerpt back."""
    import subprocess
    import sys

    clock = ac.SetTimeProvider(1_700_000_000_000)
    path = tmp_path / "q"
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_SECONDLY, time_provider=clock) as q:
        app = q.appender()
        expected = []
        for c in range(3):
            expected += [app.append(b"c%d-%d" % (c, i)) for i in range(40)]
            clock.advance_millis(1000)
        middle = q.cycle_path(q.cycles()[1])
    with open(middle, "r+b") as f:
        head = f.read(4096)
        at = head.index(b"\xb9\x0bindex2index") - 4  # the header word of index2index
        f.seek(at)
        f.write(bytes([head[at] ^ 0x08]))
    with ac.open_queue(path, read_only=True) as q:
        t = q.tailer()
        got = []
        with pytest.raises(ac.CorruptQueueError):
            while (ex := t.read_nowait()) is not None:
                got.append(ex.index)
        assert got == expected[:40]
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "repair", "--yes", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with ac.open_queue(path, read_only=True) as q:
        assert [ex.index for ex in q.tailer()] == expected


def test_packed_cycle_file_is_read_but_never_appended_to(tmp_path: Path) -> None:
    """A dataFormat 0 (packed, pre-5.19.11) cycle file has headers at any
    offset; a header CAS there is undefined behaviour, so appends are refused
    with UnalignedCycleError (the native core checks it too) and reads go on."""
    path = tmp_path / "q"
    clock = ac.SetTimeProvider(1_700_000_000_000)
    with ac.open_queue(path, time_provider=clock) as q:
        app = q.appender()
        sent = [b"%08d" % i for i in range(3)]  # 8 bytes: the same offsets packed or aligned
        for m in sent:
            app.append(m)
    (cycle_file,) = path.glob("*.cq4")
    raw = bytearray(cycle_file.read_bytes())
    field = b"\xcadataFormat\x01"
    at = raw.index(field)
    raw[at + len(field) - 1] = 0x00  # dataFormat: 0
    cycle_file.write_bytes(bytes(raw))
    with ac.open_queue(path, time_provider=clock) as q:
        assert [ex.payload for ex in q.tailer()] == sent
        with pytest.raises(ac.UnalignedCycleError):
            q.appender().append(b"more")
        with pytest.raises(ac.UnalignedCycleError), q.appender().writing_document() as dc:
            dc.write(b"more")
    assert cycle_file.read_bytes() == bytes(raw)  # not a byte changed
