"""Run the three-service pipeline: market data gateway -> strategy -> order
router, each a separate process, talking through method proxies over two
queues, and print the per-hop latency the router reads from message history.

Usage: python examples/pipeline/run.py [DIR] [--ticks N] [--rate R] [--codec C]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from messages import Order, Tick

import aiochronicle as ac

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default="pipeline-queues")
    ap.add_argument("--ticks", type=int, default=20_000)
    ap.add_argument("--rate", type=float, default=10_000.0, help="ticks per second")
    ap.add_argument("--codec", default="msgpack", choices=["msgpack", "json", "binary_wire"])
    ap.add_argument("--pauser", default="notify",
                    help="how the readers wait: notify (default), balanced, yielding, busy, ...")
    args = ap.parse_args(argv)

    shutil.rmtree(args.dir, ignore_errors=True)
    md, orders = os.path.join(args.dir, "md"), os.path.join(args.dir, "orders")
    # create both queues with their source ids (history is recorded when it is not 0)
    # and the codec they carry, before the services race to open them
    for path, source_id in ((md, 1), (orders, 2)):
        with ac.open_queue(path, source_id=source_id) as q:
            ac.set_queue_codec(q, args.codec)
    print(f"pipeline: queues {md} (sourceId 1) and {orders} (sourceId 2), codec {args.codec}, "
          f"readers wait with Pauser.{args.pauser}()", flush=True)

    py = sys.executable
    # the services import `messages` from their own directory and aiochronicle
    # from the installed package (never from the source tree)
    env = dict(os.environ, PIPELINE_PAUSER=args.pauser)

    def start(script: str, *argv: str) -> subprocess.Popen[str]:
        # each service's summary is collected, to be printed in the order of the chain
        return subprocess.Popen([py, os.path.join(HERE, script), *argv],
                                stdout=subprocess.PIPE, text=True, env=env)

    router = start("router.py", orders, args.dir)
    strategy = start("strategy.py", md, orders, args.dir)
    deadline = time.monotonic() + 30
    while not all(os.path.exists(os.path.join(args.dir, f"{n}.ready"))
                  for n in ("router", "strategy")):
        if time.monotonic() > deadline or router.poll() is not None or strategy.poll() is not None:
            router.kill()
            strategy.kill()
            print("pipeline: the readers did not start")
            return 1
        time.sleep(0.01)
    gateway = start("gateway.py", md, str(args.ticks), str(args.rate))
    codes = []
    for p in (gateway, strategy, router):
        try:
            summary, _ = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            summary, _ = p.communicate()
        print(summary, end="", flush=True)
        codes.append(p.returncode)
    if any(codes):
        print(f"pipeline: a service failed (exit codes {codes})")
        return 1
    show_calls(md, "md", "gateway -> strategy")
    show_calls(orders, "orders", "strategy -> router")
    print(f"pipeline: see every call with `aiochronicle tail {orders}`")
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
