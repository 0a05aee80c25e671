"""Operating queues with the exporter (issue 36): indices as exact cycle and
sequence, lag in seconds against the writers' own clocks, counters that
``rate()`` works on, the exporter's own figures, a dead write-lock holder,
queues that do not exist yet, TLS and basic auth from a web config file.
The exporter runs as a child process (``aiochronicle metrics``) scraped
over HTTP; expected values come from what the test wrote and its clocks."""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest
from test_cli import assert_one_line_error, run
from test_monitor import TIMEOUT, Endpoint, _msgpack_call, q_

import aiochronicle as ac
from aiochronicle.metrics import DEFAULT_LATENCY_BUCKETS

MINUTE = 60_000
START = 19_000 * 86_400_000 + 7 * MINUTE


def test_indices_above_2_53_are_exact(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    """A MINUTELY queue: its indices are above 2**53, where a float64 cannot
    hold them; cycle and sequence are served exactly."""
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.MINUTELY, time_provider=clock) as q:
        a = q.appender()
        for i in range(7):
            last = a.append(b"m%d" % i)
        t = q.tailer("svc")
        for _ in range(3):
            assert t.read_nowait() is not None
        t.close()
    assert last > 2**53 and float(last) != last  # the deprecated gauge cannot show it
    e = Endpoint(path)
    endpoint.append(e)
    m = e.scrape()
    lab = q_(path)
    cycle = START // MINUTE  # minutes since 1970: this test's clock
    assert m[("aiochronicle_last_index_cycle", lab)] == cycle
    assert m[("aiochronicle_last_index_sequence", lab)] == 6
    assert m[("aiochronicle_first_index_cycle", lab)] == cycle
    assert m[("aiochronicle_first_index_sequence", lab)] == 0
    tl = q_(path, tailer="svc")
    assert m[("aiochronicle_named_tailer_index_cycle", tl)] == cycle
    assert m[("aiochronicle_named_tailer_index_sequence", tl)] == 3
    # together they give the index back, exactly
    got = ac.RollCycles.MINUTELY.to_index(int(m[("aiochronicle_last_index_cycle", lab)]),
                                          int(m[("aiochronicle_last_index_sequence", lab)]))
    assert got == last
    code, _, err = e.stop()
    assert code == 0, err


def _lag(m: dict[tuple[str, tuple[tuple[str, str], ...]], float], path: str,
         tailer: str) -> tuple[str, float]:
    (hit,) = [(dict(lab)["source"], v) for (name, lab), v in m.items()
              if name == "aiochronicle_named_tailer_lag_seconds"
              and dict(lab)["tailer"] == tailer and dict(lab)["queue"] == path]
    return hit


def test_lag_in_seconds_and_read_counters_during_a_pipeline(
        tmp_path: Path, endpoint: list[Endpoint]) -> None:
    """A writer appends excerpts carrying message histories (its own clock,
    CLOCK_MONOTONIC) while a named tailer reads: the lag in seconds served
    is the age of the oldest unread excerpt, between what the test's clock
    says just before and just after the scrape."""
    path = str(tmp_path / "q")
    written: list[int] = []  # the writer's clock at each append, in order
    with ac.open_queue(path) as q:
        a = q.appender()
        # ten excerpts a second apart, the first ten seconds ago (as the
        # writer's clock recorded them), so an off-by-one is a second off
        base = time.monotonic_ns()
        for i in range(10):
            ns = base - (10 - i) * 1_000_000_000
            a.append(_msgpack_call(ac.MessageHistory([(1, i)], [ns])))
            written.append(ns)
        e = Endpoint(path)
        endpoint.append(e)

        def read(n: int) -> None:  # a service reads n and commits its position
            t = q.tailer("svc")
            for _ in range(n):
                assert t.read_nowait() is not None
            t.close()

        read(4)
        # the writer goes on appending while we scrape (a live pipeline)
        stop = threading.Event()
        more: list[int] = []

        def writer() -> None:
            with ac.open_queue(path) as q2:
                a2 = q2.appender()
                while not stop.is_set():
                    ns = time.monotonic_ns()
                    a2.append(_msgpack_call(ac.MessageHistory([(1, 0)], [ns])))
                    more.append(ns)
                    stop.wait(0.002)

        w = threading.Thread(target=writer)
        w.start()
        try:
            before = time.monotonic_ns()
            m = e.scrape()
            after = time.monotonic_ns()
        finally:
            stop.set()
            w.join(TIMEOUT)
        source, lag = _lag(m, path, "svc")
        assert source == "history"
        # the oldest unread excerpt is the 5th written
        assert (before - written[4]) / 1e9 <= lag <= (after - written[4]) / 1e9
        age = m[("aiochronicle_last_excerpt_age_seconds", q_(path, source="history"))]
        assert 0 <= age <= (after - written[-1]) / 1e9
        reads1 = m[("aiochronicle_named_tailer_reads_total", q_(path, tailer="svc"))]
        assert reads1 == 4
        scrapes1 = m[("aiochronicle_exporter_scrapes_total", ())]

        # more reads: the counter moves by what was read, as rate() expects
        read(3)
        m = e.scrape()
        assert m[("aiochronicle_named_tailer_reads_total", q_(path, tailer="svc"))] == 7
        assert m[("aiochronicle_exporter_scrapes_total", ())] == scrapes1 + 1
        assert m[("aiochronicle_exporter_scrape_errors_total", ())] == 0
        assert m[("aiochronicle_exporter_scrape_duration_seconds", ())] > 0
        assert m[("process_cpu_seconds_total", ())] > 0
        # moved back to the start: the counter does not go down
        t = q.tailer("svc")
        t.to_start()
        for _ in range(2):
            assert t.read_nowait() is not None
        t.close()
        m = e.scrape()
        assert m[("aiochronicle_named_tailer_reads_total", q_(path, tailer="svc"))] == 7
        # caught up: no lag; each move forward counts
        t = q.tailer("svc")
        while t.read_nowait() is not None:
            pass
        t.close()
        m = e.scrape()
        assert _lag(m, path, "svc") == ("none", 0.0)
        assert m[("aiochronicle_named_tailer_reads_total", q_(path, tailer="svc"))] == \
            7 + 8 + len(more)
    code, _, err = e.stop()
    assert code == 0, err


def test_lag_in_seconds_from_the_cycle_without_histories(
        tmp_path: Path, endpoint: list[Endpoint]) -> None:
    """Excerpts with no message history: the age is from the start of their
    cycle (an upper bound), by the wall clock."""
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.MINUTELY, time_provider=clock) as q:
        a = q.appender()
        a.append(b"one")
        clock.advance_millis(3 * MINUTE)
        a.append(b"two")
        t = q.tailer("plain")
        assert t.read_nowait() is not None
        t.close()
    e = Endpoint(path)
    endpoint.append(e)
    before = time.time()
    m = e.scrape()
    after = time.time()
    source, lag = _lag(m, path, "plain")
    second_cycle = (START + 3 * MINUTE) / 1000
    assert source == "cycle"
    assert before - second_cycle <= lag <= after - second_cycle
    age = m[("aiochronicle_last_excerpt_age_seconds", q_(path, source="cycle"))]
    assert before - second_cycle <= age <= after - second_cycle
    e.stop()


def test_latency_buckets_reach_minutes() -> None:
    assert max(DEFAULT_LATENCY_BUCKETS) >= 300
    assert list(DEFAULT_LATENCY_BUCKETS) == sorted(DEFAULT_LATENCY_BUCKETS)


HOLDER = textwrap.dedent("""
    import sys
    import aiochronicle as ac
    q = ac.open_queue(sys.argv[1])
    a = q.appender()
    a.append(b"before")
    doc = a.writing_document()
    doc.write(b"half")
    print("holding", flush=True)
    sys.stdin.read()
""")


def test_a_killed_holder_reads_as_dead(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        q.appender().append(b"first")
    child = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline() == "holding\n"
    e = Endpoint(path)
    endpoint.append(e)
    m = e.scrape()
    lab = q_(path)
    assert m[("aiochronicle_write_lock_holder", lab)] == child.pid
    assert m[("aiochronicle_write_lock_holder_alive", lab)] == 1
    child.kill()  # SIGKILL inside writing_document()
    child.communicate(timeout=TIMEOUT)
    assert child.returncode == -signal.SIGKILL
    first = e.scrape()
    m = e.scrape()
    assert m[("aiochronicle_write_lock_holder", lab)] == child.pid
    assert m[("aiochronicle_write_lock_holder_alive", lab)] == 0
    # the held time of a live holder stays 0; the dead one's is its own series
    assert m[("aiochronicle_write_lock_held_seconds", lab)] == 0
    assert m[("aiochronicle_write_lock_dead_seconds", lab)] > \
        first[("aiochronicle_write_lock_dead_seconds", lab)]
    r = run("top", "--once", "-i", "0.01", path)
    assert r.returncode == 0, r.stderr
    assert f"held by dead process {child.pid}" in r.stdout
    e.stop()


def test_metrics_and_top_wait_for_a_queue_to_appear(tmp_path: Path,
                                                    endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "later")
    e = Endpoint(path)
    endpoint.append(e)
    m = e.scrape()
    assert m[("aiochronicle_queue_up", q_(path))] == 0
    assert m[("aiochronicle_exporter_scrape_errors_total", ())] >= 1
    r = run("top", "--once", "-i", "0.01", path)
    assert r.returncode == 0, r.stderr
    assert "no such queue" in r.stdout
    with ac.open_queue(path) as q:
        q.appender().append_many([b"a", b"b", b"c"])
    m = e.scrape()
    assert m[("aiochronicle_queue_up", q_(path))] == 1
    assert m[("aiochronicle_excerpts_total", q_(path))] == 3
    # a directory that is no queue is still refused
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.txt").write_text("x")
    line = assert_one_line_error(run("metrics", str(plain), "--port", "0"))
    assert "not a Chronicle queue" in line
    e.stop()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_web_config_tls_and_basic_auth(tmp_path: Path, endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        q.appender().append(b"x")
    cert, key = _self_signed(tmp_path)
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert.name}\n  key_file: {key.name}\n"
                   f"basic_auth_users:\n  prom: '{hashed}'\n")
    ctx = ssl.create_default_context(cafile=str(cert))
    good = {"Authorization": "Basic " + base64.b64encode(b"prom:s3cret").decode()}
    e = Endpoint(path, extra=("--web-config", str(web)), context=ctx, headers=good)
    endpoint.append(e)
    assert e.url.startswith("https://")
    assert e.scrape()[("aiochronicle_excerpts_total", q_(path))] == 1
    for headers in ({}, {"Authorization": "Basic " + base64.b64encode(b"prom:no").decode()},
                    {"Authorization": "Basic " + base64.b64encode(b"eve:s3cret").decode()}):
        req = urllib.request.Request(e.url, headers=headers)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=TIMEOUT, context=ctx)
        assert err.value.code == 401
    # plain HTTP gets no answer from the TLS socket
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(e.url.replace("https", "http"), timeout=TIMEOUT)
    code, _, err_text = e.stop()
    assert code == 0, err_text
    # a bad web config is a one-line error
    bad = tmp_path / "bad.yml"
    bad.write_text("tls_server_config:\n  cert_file: c.pem\n")
    line = assert_one_line_error(run("metrics", path, "--port", "0", "--web-config", str(bad)))
    assert "key_file" in line


def test_warning_when_serving_beyond_localhost(tmp_path: Path,
                                               endpoint: list[Endpoint]) -> None:
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        q.appender().append(b"x")
    e = Endpoint(path, extra=("--host", "0.0.0.0"))
    endpoint.append(e)
    code, _, err = e.stop()
    assert code == 0
    assert "warning: serving 0.0.0.0 beyond this host without TLS and basic auth" in err
    e = Endpoint(path)
    endpoint.append(e)
    code, _, err = e.stop()
    assert "warning" not in err


