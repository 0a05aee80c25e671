"""Services: a method-reader handler with method writers on its output queues,
run exactly once by message history (DESIGN.md decision 12).

A service's position is not a saved tailer index: it is the input index that
the message history of its own last output records (Chronicle's
``afterLastWritten``).  On start a service

1. finds, in each output queue, the last excerpt whose history's newest source
   is one of its inputs: the input index it was written for is the last input
   handled (every input before it was handled too, in order);
2. loads its last snapshot (``SnapshotPolicy``), if any: the handler's state
   and the input and output positions it covers;
3. replays the inputs after the snapshot (or from the first input, without
   one) up to that last handled input, with outputs *suppressed*: each output
   the handler writes is compared with the one recorded then, and not written
   again (a difference is a :class:`NondeterministicHandlerError`).  An input
   whose outputs a crash cut midway is re-handled the same way: the outputs
   already written are suppressed, the rest written;
4. goes on live.

Handlers must be deterministic: the same inputs in the same order give the
same outputs and the same state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import msgspec

from .._core._errors import (
    CodecError,
    NondeterministicHandlerError,
    ServiceError,
    ServiceHandlerError,
)
from .._format._history import MessageHistory
from .._format._wire import PlainReader, WireError
from .._messages._methoddispatch import dispatch_tracked
from .._messages._methods import JSON_RAWS, MP_ENC, msgpack_history
from .._messages._methodwriter import ReplayGate, make_method_writer
from .._objects._aio import tailer_wait
from .._objects._queue import MethodReader, Queue, Tailer, cycles_of, open_queue
from .._storage._excerpt import Excerpt, TailerDirection
from .._waiting._pauser import Pauser

__all__ = ["Service", "ServiceInput", "ServiceOutput", "ServiceStatistics", "SnapshotPolicy"]


@dataclass(frozen=True, slots=True)
class ServiceInput:
    """One input queue of a :class:`Service`.

    Attributes:
        path: the queue directory.
        source_id: the queue's ``sourceId`` (non-zero, and different for each
            input of a service): the method reader records it with the index of
            every input in the history of the outputs written while handling
            it, which is how a restarted service finds where it stopped.  None:
            the one the queue records (a :class:`ServiceError` when it records
            none).
        interfaces: interfaces lending their annotations and method ids to the
            handler's methods (as ``Tailer.method_reader(interfaces=...)``).
        start: the index to start from when the outputs record nothing of this
            input yet (default: the queue's first excerpt).
        end: handle inputs up to this index (inclusive) only, then stop reading
            this input (default: no end).  For replays of a recorded range.
    """

    path: str
    source_id: int | None = None
    interfaces: tuple[type, ...] = ()
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class ServiceOutput:
    """One output queue of a :class:`Service`: the handler factory gets a method
    writer of ``interface`` on it, as the keyword argument ``name``.

    Attributes:
        name: the keyword the handler factory is given the writer by (a Python
            identifier, unique in the service).
        path: the queue directory.
        interface: the interface whose calls the writer appends.
        source_id: the queue's ``sourceId`` (non-zero: message history is
            written only on queues that have one).  None: the one the queue
            records (a :class:`ServiceError` when it records none).
        codec: the codec of the calls (default: the one the queue records,
            else msgpack).
    """

    name: str
    path: str
    interface: type
    source_id: int | None = None
    codec: str | None = None


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Where and how often a service snapshots its handler's state.

    A snapshot is one excerpt on the queue at ``path`` (a queue of the service's
    own): the handler's ``snapshot()`` (msgpack-encoded), the index of the last
    input handled from each input queue and the index of the last output
    written to each output queue.  One is written after ``every_inputs`` inputs
    or ``every_seconds`` seconds (whichever comes first, and only when inputs
    were handled since the last), and when the service stops cleanly.

    Attributes:
        path: the snapshot queue's directory.
        every_inputs: inputs handled between two snapshots (None: no count).
        every_seconds: the most seconds between two snapshots while inputs
            come (None: no timer).
    """

    path: str
    every_inputs: int | None = 1000
    every_seconds: float | None = 5.0


@dataclass(frozen=True, slots=True)
class ServiceStatistics:
    """Counters of a :class:`Service` (``Service.statistics``).

    Attributes:
        name: the service's name.
        state: ``"new"``, ``"recovering"``, ``"live"`` or ``"stopped"``.
        inputs_handled: inputs handled since ``run()`` started (replayed ones
            included).
        outputs_written: outputs appended since ``run()`` started.
        replayed: inputs handled again on start (from the snapshot, or the
            first input, up to the last input handled before).
        suppressed: outputs the handler wrote again on start that were already
            in the output queues (compared, not written).
        errors: inputs whose handler raised and were skipped
            (``on_error="skip"``).
        snapshots: snapshots written since ``run()`` started.
        snapshot_age: seconds since the last snapshot was written or loaded
            (None: there is none).
        recovery_seconds: seconds from ``run()`` starting to the service going
            live (None while it recovers).
        last_index: per input source id, the index of the last input handled
            (-1: none yet).
    """

    name: str
    state: str
    inputs_handled: int
    outputs_written: int
    replayed: int
    suppressed: int
    errors: int
    snapshots: int
    snapshot_age: float | None
    recovery_seconds: float | None
    last_index: Mapping[int, int] = field(default_factory=dict)


log = logging.getLogger("aiochronicle.service")

_YIELD_EVERY: Final = 256
"""Inputs handled in a row before the event loop gets a turn."""

_BATCH_BYTES: Final = 256 << 10
"""About the most bytes a live input reads in one batch (of ``_YIELD_EVERY``
excerpts at most)."""

_PAST_END: Final = object()
"""What the wake-up callback leaves the pump when an input is past its ``end``."""


# --------------------------------------------------------------------------
# What an output excerpt records
# --------------------------------------------------------------------------


def split_call(payload: bytes | memoryview) -> tuple[MessageHistory | None, bytes]:
    """The message history a method writer put first in an excerpt (None when
    there is none) and the bytes of the call after it (method and arguments),
    in msgpack, JSON or BinaryWire.

    Raises:
        WireError: the history is there but damaged.
    """
    p = bytes(payload)
    if len(p) < 2:
        return None, p
    b0 = p[0]
    if b0 == 0x93:
        try:
            hb, pos = msgpack_history(p)
        except CodecError:
            return None, p
        return MessageHistory.from_bytes(hb), p[pos:]
    if b0 == 0x92:
        return None, p[1:]
    if b0 == 0x5B:
        try:
            parts = JSON_RAWS.decode(p)
        except msgspec.DecodeError:
            return None, p
        if len(parts) != 3:
            return None, b",".join(bytes(x) for x in parts)
        return (MessageHistory.from_plain(msgspec.json.decode(parts[0])),
                b",".join(bytes(x) for x in parts[1:]))
    r = PlainReader(p)
    end = len(p)
    try:
        pos = r.skip_padding(0, end)
        if pos >= end or not r.at_key(pos):
            return None, p
        key, kpos = r.key(pos, end)
        if key != -1 and key != "history":
            return None, p[pos:]
        raw, vend = r.value(kpos, end)
    except IndexError:
        raise WireError("truncated message history") from None
    return MessageHistory.from_plain(raw), p[vend:]


def _origin(payload: bytes | memoryview) -> tuple[int, int] | None:
    """``(source id, index)`` of the newest source in an excerpt's history:
    the input a service read when it wrote it; None without history."""
    try:
        h, _ = split_call(payload)
    except WireError:
        return None
    if h is None or not h.sources:
        return None
    return h.sources[-1]


# --------------------------------------------------------------------------
# Snapshots
# --------------------------------------------------------------------------


class _SnapshotRecord(msgspec.Struct, forbid_unknown_fields=False):
    """One excerpt of a snapshot queue."""

    service: str
    inputs: dict[int, int]  # source id -> index of the last input handled
    outputs: dict[str, int]  # output name -> index of the last output written (-1: none)
    handled: int
    written_ns: int  # time.time_ns() when written
    state: msgspec.Raw


_SNAP_DEC = msgspec.msgpack.Decoder(_SnapshotRecord)
_NIL: Final = MP_ENC.encode(None)


# --------------------------------------------------------------------------
# The parts of a running service
# --------------------------------------------------------------------------


class _Replay:
    """What outputs must know while inputs are replayed: whether they are, and
    the input being handled.  While they are not, the outputs' gates are open:
    the writers' calls made in C append straight to the queues."""

    __slots__ = ("_active", "gates", "index", "input", "service")

    def __init__(self, service: str) -> None:
        self.service = service
        self._active = False
        self.gates: list[ReplayGate] = []
        self.input: _Input | None = None
        self.index = -1

    @property
    def active(self) -> bool:
        """Whether an input is being replayed (outputs compared, suppressed)."""
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = value
        for g in self.gates:
            g.open = not value


class _Cursor:
    """The outputs one input's handling recorded on one output queue, read
    forward (those written for other inputs are skipped)."""

    __slots__ = ("_limit", "_peeked", "_tailer", "source_id")

    def __init__(self, tailer: Tailer | None, source_id: int, limit: int) -> None:
        self._tailer = tailer
        self.source_id = source_id
        self._limit = limit  # the last output recorded before the restart
        self._peeked: tuple[int, MessageHistory, bytes] | None = None

    def peek(self) -> tuple[int, MessageHistory, bytes] | None:
        """(input index, history, call bytes) of the next recorded output."""
        if self._peeked is not None:
            return self._peeked
        t = self._tailer
        if t is None:
            return None
        while True:
            ex = t.read_nowait()
            if ex is None or ex.index > self._limit:
                # what the replay writes itself is not compared with
                self.close()
                return None
            try:
                h, body = split_call(ex.payload)
            except WireError:
                continue
            if h is None or not h.sources or h.sources[-1][0] != self.source_id:
                continue
            self._peeked = (h.sources[-1][1], h, body)
            return self._peeked

    def take(self) -> None:
        self._peeked = None

    def close(self) -> None:
        if self._tailer is not None:
            self._tailer.close()
            self._tailer = None


class _Output:
    """The appender a service's method writer appends through: straight to the
    queue when live; while replaying, each call is compared with the one
    recorded for the same input and suppressed (or written, past what a crash
    cut)."""

    __slots__ = ("_append", "_appended", "_appender", "_ctx", "_final", "config", "cursors",
                 "gate", "queue", "recorded", "suppressed")

    def __init__(self, config: ServiceOutput, queue: Queue, ctx: _Replay) -> None:
        self.config = config
        self.queue = queue
        a = self._appender = queue.appender()
        self._append = a.append
        self._appended = a.excerpts_appended  # (what this run appends: written)
        self._ctx = ctx
        # the writers' calls made in C append straight to the queue while live
        self.gate = ReplayGate(a)
        self.gate.open = not ctx.active
        ctx.gates.append(self.gate)
        last = queue.last_index
        self.recorded = -1 if last is None else last  # the last output written before this run
        self.suppressed = 0
        self.cursors: dict[int, _Cursor] = {}
        self._final: tuple[int, int] | None = None  # (written, last), once its queue closed

    @property
    def written(self) -> int:
        """The outputs appended in this run."""
        if self._final is not None:
            return self._final[0]
        return self._appender.excerpts_appended - self._appended

    @property
    def last(self) -> int:
        """The index of the last output on the queue (-1: none)."""
        if self._final is not None:
            return self._final[1]
        return self._appender.last_index_appended if self.written else self.recorded

    def finish(self) -> None:
        """Keep the counts (before the queue closes)."""
        if self._final is None:
            self._final = (self.written, self.last)

    def append(self, data: bytes | bytearray | memoryview | str, /) -> int:
        """Append one output (the method writer calls this where it does not
        append itself)."""
        if self._ctx.active:
            return self._replayed(data)
        i: int = self._append(data)
        return i

    def _replayed(self, data: bytes | bytearray | memoryview | str) -> int:
        ctx = self._ctx
        inp = ctx.input
        assert inp is not None
        j = ctx.index
        name = self.config.name
        cur = self.cursors.get(inp.source_id)
        rec = None if cur is None else cur.peek()
        if rec is not None and rec[0] < j:
            raise NondeterministicHandlerError(
                f"service {ctx.service!r}: input {rec[0]:#x} of source {inp.source_id} wrote "
                f"more outputs to {name!r} before the restart than on replay",
                ctx.service, inp.source_id, rec[0], name)
        if rec is None or rec[0] > j:
            if j < inp.replay_to:
                raise NondeterministicHandlerError(
                    f"service {ctx.service!r}: replaying input {j:#x} of source "
                    f"{inp.source_id} wrote an output to {name!r} that the run before the "
                    "restart did not write", ctx.service, inp.source_id, j, name)
            # the input a crash cut: what it had not written yet is written now
            i: int = self._append(data if not isinstance(data, str) else data.encode())
            return i
        assert cur is not None
        cur.take()
        h, body = split_call(data.encode() if isinstance(data, str) else bytes(data))
        if body != rec[2] or (h is not None and h.sources != rec[1].sources):
            raise NondeterministicHandlerError(
                f"service {ctx.service!r}: replaying input {j:#x} of source {inp.source_id} "
                f"wrote another output to {name!r} than the run before the restart",
                ctx.service, inp.source_id, j, name)
        self.suppressed += 1
        return -1

    def close(self) -> None:
        for c in self.cursors.values():
            c.close()
        self.cursors.clear()


class _Input:
    """One input queue of a running service."""

    __slots__ = ("config", "held", "last", "pending", "process", "queue", "reader",
                 "replay_to", "source_id", "tailer", "task", "waiting")

    def __init__(self, config: ServiceInput, queue: Queue, tailer: Tailer,
                 reader: MethodReader) -> None:
        self.config = config
        self.queue = queue
        self.source_id = queue.source_id
        self.tailer = tailer
        self.reader = reader
        self.last = -1  # the index of the last input handled
        self.replay_to = -1  # the last input handled before the restart
        self.pending: Excerpt | None = None  # read ahead by the replay
        self.waiting = False
        self.task: asyncio.Task[None] | None = None
        self.process = reader.process
        #: what the wake-up callback left the pump: an exception to raise, an
        #: async handler's (awaitable, index), or _PAST_END
        self.held: Any = None


def _raise(exc: Exception, excerpt: Excerpt) -> None:
    raise exc


# --------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------


class Service:
    """A read-process-write service, exactly once by message history.

    ``handler`` is a factory called once per :meth:`run` as
    ``handler(**writers)``, one method writer per :class:`ServiceOutput`, by its
    name; it returns the handler object, whose public methods are called for
    the method calls read from the inputs (as a method reader's handler; they
    may be ``async def``).  It may keep state; to have that state come back
    after a restart without replaying every input, give a ``snapshots`` policy
    and two methods to the handler:

    * ``snapshot(self) -> object``: the state, msgspec-encodable;
    * ``restore(self, state: object) -> None``: take it back (decoded as plain
      msgpack values, or as the type the handler's ``snapshot_type`` attribute
      names).

    Without a snapshot policy, a restart replays every input from the first
    (``stateless=True``: only the input a crash cut midway, for handlers that
    keep no state).

    ``pauser``: how each input's tailer waits (a :class:`Pauser`, with one
    input only, or a factory called once per input; default
    ``Pauser.balanced()``).  ``on_error``: what happens when the handler
    raises (or an input cannot be decoded): ``"stop"`` (default) logs it with
    the input's index and makes :meth:`run` raise :class:`ServiceHandlerError`;
    ``"skip"`` logs it and goes on with the next input (counted in
    ``statistics.errors``).  Never is an input skipped silently.

    Each output queue is written by this service alone; each input and output
    queue has a ``sourceId``.  A service without outputs has no history to
    resume from: it resumes from its last snapshot's positions, else from
    each input's ``start`` (at least once).  With several inputs, each input's excerpts are
    handled once each and in order, and each input's outputs keep their order;
    how the inputs interleave is not recorded (see the docs, "Exactly once").

    Raises:
        ServiceError: the configuration cannot work (checked here where it can
            be without opening a queue, the rest by :meth:`run`).
    """

    def __init__(self, name: str, handler: Callable[..., object],
                 inputs: Sequence[ServiceInput], outputs: Sequence[ServiceOutput] = (), *,
                 snapshots: SnapshotPolicy | None = None,
                 pauser: Pauser | Callable[[], Pauser] | None = None,
                 on_error: Literal["stop", "skip"] = "stop",
                 stateless: bool = False) -> None:
        """See the class docstring."""
        if not name:
            raise ServiceError("a service needs a name")
        if not inputs:
            raise ServiceError(f"service {name!r} has no input")
        if on_error not in ("stop", "skip"):
            raise ServiceError(f"service {name!r}: on_error is 'stop' or 'skip', "
                               f"not {on_error!r}")
        ids = [i.source_id for i in inputs if i.source_id is not None]
        if any(s <= 0 for s in ids):
            raise ServiceError(f"service {name!r}: an input's source_id must be above 0")
        if len(set(ids)) != len(ids):
            raise ServiceError(f"service {name!r}: two inputs share a source_id")
        names = [o.name for o in outputs]
        bad = [n for n in names if not n.isidentifier()]
        if bad:
            raise ServiceError(f"service {name!r}: output name {bad[0]!r} is not an identifier")
        if len(set(names)) != len(names):
            raise ServiceError(f"service {name!r}: two outputs share a name")
        if isinstance(pauser, Pauser) and len(inputs) > 1:
            raise ServiceError(f"service {name!r} has {len(inputs)} inputs: give a pauser "
                               "factory (each input waits with its own pauser)")
        if snapshots is not None and snapshots.every_inputs is not None \
                and snapshots.every_inputs < 1:
            raise ServiceError(f"service {name!r}: every_inputs must be 1 or more")
        self._name = name
        self._factory = handler
        self._inputs_cfg = tuple(inputs)
        self._outputs_cfg = tuple(outputs)
        self._snap = snapshots
        self._pauser = pauser
        self._skip = on_error == "skip"
        self._stateless = stateless
        self._handler: object | None = None
        self._state = "new"
        self._stopping = False
        # the C dispatch's cells (consumed, calls, stop: set by stop())
        self._done = array("q", [0, 0, 0])
        self._until_end = False
        self._live_event: asyncio.Event | None = None
        self._inputs: list[_Input] = []
        self._outputs: list[_Output] = []
        self._handled = self._replayed = self._errors = self._snapshots = 0
        self._snap_at = 0  # _handled at the last snapshot
        self._next_snap = -1  # _handled at which the next snapshot is due (-1: none)
        self._snap_written_ns: int | None = None
        self._started = 0.0
        self._recovery: float | None = None
        self._inside = 0  # inputs being handled (async handlers may interleave)
        self._snap_queue: Queue | None = None
        self._snap_append: Callable[[bytes], int] | None = None
        self._timer: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        """The service's name (in logs, errors and snapshots)."""
        return self._name

    @property
    def handler(self) -> object | None:
        """The handler object of the current or last :meth:`run` (None before)."""
        return self._handler

    @property
    def live(self) -> bool:
        """True once :meth:`run` has recovered and handles live inputs."""
        return self._state == "live"

    async def wait_live(self) -> None:
        """Return once the service is live (recovered), as :attr:`live` says."""
        if self._live_event is None:
            self._live_event = asyncio.Event()
        if self._state == "live":
            return
        await self._live_event.wait()

    @property
    def statistics(self) -> ServiceStatistics:
        """The counters now."""
        age = None
        if self._snap_written_ns is not None:
            age = max(0.0, (time.time_ns() - self._snap_written_ns) / 1e9)
        return ServiceStatistics(
            self._name, self._state, self._handled,
            sum(o.written for o in self._outputs), self._replayed,
            sum(o.suppressed for o in self._outputs), self._errors, self._snapshots, age,
            self._recovery, {i.source_id: i.last for i in self._inputs})

    def stop(self) -> None:
        """Make :meth:`run` finish the current input, snapshot and return (from
        the event loop's thread: a handler, a signal handler, another task)."""
        self._stopping = True
        self._done[2] = 1  # the C dispatch stops after the input being handled
        try:
            me = asyncio.current_task()
        except RuntimeError:  # no loop running in this thread
            me = None
        for inp in self._inputs:
            # a handler the waiter's drain runs in the task itself: its wait
            # ends when the drain sees _stopping, with nothing to cancel
            if inp.waiting and inp.task is not None and inp.task is not me:
                inp.task.cancel()

    def __repr__(self) -> str:
        return f"<Service {self._name!r} {self._state}>"

    # -- run -----------------------------------------------------------------
    async def run(self, *, until_end: bool = False) -> ServiceStatistics:
        """Recover (see the module docs) and handle inputs as they come, until
        :meth:`stop` (or, with ``until_end``, until no input has more to read
        now, or each has reached its ``end``); then write a snapshot (with a
        policy, if inputs were handled since the last) and return the
        statistics.  Cancelling it stops at once, without a snapshot: what was
        written stays exactly-once (a restart recovers from it).

        Raises:
            ServiceError: a queue without a source id, a snapshot of another
                service.
            NondeterministicHandlerError: a replayed input's outputs differ
                from the recorded ones.
            ServiceHandlerError: the handler raised (``on_error="stop"``).
        """
        if self._state in ("recovering", "live"):
            raise ServiceError(f"service {self._name!r} is running already")
        self._stopping = False
        self._done[2] = 0
        self._until_end = until_end
        self._started = time.monotonic()
        self._recovery = None
        self._handled = self._replayed = self._errors = self._snapshots = 0
        self._state = "recovering"
        self._outputs = []
        self._snap_at = 0
        self._next_snap = -1
        if self._live_event is not None:
            self._live_event.clear()
        ctx = _Replay(self._name)
        try:
            self._open(ctx)
            await self._recover(ctx)
            self._recovery = time.monotonic() - self._started
            self._state = "live"
            if self._live_event is not None:
                self._live_event.set()
            if self._stopping:
                # stopped while replaying: no snapshot (one now would claim
                # the outputs recorded for inputs not replayed yet)
                self._state = "stopped"
                return self.statistics
            await self._run_live()
            if self._handled != self._snap_at:
                self._write_snapshot()
            self._state = "stopped"
            return self.statistics
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._state = "stopped"
            self._close()

    # -- opening ------------------------------------------------------------
    def _pauser_for(self) -> Pauser:
        p = self._pauser
        if p is None:
            return Pauser.balanced()
        if isinstance(p, Pauser):
            return p
        return p()

    def _open(self, ctx: _Replay) -> None:
        writers: dict[str, Any] = {}
        for oc in self._outputs_cfg:
            q = open_queue(oc.path, source_id=oc.source_id or 0)
            if not q.source_id:
                q.close()
                raise ServiceError(f"service {self._name!r}: output queue {oc.path} has no "
                                   "sourceId (give ServiceOutput.source_id): message history, "
                                   "which exactly-once resumes from, is written only on "
                                   "queues with one")
            out = _Output(oc, q, ctx)
            self._outputs.append(out)
            writers[oc.name] = make_method_writer(out, oc.interface, cycles_of(q).meta, q.path,
                                                  q.source_id, codec=oc.codec,
                                                  record_history=True, gate=out.gate)
        handler = self._handler = self._factory(**writers)
        seen: set[int] = set()
        for ic in self._inputs_cfg:
            q = open_queue(ic.path, source_id=ic.source_id or 0)
            if not q.source_id:
                q.close()
                raise ServiceError(f"service {self._name!r}: input queue {ic.path} has no "
                                   "sourceId to resume from (give ServiceInput.source_id)")
            if q.source_id in seen:
                q.close()
                raise ServiceError(f"service {self._name!r}: two inputs have sourceId "
                                   f"{q.source_id}")
            seen.add(q.source_id)
            t = q.tailer(pauser=self._pauser_for())
            reader = t.method_reader(handler, on_error=_raise, history=True,
                                     interfaces=ic.interfaces, batch=False)
            self._inputs.append(_Input(ic, q, t, reader))
        if self._snap is not None:
            self._snap_queue = open_queue(self._snap.path)

    def _close(self) -> None:
        for inp in self._inputs:
            inp.queue.close()
        for out in self._outputs:
            out.close()
            out.finish()
            out.queue.close()
        if self._snap_queue is not None:
            self._snap_queue.close()
            self._snap_queue = None
        self._snap_append = None
        self._inputs = []
        # outputs stay for the statistics (their queues are closed)

    # -- recovery -------------------------------------------------------------
    def _load_snapshot(self) -> _SnapshotRecord | None:
        q = self._snap_queue
        if q is None:
            return None
        t = q.tailer(direction=TailerDirection.BACKWARD)
        try:
            t.to_end()
            while True:
                ex = t.read_nowait()
                if ex is None:
                    return None
                try:
                    rec = _SNAP_DEC.decode(ex.payload)
                except msgspec.DecodeError as exc:
                    raise ServiceError(f"service {self._name!r}: excerpt {ex.index:#x} of "
                                       f"snapshot queue {q.path} is not a snapshot: "
                                       f"{exc}") from None
                if rec.service != self._name:
                    raise ServiceError(f"service {self._name!r}: snapshot queue {q.path} "
                                       f"holds snapshots of service {rec.service!r}")
                return rec
        finally:
            t.close()

    def _scan_outputs(self, snap: _SnapshotRecord | None) -> dict[tuple[int, str], tuple[
            int, int]]:
        """Per (input source id, output name): (the last input index its
        outputs there record, the output index of the first of that input's
        outputs), scanning each output queue back from its end (to the
        snapshot's position at most)."""
        ids = {i.source_id for i in self._inputs}
        found: dict[tuple[int, str], tuple[int, int]] = {}
        for out in self._outputs:
            name = out.config.name
            stop_at = -1 if snap is None else snap.outputs.get(name, -1)
            done: set[int] = set()
            t = out.queue.tailer(direction=TailerDirection.BACKWARD)
            try:
                t.to_end()
                while len(done) < len(ids):
                    ex = t.read_nowait()
                    if ex is None or ex.index <= stop_at:
                        break
                    o = _origin(ex.payload)
                    if o is None or o[0] not in ids or o[0] in done:
                        continue
                    sid, idx = o
                    key = (sid, name)
                    got = found.get(key)
                    if got is None or got[0] == idx:
                        found[key] = (idx, ex.index)
                    else:
                        done.add(sid)
            finally:
                t.close()
        return found

    def _position(self, t: Tailer, after: int | None, at: int | None) -> None:
        """Move ``t`` just past index ``after``, or to index ``at``, or to the start."""
        if after is not None and after >= 0 and t.move_to_index(after):
            t.read_nowait()
            return
        if at is not None and at >= 0:
            t.move_to_index(at)
            return
        t.to_start()

    async def _recover(self, ctx: _Replay) -> None:
        snap = self._load_snapshot()
        handler = self._handler
        if snap is not None:
            restore = getattr(handler, "restore", None)
            if bytes(snap.state) != _NIL:  # a handler without snapshot() records nil
                if restore is None:
                    raise ServiceError(f"service {self._name!r}: a snapshot to load, and the "
                                       "handler has no restore(state) method")
                kind = getattr(handler, "snapshot_type", Any)
                restore(msgspec.msgpack.decode(snap.state, type=kind))
            self._snap_written_ns = snap.written_ns
        found = self._scan_outputs(snap)
        for inp in self._inputs:
            sid = inp.source_id
            last = max((v[0] for (s, _), v in found.items() if s == sid), default=-1)
            covered = -1 if snap is None else snap.inputs.get(sid, -1)
            inp.replay_to = last
            # what the handler's state covers (a snapshot taken now would say)
            inp.last = covered
            end = inp.config.end
            if snap is not None or self._stateless:
                # a snapshot covers up to `covered`; stateless: re-handle the last only
                start_after = covered if snap is not None else None
                start_at = last if self._stateless and snap is None else None
                if snap is not None and self._stateless and last > covered:
                    start_after, start_at = None, last
            else:
                start_after, start_at = None, None
            if start_after is None and start_at is None and inp.config.start is not None:
                start_at = inp.config.start
            self._position(inp.tailer, start_after, start_at)
            # the recorded outputs to compare the replay with
            for out in self._outputs:
                ot = out.queue.tailer()
                if snap is not None and not (self._stateless and last > covered):
                    self._position(ot, snap.outputs.get(out.config.name, -1), None)
                elif self._stateless:
                    got = found.get((sid, out.config.name))
                    if got is None or got[0] != last:
                        ot.close()
                        out.cursors[sid] = _Cursor(None, sid, -1)
                        continue
                    ot.move_to_index(got[1])
                else:
                    ot.to_start()
                out.cursors[sid] = _Cursor(ot, sid, out.recorded)
            if end is not None:
                inp.replay_to = min(inp.replay_to, end)
            await self._replay(ctx, inp)
            if self._stopping:
                break
        for out in self._outputs:
            out.close()
        ctx.active = False
        log.info("service %s recovered in %.3f s: replayed %d inputs, suppressed %d outputs",
                 self._name, time.monotonic() - self._started, self._replayed,
                 sum(o.suppressed for o in self._outputs))

    async def _replay(self, ctx: _Replay, inp: _Input) -> None:
        """Handle ``inp``'s inputs up to ``replay_to`` with outputs suppressed."""
        read = inp.tailer.read_nowait
        process = inp.reader.process
        ctx.input = inp
        n = 0
        while not self._stopping:
            ex = read()
            if ex is None:
                break
            j = ex.index
            if j > inp.replay_to:
                inp.pending = ex
                break
            ctx.active = True
            ctx.index = j
            try:
                r = process(ex.payload, j)
                if r is not None:
                    await r
            except (NondeterministicHandlerError, asyncio.CancelledError):
                raise
            except Exception as exc:
                self._failed(inp, j, exc)
            finally:
                ctx.active = False
            inp.last = j
            self._handled += 1
            self._replayed += 1
            n += 1
            if n % _YIELD_EVERY == 0:
                await asyncio.sleep(0)
        if self._stopping:
            return
        inp.last = max(inp.last, inp.replay_to)
        for out in self._outputs:
            cur = out.cursors.get(inp.source_id)
            rec = None if cur is None else cur.peek()
            if rec is not None and rec[0] <= inp.replay_to:
                raise NondeterministicHandlerError(
                    f"service {self._name!r}: input {rec[0]:#x} of source {inp.source_id} "
                    f"wrote more outputs to {out.config.name!r} before the restart than on "
                    "replay", self._name, inp.source_id, rec[0], out.config.name)

    def _failed(self, inp: _Input, index: int, exc: Exception) -> None:
        """A handler raised on input ``index``: log it; raise unless skipping."""
        if self._skip:
            self._errors += 1
            log.error("service %s: the handler raised on input %#x of source %d (skipped): "
                      "%r", self._name, index, inp.source_id, exc)
            return
        log.error("service %s: the handler raised on input %#x of source %d (stopping): %r",
                  self._name, index, inp.source_id, exc)
        raise ServiceHandlerError(f"service {self._name!r}: the handler raised on input "
                                  f"{index:#x} of source {inp.source_id}: {exc!r}", self._name,
                                  inp.source_id, index) from exc

    # -- live -----------------------------------------------------------------
    async def _run_live(self) -> None:
        snap = self._snap
        if snap is not None:
            if snap.every_inputs is not None:
                self._next_snap = self._handled + snap.every_inputs
            if snap.every_seconds is not None:
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(snap.every_seconds, self._tick, loop)
            if self._replayed:
                self._write_snapshot()  # the replay need not be done again
        if len(self._inputs) == 1:
            inp = self._inputs[0]
            inp.task = asyncio.current_task()
            try:
                await self._pump(inp)
            finally:
                inp.task = None
            return
        tasks = []
        for inp in self._inputs:
            inp.task = asyncio.ensure_future(self._pump(inp))
            tasks.append(inp.task)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _step(self, inp: _Input, p: bytes | memoryview, j: int) -> Awaitable[None] | None:
        """Handle input ``j`` (payload ``p``) of ``inp``: call the handler and,
        when it is done, count the input and write a snapshot when one is due.
        Returns an async handler's awaitable (the caller awaits it with
        :meth:`_finish`); raises what :meth:`_failed` raises."""
        try:
            r = inp.process(p, j)
        except Exception as exc:
            self._failed(inp, j, exc)
            r = None
        if r is not None:
            return r
        inp.last = j
        self._handled += 1
        if self._handled == self._next_snap:
            self._write_snapshot()
        return None

    def _handled_run(self, inp: _Input, idx: array[int], k: int, q: int) -> None:
        """Count inputs ``idx[k:q]`` as handled (a snapshot is due at most at
        the last: the C dispatch stops there)."""
        if q > k:
            inp.last = idx[q - 1]
            self._handled += q - k
            if self._handled == self._next_snap:
                self._write_snapshot()

    async def _finish(self, inp: _Input, r: Awaitable[None], j: int) -> None:
        """Await what an async handler returned for input ``j``, then count it."""
        self._inside += 1
        try:
            await r
        except Exception as exc:
            self._failed(inp, j, exc)
        finally:
            self._inside -= 1
        inp.last = j
        self._handled += 1
        if self._handled == self._next_snap:
            self._write_snapshot()

    async def _pump(self, inp: _Input) -> None:
        """Handle ``inp``'s live inputs until the service stops.

        What is there is read in batches (the tailer's position may run ahead
        of the inputs handled: a restart resumes from the outputs' history and
        the snapshot, never from it).  Parked on ``Pauser.notify()`` wake-ups,
        what a wake-up finds goes to the waiter's drain (``handle``), which
        calls sync handlers in this task as a method reader's ``run()`` does,
        with the same bookkeeping."""
        tailer = inp.tailer
        read_many = tailer.read_many
        reader = inp.reader
        done = self._done
        wait = tailer_wait  # the wait a method reader's run() has (its source's)
        loop = asyncio.get_running_loop()
        step = self._step
        process = inp.process
        end = inp.config.end
        until_end = self._until_end

        def until() -> bool:
            return self._stopping or inp.held is not None

        def handle(ex: Excerpt) -> bool:
            # the waiter's drain: called in this task for what a wake-up found
            j = ex.index
            if end is not None and j > end:
                inp.held = _PAST_END
                return False
            try:  # _step, inlined (a call less per input)
                try:
                    r = process(ex.payload, j)
                except Exception as exc:
                    self._failed(inp, j, exc)
                    r = None
                if r is not None:
                    inp.held = (r, j)
                    return False
                inp.last = j
                self._handled += 1
                if self._handled == self._next_snap:
                    self._write_snapshot()
            except Exception as exc:  # the task raises it
                inp.held = exc
                return False
            return not self._stopping

        since = 0
        ex = inp.pending
        inp.pending = None
        if ex is not None:
            if end is not None and ex.index > end:
                return
            r = step(inp, ex.payload, ex.index)
            if r is not None:
                await self._finish(inp, r, ex.index)
        while not self._stopping:
            batch = read_many(_YIELD_EVERY, _BATCH_BYTES)
            n = len(batch)
            if n:
                data = batch.data
                if not data.readonly:  # dict keys are sliced out of it: hashable
                    data = memoryview(bytes(data))
                off, idx = batch.offsets, batch.indices
                k = 0
                while k < n:
                    j = idx[k]
                    if end is not None and j > end:
                        return
                    # a run of the common calls, dispatched in C: up to the next
                    # snapshot (one at a time where the input has an end)
                    lim = k + 1 if end is not None else n
                    if self._next_snap > self._handled:
                        lim = min(lim, k + self._next_snap - self._handled)
                    done[0] = k
                    try:
                        q = dispatch_tracked(reader, data, off, idx, k, lim, done)
                    except Exception as exc:
                        q = done[0]  # just past the input whose handler raised
                        if q <= k:  # (no handler ran: not the handler's)
                            raise
                        self._handled_run(inp, idx, k, q - 1)
                        self._failed(inp, idx[q - 1], exc)
                        self._handled_run(inp, idx, q - 1, q)
                        if self._stopping:
                            return
                        k = q
                        continue
                    if q > k:
                        self._handled_run(inp, idx, k, q)
                        if self._stopping:
                            return
                        k = q
                        continue
                    # any other call: the reader's general path (_step, inlined)
                    k += 1
                    try:
                        r = process(data[off[k - 1]:off[k]], j)
                    except Exception as exc:
                        self._failed(inp, j, exc)
                        r = None
                    if r is not None:
                        await self._finish(inp, r, j)
                    else:
                        inp.last = j
                        self._handled += 1
                        if self._handled == self._next_snap:
                            self._write_snapshot()
                    if self._stopping:
                        return
                since += n
                if since >= _YIELD_EVERY:
                    since = 0
                    await asyncio.sleep(0)
                continue
            if until_end:
                break
            inp.waiting = True
            try:
                got = await wait(tailer, until, loop, handle)
            except asyncio.CancelledError:
                if self._stopping:  # stop() ended the wait
                    task = asyncio.current_task()
                    if task is not None:
                        task.uncancel()
                    got = None
                else:
                    raise
            finally:
                inp.waiting = False
            since = 0
            held = inp.held
            if held is not None:
                inp.held = None
                if held is _PAST_END:
                    return
                if isinstance(held, Exception):
                    raise held
                r, j = held
                await self._finish(inp, r, j)
                continue
            if got is None:
                break
            j = got.index
            if end is not None and j > end:
                return
            r = step(inp, got.payload, j)
            if r is not None:
                await self._finish(inp, r, j)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        snap = self._snap
        assert snap is not None and snap.every_seconds is not None
        if self._handled != self._snap_at:
            if self._inside:
                self._next_snap = self._handled + 1  # after the input being handled
            else:
                self._write_snapshot()
        self._timer = loop.call_later(snap.every_seconds, self._tick, loop)

    def _write_snapshot(self) -> None:
        q = self._snap_queue
        if q is None or self._inside:
            if q is not None:
                self._next_snap = self._handled + 1
            return
        snapshot = getattr(self._handler, "snapshot", None)
        state = MP_ENC.encode(snapshot() if snapshot is not None else None)
        now = time.time_ns()
        rec = _SnapshotRecord(self._name, {i.source_id: i.last for i in self._inputs},
                              {o.config.name: o.last for o in self._outputs}, self._handled,
                              now, msgspec.Raw(state))
        if self._snap_append is None:  # one appender for the run (each is set up anew)
            self._snap_append = q.appender().append
        self._snap_append(MP_ENC.encode(rec))
        self._snapshots += 1
        self._snap_at = self._handled
        self._snap_written_ns = now
        every = self._snap.every_inputs if self._snap is not None else None
        self._next_snap = self._handled + every if every is not None else -1
