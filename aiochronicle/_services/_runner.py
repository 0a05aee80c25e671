"""The runner of ``aiochronicle run PIPELINE.toml``: each service of a
pipeline in a process of its own, watched and restarted.

:class:`Runner` (in the runner's process) starts one child per service
(``python -m aiochronicle _service PIPELINE.toml NAME``) and, for each, a
standby process (started, modules imported, service built, waiting on its
stdin) that the next restart tells to go, so a restart does not wait for a
Python process to start.  It prefixes each line a child prints with the
service's name on one log stream, restarts a child that died with the backoff
of its :class:`~._pipeline.RestartPolicy`, and on
SIGTERM or SIGINT sends each child SIGTERM and waits: a child finishes the
input it is handling, snapshots and exits 0.  Children run in sessions of
their own (a terminal's Ctrl-C reaches the runner only, which stops them in
order) and get SIGTERM when the runner dies (``PR_SET_PDEATHSIG``).

Each child writes its figures as JSON lines on a pipe of its own (fd number
in ``AIOCHRONICLE_STATUS_FD``): inputs handled, lag per input, snapshot time,
and, once, the moment it handled its first live input.  The runner keeps the
last figures of each service (:meth:`Runner.figures`) for ``/metrics`` and
logs the restart latency: from seeing the death to the restarted service
handling its next live input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from ._pipeline import PipelineSpec, ServiceSpec

__all__ = ["RESTARTED_ENV", "STATUS_FD_ENV", "Runner", "ServiceFigures"]

STATUS_FD_ENV = "AIOCHRONICLE_STATUS_FD"
RESTARTED_ENV = "AIOCHRONICLE_RESTARTED"
"""Set (to 1) for a service process that restarts one that died."""
STOP_GRACE = 30.0
"""Seconds a child has to stop after SIGTERM before it is killed."""


@dataclass
class ServiceFigures:
    """What the runner knows of one service (for ``/metrics`` and the log).

    Attributes:
        name: the service.
        up: a process of it is running.
        pid: its process id (0 when none).
        restarts: restarts since the runner started.
        handled: inputs handled by the running process, replayed ones aside.
        replayed: inputs replayed with outputs suppressed on its last start.
        handled_total: inputs handled by every process of it so far.
        lag: input queue path -> excerpts not yet handled.
        lag_seconds: input queue path -> how long the oldest input not yet
            handled has waited (as the service's reports see it, to their
            period; 0 when none waits).
        snapshot_time: wall-clock time (s) of its last snapshot, or None.
        restart_ms: the last restart's latency (ms), from the runner seeing
            the death to the new process handling its next live input.
    """

    name: str
    up: bool = False
    pid: int = 0
    restarts: int = 0
    handled: int = 0
    replayed: int = 0
    handled_total: int = 0
    lag: dict[str, int] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)
    snapshot_time: float | None = None
    restart_ms: float | None = None


@dataclass
class _Process:
    """A process of a service, with the tasks reading its log and status."""

    proc: asyncio.subprocess.Process
    pump: asyncio.Task[None]
    status: asyncio.Task[None]


class _Child:
    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self.figures = ServiceFigures(spec.name)
        self.proc: asyncio.subprocess.Process | None = None
        self.in_a_row = 0
        self.died_ns: int | None = None
        self.base_handled = 0
        self.status_task: asyncio.Task[None] | None = None
        self.spare: _Process | None = None  # a standby process for the next restart
        self.spare_task: asyncio.Task[None] | None = None


class Runner:
    """Starts, watches and restarts the services of a pipeline.

    Args:
        spec: the checked pipeline.
        out: where the one log stream goes (default ``sys.stdout``).
        child_argv: the command that runs one service, before its name
            (default ``python -m aiochronicle _service PIPELINE.toml``).
    """

    def __init__(self, spec: PipelineSpec, *, out: TextIO | None = None,
                 child_argv: Sequence[str] | None = None) -> None:
        self.spec = spec
        self._out = out if out is not None else sys.stdout
        self._argv = list(child_argv) if child_argv is not None else [
            sys.executable, "-m", "aiochronicle", "_service", spec.file,
            "--directory", spec.directory]
        self._children = {s.name: _Child(s) for s in spec.services}
        self._stopping = asyncio.Event()
        self._failed: str | None = None

    def figures(self) -> list[ServiceFigures]:
        """The figures of every service, in the order of the file."""
        return [c.figures for c in self._children.values()]

    def log(self, who: str, text: str) -> None:
        """One line of the log stream, prefixed with ``who`` (one write)."""
        width = max(len(n) for n in [*self._children, "runner"])
        data = "".join(f"{who:<{width}} | {line}\n" for line in text.splitlines() or [""])
        try:
            self._out.write(data)
            self._out.flush()
        except (OSError, ValueError):  # the log's reader went away: keep running
            pass

    def stop(self) -> None:
        """Stop every service (as on SIGTERM); :meth:`run` then returns."""
        self._stopping.set()

    async def run(self, *, on_started: Callable[[], None] | None = None) -> int:
        """Run until :meth:`stop`, SIGTERM or SIGINT, or a service out of restarts.

        Returns 0 when every service stopped cleanly on request, 1 otherwise.
        """
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            self.log("runner", f"starting {len(self._children)} services of {self.spec.file} "
                     f"on {self.spec.loop}: {', '.join(self._children)}")
            tasks = [asyncio.create_task(self._watch(c), name=f"watch {c.spec.name}")
                     for c in self._children.values()]
            for t in tasks:
                t.add_done_callback(self._watch_ended)
            if on_started is not None:
                on_started()
            await self._stopping.wait()
            codes = await asyncio.gather(*(self._stop_child(c) for c in self._children.values()))
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
        bad = [f"{c.spec.name} ({code})" for c, code in zip(self._children.values(), codes,
                                                          strict=True)
               if code not in (0, None)]
        if self._failed:
            self.log("runner", f"stopped: {self._failed}")
            return 1
        if bad:
            self.log("runner", f"stopped; not cleanly: {', '.join(bad)}")
            return 1
        self.log("runner", "stopped: every service exited cleanly")
        return 0

    def _watch_ended(self, task: asyncio.Task[None]) -> None:
        """A service's watcher failed (a process that cannot be started):
        stop the pipeline rather than run on without the service."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        self._failed = f"{task.get_name()[len('watch '):]}: {type(exc).__name__}: {exc}"
        self.log("runner", f"cannot run {self._failed}: stopping the pipeline")
        self._stopping.set()

    def _on_signal(self, sig: int) -> None:
        if not self._stopping.is_set():
            self.log("runner", f"{signal.Signals(sig).name}: stopping every service")
        self._stopping.set()

    async def _stop_child(self, c: _Child) -> int | None:
        await self._drop_spare(c)
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return None  # not running (stopped on its own, or waiting to restart)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(proc.wait(), STOP_GRACE)
        except TimeoutError:
            self.log("runner", f"{c.spec.name} did not stop in {STOP_GRACE:.0f} s: killed")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return await proc.wait()

    async def _spawn(self, c: _Child, *, standby: bool) -> _Process:
        """A new process of service ``c``; ``standby``: one that imports and
        builds the service, then waits for a line on its stdin to run it."""
        r, w = os.pipe()
        env = dict(os.environ, **{STATUS_FD_ENV: str(w), "PYTHONUNBUFFERED": "1"})
        if c.died_ns is not None:
            env[RESTARTED_ENV] = "1"
        try:
            proc = await asyncio.create_subprocess_exec(
                *self._argv, c.spec.name, *(["--standby"] if standby else []),
                stdin=asyncio.subprocess.PIPE if standby else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                env=env, pass_fds=(w,), start_new_session=True)
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        return _Process(proc, asyncio.create_task(self._pump(c, proc)),
                        asyncio.create_task(self._read_status(c, r)))

    async def _spawn_spare(self, c: _Child) -> None:
        with contextlib.suppress(OSError):
            c.spare = await self._spawn(c, standby=True)

    async def _drop_spare(self, c: _Child) -> None:
        if c.spare_task is not None:
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await c.spare_task
            c.spare_task = None
        spare, c.spare = c.spare, None
        if spare is None:
            return
        if spare.proc.stdin is not None:
            spare.proc.stdin.close()  # EOF: a standby process exits 0
        try:
            await asyncio.wait_for(spare.proc.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                spare.proc.kill()
            await spare.proc.wait()
        await spare.pump

    async def _launch(self, c: _Child) -> _Process:
        """Run service ``c``: its standby process told to go, if it has a
        live one, else a new process."""
        if c.spare_task is not None:
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await c.spare_task
            c.spare_task = None
        spare, c.spare = c.spare, None
        run: _Process | None = None
        if spare is not None and spare.proc.returncode is None and spare.proc.stdin is not None:
            try:
                spare.proc.stdin.write(b"go\n")
                await spare.proc.stdin.drain()
                run = spare
            except (ConnectionError, OSError):
                pass
        if run is None:
            if spare is not None:
                await self._drop_spare_process(spare)
            run = await self._spawn(c, standby=False)
        c.proc = run.proc
        c.figures.up, c.figures.pid = True, run.proc.pid
        c.base_handled = c.figures.handled_total
        c.figures.handled = c.figures.replayed = 0
        c.status_task = run.status
        return run

    async def _drop_spare_process(self, spare: _Process) -> None:
        with contextlib.suppress(ProcessLookupError):
            spare.proc.kill()
        await spare.proc.wait()
        await spare.pump

    async def _read_status(self, c: _Child, fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe)
            try:
                while line := await reader.readline():
                    with contextlib.suppress(ValueError, TypeError, KeyError):
                        self._status(c, json.loads(line))
            finally:
                transport.close()

    def _status(self, c: _Child, s: dict[str, Any]) -> None:
        f = c.figures
        if s.get("standby"):
            self.log("runner", f"{c.spec.name}: a standby process is ready for the next "
                     "restart")
            return
        if "live" in s:
            self.log("runner", f"{c.spec.name} is live: recovered in {float(s['live']):.1f} ms, "
                     f"{int(s.get('replayed', 0))} inputs replayed")
        if "handled" in s:
            f.handled = int(s["handled"])
            f.handled_total = c.base_handled + f.handled
        if "replayed" in s:
            f.replayed = int(s["replayed"])
        if "lag" in s:
            f.lag = {str(k): int(v) for k, v in s["lag"].items()}
        if "lag_seconds" in s:
            f.lag_seconds = {str(k): float(v) for k, v in s["lag_seconds"].items()}
        if s.get("snapshot_time") is not None:
            f.snapshot_time = float(s["snapshot_time"])
        if "live_ns" in s and c.died_ns is not None:
            ms = (int(s["live_ns"]) - c.died_ns) / 1e6
            f.restart_ms = ms
            c.died_ns = None
            self.log("runner", f"{c.spec.name}: restart latency {ms:.1f} ms from the runner "
                     f"seeing the death to the next live input handled, of which recovery "
                     f"(snapshot, then {f.replayed} inputs replayed) "
                     f"{float(s.get('replay_ms', 0.0)):.1f} ms")

    async def _pump(self, c: _Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            self.log(c.spec.name, line.decode(errors="replace").rstrip("\n"))

    async def _watch(self, c: _Child) -> None:
        policy = c.spec.restart
        while not self._stopping.is_set():
            started = time.monotonic()
            run = await self._launch(c)
            proc = run.proc
            self.log("runner", f"started {c.spec.name} (pid {proc.pid})")
            if policy.standby and policy.max_restarts > 0:
                # the next restart's process, ready: its start is not on that path
                c.spare_task = asyncio.create_task(self._spawn_spare(c))
            code = await proc.wait()
            c.died_ns = time.monotonic_ns()
            await run.pump
            c.figures.up, c.figures.pid = False, 0
            if self._stopping.is_set():
                return
            if code == 0:
                self.log("runner", f"{c.spec.name} exited 0 on its own: not restarted")
                await self._drop_spare(c)
                return
            how = (f"killed by {signal.Signals(-code).name}" if code < 0
                   else f"exited with status {code}")
            if time.monotonic() - started >= policy.reset_after:
                c.in_a_row = 0
            c.in_a_row += 1
            if c.in_a_row > policy.max_restarts:
                self._failed = (f"{c.spec.name} {how}, {c.in_a_row - 1} restarts in a row "
                                f"(max_restarts {policy.max_restarts})")
                self.log("runner", f"{c.spec.name} {how}; out of restarts: stopping the "
                         "pipeline")
                self._stopping.set()
                return
            delay = policy.delay(c.in_a_row)
            self.log("runner", f"{c.spec.name} {how}: restart {c.in_a_row} in a row in "
                     f"{delay:g} s")
            c.figures.restarts += 1
            if delay:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)


def set_parent_death_signal() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies (a no-op
    elsewhere): a child of a SIGKILLed runner stops instead of running on."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
