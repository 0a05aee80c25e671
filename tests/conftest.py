"""Shared pytest fixtures.

Golden data written by Java Chronicle Queue lives in ``tests/fixtures/java`` (its
README.md says what wrote each file and how).  Tests copy or extract what they need
into ``tmp_path`` and never write there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loops import KINDS, loop_factory
from skips import listed, under_ci

# A pass that a non-interactive shell runs in the background (`cmd &`, as
# scripts/test.sh runs some) starts with SIGINT ignored, and every process a
# test starts inherits that: `aiochronicle tail -f` would then never see the
# Ctrl-C a test sends it (Python leaves an ignored SIGINT ignored).  The tests
# stand for a user at a terminal, so their processes get SIGINT's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The JVMs the tests start (Spark drivers and executors, the standalone cluster, HDFS,
# Maven, the Java interop programs) live seconds, not hours: the C1 compiler alone and
# the serial collector start them with about half the CPU (C2's compiler threads and
# G1's workers are what a short JVM spends most on), which on a 2-core machine is most
# of what the Spark tests cost.  A JAVA_TOOL_OPTIONS of the user's own is kept.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# interop/jvm.py builds and runs the Java interop programs (tests/test_java_live.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

JAVA_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "java"


@pytest.fixture(scope="session")
def java_fixtures() -> Path:
    """The directory of Java-written golden queues (part of the repository)."""
    assert (JAVA_FIXTURES / "README.md").is_file(), f"Java fixtures missing at {JAVA_FIXTURES}"
    return JAVA_FIXTURES


@pytest.fixture(scope="session")
def _extracted_fixtures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Archive name -> a pristine extraction of it, made once per session."""
    return {}


@pytest.fixture
def extract_fixture(java_fixtures: Path, tmp_path: Path, _extracted_fixtures: dict[str, Path],
                    tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``extract_fixture("cqv5-sample-input.tar.bz2")`` unpacks a fixture tarball into
    ``tmp_path`` (or ``tmp_path / subdir``) and returns the directory it was unpacked into.

    The archive is extracted with ``tar --sparse -xjf`` once per session (its members are
    stored dense, so that writes the 80 MiB of zeros); each test then gets a private
    ``cp --sparse=always`` copy, which is fast and leaves the zeros as holes.
    """

    def extract(name: str, subdir: str | None = None) -> Path:
        archive = java_fixtures / name
        assert archive.is_file(), f"no Java fixture {archive}"
        pristine = _extracted_fixtures.get(name)
        if pristine is None:
            pristine = tmp_path_factory.mktemp("java-fixture")
            subprocess.run(["tar", "--sparse", "--no-same-owner", "-xjf", str(archive),
                            "-C", str(pristine)], check=True, capture_output=True)
            _extracted_fixtures[name] = pristine
        dest = tmp_path / subdir if subdir else tmp_path
        dest.mkdir(parents=True, exist_ok=True)
        for entry in pristine.iterdir():
            subprocess.run(["cp", "-a", "--sparse=always", str(entry), str(dest)],
                           check=True, capture_output=True)
        return dest

    return extract


# --------------------------------------------------------------------------
# parallel runs (pytest-xdist: ``-n 2`` in scripts/test.sh)
# --------------------------------------------------------------------------


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Each test goes to whichever worker is free, except the Spark tests: those that
    share one Spark session (tests/spark/conftest.py) run on one worker, one after
    another, as a JVM costs a core and a few GiB; the standalone cluster's module
    (its own JVMs, no session) is a unit of its own, so it runs beside them on
    another worker, and so is each test of ``test_spark_register.py`` (a user's
    process with its own Spark each: the installed wheel's pass runs little
    else).  The units with the most tests go first (the Spark lane, then
    the cluster's), then the slow tests (``pytest_collection_modifyitems`` puts them
    first in the collection), so that no long test starts last.  (pytest-xdist's
    own ``xdist_group`` marker is not honoured with pytest 9, where a node id is
    computed: the group never reaches the scheduler.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SparkOnOneWorker(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/spark/test_spark_cluster.py"):
                return "spark-cluster"
            if nodeid.startswith("tests/spark/test_spark_register.py"):
                return nodeid
            return "spark" if nodeid.startswith("tests/spark/") else nodeid

    return SparkOnOneWorker(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a pytest-xdist worker, the slow tests first (a stable sort: the same order
    on every worker, as the scheduler requires), so they start early and the
    short ones fill the other workers' time around them; the Spark tests keep
    their order (one unit, on one worker, with module-scoped fixtures).  A run without workers
    keeps the collection order (module-scoped fixtures are set up once)."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.nodeid.startswith("tests/spark/")
                   or item.get_closest_marker("slow") is None)


# --------------------------------------------------------------------------
# skips: only for a reason tests/skips.py names; under CI any other fails the run
# --------------------------------------------------------------------------

_UNLISTED_SKIPS: list[str] = []


def _note_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    reason = reason.removeprefix("Skipped: ")
    if not listed(reason):
        _UNLISTED_SKIPS.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_skip(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _UNLISTED_SKIPS:
        verdict = "fail this CI run" if under_ci() else "would fail a CI run"
        terminalreporter.section(f"skips for reasons tests/skips.py does not name ({verdict})")
        for line in _UNLISTED_SKIPS:
            terminalreporter.line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _UNLISTED_SKIPS and under_ci() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(params=KINDS)
def run(request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """``run(coro)`` runs a coroutine on a fresh loop of each kind (asyncio,
    uvloop), in debug mode unless the test module sets ``LOOP_DEBUG = False``
    (or the call says ``debug=False``); the test fails if the loop's exception
    handler was called (a task whose error nobody retrieved, ...)."""
    factory = loop_factory(request.param)
    default_debug: bool = getattr(request.module, "LOOP_DEBUG", True)
    errors: list[dict[str, Any]] = []

    def runner(coro: Awaitable[Any], debug: bool | None = None) -> Any:
        with asyncio.Runner(loop_factory=factory,
                            debug=default_debug if debug is None else debug) as r:
            r.get_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
            return r.run(coro)  # type: ignore[arg-type]

    yield runner
    assert not errors, f"the event loop reported: {errors}"


@pytest.fixture
def endpoint() -> Iterator[list[Any]]:
    """The ``aiochronicle metrics`` children a test starts (``test_monitor.Endpoint``,
    each with its ``proc``): the test appends them; any still running afterwards
    is killed and reaped."""
    made: list[Any] = []
    yield made
    for e in made:
        if e.proc.poll() is None:
            e.proc.kill()
            e.proc.communicate(timeout=60)


# --------------------------------------------------------------------------
# where the CPU goes (opt-in: AIOCHRONICLE_TEST_CPU=<file>; scripts/test_cpu.py sums it)
# --------------------------------------------------------------------------

_CPU_FILE = os.environ.get("AIOCHRONICLE_TEST_CPU")
_TICK = os.sysconf("SC_CLK_TCK")
# pid -> the parents it was seen with (an orphan handed to this process was seen
# under another one first)
_PARENTS: dict[int, set[int]] = {}


def _tree_cpu() -> dict[int, float]:
    """CPU seconds (own and reaped children's, user+system) of each process
    descended from this one (zombies too), by pid."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid ... utime(11) stime(12) cutime(13) cstime(14)
        stats[int(entry.name)] = (int(fields[1]),
                                  sum(int(x) for x in fields[11:15]) / _TICK)
    mine: dict[int, float] = {}
    parents = {os.getpid()}
    while True:
        found = {pid for pid, (ppid, _) in stats.items() if ppid in parents and pid not in mine}
        if not found:
            return mine
        for pid in found:
            mine[pid] = stats[pid][1]
            _PARENTS.setdefault(pid, set()).add(stats[pid][0])
        parents |= found


def _reap_orphans() -> None:
    """Reap the orphans handed to this process (a subreaper: the JVM a Spark
    driver leaves running when it exits), so that their CPU is counted."""
    me = os.getpid()
    for pid, seen in list(_PARENTS.items()):
        if seen - {me}:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            try:
                os.stat(f"/proc/{pid}")
            except FileNotFoundError:
                del _PARENTS[pid]


def _rusage_cpu(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def _watch_tree(stop: threading.Event) -> None:
    while not stop.wait(0.2):
        _tree_cpu()


if _CPU_FILE:
    # orphans of the processes tests start become this process's children, not init's
    import ctypes
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        """Records the CPU a test (setup, call, teardown) cost: this process's, its
        reaped children's, and what its live descendants used meanwhile."""
        tree = _tree_cpu()
        own = _rusage_cpu(resource.RUSAGE_SELF)
        reaped = _rusage_cpu(resource.RUSAGE_CHILDREN)
        wall = time.monotonic()
        stop = threading.Event()
        watcher = threading.Thread(target=_watch_tree, args=(stop,), daemon=True)
        watcher.start()
        yield
        stop.set()
        watcher.join()
        _reap_orphans()
        after = _tree_cpu()
        live = sum(cpu - tree.get(pid, 0.0) for pid, cpu in after.items())
        # a process alive before and gone since: whoever reaped it counts all its CPU
        gone = sum(cpu for pid, cpu in tree.items() if pid not in after)
        children = _rusage_cpu(resource.RUSAGE_CHILDREN) - reaped + live - gone
        line = json.dumps({"test": item.nodeid, "self": _rusage_cpu(resource.RUSAGE_SELF) - own,
                           "children": children, "wall": time.monotonic() - wall})
        with open(_CPU_FILE, "a") as f:
            f.write(line + "\n")
