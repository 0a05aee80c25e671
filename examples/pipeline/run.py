"""Run the three-service pipeline (gateway -> strategy -> router, each a
process of its own) through ``aiochronicle run PIPELINE.toml``, feed it bursts
of market data, and print the per-hop latency the router reads from message
history.  With ``--kill SERVICE``, SIGKILL that service in the middle of the
feed (the runner restarts it), then run the same feed again without the kill
and show that the router's orders are the same, each exactly once, in order.

Usage: python examples/pipeline/run.py [DIR] [--ticks N] [--rate R] [--kill SERVICE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from messages import Feed, Order, Routed, Tick

import aiochronicle as ac

HERE = os.path.dirname(os.path.abspath(__file__))
PIPELINE = os.path.join(HERE, "PIPELINE.toml")
BURST = 20  # ticks the gateway publishes for one feed call


class Log:
    """Echoes the runner's log stream and remembers each service's pid."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.pids: dict[str, int] = {}
        self.ready: set[tuple[str, str]] = set()  # (service, "is live" or "a standby...")
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            m = re.search(r"started (\w+) \(pid (\d+)\)", line)
            if m:
                with self.changed:
                    self.pids[m.group(1)] = int(m.group(2))
                    self.changed.notify_all()
            m = re.search(r"(\w+)(: a standby process is ready| is live)", line)
            if m:
                with self.changed:
                    self.ready.add((m.group(1), m.group(2).strip(": ")))
                    self.changed.notify_all()

    def wait_ready(self, services: tuple[str, ...], timeout: float = 60.0) -> None:
        """Until each service is live and has a standby process for its next restart."""
        want = {(s, w) for s in services for w in ("is live", "a standby process is ready")}
        with self.changed:
            if not self.changed.wait_for(lambda: want <= self.ready, timeout):
                raise SystemExit("pipeline: the services did not start")

    def pid(self, service: str, timeout: float = 30.0) -> int:
        with self.changed:
            if not self.changed.wait_for(lambda: service in self.pids, timeout):
                raise SystemExit(f"pipeline: {service} did not start")
            return self.pids[service]


class Orders:
    """Collects the router's ``Routing`` calls."""

    def __init__(self) -> None:
        self.routed: list[Routed] = []
        self.done = False

    def on_routed(self, routed: Routed) -> None:
        self.routed.append(routed)

    def end_of_day(self, orders: int) -> None:
        self.done = True


def routed_orders(path: str, timeout: float = 120.0) -> list[Routed]:
    """The router's orders, once its ``end_of_day`` is in the queue."""
    orders = Orders()
    deadline = time.monotonic() + timeout
    while not os.path.isdir(path):
        time.sleep(0.01)
    with ac.open_queue(path, read_only=True) as q:
        reader = q.tailer().method_reader(orders)
        while not orders.done:
            if reader.read_available() == 0:
                if time.monotonic() > deadline:
                    raise SystemExit("pipeline: the router did not finish in time")
                time.sleep(0.01)
    return orders.routed


def run_pipeline(directory: str, ticks: int, rate: float, kill: str | None) -> list[Routed]:
    """One run of the pipeline on a fresh directory; the router's orders."""
    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    runner = subprocess.Popen([sys.executable, "-m", "aiochronicle", "run", PIPELINE,
                               "--directory", directory],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = Log(runner)
    try:
        log.wait_ready(("gateway", "strategy", "router"))
        with ac.open_queue(os.path.join(directory, "feed"), source_id=10) as fq:
            feed = fq.appender().method_writer(Feed)
            start = time.monotonic()
            for first in range(0, ticks, BURST):
                feed.on_burst(first, min(BURST, ticks - first))
                if kill and first == (ticks // 2) // BURST * BURST:
                    os.kill(log.pid(kill), signal.SIGKILL)
                    print(f"pipeline: SIGKILLed {kill} in the middle of the feed", flush=True)
                time.sleep(max(0.0, start + (first + BURST) / rate - time.monotonic()))
            feed.end_of_day(ticks)
        orders = routed_orders(os.path.join(directory, "routed"))
    finally:
        runner.send_signal(signal.SIGTERM)
        code = runner.wait(60)
        log.thread.join(10)
    if code != 0:
        raise SystemExit(f"pipeline: the runner exited with status {code}")
    print(f"pipeline: stopped cleanly, {len(orders):,} orders routed", flush=True)
    return orders


class _Show:
    """A method-reader handler that prints each call it is given."""

    def on_tick(self, tick: Tick) -> None:
        print(f"  on_tick({tick!r})")

    def on_order(self, order: Order) -> None:
        print(f"  on_order({order!r})")


def show_calls(path: str, name: str, hop: str, count: int = 3) -> None:
    """Print the first few method calls of a queue, decoded into their Structs."""
    with ac.open_queue(path, read_only=True) as q:
        print(f"the first calls on the {name} queue ({hop}), each excerpt one typed method "
              "call:")
        q.tailer().method_reader(_Show()).read_available(limit=count)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="pipeline-queues")
    ap.add_argument("--ticks", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=10_000.0, help="ticks per second")
    ap.add_argument("--kill", choices=["gateway", "strategy", "router"],
                    help="SIGKILL this service in the middle, then compare with a run "
                         "without the kill")
    args = ap.parse_args(argv)
    first = os.path.join(args.dir, "with-kill" if args.kill else "run")
    orders = run_pipeline(first, args.ticks, args.rate, args.kill)
    show_calls(os.path.join(first, "md"), "md", "gateway -> strategy")
    show_calls(os.path.join(first, "orders"), "orders", "strategy -> router")
    if args.kill:
        print("pipeline: the same feed again, without the kill", flush=True)
        clean = run_pipeline(os.path.join(args.dir, "without-kill"), args.ticks, args.rate, None)
        if orders != clean:
            at = next((i for i, (a, b) in enumerate(zip(orders, clean, strict=False)) if a != b),
                      min(len(orders), len(clean)))
            print(f"pipeline: DIFFERENT: {len(orders):,} orders with the kill, "
                  f"{len(clean):,} without; first difference at order {at}")
            return 1
        print(f"pipeline: the router's {len(orders):,} orders with {args.kill} killed equal "
              "those of the run without the kill: each exactly once, in order")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
