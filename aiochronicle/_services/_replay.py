"""``aiochronicle replay``: re-run one service of a pipeline over recorded
input and say whether its output equals the recorded output.

The service is run as in production (a :class:`~._service.Service`, its
handler made afresh from the ``module:Class`` of the ``PIPELINE.toml``) with
its outputs on scratch queues in a directory of its own (each with the
output's source id, so histories read as the recorded ones do), over the
input excerpts of its input queues from the first up to ``--to``; the inputs
before ``--from`` rebuild the handler's state.  The
scratch outputs written for inputs from ``--from`` to ``--to`` are then
compared with the calls of the recorded output whose history holds an input
of that range, in order, decoded with the output's interface: the method,
its arguments field by field, and the message history's sources must be
equal; the history's timings are left aside.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from msgspec import to_builtins

from .._format._history import current_history
from .._objects._queue import Queue, open_queue
from ._pipeline import OutputSpec, PipelineSpec, resolve
from ._service import Service, ServiceInput, ServiceOutput
from ._serviceproc import loop_factory

__all__ = ["ReplayResult", "replay"]


class _Call(NamedTuple):
    index: int  # type: ignore[assignment]  # the excerpt's index in its queue
    method: str
    args: Any  # the arguments as plain values (msgspec.to_builtins)
    sources: tuple[tuple[int, int], ...]  # the history's sources before this queue's


def _recorded_calls(path: str, iface: type, ids: set[int], lo: int, hi: int) -> list[_Call]:
    """The method calls of the queue at ``path`` written for an input of
    ``ids`` from ``lo`` to ``hi`` (by their message history), in order."""
    calls: list[_Call] = []

    def recorder(name: str) -> Callable[..., None]:
        def record(self: object, *args: Any) -> None:
            h = current_history()
            sources = tuple(h.sources) if h is not None else ()
            if any(sid in ids and lo <= idx <= hi for sid, idx in sources[:-1]):
                calls.append(_Call(sources[-1][1], name, to_builtins(args), sources[:-1]))
        # the interface method's parameters (a method reader takes no *args)
        record.__signature__ = inspect.signature(getattr(iface, name))  # type: ignore[attr-defined]
        return record

    handler = type("Recorder", (), {name: recorder(name) for name in dir(iface)
                                    if not name.startswith("_")
                                    and callable(getattr(iface, name))})()
    with open_queue(path, read_only=True) as q:
        q.tailer().method_reader(handler, interfaces=[iface]).read_available()
    return calls


def _first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two plain values first differ (``args[0].qty: 1000000 != 2000000``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in [*a, *(k for k in b if k not in a)]:
            if k not in a or k not in b:
                return (f"{where}.{k}: {a.get(k, 'missing')!r} recorded, "
                        f"{b.get(k, 'missing')!r} replayed")
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d is not None:
                return d
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        for k, (x, y) in enumerate(zip(a, b, strict=False)):
            d = _first_difference(x, y, f"{where}[{k}]")
            if d is not None:
                return d
        if len(a) != len(b):
            return f"{where}: {len(a)} items recorded, {len(b)} replayed"
        return None
    if a != b or type(a) is not type(b):
        return f"{where}: recorded {a!r}, replayed {b!r}"
    return None


def _compare(name: str, recorded: list[_Call], replayed: list[_Call]) -> str | None:
    for n, (r, p) in enumerate(zip(recorded, replayed, strict=False)):
        where = (f"output {name!r}, call {n + 1} (recorded at {r.index:#x}, replayed at "
                 f"{p.index:#x})")
        if r.method != p.method:
            return f"{where}: recorded {r.method}(...), replayed {p.method}(...)"
        d = _first_difference(r.args, p.args, "args")
        if d is not None:
            return f"{where}, {r.method}(): {d}\n  recorded: {r.method}{tuple(r.args)!r}\n" \
                   f"  replayed: {p.method}{tuple(p.args)!r}"
        if r.sources != p.sources:
            return f"{where}: history sources differ: recorded {r.sources}, replayed {p.sources}"
    if len(recorded) != len(replayed):
        more, which = ((recorded, "recorded") if len(recorded) > len(replayed)
                       else (replayed, "replayed"))
        c = more[min(len(recorded), len(replayed))]
        return (f"output {name!r}: {len(recorded)} calls recorded, {len(replayed)} "
                f"replayed; the first only {which} (at {c.index:#x}): "
                f"{c.method}{tuple(c.args)!r}")
    return None


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        service: the service replayed.
        inputs: input excerpts handled.
        compared: output name -> (recorded calls, replayed calls).
        difference: the first difference, or None when the outputs are equal.
    """

    service: str
    inputs: int = 0
    compared: dict[str, tuple[int, int]] = field(default_factory=dict)
    difference: str | None = None

    @property
    def equal(self) -> bool:
        """The replayed output equals the recorded output."""
        return self.difference is None

    def report(self) -> str:
        """The lines ``aiochronicle replay`` prints."""
        counts = ", ".join(f"{name}: {rec} recorded, {rep} replayed"
                           for name, (rec, rep) in self.compared.items())
        head = f"replay of {self.service}: {self.inputs} inputs handled; {counts}\n"
        if self.difference is None:
            return head + "EQUAL: the replayed output equals the recorded output\n"
        return head + f"DIFFERENT: {self.difference}\n"


def replay(pipeline: PipelineSpec, name: str, from_index: int | None, to_index: int | None,
           into: str) -> ReplayResult:
    """Re-run service ``name`` over its inputs from ``from_index`` to
    ``to_index`` (inclusive; None: the first, the last) into scratch queues
    in ``into``, and compare with its recorded output."""
    spec = pipeline.service(name)
    if os.path.isdir(into) and os.listdir(into):
        raise FileExistsError(f"--into {into} is not empty: give a new or empty directory")
    result = ReplayResult(name)
    ins = [open_queue(i.path, read_only=True) for i in spec.inputs]
    outs: list[tuple[OutputSpec, Queue]] = []
    try:
        lo = from_index if from_index is not None else min(
            (q.first_index for q in ins if q.first_index is not None), default=0)
        hi = to_index if to_index is not None else max(
            (q.last_index for q in ins if q.last_index is not None), default=-1)
        for o in spec.outputs:
            outs.append((o, open_queue(os.path.join(into, o.name), source_id=o.source_id)))
        for _, q in outs:
            q.close()
        # the service itself, as it runs in production, on the pipeline's
        # loop, from the first input (the inputs before --from rebuild its
        # state; their outputs are left out of the comparison, as the
        # recorded ones are) to --to, writing to the scratch queues
        svc = Service(
            name=spec.name, handler=resolve(spec.handler),
            inputs=[ServiceInput(path=i.path, source_id=i.source_id,
                                 interfaces=tuple(resolve(x) for x in i.interfaces), end=hi)
                    for i in spec.inputs],
            outputs=[ServiceOutput(name=o.name, path=q.path, interface=resolve(o.interface),
                                   source_id=o.source_id) for o, q in outs],
            on_error=spec.on_error)
        with asyncio.Runner(loop_factory=loop_factory(pipeline)) as runner:
            runner.run(svc.run(until_end=True))
        for q in ins:
            first, last = q.first_index, q.last_index
            if first is not None and last is not None and max(lo, first) <= min(hi, last):
                result.inputs += q.count_excerpts(max(lo, first), min(hi, last) + 1)
        ids = {i.source_id for i in spec.inputs}
        for o, q in outs:
            iface = resolve(o.interface)
            recorded = _recorded_calls(o.path, iface, ids, lo, hi)
            replayed = _recorded_calls(q.path, iface, ids, lo, hi)
            result.compared[o.name] = (len(recorded), len(replayed))
            if result.difference is None:
                result.difference = _compare(o.name, recorded, replayed)
    finally:
        for q in ins:
            q.close()
        for _, q in outs:
            q.close()
    return result

