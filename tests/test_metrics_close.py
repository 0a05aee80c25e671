"""A metrics scrape beside a service that opens and closes its queues and
tailers never reads a page a close unmapped (issue 31: ``ServiceMetrics``
crashed the service it ran in with SIGSEGV).

Each case runs in a child process, so a crash fails the test instead of the
test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import prometheus_client  # noqa: F401  (the monitor extra: a dev dependency)
import pytest
from loops import KINDS, loop_factory

import aiochronicle as ac


def run_child(code: str, *args: str, timeout: float = 240) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (fails on any death)."""
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(code),
                        *args], capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, f"child died with {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_close_inside_a_scrape_leaves_the_metadata_mapped(tmp_path: Path) -> None:
    """Deterministic: the queue is closed (as a signal handler on the
    scraping thread, or another thread, would) at the very moment the scrape
    is about to load a word of ``metadata.cq4t`` through its mapping."""
    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"x")
    out = run_child("""
        import sys
        import aiochronicle as ac
        from aiochronicle._core._native import lib
        from prometheus_client import CollectorRegistry, generate_latest
        from aiochronicle.metrics import ServiceMetrics

        registry = CollectorRegistry()
        metrics = ServiceMetrics(registry)
        q = ac.open_queue(sys.argv[1])
        t = q.tailer()
        metrics.add_tailer("t", t)
        armed = [True]

        def hook(frame, event, arg):
            if event == "c_call" and armed[0] and arg is lib.cq_load64:
                armed[0] = False
                q.close()

        sys.setprofile(hook)
        try:
            text = generate_latest(registry).decode()
        finally:
            sys.setprofile(None)
        assert not armed[0], "the scrape loaded no mapped word"
        assert 'aiochronicle_tailer_index{tailer="t"}' not in text, text
        print("scraped")
    """, str(tmp_path / "q"))
    assert "scraped" in out


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_scrapes_beside_open_and_close(tmp_path: Path, kind: str) -> None:
    """A service on ``kind``'s loop opens a queue, reads with tailers, closes
    them and the queue, again and again for 10 s, while a thread scrapes its
    ``ServiceMetrics`` as prometheus_client's HTTP server would (before the fix
    this crashed within 1.5 s, in six runs of six: 10 s is several times that,
    about 5,000 rounds here)."""
    loop_factory(kind)  # skips where the loop kind is not available
    with ac.open_queue(tmp_path / "q", roll_cycle=ac.RollCycles.TEST_SECONDLY) as q:
        a = q.appender()
        for i in range(200):
            a.append(b"%d" % i)
    out = run_child("""
        import asyncio, sys, threading, time
        import aiochronicle as ac
        from prometheus_client import CollectorRegistry, generate_latest
        from aiochronicle.metrics import ServiceMetrics

        path, kind, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
        registry = CollectorRegistry()
        metrics = ServiceMetrics(registry)
        stop = threading.Event()
        scrapes = [0]

        def scrape():
            while not stop.is_set():
                generate_latest(registry)
                scrapes[0] += 1

        async def service():
            deadline = time.monotonic() + seconds
            rounds = 0
            with ac.open_queue(path) as base:
                while time.monotonic() < deadline:
                    q = ac.open_queue(path)
                    t = q.tailer()
                    metrics.add_tailer("t", t)
                    metrics.add_appender("a", q.appender())
                    bt = base.tailer()
                    metrics.add_tailer("bt", bt)
                    for _ in range(3):
                        t.read_nowait()
                        bt.read_nowait()
                    await asyncio.sleep(0)
                    bt.close()
                    if rounds % 2:
                        t.close()
                    q.close()
                    rounds += 1
            return rounds

        th = threading.Thread(target=scrape)
        th.start()
        try:
            if kind == "uvloop":
                import uvloop
                rounds = uvloop.run(service())
            else:
                rounds = asyncio.run(service())
        finally:
            stop.set()
            th.join()
        print("rounds", rounds, "scrapes", scrapes[0])
    """, str(tmp_path / "q"), kind, "10")
    words = out.split()
    assert int(words[1]) > 0 and int(words[3]) > 0, out
