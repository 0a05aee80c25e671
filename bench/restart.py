"""Restart latency of a service under ``aiochronicle run``: from the runner
seeing the death to the restarted service handling its next live input.

Run:  .venv/bin/python bench/restart.py [--quick] [--kills N] [--dir DIR]

The example pipeline (``examples/pipeline``: gateway -> strategy -> router,
uvloop, snapshots) is run by ``aiochronicle run`` while this process feeds it
bursts of market data at ``--rate`` ticks per second; the strategy is
SIGKILLed ``--kills`` times, each time once the restarted one is handling
live input again and its next standby process is ready.  The runner logs
each restart's latency and, of it, the recovery (loading the snapshot and
replaying the inputs since it, outputs suppressed).  The rest is telling the
standby process (already started and imported) to go, and it making its event
loop and opening its queues.

Baseline, in the same run: the wall time of ``python -m aiochronicle
--version`` (a Python process that imports aiochronicle and exits), what a
restart by a new process would cost at least.  Printed: the medians, and the restart
latency as a ratio to that baseline.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "pipeline"
sys.path.insert(0, str(EXAMPLE))

from messages import Feed  # noqa: E402

import aiochronicle as ac  # noqa: E402

LATENCY = re.compile(r"strategy: restart latency ([\d.]+) ms .*?then (\d+) inputs replayed\) "
                     r"([\d.]+) ms")


def _baseline(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "aiochronicle", "--version"], check=True,
                       capture_output=True)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--rate", type=float, default=5000.0, help="ticks per second")
    ap.add_argument("--quick", action="store_true", help="3 kills")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    args = ap.parse_args()
    kills = 3 if args.quick else args.kills
    work = Path(args.dir or tempfile.mkdtemp(prefix="restart-bench-"))
    shutil.rmtree(work / "queues", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    text = (EXAMPLE / "PIPELINE.toml").read_text()
    text = re.sub(r"(?m)^python_path = .*$", f'python_path = ["{EXAMPLE}"]', text)
    (work / "PIPELINE.toml").write_text(text)

    runner = subprocess.Popen([sys.executable, "-m", "aiochronicle", "run", "PIPELINE.toml"],
                              cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    lines: list[str] = []
    cond = threading.Condition()

    def read() -> None:
        assert runner.stdout is not None
        for line in runner.stdout:
            with cond:
                lines.append(line)
                cond.notify_all()

    threading.Thread(target=read, daemon=True).start()

    def wait_for(rx: re.Pattern[str], after: int) -> re.Match[str]:
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found[:] = [m for ln in lines[after:] if (m := rx.search(ln))][:1]
            return bool(found)

        with cond:
            if not cond.wait_for(seen, 60):
                raise SystemExit("no " + rx.pattern + " in the log:\n" + "".join(lines))
        return found[0]

    stop = threading.Event()

    def feed() -> None:
        with ac.open_queue(str(work / "queues" / "feed"), source_id=10) as fq:
            writer = fq.appender().method_writer(Feed)
            seq, start = 0, time.monotonic()
            while not stop.is_set():
                writer.on_burst(seq, 20)
                seq += 20
                time.sleep(max(0.0, start + seq / args.rate - time.monotonic()))

    results: list[tuple[float, int, float]] = []
    try:
        pid = int(wait_for(re.compile(r"started strategy \(pid (\d+)\)"), 0).group(1))
        feeder = threading.Thread(target=feed, daemon=True)
        feeder.start()
        ready = re.compile(r"strategy: a standby process is ready")
        at = 0
        for _ in range(kills):
            wait_for(ready, at)
            time.sleep(0.5)  # inputs since the last snapshot to replay
            at = len(lines)
            os.kill(pid, signal.SIGKILL)
            pid = int(wait_for(re.compile(r"started strategy \(pid (\d+)\)"), at).group(1))
            m = wait_for(LATENCY, at)
            results.append((float(m.group(1)), int(m.group(2)), float(m.group(3))))
        stop.set()
        feeder.join(10)
    finally:
        runner.send_signal(signal.SIGTERM)
        code = runner.wait(60)
    if code != 0:
        print("".join(lines))
        raise SystemExit(f"the runner exited with status {code}")
    base = _baseline(kills)
    lat = statistics.median(r[0] for r in results)
    rec = statistics.median(r[2] for r in results)
    rep = statistics.median(r[1] for r in results)
    b = statistics.median(base)
    print(f"restart of the strategy, {kills} SIGKILLs at {args.rate:,.0f} ticks/s "
          f"(median of each):")
    print("| figure | ms | ratio to a bare process start |")
    print("|---|---|---|")
    print(f"| restart latency (death seen -> next live input handled) | {lat:.1f} | "
          f"{lat / b:.2f}x |")
    print(f"| of it: recovery ({rep:.0f} inputs replayed after the snapshot) | {rec:.1f} | "
          f"{rec / b:.2f}x |")
    print(f"| of it: the rest (the standby told to go, loop, queues opened) | {lat - rec:.1f} | "
          f"{(lat - rec) / b:.2f}x |")
    print(f"| baseline: `python -m aiochronicle --version`, start to exit | {b:.1f} | 1.00x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
