"""The ``chronicle`` data source: batch and streaming reads of a queue.

``spark.read.format("chronicle").load(queue_dir)`` plans one partition per
cycle file (split by sequence range when a cycle holds more than
``partitionSize`` excerpts); each partition opens the queue read-only, seeks
to its first index and yields Arrow record batches built from the native
batch reader (:meth:`Tailer.read_many`).

``spark.readStream.format("chronicle").load(queue_dir)`` uses queue indices as
offsets (``{"index": n}``, the index the next micro-batch starts at): excerpts
appended by any process, in any later cycle, are picked up with no gap and no
duplicate; ``maxRecordsPerTrigger`` bounds a micro-batch and
``Trigger.AvailableNow`` reads what was there when the query started.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .._messages._codecs import Codec, Codecs
from .._objects._queue import Queue, open_queue
from .._storage._excerpt import Batch
from ._columns import Layout, norm_options, option_int
from ._jar import not_serving
from ._sink import ChronicleStreamWriter, ChronicleWriter

if TYPE_CHECKING:
    from .._objects._queue import Tailer

__all__ = [
    "ChronicleDataSource",
    "ChronicleReader",
    "ChronicleStreamReader",
    "PythonChronicleDataSource",
    "Span",
    "check_engine",
]

DEFAULT_PARTITION_SIZE = 4_000_000
DEFAULT_BATCH_ROWS = 65_536
DEFAULT_BATCH_BYTES = 16 << 20


# --------------------------------------------------------------------------
# queues opened by a worker, kept open across tasks
# --------------------------------------------------------------------------

_QUEUES: dict[str, Queue] = {}
_QUEUES_LOCK = threading.Lock()


def shared_queue(path: str) -> Queue:
    """``path`` opened read-only, once per process (Spark reuses its Python
    workers, so later tasks and micro-batches find the files mapped)."""
    key = os.path.abspath(path)
    with _QUEUES_LOCK:
        q = _QUEUES.get(key)
        if q is None or q.closed:
            q = open_queue(key, read_only=True)
            if len(_QUEUES) >= 16:
                _QUEUES.pop(next(iter(_QUEUES))).close()
            _QUEUES[key] = q
        return q


def check_engine(options: Mapping[str, str], *, reading: bool) -> None:
    """The ``engine`` option as the Python data source sees it: ``auto`` and ``python``
    are read here; a read with ``jvm`` reaches it only when the JVM reader is not
    serving ``format("chronicle")``, and fails saying why.  (The JVM reader asks this
    source for the schema of decoded columns whatever the engine: ``reading`` False.)"""
    engine = norm_options(options).get("engine", "auto").strip().lower()
    if engine not in ("auto", "jvm", "python"):
        raise ValueError(f"option engine must be auto, jvm or python, not {engine!r}")
    if engine == "jvm" and reading:
        raise ValueError(f"option engine=jvm: the JVM reader is not serving this read: "
                         f"{not_serving()}")


def _queue_path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("give the queue directory: load(path) or option('path', ...)")
    return path


@dataclass(frozen=True)
class Span(InputPartition):
    """Excerpts ``lo`` (inclusive) to ``hi`` (exclusive) of one cycle, by sequence."""

    cycle: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", (self.cycle, self.lo, self.hi))


# --------------------------------------------------------------------------
# the reader both kinds share
# --------------------------------------------------------------------------


class _Reading:
    """Options and the per-partition read, common to batch and streaming."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None,
                 user_schema: bool) -> None:
        self.options = norm_options(options)
        self.path = _queue_path(self.options)
        self.layout = Layout(self.options, schema if user_schema else None)
        self.partition_size = option_int(self.options, "partitionSize",
                                         DEFAULT_PARTITION_SIZE) or DEFAULT_PARTITION_SIZE
        self.batch_rows = option_int(self.options, "batchSize",
                                     DEFAULT_BATCH_ROWS) or DEFAULT_BATCH_ROWS
        self.batch_bytes = option_int(self.options, "batchBytes",
                                      DEFAULT_BATCH_BYTES) or DEFAULT_BATCH_BYTES

    def codec(self, q: Queue) -> Codec:
        """The codec payloads are decoded with: the ``codec`` option, else the one the queue
        records, else BinaryWire."""
        if self.layout.codec_name:
            return Codecs.get(self.layout.codec_name)
        return q.codec

    def spans(self, q: Queue, lo_index: int | None, hi_index: int | None,
              first_cycle: int | None = None, last_cycle: int | None = None) -> list[Span]:
        """Partitions covering indices ``[lo_index, hi_index)`` (None: open)."""
        rc = q.roll_cycle
        lc = rc.to_cycle(lo_index) if lo_index is not None else None
        hc = rc.to_cycle(hi_index) if hi_index is not None else None
        out: list[Span] = []
        step = self.partition_size
        for c in q.cycles():
            if (lc is not None and c < lc) or (hc is not None and c > hc):
                continue
            if (first_cycle is not None and c < first_cycle) or (
                    last_cycle is not None and c > last_cycle):
                continue
            n = q.excerpts_in_cycle(c)
            lo = rc.to_sequence(lo_index) if lo_index is not None and c == lc else 0
            hi = min(n, rc.to_sequence(hi_index)) if hi_index is not None and c == hc else n
            s = lo
            while s < hi:
                e = min(hi, s + step)
                out.append(Span(c, s, e))
                s = e
        return out

    def read_span(self, span: Span) -> Iterator[pa.RecordBatch]:
        """Arrow record batches of the excerpts of one partition (a cycle's sequence range)."""
        q = shared_queue(self.path)
        rc = q.roll_cycle
        shift = rc.cycle_shift
        codec = self.codec(q)
        layout = self.layout
        t = q.tailer(include_metadata=layout.include_metadata)
        try:
            if layout.include_metadata and span.lo > 0:
                # from the excerpt before: the metadata between it and the first
                # excerpt belongs to this partition (whatever the partitioning)
                if not t.move_to_index(rc.to_index(span.cycle, span.lo - 1)):
                    return
                skipped = t.read_nowait()
                if skipped is None or skipped.index != rc.to_index(span.cycle, span.lo - 1):
                    return
            elif not t.move_to_index(rc.to_index(span.cycle, span.lo)):
                return
            remaining = span.hi - span.lo
            while remaining > 0:
                if layout.include_metadata:
                    batch, meta = _read_with_metadata(t, min(remaining, self.batch_rows),
                                                      rc.to_index(span.cycle, span.hi))
                    got = sum(1 for m in meta if not m)
                else:
                    batch, meta = t.read_many(min(remaining, self.batch_rows),
                                              self.batch_bytes), None
                    got = len(batch)
                if not len(batch):
                    break
                remaining -= got
                yield layout.record_batch(batch, shift, codec, t, meta)
        finally:
            t.close()


def _read_with_metadata(t: Tailer, max_count: int, stop: int) -> tuple[Batch, list[bool]]:
    """Up to ``max_count`` data excerpts and the metadata between them (one at
    a time: metadata is a slow, diagnostic path)."""
    data = bytearray()
    offsets = array("q", [0])
    indices = array("q")
    meta: list[bool] = []
    data_count = 0
    while data_count < max_count:
        if t.index >= stop:
            break
        ex = t.read_nowait()
        if ex is None:
            break
        is_meta = ex.metadata
        if not is_meta:
            if ex.index >= stop:
                break
            data_count += 1
        data += ex.payload
        offsets.append(len(data))
        indices.append(ex.index)
        meta.append(is_meta)
    return Batch(memoryview(bytes(data)), offsets, indices), meta


# --------------------------------------------------------------------------
# batch reads
# --------------------------------------------------------------------------


class ChronicleReader(_Reading, DataSourceReader):
    """Batch reader: one partition per cycle (or per ``partitionSize`` excerpts).

    Options: ``startIndex`` (inclusive) and ``endIndex`` (exclusive) bound the
    indices; ``startCycle`` and ``endCycle`` (both inclusive) the cycles.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType,
                 user_schema: bool) -> None:
        super().__init__(options, schema, user_schema)
        o = self.options
        self.start_index = option_int(o, "startIndex", None)
        self.end_index = option_int(o, "endIndex", None)
        self.start_cycle = option_int(o, "startCycle", None)
        self.end_cycle = option_int(o, "endCycle", None)

    def partitions(self) -> list[InputPartition]:
        """Spark callback: the batch read's partitions, at most ``partitionSize`` excerpts of one
        cycle each."""
        q = shared_queue(self.path)
        spans: list[InputPartition] = list(self.spans(
            q, self.start_index, self.end_index, self.start_cycle, self.end_cycle))
        return spans

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Spark callback, on an executor: the rows of one partition as Arrow record batches."""
        if not isinstance(partition, Span):
            return iter(())  # an empty queue plans one empty partition
        return self.read_span(partition)


# --------------------------------------------------------------------------
# streaming reads
# --------------------------------------------------------------------------


class ChronicleStreamReader(_Reading, DataSourceStreamReader,
                            SupportsTriggerAvailableNow):
    """Streaming reader; offsets are ``{"index": n}``, the next index to read.

    Options: ``startingIndex`` = ``earliest`` (default), ``latest`` or an
    index; ``maxRecordsPerTrigger`` bounds each micro-batch.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType,
                 user_schema: bool) -> None:
        super().__init__(options, schema, user_schema)
        o = self.options
        self.starting = (o.get("startingindex") or "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            option_int(o, "startingIndex", None)  # validate
        self.max_rows = option_int(o, "maxRecordsPerTrigger", None)
        if self.max_rows is not None and self.max_rows <= 0:
            raise ValueError("maxRecordsPerTrigger must be positive")
        self._target: int | None = None  # Trigger.AvailableNow: the end when it started

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def _queue(self) -> Queue | None:
        try:
            return shared_queue(self.path)
        except FileNotFoundError:
            return None  # not created yet: nothing to read

    def _end(self, q: Queue | None) -> int:
        """The index after the last excerpt written (0 for an empty queue)."""
        if q is None:
            return 0
        last = q.last_index
        if last is None:
            return 0
        return last + 1

    def initialOffset(self) -> dict[str, int]:
        """Spark callback: where a new query starts (``startingIndex``)."""
        if self.starting == "earliest":
            q = self._queue()
            first = q.first_index if q is not None else None
            return {"index": first if first is not None else 0}
        if self.starting == "latest":
            return {"index": self._end(self._queue())}
        start = option_int(self.options, "startingIndex", 0)
        return {"index": start or 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        """Spark callback: ``maxRecordsPerTrigger`` rows per micro-batch, else all available."""
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Spark callback for ``Trigger.AvailableNow``: fix the end at what is in the queue now."""
        self._target = self._end(self._queue())

    def reportLatestOffset(self) -> dict[str, int] | None:
        """Spark callback: the index after the last excerpt, for progress reports."""
        q = self._queue()
        return None if q is None else {"index": self._end(q)}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: ReadLimit | None = None) -> dict[str, int]:
        """Spark callback: the end of the next micro-batch, within the read limit."""
        if start is None:
            start = self.initialOffset()
        begin = int(start["index"])
        q = self._queue()
        if q is None:
            return {"index": begin}
        budget: int | None = None
        if isinstance(limit, ReadMaxRows):
            budget = limit.max_rows
        elif limit is None and self.max_rows is not None:
            budget = self.max_rows
        rc = q.roll_cycle
        bc, bs = rc.to_cycle(begin), rc.to_sequence(begin)
        end = begin
        for c in q.cycles():
            if c < bc:
                continue
            lo = bs if c == bc else 0
            avail = q.excerpts_in_cycle(c) - lo
            if avail <= 0:
                continue
            take = avail if budget is None else min(avail, budget)
            end = rc.to_index(c, lo + take)
            if budget is not None:
                budget -= take
                if budget <= 0:
                    break
        if self._target is not None and end > self._target:
            end = max(begin, self._target)
        return {"index": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """Spark callback: the micro-batch ``[start, end)`` split into partitions."""
        lo, hi = int(start["index"]), int(end["index"])
        if hi <= lo:
            return []
        q = self._queue()
        if q is None:
            return []
        return self.spans(q, lo, hi)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Spark callback, on an executor: the rows of one partition as Arrow record batches."""
        assert isinstance(partition, Span)
        return self.read_span(partition)

    def commit(self, end: dict[str, int]) -> None:
        """Spark callback: nothing to do, reading
        consumes nothing (use the checkpoint to resume)."""
        pass

    def stop(self) -> None:
        """Spark callback: nothing to release (read-only queues stay open per worker for reuse)."""
        pass


# --------------------------------------------------------------------------
# the data source
# --------------------------------------------------------------------------


class ChronicleDataSource(DataSource):
    """``format("chronicle")``: read, stream and write Chronicle queues.

    See :class:`~aiochronicle.spark._columns.Layout` for the columns,
    :class:`ChronicleReader` / :class:`ChronicleStreamReader` for the read
    options and :mod:`aiochronicle.spark._sink` for writing.
    """

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("chronicle")``."""
        return "chronicle"

    def schema(self) -> StructType:
        """The default columns for the options given (see ``docs/spark.md``)."""
        check_engine(self.options, reading=False)
        return Layout(self.options).schema

    def _user_schema(self, schema: StructType) -> bool:
        return bool(schema != Layout(self.options).schema)

    def reader(self, schema: StructType) -> ChronicleReader:
        """Spark callback: a batch reader for ``spark.read``."""
        check_engine(self.options, reading=True)
        return ChronicleReader(self.options, schema, self._user_schema(schema))

    def streamReader(self, schema: StructType) -> ChronicleStreamReader:
        """Spark callback: a streaming reader for ``spark.readStream``."""
        check_engine(self.options, reading=True)
        return ChronicleStreamReader(self.options, schema, self._user_schema(schema))

    def writer(self, schema: StructType, overwrite: bool) -> ChronicleWriter:
        """Spark callback: a batch writer for ``df.write`` (append only)."""
        return ChronicleWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> ChronicleStreamWriter:
        """Spark callback: a streaming writer for ``df.writeStream``."""
        return ChronicleStreamWriter(self.options, schema, overwrite)


class PythonChronicleDataSource(ChronicleDataSource):
    """The Python data source under the name ``chronicle_python``: how
    :func:`~aiochronicle.spark.register` registers it when the JVM reader is
    ``chronicle`` (the JVM hands it the decoded columns it does not decode itself,
    other schemas and writing)."""

    @classmethod
    def name(cls) -> str:
        """The format name the JVM reader delegates to."""
        return "chronicle_python"
