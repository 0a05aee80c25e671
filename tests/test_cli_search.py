"""``aiochronicle tail -b KEY`` and ``--from-time TIME``: start where a binary
search says (Java's ``ChronicleReaderMain -b``)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import msgspec

import aiochronicle as ac


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], capture_output=True,
                          text=True, timeout=120)


class Order(msgspec.Struct):
    id: int
    at_ms: int


class Orders:
    def on_order(self, order: Order) -> None: ...


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_tail_from_a_key_and_a_time_field(tmp_path):
    path = str(tmp_path / "q")
    t0 = 1_764_300_000_000  # epoch ms
    with ac.open_queue(path) as q:
        w = q.appender().method_writer(Orders)
        for i in range(0, 300, 3):
            w.on_order(Order(i, t0 + i * 1000))
    r = run("tail", path, "-b", "100", "--key-field", "id", "--json", "-x", "2")
    assert r.returncode == 0, r.stderr
    recs = _records(r.stdout)
    assert [rec["payload"]["on_order"]["id"] for rec in recs] == [102, 105]
    r = run("tail", path, "--from-time", str(t0 + 150_500), "--time-field", "at_ms",
            "--json", "-x", "1")
    assert r.returncode == 0, r.stderr
    assert _records(r.stdout)[0]["payload"]["on_order"]["id"] == 153
    # ISO 8601 with a zone
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime((t0 + 30_000) / 1000))
    r = run("tail", path, "--from-time", iso, "--time-field", "at_ms", "--json", "-x", "1")
    assert r.returncode == 0, r.stderr
    assert _records(r.stdout)[0]["payload"]["on_order"]["id"] == 30
    # past the end: nothing
    r = run("tail", path, "-b", "1000", "--key-field", "id")
    assert r.returncode == 0 and r.stdout == ""


def test_tail_from_time_by_message_history(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, source_id=1) as q:
        w = q.appender().method_writer(Orders, record_history=True)
        for i in range(20):
            w.on_order(Order(i, 0))
        # a pause either side of the instant: the CLI maps the wall clock onto
        # this host's monotonic clock (the histories' timings) in its own
        # process, a few microseconds apart from this one's
        time.sleep(0.05)
        mid_wall_ns = time.time_ns()
        time.sleep(0.05)
        for i in range(20, 40):
            w.on_order(Order(i, 0))
    r = run("tail", path, "--from-time", str(mid_wall_ns), "--json", "-x", "1")
    assert r.returncode == 0, r.stderr
    assert _records(r.stdout)[0]["payload"]["on_order"]["id"] == 20


def test_bad_arguments(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        q.appender().append(b"x")
    r = run("tail", path, "--from-time", "half past nine")
    assert r.returncode == 2 and "--from-time" in r.stderr
    r = run("tail", path, "-b", "1", "-n", "0")
    assert r.returncode == 2 and "cannot be combined" in r.stderr
