"""One service of a ``PIPELINE.toml`` in its own process: what the runner
starts (``python -m aiochronicle _service PIPELINE.toml NAME``).

:func:`build_service` makes the :class:`~._service.Service` a
:class:`~._pipeline.ServiceSpec` describes; :func:`serve` runs it on the
pipeline's event loop until SIGTERM or SIGINT (the service finishes the input
it is handling, snapshots and returns: exit 0), writing its figures as JSON
lines to the runner's status pipe (see :mod:`._runner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from .._objects._queue import Queue, open_queue
from .._waiting._pauser import Pauser
from ._pipeline import PipelineSpec, ServiceSpec, resolve
from ._runner import RESTARTED_ENV, STATUS_FD_ENV, set_parent_death_signal
from ._service import Service, ServiceInput, ServiceOutput, SnapshotPolicy

__all__ = ["build_service", "loop_factory", "serve"]

STATUS_EVERY = 0.25
"""Seconds between two reports of the figures to the runner."""


def build_service(spec: ServiceSpec, *, handler: Callable[..., object] | None = None) -> Service:
    """The service ``spec`` describes (its handler class imported from
    ``module:Class`` unless ``handler`` is given)."""
    factory = handler if handler is not None else resolve(spec.handler)
    assert callable(factory)
    inputs = [ServiceInput(path=i.path, source_id=i.source_id,
                           interfaces=tuple(resolve(x) for x in i.interfaces))
              for i in spec.inputs]
    outputs = [ServiceOutput(name=o.name, path=o.path, interface=resolve(o.interface),
                             source_id=o.source_id)
               for o in spec.outputs]
    snapshots = None
    if spec.snapshots is not None:
        snapshots = SnapshotPolicy(path=spec.snapshots.path,
                                   every_inputs=spec.snapshots.every_inputs,
                                   every_seconds=spec.snapshots.every_seconds)
    pauser: Callable[[], Pauser] = getattr(Pauser, spec.pauser)  # one per input
    return Service(name=spec.name, handler=factory, inputs=inputs, outputs=outputs,
                   snapshots=snapshots, pauser=pauser, on_error=spec.on_error)


class _Reporter:
    """Writes the service's figures to the runner's status pipe."""

    def __init__(self, fd: int, svc: Service, spec: ServiceSpec, restarted: bool) -> None:
        self.fd = fd
        self.restarted = restarted
        self.svc = svc
        self.inputs: list[tuple[str, int, Queue]] = []
        for i in spec.inputs:
            with contextlib.suppress(Exception):
                self.inputs.append((i.path, i.source_id, open_queue(i.path, read_only=True)))
        self.waiting: dict[str, tuple[int, float]] = {}  # input -> (its lag, seen since)

    def send(self, data: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, (json.dumps(data) + "\n").encode())

    def figures(self) -> dict[str, Any]:
        st = self.svc.statistics
        out: dict[str, Any] = {"handled": max(0, st.inputs_handled - st.replayed),
                               "replayed": st.replayed}
        if st.snapshot_age is not None:
            out["snapshot_time"] = time.time() - st.snapshot_age
        lag: dict[str, int] = {}
        lag_s: dict[str, float] = {}
        now = time.monotonic()
        for path, sid, q in self.inputs:
            try:
                last = q.last_index
                done = st.last_index.get(sid, -1)
                if last is None:
                    behind = 0
                elif done < 0:
                    first = q.first_index
                    behind = 0 if first is None else q.count_excerpts(first, last + 1)
                else:
                    behind = 0 if done >= last else q.count_excerpts(done + 1, last + 1)
            except Exception:  # the queue went away (retention...): no figure
                continue
            # seconds: how long some input has been waiting, the service not
            # catching up (0 once it has handled all it saw)
            was = self.waiting.get(path)
            if behind == 0:
                self.waiting.pop(path, None)
            elif was is None or done >= was[0]:
                self.waiting[path] = (last if last is not None else -1, now)
            lag[path] = behind
            lag_s[path] = now - self.waiting[path][1] if path in self.waiting else 0.0
        out["lag"], out["lag_seconds"] = lag, lag_s
        return out

    def close(self) -> None:
        for _, _, q in self.inputs:
            q.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)

    async def run(self) -> None:
        """Report the figures every :data:`STATUS_EVERY` seconds and, once,
        the moment the first live input was handled (the restart latency)."""
        await asyncio.gather(self._first_live(), self._figures())

    async def _first_live(self) -> None:
        await self.svc.wait_live()
        st = self.svc.statistics
        self.send({"live": (st.recovery_seconds or 0.0) * 1e3, "replayed": st.replayed})
        if not self.restarted:
            return
        seen = st.inputs_handled
        # a close look for 0.25 s (the restart latency is measured to 0.5 ms),
        # then one a report period (an idle input: no latency to speak of)
        close_until = time.monotonic() + 0.25
        while self.svc.statistics.inputs_handled == seen:
            await asyncio.sleep(0.0005 if time.monotonic() < close_until else STATUS_EVERY)
        st = self.svc.statistics
        self.send({"live_ns": time.monotonic_ns(), "replayed": st.replayed,
                   "replay_ms": (st.recovery_seconds or 0.0) * 1e3})

    async def _figures(self) -> None:
        while True:
            self.send(self.figures())
            await asyncio.sleep(STATUS_EVERY)


async def _serve(svc: Service, spec: ServiceSpec, restarted: bool) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, svc.stop)
    fd = os.environ.get(STATUS_FD_ENV)
    reporter = _Reporter(int(fd), svc, spec, restarted) if fd and fd.isdigit() else None
    task = asyncio.create_task(reporter.run()) if reporter is not None else None
    try:
        await svc.run()
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if reporter is not None:
            reporter.send(reporter.figures())
            reporter.close()


def loop_factory(pipeline: PipelineSpec) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop factory of the pipeline's ``loop`` (None: asyncio's)."""
    if pipeline.loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def serve(pipeline: PipelineSpec, name: str, *, standby: bool = False) -> int:
    """Run service ``name`` of ``pipeline`` until SIGTERM or SIGINT; 0 when
    it stopped cleanly.  ``standby``: make the service ready (modules
    imported, handler and interfaces resolved), then wait for a line on stdin
    before running it (the runner's next restart; end of file: exit 0)."""
    set_parent_death_signal()
    # the service's log (recovery, a handler's error with the input's index)
    # goes to the runner's log stream with the rest of what it prints
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(levelname)s %(name)s: %(message)s")
    spec = pipeline.service(name)
    svc = build_service(spec)
    factory = loop_factory(pipeline)
    if standby:
        fd = os.environ.get(STATUS_FD_ENV)
        if fd and fd.isdigit():
            with contextlib.suppress(OSError):
                os.write(int(fd), b'{"standby": true}\n')
        if not sys.stdin.buffer.readline():
            return 0
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(svc, spec, standby or bool(os.environ.get(RESTARTED_ENV))))
    return 0
