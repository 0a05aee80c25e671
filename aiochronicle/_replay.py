"""``aiochronicle replay``: re-run one service of a pipeline over recorded
input and say whether its output equals the recorded output.

The handler is made afresh (``module:Class`` of the ``PIPELINE.toml``) with
method writers on scratch queues in a directory of its own (each with the
output's source id, so histories read as the recorded ones do), and given the
input excerpts from ``--from`` to ``--to`` of its input queues in index order
(with several inputs, the lower index first: histories record no
interleaving).  Each scratch output is then compared with the excerpts of the
recorded output whose history holds an input of that range, in order, field
by field: the message history's sources must be equal, its timings are left
aside, and the rest of the excerpt is decoded and compared line by line where
the bytes differ.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from ._history import HISTORY_KEY, MessageHistory
from ._methodreader import MethodReader
from ._pipeline import OutputSpec, PipelineSpec, resolve
from ._queue import Queue, open_queue
from ._render import decode_payload
from ._tailer import Tailer

__all__ = ["ReplayResult", "replay", "split_history"]


def split_history(payload: bytes) -> tuple[MessageHistory | None, bytes]:
    """(the message history at the start of a method call's excerpt, or None;
    the rest of the excerpt)."""
    if payload[:3] == HISTORY_KEY and len(payload) >= 6 and payload[3] == 0x81:
        n = int.from_bytes(payload[4:6], "little")
        try:
            history = MessageHistory.from_bytes(payload[6:6 + n])
        except ValueError:
            return None, payload
        return history, payload[6 + n:]
    return None, payload


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        service: the service replayed.
        inputs: input excerpts handled.
        compared: output name -> (recorded excerpts, replayed excerpts).
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


def _excerpts(q: Queue) -> Iterator[tuple[int, bytes]]:
    t = q.tailer()
    while (ex := t.read_nowait()) is not None:
        yield ex.index, bytes(ex.payload)


def _lines(payload: bytes) -> list[str]:
    return decode_payload(payload).text.splitlines() or [payload.hex()]


def _compare(name: str, recorded: list[tuple[int, bytes]],
             replayed: list[tuple[int, bytes]]) -> str | None:
    for n, ((ri, rp), (pi, pp)) in enumerate(zip(recorded, replayed, strict=False)):
        rh, rest_r = split_history(rp)
        ph, rest_p = split_history(pp)
        where = (f"output {name!r}, excerpt {n + 1} (recorded at {ri:#x}, replayed at "
                 f"{pi:#x})")
        if (rh and rh.sources) != (ph and ph.sources):
            return (f"{where}: history sources differ: recorded "
                    f"{rh.sources if rh else None}, replayed {ph.sources if ph else None}")
        if rest_r != rest_p:
            a, b = _lines(rest_r), _lines(rest_p)
            for k, (x, y) in enumerate(zip(a, b, strict=False)):
                if x != y:
                    return f"{where}, line {k + 1}:\n  recorded: {x}\n  replayed: {y}"
            return (f"{where}: recorded {len(rest_r)} bytes, replayed {len(rest_p)} bytes:\n"
                    f"  recorded: {' '.join(a)}\n  replayed: {' '.join(b)}")
    if len(recorded) != len(replayed):
        more, which = ((recorded, "recorded") if len(recorded) > len(replayed)
                       else (replayed, "replayed"))
        i, p = more[min(len(recorded), len(replayed))]
        return (f"output {name!r}: {len(recorded)} excerpts recorded, {len(replayed)} "
                f"replayed; the first only {which} (at {i:#x}): {' '.join(_lines(p))}")
    return None


def _in_range(payload: bytes, ids: set[int], lo: int, hi: int) -> bool:
    history, _ = split_history(payload)
    if history is None:
        return False
    return any(sid in ids and lo <= idx <= hi for sid, idx in history.sources)


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
        writers = {o.name: q.appender().method_writer(resolve(o.interface))
                   for o, q in outs}
        factory = resolve(spec.handler)
        assert callable(factory)
        handler = factory(**writers)
        readers: list[tuple[Tailer, MethodReader, int]] = []
        for i, q in zip(spec.inputs, ins, strict=True):
            t = q.tailer()
            if not t.move_to_index(lo):
                t.to_start()
            ifaces = [resolve(x) for x in i.interfaces]
            end = q.last_index
            if end is not None:
                readers.append((t, t.method_reader(handler, interfaces=ifaces),
                                min(hi, end)))
        while readers:
            # the input with the lowest next index first
            k = min(range(len(readers)), key=lambda k: readers[k][0].index)
            t, reader, end = readers[k]
            if t.index > end or reader.read_available(limit=1) == 0:
                del readers[k]
                continue
            result.inputs += 1
        ids = {i.source_id for i in spec.inputs}
        for o, q in outs:
            with open_queue(o.path, read_only=True) as rq:
                recorded = [(i, p) for i, p in _excerpts(rq) if _in_range(p, ids, lo, hi)]
            replayed = list(_excerpts(q))
            result.compared[o.name] = (len(recorded), len(replayed))
            if result.difference is None:
                result.difference = _compare(o.name, recorded, replayed)
    finally:
        for q in ins:
            q.close()
        for _, q in outs:
            q.close()
    return result

