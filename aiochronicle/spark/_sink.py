"""The ``chronicle`` sink: ``df.write`` and ``df.writeStream`` append rows as excerpts.

Rows become payloads in one of two ways:

* a ``payload`` column (binary, or string as UTF-8): its bytes are the
  excerpt, appended in bulk from the Arrow buffers (``Appender.append_packed``);
  any other column is ignored, so a DataFrame read from one queue copies into
  another;
* otherwise every column but ``index``, ``cycle``, ``sequence`` and
  ``metadata`` is encoded with the queue's codec: a row as a map of its
  columns, or, with a ``method`` column, as a method call whose argument is the
  struct column named by the method (the layout the ``interface`` read option
  gives), else the other columns as a map.  With the ``interface`` option
  (``module:Class``) a method of several parameters takes them from its struct
  column by name, as that read option lays them out.

Where rows are appended (``writeOn``): ``executors`` (the default) appends
from each task, which needs the queue directory on the executors' host;
``driver`` ships the encoded payloads to the driver in the commit messages and
appends them there in partition order, so only the driver needs the queue.

Exactly-once streaming (``exactlyOnce=true``, implies ``writeOn=driver``):
the driver appends a micro-batch and then records its batch id in
``metadata.cq4t`` under ``aiochronicle.spark.<sinkId>.batch`` (``sinkId``
defaults to the streaming query's id, which a checkpoint keeps across
restarts).  A micro-batch Spark replays after a restart whose id is not above
the recorded one is skipped, so it is not appended twice.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .._messages._codecs import CODEC_KEY, Codec, Codecs, codec_of
from .._objects._queue import Appender, Queue, open_queue, set_queue_codec
from ._columns import call_params, encode_rows, load_object, norm_options, option_bool

__all__ = [
    "BATCH_KEY",
    "ChronicleStreamWriter",
    "ChronicleWriter",
    "CommitMessage",
    "committed_batch",
]

BATCH_KEY = "aiochronicle.spark.{}.batch"
"""The ``metadata.cq4t`` key holding a sink's last committed micro-batch id."""

_SKIP = ("index", "cycle", "sequence", "metadata")


def committed_batch(queue: Queue, sink_id: str) -> int | None:
    """The last micro-batch id the exactly-once sink ``sink_id`` committed to
    ``queue`` (None before its first)."""
    return queue.table_store_get(BATCH_KEY.format(sink_id))


@dataclass
class CommitMessage(WriterCommitMessage):
    """What a write task reports: how many rows and the last index they got
    (when the task appended them), or the packed payloads, ``(data,
    offsets)`` pairs in Arrow's layout, for the driver to append."""

    rows: int = 0
    last: int | None = None
    parts: list[tuple[bytes, bytes]] | None = None
    query_id: str | None = None
    batch_id: int | None = None
    skipped: bool = False


# --------------------------------------------------------------------------
# appenders kept open per worker process and thread
# --------------------------------------------------------------------------

_APPENDERS: dict[tuple[str, int], tuple[Queue, Appender]] = {}
_LOCK = threading.Lock()


def _appender(path: str) -> tuple[Queue, Appender]:
    key = (os.path.abspath(path), threading.get_ident())
    with _LOCK:
        got = _APPENDERS.get(key)
        if got is not None and not got[0].closed:
            return got
        q = open_queue(key[0])
        got = (q, q.appender())
        _APPENDERS[key] = got
        return got


def _packed(rb: pa.RecordBatch, codec: Codec,
            params: Mapping[str, list[str] | None] | None = None) -> tuple[Any, array[int]]:
    """The payloads of ``rb``'s rows, packed: (data, offsets) in Arrow's layout."""
    n = rb.num_rows
    names = rb.schema.names
    if "payload" in names:
        col = rb.column(names.index("payload"))
        if col.null_count:
            raise ValueError("the payload column holds nulls")
        if not pa.types.is_large_binary(col.type):
            if not (pa.types.is_binary(col.type) or pa.types.is_string(col.type)
                    or pa.types.is_large_string(col.type)):
                raise TypeError(f"the payload column must be binary or string, not {col.type}")
            col = col.cast(pa.large_binary())
        _, obuf, dbuf = col.buffers()
        offsets = array("q")
        start = col.offset * 8
        offsets.frombytes(memoryview(obuf)[start:start + (n + 1) * 8])
        return (dbuf if dbuf is not None else b""), offsets
    payloads = encode_rows(rb, codec, _SKIP, params)
    offsets = array("q", [0])
    total = 0
    for p in payloads:
        total += len(p)
        offsets.append(total)
    return b"".join(payloads), offsets


class _Writing:
    """Options, codec and the appending shared by the batch and stream writers."""

    def __init__(self, options: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("a Chronicle queue is append-only: write with mode('append')")
        self.options = o = norm_options(options)
        self.path = o.get("path") or ""
        if not self.path:
            raise ValueError("give the queue directory: save(path) or option('path', ...)")
        where = (o.get("writeon") or "executors").lower()
        if where not in ("executors", "driver"):
            raise ValueError(f"option writeOn must be executors or driver, not {where!r}")
        self.exactly_once = option_bool(o, "exactlyOnce", False)
        self.on_driver = where == "driver" or self.exactly_once
        self.sink_id = o.get("sinkid") or None
        iface = o.get("interface")
        self.params = call_params(load_object(iface)) if iface else None
        raw = "payload" in schema.names
        # runs on the driver: create the queue and record its codec once here
        q = open_queue(self.path)
        try:
            asked = o.get("codec")
            rec = codec_of(q.table_store_get(CODEC_KEY))
            if asked:
                c = Codecs.get(asked)
                if rec is not c and not raw:
                    set_queue_codec(q, c)
            elif rec is None and not raw:
                set_queue_codec(q, Codecs.MSGPACK)
                c = Codecs.MSGPACK
            else:
                c = rec or Codecs.BINARY_WIRE
            self.codec_name = c.name
        finally:
            q.close()

    @property
    def codec(self) -> Codec:
        """The codec rows are encoded with (the ``codec`` option, else the queue's, else
        BinaryWire)."""
        return Codecs.get(self.codec_name)

    def _write(self, iterator: Iterator[pa.RecordBatch], skip: bool = False,
               **extra: Any) -> CommitMessage:
        codec = self.codec
        rows = 0
        if self.on_driver:
            parts: list[tuple[bytes, bytes]] = []
            for rb in iterator:
                if skip or not rb.num_rows:
                    continue
                data, o = _packed(rb, codec, self.params)
                parts.append(_rebased(data, o))
                rows += rb.num_rows
            return CommitMessage(rows=rows, parts=parts, skipped=skip, **extra)
        last = None
        _, app = _appender(self.path)
        for rb in iterator:
            if not rb.num_rows:
                continue
            data, o = _packed(rb, codec, self.params)
            last = app.append_packed(data, o)
            rows += rb.num_rows
        return CommitMessage(rows=rows, last=last, **extra)

    def _append_messages(self, messages: list[CommitMessage | None]) -> int | None:
        """On the driver: append what the tasks shipped, in partition order;
        returns the last index appended."""
        q = open_queue(self.path)
        try:
            return _append_parts(q.appender(), messages)
        finally:
            q.close()


def _rebased(data: Any, offsets: array[int]) -> tuple[bytes, bytes]:
    """``(data, offsets)`` as bytes, the offsets starting at 0."""
    base, end = offsets[0], offsets[-1]
    if base:
        arr = pa.Array.from_buffers(pa.int64(), len(offsets), [None, pa.py_buffer(offsets)])
        return (bytes(memoryview(data)[base:end]),
                pc.subtract(arr, base).buffers()[1].to_pybytes())
    return bytes(memoryview(data)[:end]), offsets.tobytes()


def _append_parts(app: Appender, messages: list[CommitMessage | None]) -> int | None:
    last = None
    for m in messages:
        if m is None or m.skipped or not m.parts:
            continue
        for data, ob in m.parts:
            offs = array("q")
            offs.frombytes(ob)
            if len(offs) > 1:
                last = app.append_packed(data, offs)
    return last


class ChronicleWriter(_Writing, DataSourceArrowWriter):
    """``df.write.format("chronicle").mode("append").save(queue_dir)``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CommitMessage:
        """Spark callback, on an executor: encode the rows (appended here, or shipped to the
        driver)."""
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Spark callback, on the driver: append the rows the tasks shipped, in partition order."""
        if self.on_driver:
            self._append_messages([m if isinstance(m, CommitMessage) else None
                                   for m in messages])

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Spark callback: nothing is undone, rows
        already appended stay (a queue is append-only)."""
        pass  # rows appended by finished tasks stay: a queue is append-only


class ChronicleStreamWriter(_Writing, DataSourceStreamArrowWriter):
    """``df.writeStream.format("chronicle").option("checkpointLocation", ...)
    .start(queue_dir)``, exactly once with ``option("exactlyOnce", "true")``."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CommitMessage:
        """Spark callback, on an executor: encode a micro-batch; with exactly-once, a replayed one
        is skipped."""
        if not self.exactly_once:
            return self._write(iterator)
        from pyspark import TaskContext

        ctx = TaskContext.get()
        qid = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        bid_s = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        bid = int(bid_s) if bid_s else None
        sink = self.sink_id or qid
        skip = False
        if sink is not None and bid is not None:
            # a replayed micro-batch already committed: ship nothing
            done = _committed(self.path, sink)
            skip = done is not None and bid <= done
        return self._write(iterator, skip=skip, query_id=qid, batch_id=bid)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Spark callback, on the driver: append the micro-batch, and record its id when
        exactly-once."""
        if not self.on_driver:
            return
        msgs = [m if isinstance(m, CommitMessage) else None for m in messages]
        if not self.exactly_once:
            self._append_messages(msgs)
            return
        sink = self.sink_id or next((m.query_id for m in msgs if m and m.query_id), None)
        if sink is None:
            raise ValueError("exactlyOnce needs a sinkId option (no streaming query id found)")
        key = BATCH_KEY.format(sink)
        q = open_queue(self.path)
        try:
            done = q.table_store_get(key)
            if done is not None and batchId <= done:
                return  # replayed after a restart: already appended
            _append_parts(q.appender(), msgs)
            q.table_store_put(key, batchId)
        finally:
            q.close()

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Spark callback: nothing is undone (see ``commit``)."""
        pass


def _committed(path: str, sink: str) -> int | None:
    try:
        q = open_queue(path, read_only=True)
    except FileNotFoundError:
        return None
    try:
        return committed_batch(q, sink)
    finally:
        q.close()
