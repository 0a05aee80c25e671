"""Single-process append/read throughput of aiochronicle, beside two references.

Run:  .venv/bin/python bench/throughput.py [--quick] [--dir DIR] [--write-docs]

For each payload size it measures, in one run:

* aiochronicle per-message ``Appender.append`` and ``Tailer.read_nowait``;
* aiochronicle batch ``Appender.append_packed`` and ``Tailer.read_many``;
* reference "python-copy": a Python loop that only copies the same bytes into a
  preallocated buffer (what the interpreter itself costs per message);
* reference "memcpy": one bulk copy of all the payload bytes (the machine's
  memory bandwidth limit).

Ratios are printed against the references measured in the same run, because
this machine is noisy; compare ratios, not absolute figures, across runs.
``--write-docs`` puts the table into docs/performance.md (the
``throughput-bench`` block) and plots docs/throughput.png.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from array import array
from collections.abc import Callable

import _report  # bench/_report.py (this directory is on sys.path)

import aiochronicle as ac

WHAT = ("python-copy", "memcpy", "append", "read_nowait", "append_packed", "read_many")


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        n = fn()
        return n, time.perf_counter() - t0
    finally:
        gc.enable()


def best_of(repeats: int, fn: Callable[[], int]) -> float:
    """Best rate (items/s) over ``repeats`` runs."""
    best = 0.0
    for _ in range(repeats):
        n, dt = timed(fn)
        best = max(best, n / dt)
    return best


def run_size(root: str, size: int, count: int, repeats: int) -> dict[str, float]:
    msg = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert len(msg) == size
    rates: dict[str, float] = {}

    # reference: the interpreter copying the bytes into a preallocated buffer
    buf = bytearray(size * count)

    def py_copy() -> int:
        pos = 0
        b = buf
        m = msg
        n = size
        for _ in range(count):
            b[pos:pos + n] = m
            pos += n
        return count

    rates["python-copy"] = best_of(repeats, py_copy)

    # reference: one bulk copy of the same bytes
    src = msg * count
    dst = memoryview(buf)  # memoryview slice assignment is one memcpy (bytearray's is not)

    def bulk() -> int:
        dst[:] = src
        return count

    rates["memcpy"] = best_of(repeats, bulk)

    def fresh(tag: str) -> ac.Queue:
        path = os.path.join(root, f"{tag}-{size}")
        shutil.rmtree(path, ignore_errors=True)
        return ac.open_queue(path, roll_cycle=ac.RollCycles.HUGE_DAILY)

    # per-message append, then per-message read of what was written
    best_append = best_read = 0.0
    for r in range(repeats):
        with fresh(f"single{r}") as q:
            app = q.appender()
            app.append(msg)  # create the cycle file outside the timing
            append = app.append

            def do_append(append: Callable[[bytes], int] = append) -> int:
                for _ in range(count):
                    append(msg)
                return count

            n, dt = timed(do_append)
            best_append = max(best_append, n / dt)
            tailer = q.tailer()
            tailer.read_nowait()
            read = tailer.read_nowait

            def do_read(read: Callable[[], ac.Excerpt | None] = read) -> int:
                got = 0
                while read() is not None:
                    got += 1
                return got

            n, dt = timed(do_read)
            assert n == count, (n, count)
            best_read = max(best_read, n / dt)
    rates["append"] = best_append
    rates["read_nowait"] = best_read

    # batch append (Arrow layout) and batch read
    packed = msg * count
    offsets = array("q", range(0, size * (count + 1), size))
    best_bappend = best_bread = 0.0
    for r in range(repeats):
        with fresh(f"batch{r}") as q:
            app = q.appender()
            app.append(msg)

            def do_bappend(app: ac.Appender = app) -> int:
                app.append_packed(packed, offsets)
                return count

            n, dt = timed(do_bappend)
            best_bappend = max(best_bappend, n / dt)
            tailer = q.tailer()
            tailer.read_nowait()

            def do_bread(tailer: ac.Tailer = tailer) -> int:
                got = 0
                while True:
                    batch = tailer.read_many(65536, 4 << 20)
                    if not len(batch):
                        return got
                    got += len(batch)

            n, dt = timed(do_bread)
            assert n == count, (n, count)
            best_bread = max(best_bread, n / dt)
    rates["append_packed"] = best_bappend
    rates["read_many"] = best_bread
    return rates


def docs_lines(results: list[tuple[int, int, dict[str, float]]]) -> list[str]:
    rows = []
    for size, _count, rates in results:
        for what in WHAT:
            r = rates[what]
            rows.append([f"{size} B", f"`{what}`" if what not in ("python-copy", "memcpy")
                         else what, _report.rate(r), f"{r * size / 1e6:,.1f}",
                         _report.ratio(r, rates["python-copy"]),
                         _report.ratio(r, rates["memcpy"], 3)])
    return _report.table(["size", "what", "msgs/s", "MB/s", "vs python-copy", "vs memcpy"],
                         rows, "llrrrr")


def plot(results: list[tuple[int, int, dict[str, float]]], name: str) -> bool:
    plt = _report.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=_report.FIGSIZE)
    width = 0.8 / len(WHAT)
    colors = {"python-copy": "#bbbbbb", "memcpy": "#777777", "append": "#9ecae1",
              "read_nowait": "#3182bd", "append_packed": "#fdae6b", "read_many": "#e6550d"}
    for k, what in enumerate(WHAT):
        xs = [i + (k - (len(WHAT) - 1) / 2) * width for i in range(len(results))]
        ax.bar(xs, [rates[what] for _s, _c, rates in results], width, label=what,
               color=colors[what], hatch="//" if what in ("python-copy", "memcpy") else None,
               edgecolor="white", linewidth=0.5)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels([f"{size} B" for size, _c, _r in results])
    ax.set_yscale("log")
    ax.set_ylabel("messages per second (log)")
    ax.set_title("one process: aiochronicle append/read beside a Python copy loop and memcpy")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc="upper right")
    _report.save(fig, name)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--dir", default=None, help="where to put the queues (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true",
                        help="write the table into docs/performance.md and docs/throughput.png")
    args = parser.parse_args()
    sizes = [(40, 1_000_000), (256, 500_000), (4096, 100_000)]
    if args.quick:
        sizes = [(s, max(1000, n // 100)) for s, n in sizes]
    root = args.dir or tempfile.mkdtemp(prefix="aiochronicle-bench-")
    load0 = _report.load()
    t_start = time.monotonic()
    print(f"aiochronicle {ac.__version__} throughput, one process, best of {args.repeats}; "
          f"load average {load0:.2f}; queues in {root}")
    header = (f"{'size':>6} {'what':<14} {'msgs/s':>14} {'MB/s':>10} {'vs python-copy':>15} "
              f"{'vs memcpy':>10}")
    print(header)
    print("-" * len(header))
    results: list[tuple[int, int, dict[str, float]]] = []
    try:
        for size, count in sizes:
            rates = run_size(root, size, count, args.repeats)
            results.append((size, count, rates))
            for what in WHAT:
                r = rates[what]
                print(f"{size:>6} {what:<14} {r:>14,.0f} {r * size / 1e6:>10,.1f} "
                      f"{r / rates['python-copy']:>14.2f}x {r / rates['memcpy']:>9.3f}x")
            print()
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    load1 = _report.load()
    print(f"total {time.monotonic() - t_start:.0f} s; load average {load1:.2f}")
    if args.write_docs:
        png = "throughput.png"
        counts = ", ".join(f"{count:,} x {size} B" for size, count, _r in results)
        body = [_report.measured_by(
                    "throughput.py", load0, load1,
                    [f"best of {args.repeats} runs of {counts}"]),
                "Rates in messages per second; the ratios are against the two references "
                "of the same run.", "", *docs_lines(results)]
        if plot(results, png):
            body += ["", f"![single-process append and read rates, with the references]({png})"]
        else:
            _report.skipped_plot(png)
        _report.replace_block(_report.PERFORMANCE, "throughput-bench", body)
        print("wrote docs/performance.md" + (f" and docs/{png}" if "![" in body[-1] else ""))


if __name__ == "__main__":
    main()
