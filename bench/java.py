"""aiochronicle beside Java Chronicle Queue on the same machine, in one run: Java's
appender to Java's tailer (two JVMs), Python to Python, Java to Python and Python to
Java, all on one queue directory format.

Run:  .venv/bin/python bench/java.py [--quick] [--version V] [--write-docs]

Every message is 40 bytes: the send time (``CLOCK_MONOTONIC`` ns, Java's
``System.nanoTime()`` and Python's ``time.monotonic_ns()``, taken just before the
append), the sequence number, zeros. Writers append one excerpt per call (Java:
``writingDocument``; Python: ``Appender.append``); readers busy-poll one excerpt per call
(Java: ``readingDocument``; Python: ``Tailer.read_nowait``) from a tailer at the start,
and take the receive time as soon as they have the excerpt.

* Throughput: the writer appends ``--throughput-msgs`` flat out; the rate is the
  messages after the first 10% (JIT warm-up) over the time from the send of the first
  of them to the receipt of the last; the best of ``--repeats`` interleaved runs.
* Latency: the writer paces ``--seconds`` of messages at 10k/s and 100k/s (spinning on
  the clock); p50/p90/p99 of receive - send, the first ``--warmup`` seconds left out;
  ``--repeats`` interleaved runs of which each pair keeps the one with the lowest p99.

Each writer and reader is its own process, pinned to CPUs 0 and 1 (``taskset``;
``--no-pin`` not to), with the JVM's JIT and background threads on the same CPU as its
busy thread. Every figure is also given as a ratio to Java -> Java's in the same run.
This 2-vCPU VM is shared and noisy: compare figures within one run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

import _report  # bench/_report.py (this directory is on sys.path)

import aiochronicle as ac
import jvm  # interop/jvm.py

MSG = struct.Struct("<qq24x")  # send time, sequence, zeros: 40 bytes
PAIRS = ("Java -> Java", "Python -> Python", "Java -> Python", "Python -> Java")


# --------------------------------------------------------------------------
# the Python side (run as child processes of this script)
# --------------------------------------------------------------------------


def py_write(path: str, count: int, rate: int) -> None:
    with ac.open_queue(path) as q:
        app = q.appender()
        append, now, pack = app.append, time.monotonic_ns, MSG.pack
        if rate:
            period = 1_000_000_000 // rate
            start = now()
            for i in range(count):
                nxt = start + i * period
                while now() < nxt:
                    pass
                append(pack(now(), i))
        else:
            for i in range(count):
                append(pack(now(), i))
    print("END", count, flush=True)


def py_read(path: str, count: int, out: str) -> None:
    sent, recv = array("q", bytes(8 * count)), array("q", bytes(8 * count))
    with ac.open_queue(path) as q:
        tailer = q.tailer()
        read, now, unpack = tailer.read_nowait, time.monotonic_ns, MSG.unpack_from
        print("READY", flush=True)
        n = 0
        while n < count:
            e = read()
            if e is None:
                continue
            t = now()
            sent[n] = unpack(e.payload)[0]
            recv[n] = t
            n += 1
    pairs = array("q", bytes(16 * count))
    pairs[0::2], pairs[1::2] = sent, recv
    Path(out).write_bytes(pairs.tobytes())
    print("END", count, flush=True)


# --------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------


PIN = True  # --no-pin turns it off


def _pinned(cmd: list[str], cpu: int) -> list[str]:
    taskset = shutil.which("taskset")
    if PIN and taskset and (os.cpu_count() or 1) >= 2:
        return [taskset, "-c", str(cpu), *cmd]
    return cmd


def _python(*args: str) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--role", *args]


def run_pair(pair: str, version: str, workdir: str, count: int,
             rate: int) -> tuple[array[int], array[int]]:
    """One writer and one reader process on a fresh queue; (send, receive) times."""
    qdir = tempfile.mkdtemp(prefix="q-", dir=workdir)
    out = os.path.join(workdir, "times.bin")
    writer_lang, reader_lang = (s.strip() for s in pair.split("->"))
    if reader_lang == "Java":
        reader = jvm.command(version, "bench-read", qdir, str(count), out, bench=True)
    else:
        reader = _python("py-read", qdir, str(count), out)
    if writer_lang == "Java":
        writer = jvm.command(version, "bench-write", qdir, str(count), "40", str(rate),
                             bench=True)
    else:
        writer = _python("py-write", qdir, str(count), str(rate))
    rp = subprocess.Popen(_pinned(reader, 1), stdout=subprocess.PIPE, text=True)
    assert rp.stdout is not None
    ready = rp.stdout.readline()
    if ready.strip() != "READY":
        raise RuntimeError(f"{pair} reader did not start: {ready!r}")
    subprocess.run(_pinned(writer, 0), check=True, stdout=subprocess.DEVNULL)
    if rp.wait(timeout=600) != 0:
        raise RuntimeError(f"{pair} reader failed ({rp.returncode})")
    pairs = array("q")
    pairs.frombytes(Path(out).read_bytes())
    shutil.rmtree(qdir)
    return pairs[0::2], pairs[1::2]


def throughput(sent: array[int], recv: array[int]) -> float:
    first = len(sent) // 10
    return (len(sent) - first) / ((recv[-1] - sent[first]) / 1e9)


def percentiles(sent: array[int], recv: array[int], skip: int) -> list[float]:
    lat = sorted(r - s for s, r in zip(sent[skip:], recv[skip:], strict=True))
    return [lat[min(len(lat) - 1, int(p * len(lat)))] / 1000 for p in (0.50, 0.90, 0.99)]


def ratio(a: float, b: float) -> str:
    """``a / b`` with two decimals, two significant digits below 0.1, ``<0.01x`` below
    0.01."""
    if not b:
        return "-"
    r = a / b
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x" if r >= 0.01 else "<0.01x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--version", default=jvm.NEWEST, choices=sorted(jvm.VERSIONS),
                    help="the Chronicle Queue version of the Java side")
    ap.add_argument("--throughput-msgs", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=2.0, help="measured seconds per rate")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds left out first")
    ap.add_argument("--rates", default="10000,100000", help="comma-separated msgs/s")
    ap.add_argument("--repeats", type=int, default=4,
                    help="interleaved runs; each pair keeps its best throughput and the "
                         "latency run with the lowest p99")
    ap.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="do not pin writer and reader to CPUs 0 and 1")
    ap.add_argument("--write-docs", action="store_true",
                    help="put the figures into docs/performance.md")
    args = ap.parse_args()
    if args.role:
        role: dict[str, Callable[[], None]] = {
            "py-write": lambda: py_write(args.role[1], int(args.role[2]), int(args.role[3])),
            "py-read": lambda: py_read(args.role[1], int(args.role[2]), args.role[3]),
        }
        role[args.role[0]]()
        return
    if args.quick:
        args.throughput_msgs, args.seconds, args.warmup, args.repeats = 100_000, 0.5, 0.1, 1
    rates = [int(r) for r in args.rates.split(",")]
    global PIN
    PIN = args.pin
    jvm.build(args.version)
    load_start = _report.load()
    tput: dict[str, float] = {}
    lat: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-java-",
                                     dir="/dev/shm" if os.path.isdir("/dev/shm") else None
                                     ) as workdir:
        for _ in range(args.repeats):
            for pair in PAIRS:
                got_tput = throughput(*run_pair(pair, args.version, workdir,
                                                args.throughput_msgs, 0))
                print(f"{pair}: {got_tput:,.0f} msgs/s", file=sys.stderr)
                tput[pair] = max(tput.get(pair, 0.0), got_tput)
        for _ in range(args.repeats):
            for rate in rates:
                count = int(rate * (args.seconds + args.warmup))
                for pair in PAIRS:
                    sent, recv = run_pair(pair, args.version, workdir, count, rate)
                    got = percentiles(sent, recv, int(rate * args.warmup))
                    print(f"{pair} at {rate}/s: p50/p90/p99 "
                          f"{'/'.join(f'{x:.1f}' for x in got)} us", file=sys.stderr)
                    # the repetition with the lowest p99 (the machine is shared)
                    if (pair, rate) not in lat or got[2] < lat[pair, rate][2]:
                        lat[pair, rate] = got
    load_end = _report.load()

    base = PAIRS[0]
    rows = []
    for pair in PAIRS:
        row: list[object] = [pair, _report.rate(tput[pair]), ratio(tput[pair], tput[base])]
        for rate in rates:
            for k in range(3):
                v, b = lat[pair, rate][k], lat[base, rate][k]
                row.append(f"{v:.1f} ({ratio(v, b)})")
        rows.append(row)
    header = ["writer -> reader", "msgs/s", "vs Java"]
    for rate in rates:
        header += [f"p{p} µs @{rate // 1000}k/s" for p in (50, 90, 99)]
    lines = [_report.measured_by(
        "java.py", load_start, load_end,
        [f"Chronicle Queue {args.version} on Java 17", "40 B",
         f"{args.throughput_msgs:,} messages for throughput",
         f"{args.seconds:g} s per rate for latency ({args.warmup:g} s warm-up left out), "
         f"best of {args.repeats} runs", "pinned" if args.pin else "not pinned"]),
        "", *_report.table(header, rows)]
    print("\n".join(lines))
    if args.write_docs:
        _report.replace_block(_report.PERFORMANCE, "java-bench", lines)


if __name__ == "__main__":
    main()
