"""``aiochronicle run PIPELINE.toml`` and ``aiochronicle replay``, as a user
runs them: real processes of the command line, the example pipeline's
handlers (examples/pipeline), real queues.

* a bad PIPELINE.toml is refused before anything starts, with the file and the
  line of the mistake;
* the runner starts the three services, a SIGKILLed service is restarted and
  the router's orders equal those of the same feed through the handlers
  without any crash (computed here, in this process), each once and in order;
  SIGTERM stops every service cleanly and the runner exits 0; ``/metrics``
  shows the restarts, inputs handled, lag and snapshot age; on asyncio and
  uvloop;
* replay of a service over its recorded input says equal, and different (with
  the first difference) for a deliberately changed handler.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aiochronicle as ac

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pipeline"
TICKS = 3000
BURST = 20

sys.path.insert(0, str(EXAMPLE))
from gateway import Gateway  # noqa: E402
from messages import Feed, Routed  # noqa: E402
from router import Router  # noqa: E402
from strategy import Momentum  # noqa: E402

sys.path.remove(str(EXAMPLE))


def _toml(loop: str, *, strategy: str = "strategy:Momentum", extra_path: str = "",
          metrics: bool = True) -> str:
    paths = [str(EXAMPLE), *([extra_path] if extra_path else [])]
    text = (EXAMPLE / "PIPELINE.toml").read_text()
    text = re.sub(r'(?m)^loop = "\w+"', f'loop = "{loop}"', text)
    text = re.sub(r'(?m)^python_path = .*$', f"python_path = {paths!r}".replace("'", '"'), text)
    text = text.replace('handler = "strategy:Momentum"', f'handler = "{strategy}"')
    if not metrics:
        text = re.sub(r"(?m)^metrics = .*$", "", text)
    return text


def _cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------
# a bad PIPELINE.toml: refused before anything starts, file and line named
# --------------------------------------------------------------------------

GOOD = """\
[pipeline]
loop = "asyncio"
python_path = ["{example}"]

[[service]]
name = "gateway"
handler = "gateway:Gateway"
[[service.input]]
path = "feed"
source_id = 10
interfaces = ["messages:Feed"]
[[service.output]]
name = "md"
path = "md"
source_id = 1
interface = "messages:MarketData"

[[service]]
name = "strategy"
handler = "strategy:Momentum"
[[service.input]]
path = "md"
source_id = 1
interfaces = ["messages:MarketData"]
[[service.output]]
name = "orders"
path = "orders"
source_id = 2
interface = "messages:OrderFlow"
"""

#: (id, (old, new) edit of GOOD, the line named, what the message says)
BAD: list[tuple[str, tuple[str, str], int, str]] = [
    ("unknown key", ('source_id = 2\n', 'source_id = 2\nsourceid = 3\n'), 29,
     "unknown key 'sourceid' in output 1 of service 'strategy'"),
    ("unknown table", ('[pipeline]\n', '[pipelines]\n'), 1, "unknown key 'pipelines'"),
    ("unknown service key", ('name = "strategy"\n', 'name = "strategy"\nrestarts = 3\n'), 20,
     "unknown key 'restarts' in [[service]] number 2"),
    ("missing module", ('"strategy:Momentum"', '"strategi:Momentum"'), 20,
     "no module 'strategi'"),
    ("missing class", ('"strategy:Momentum"', '"strategy:Momentom"'), 20,
     "module 'strategy' has no 'Momentom'"),
    ("missing interface", ('"messages:OrderFlow"', '"messages:OrderFlows"'), 29,
     "module 'messages' has no 'OrderFlows'"),
    ("two services of one name", ('name = "strategy"', 'name = "gateway"'), 19,
     "two services named 'gateway' (the other at line 6)"),
    ("input without source id", ('path = "md"\nsource_id = 1\ninterfaces',
                                 'path = "md"\ninterfaces'), 21,
     "input 1 of service 'strategy' has no source_id"),
    ("input source id not its writer's", ('path = "md"\nsource_id = 1\ninterfaces',
                                          'path = "md"\nsource_id = 7\ninterfaces'), 23,
     "source_id 7, but its queue is written by service 'gateway' with source_id 1"),
    ("output without source id", ('path = "orders"\nsource_id = 2\n', 'path = "orders"\n'), 25,
     "output 1 of service 'strategy' has no source_id"),
    ("no handler", ('handler = "strategy:Momentum"\n', ''), 18,
     "service 'strategy' has no 'handler'"),
    ("bad type", ('source_id = 10', 'source_id = "10"'), 10,
     "'source_id' of input 1 of service 'gateway' must be an integer"),
    ("bad loop", ('loop = "asyncio"', 'loop = "trio"'), 2, "'loop' must be one of"),
    ("bad pauser", ('name = "gateway"\n', 'name = "gateway"\npauser = "fast"\n'), 7,
     "'pauser' of service 'gateway' must be one of"),
    ("not TOML", ('[[service.output]]\nname = "orders"', '[[service.output]\nname = "orders"'),
     25, "not valid TOML"),
]


#: the cases run as a user runs them, in a process of the command line (the
#: others call the same ``main`` in this process, to keep the suite quick)
IN_A_PROCESS = {"unknown key", "missing module", "two services of one name"}


@pytest.mark.parametrize(("case", "edit", "line", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_pipeline_is_refused_with_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        case: str, edit: tuple[str, str], line: int, message: str) -> None:
    good = GOOD.replace("{example}", str(EXAMPLE))
    assert edit[0] in good
    (tmp_path / "PIPELINE.toml").write_text(good.replace(edit[0], edit[1], 1))
    if case in IN_A_PROCESS:
        out = _cli("run", "PIPELINE.toml", cwd=tmp_path)
        code, stdout, stderr = out.returncode, out.stdout, out.stderr
    else:
        from aiochronicle._cli import main

        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "path", list(sys.path))  # python_path is added to it
        code = main(["run", "PIPELINE.toml"])
        stdout, stderr = capsys.readouterr()
        # the library's error: named, with where
        from aiochronicle._services._pipeline import load_pipeline

        with pytest.raises(ac.PipelineError) as err:
            load_pipeline("PIPELINE.toml")
        assert (err.value.file, err.value.line) == ("PIPELINE.toml", line)
    assert code == 1, stdout + stderr
    assert f"aiochronicle run: error: PIPELINE.toml:{line}: " in stderr, stderr
    assert message in stderr, stderr
    assert stdout == ""  # nothing started...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["PIPELINE.toml"]  # ...or created


def test_the_good_pipeline_of_those_cases_loads(tmp_path: Path) -> None:
    """The file the cases above break is itself accepted (each case fails for its edit)."""
    from aiochronicle._services._pipeline import load_pipeline

    (tmp_path / "PIPELINE.toml").write_text(GOOD.replace("{example}", str(EXAMPLE)))
    spec = load_pipeline(str(tmp_path / "PIPELINE.toml"))
    assert [s.name for s in spec.services] == ["gateway", "strategy"]
    assert [s.line for s in spec.services] == [5, 18]
    assert spec.services[1].inputs[0].source_id == 1


# --------------------------------------------------------------------------
# run: kill, restart, exactly once; SIGTERM; /metrics
# --------------------------------------------------------------------------


def _expected() -> list[Routed]:
    """The router's orders for the feed, through the three handlers in this
    process: no queue, no crash."""
    class Collect:
        def __init__(self) -> None:
            self.routed: list[Routed] = []

        def on_routed(self, routed: Routed) -> None:
            self.routed.append(routed)

        def end_of_day(self, orders: int) -> None:
            pass

    out = Collect()
    gateway = Gateway(Momentum(Router(out)))  # type: ignore[arg-type]
    for first in range(0, TICKS, BURST):
        gateway.on_burst(first, BURST)
    return out.routed


class _Log:
    """The runner's log stream, read as it comes: pids, the /metrics address."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.cond:
                self.lines.append(line)
                self.cond.notify_all()
        with self.cond:
            self.lines.append("")  # EOF
            self.cond.notify_all()

    def wait_for(self, pattern: str, after: int = 0, timeout: float = 60) -> re.Match[str]:
        rx = re.compile(pattern)
        found: list[re.Match[str]] = []

        def seen() -> bool:
            for line in self.lines[after:]:
                if m := rx.search(line):
                    found.append(m)
                    return True
            return bool(self.lines) and self.lines[-1] == ""

        with self.cond:
            self.cond.wait_for(seen, timeout)
        assert found, f"no {pattern!r} in the log:\n{''.join(self.lines)}"
        return found[0]

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _routed(path: Path) -> tuple[list[Routed], bool]:
    got: list[Routed] = []
    done: list[int] = []

    class Collect:
        def on_routed(self, routed: Routed) -> None:
            got.append(routed)

        def end_of_day(self, orders: int) -> None:
            done.append(orders)

    with ac.open_queue(str(path), read_only=True) as q:
        q.tailer().method_reader(Collect()).read_available()
    return got, bool(done)


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"(?m)^(aiochronicle_\S+) (\S+)$", text)}


LOOPS = ["asyncio", "uvloop"]


@pytest.fixture(scope="module", params=LOOPS)
def killed_run(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The example pipeline run by ``aiochronicle run`` on ``loop``; the
    strategy SIGKILLed in the middle of the feed; stopped with SIGTERM."""
    loop: str = request.param
    work = tmp_path_factory.mktemp(f"run-{loop}")
    (work / "PIPELINE.toml").write_text(_toml(loop))
    queues = work / "queues"
    proc = subprocess.Popen([sys.executable, "-m", "aiochronicle", "run", "PIPELINE.toml"],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    log = _Log(proc)
    result: dict[str, Any] = {"loop": loop, "work": work, "queues": queues}
    try:
        url = log.wait_for(r"serving (http://\S+/metrics)").group(1)
        pid = int(log.wait_for(r"started strategy \(pid (\d+)\)").group(1))
        with ac.open_queue(str(queues / "feed"), source_id=10) as fq:
            feed = fq.appender().method_writer(Feed)
            bursts = range(0, TICKS, BURST)
            half = len(bursts) // 2
            for first in bursts[:half]:
                feed.on_burst(first, BURST)
            # the kill lands while the strategy works through a backlog (bursts in flight)
            with ac.open_queue(str(queues / "orders"), read_only=True) as oq:
                while (oq.last_index or 0) == 0:
                    oq.tailer().read_nowait()  # handshake: the strategy has written
            # the log's length before the kill: with a standby process ready, the
            # runner logs the restart within microseconds of the kill
            at = len(log.lines)
            os.kill(pid, signal.SIGKILL)
            new_pid = int(log.wait_for(r"started strategy \(pid (\d+)\)", at).group(1))
            assert new_pid != pid
            for first in bursts[half:]:
                feed.on_burst(first, BURST)
            feed.end_of_day(TICKS)
        log.wait_for(r"router:   routed")
        log.wait_for(r"strategy: restart latency")
        # the last figures reach the runner every 0.25 s: wait for the lag to drain
        deadline = time.monotonic() + 60
        while True:
            figures = _scrape(url)
            if (figures.get('aiochronicle_service_lag_excerpts{input="%s",service="router"}'
                            % (queues / "orders")) == 0.0
                    and figures.get('aiochronicle_service_inputs_handled_total'
                                    '{service="gateway"}') == TICKS // BURST + 1):
                break
            assert time.monotonic() < deadline, figures
        result["metrics"] = figures
    finally:
        proc.send_signal(signal.SIGTERM)
        result["code"] = proc.wait(60)
        log.thread.join(10)
        result["log"] = log.text
    yield result


def test_killed_service_is_restarted_and_orders_are_exactly_once(
        killed_run: dict[str, Any]) -> None:
    log = killed_run["log"]
    assert "strategy killed by SIGKILL: restart 1 in a row" in log, log
    got, done = _routed(killed_run["queues"] / "routed")
    expected = _expected()
    assert len(expected) > 100
    assert got == expected  # each order once, in order, as without the crash
    assert done


def test_sigterm_stops_every_service_cleanly(killed_run: dict[str, Any]) -> None:
    log = killed_run["log"]
    assert killed_run["code"] == 0, log
    assert "SIGTERM: stopping every service" in log
    assert "stopped: every service exited cleanly" in log
    # every line of a service carries its name
    assert re.search(r"(?m)^router   \| router:   routed", log), log
    assert re.search(r"(?m)^gateway  \| gateway:  published 3,000 ticks", log), log


def test_metrics_show_the_pipeline(killed_run: dict[str, Any]) -> None:
    m = killed_run["metrics"]
    q = killed_run["queues"]
    assert m['aiochronicle_service_restarts_total{service="strategy"}'] == 1.0
    assert m['aiochronicle_service_restarts_total{service="router"}'] == 0.0
    assert m['aiochronicle_service_up{service="strategy"}'] == 1.0
    assert m['aiochronicle_service_inputs_handled_total{service="gateway"}'] == TICKS // BURST + 1
    assert m['aiochronicle_service_lag_excerpts{input="%s",service="router"}'
             % (q / "orders")] == 0.0
    assert 'aiochronicle_service_lag_seconds{input="%s",service="strategy"}' % (q / "md") in m
    assert 'aiochronicle_service_snapshot_age_seconds{service="strategy"}' in m
    assert m['aiochronicle_service_restart_seconds{service="strategy"}'] > 0
    # and the queues' own figures, from the existing collector
    assert m['aiochronicle_last_index{queue="%s"}' % (q / "routed")] > 0


# --------------------------------------------------------------------------
# replay
# --------------------------------------------------------------------------

CHANGED = '''\
from messages import Order
from strategy import Momentum


class Changed(Momentum):
    """The strategy with a deliberate change: a larger quantity from tick 1000 on."""

    def on_tick(self, tick):
        side = self.rule.side(tick)
        if side is not None:
            limit = tick.ask if side == "BUY" else tick.bid
            qty = 2_000_000 if tick.seq >= 1000 else 1_000_000
            self.orders.on_order(Order(tick.symbol, side, qty, limit, tick.seq))
            self.sent += 1
'''


def test_replay_equal_and_different(killed_run: dict[str, Any], tmp_path: Path) -> None:
    work, queues = killed_run["work"], killed_run["queues"]
    with ac.open_queue(str(queues / "md"), read_only=True) as md:
        first, last = md.first_index, md.last_index
    assert first is not None and last is not None
    frm, to = first + 500, first + 1500
    out = _cli("replay", "PIPELINE.toml", "strategy", "--from", hex(frm), "--to", str(to),
               "--into", str(tmp_path / "same"), cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "EQUAL" in out.stdout
    n = int(re.search(r"orders: (\d+) recorded, (\d+) replayed", out.stdout).group(1))  # type: ignore[union-attr]
    assert n > 10

    (tmp_path / "changed.py").write_text(CHANGED)
    (work / "CHANGED.toml").write_text(_toml(killed_run["loop"], strategy="changed:Changed",
                                             extra_path=str(tmp_path)))
    out = _cli("replay", "CHANGED.toml", "strategy", "--from", hex(frm), "--to", str(to),
               "--into", str(tmp_path / "changed"), cwd=work)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "DIFFERENT: output 'orders'" in out.stdout, out.stdout
    assert re.search(r"recorded: .*1000000", out.stdout), out.stdout
    assert re.search(r"replayed: .*2000000", out.stdout), out.stdout
    # before tick 1000 the change does not show: equal
    out = _cli("replay", "CHANGED.toml", "strategy", "--to", str(first + 999),
               "--into", str(tmp_path / "before"), cwd=work)
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------
# restart policy: a service that keeps dying
# --------------------------------------------------------------------------

BOOM = '''\
from messages import MarketData


class Boom:
    """Raises on every tick (on_error = "stop": the service exits non-zero)."""

    def __init__(self, md: MarketData) -> None:
        self.md = md

    def on_burst(self, first_seq: int, count: int) -> None:
        raise RuntimeError(f"boom at {first_seq}")

    def end_of_day(self, ticks: int) -> None:
        pass
'''


def test_a_service_out_of_restarts_stops_the_pipeline(tmp_path: Path) -> None:
    (tmp_path / "boom.py").write_text(BOOM)
    (tmp_path / "PIPELINE.toml").write_text(f"""\
[pipeline]
python_path = [".", "{EXAMPLE}"]
[restart]
backoff = 0.01
max_restarts = 2
[[service]]
name = "boom"
handler = "boom:Boom"
[[service.input]]
path = "feed"
source_id = 10
interfaces = ["messages:Feed"]
[[service.output]]
name = "md"
path = "md"
source_id = 1
interface = "messages:MarketData"
""")
    with ac.open_queue(str(tmp_path / "feed"), source_id=10) as fq:
        fq.appender().method_writer(Feed).on_burst(40, 20)
        index = fq.last_index
    assert index is not None
    out = _cli("run", "PIPELINE.toml", cwd=tmp_path)
    assert out.returncode == 1, out.stdout
    log = out.stdout
    # each death is logged with the input that failed, never skipped silently
    assert log.count("boom at 40") >= 3, log
    assert f"{index:#x}" in log or str(index) in log, log
    assert "restart 1 in a row in 0.01 s" in log and "restart 2 in a row in 0.02 s" in log, log
    assert "boom exited with status 1; out of restarts: stopping the pipeline" in log, log
    assert "stopped: boom exited with status 1, 2 restarts in a row (max_restarts 2)" in log
