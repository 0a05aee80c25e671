"""Prometheus metrics of queues and of the services that use them.

Needs ``prometheus-client`` (``pip install 'aiochronicle[metrics]'``).

Two parts:

* :class:`QueueCollector`: the figures of whole queues (excerpts, last
  index, named tailers' lag, cycle files, disk, the write lock), read again
  at each scrape; what ``aiochronicle metrics`` serves.
* :class:`ServiceMetrics`: a service's own figures (its appenders' and
  tailers' counts, its method readers' counters, its pausers' statistics,
  and per-hop latency histograms from the message histories it handles),
  registered on a registry the service passes in::

      from prometheus_client import CollectorRegistry, start_http_server
      from aiochronicle.metrics import ServiceMetrics

      registry = CollectorRegistry()
      metrics = ServiceMetrics(registry)
      metrics.add_appender("orders", appender)
      metrics.add_tailer("prices", tailer)
      start_http_server(9464, "127.0.0.1", registry)

Reading a figure never takes a lock, never writes to a queue and costs
O(cycles), not O(excerpts).
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

try:
    from prometheus_client import CollectorRegistry, Histogram
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError as exc:  # the optional "metrics" extra
    raise ImportError("aiochronicle.metrics needs prometheus-client: "
                      "pip install 'aiochronicle[metrics]'") from exc

from ._core._errors import QueueClosedError
from ._format._history import MessageHistory
from ._monitoring._monitor import QueueFigures, QueueWatch, hop_names
from ._objects._queue import Appender, MethodReader, Queue, Tailer
from ._services._runner import ServiceFigures
from ._waiting._pauser import Pauser

__all__ = ["DEFAULT_LATENCY_BUCKETS", "PipelineCollector", "QueueCollector", "ServiceMetrics"]

_log = logging.getLogger("aiochronicle.metrics")

#: histogram buckets (seconds) for per-hop latency: 1 us to 10 minutes
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3,
    1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0)


class _Family(NamedTuple):
    """One metric family a collector reports: its name (after ``aiochronicle_``),
    its type, its help text and its labels."""

    name: str
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily]
    help: str
    labels: tuple[str, ...]


def _families(table: Sequence[_Family]) -> dict[str, Any]:
    """Empty metric families of ``table``, by short name, in its order (the
    order they are scraped in)."""
    return {f.name: f.kind(f"aiochronicle_{f.name}", f.help, labels=list(f.labels))
            for f in table}


_C, _G = CounterMetricFamily, GaugeMetricFamily
_Q, _QT = ("queue",), ("queue", "tailer")

#: QueueCollector's figures of each queue
_QUEUE_FAMILIES: tuple[_Family, ...] = (
    _Family("queue_up", _G, "1 if the queue could be read", _Q),
    _Family("excerpts", _C, "excerpts in the queue's cycle files", _Q),
    _Family("last_index", _G, "index of the last excerpt (-1: none)", _Q),
    _Family("first_index", _G, "index of the first excerpt (-1: none)", _Q),
    _Family("bytes_written", _G, "bytes written in the cycle files", _Q),
    _Family("cycle_files", _G, "cycle files", _Q),
    _Family("disk_bytes", _G, "disk blocks allocated to the cycle files, in bytes "
            "(st_blocks * 512: holes of sparse files take none)", _Q),
    _Family("file_size_bytes", _G, "apparent size of the cycle files, in bytes (holes "
            "counted)", _Q),
    _Family("write_lock_held_seconds", _G, "seconds the write lock has been seen held with no "
            "excerpt written (0: free)", _Q),
    _Family("write_lock_holder", _G, "PID holding the write lock (0: free)", _Q),
    _Family("write_lock_holder_alive", _G, "1 if the write lock's holder is a live process "
            "(0: dead or free)", _Q),
    _Family("write_lock_dead_seconds", _G, "seconds the write lock has been seen held by a dead "
            "process (0: free or alive)", _Q),
    *(_Family(f"{k}_index_{part}", _G, f"{part} of the {k} excerpt's index", _Q)
      for part in ("cycle", "sequence") for k in ("last", "first")),
    _Family("last_excerpt_age_seconds", _G, "seconds since the last excerpt was written",
            ("queue", "source")),
    _Family("named_tailer_lag_excerpts", _G, "excerpts a named tailer has still to read", _QT),
    _Family("named_tailer_lag_bytes", _G, "bytes a named tailer has still to read", _QT),
    _Family("named_tailer_index", _G, "the next index a named tailer reads (0: not started)",
            _QT),
    _Family("named_tailer_index_cycle", _G, "cycle of the next index a named tailer reads", _QT),
    _Family("named_tailer_index_sequence", _G, "sequence of the next index a named tailer reads",
            _QT),
    _Family("named_tailer_lag_seconds", _G, "seconds since the oldest excerpt a named tailer "
            "has still to read was written (0: none)", ("queue", "tailer", "source")),
    _Family("named_tailer_reads", _C, "excerpts a named tailer was seen to read", _QT),
)

#: QueueCollector's own figures (no labels)
_EXPORTER_FAMILIES: tuple[_Family, ...] = (
    _Family("exporter_scrape_errors", _C, "looks at a queue that failed", ()),
    _Family("exporter_scrapes", _C, "collections made", ()),
    _Family("exporter_scrape_duration_seconds", _G, "seconds the last collection took", ()),
)

_READER_FIELDS = ("read", "dispatched", "unknown", "ignored", "errors")

#: ServiceMetrics' figures
_SERVICE_FAMILIES: tuple[_Family, ...] = (
    _Family("appender_excerpts", _C, "excerpts an appender wrote", ("appender",)),
    _Family("appender_last_index", _G, "index of an appender's last excerpt (-1: none)",
            ("appender",)),
    _Family("tailer_excerpts", _C, "excerpts a tailer moved past since it was added",
            ("tailer",)),
    _Family("tailer_index", _G, "a tailer's next index", ("tailer",)),
    _Family("tailer_lag_excerpts", _G, "excerpts from a tailer's position to the end of its "
            "queue", ("tailer",)),
    *(_Family(f"reader_{f}", _C, f"a method reader's {f} counter", ("reader",))
      for f in _READER_FIELDS),
    _Family("pauser_pauses", _C, "times a pauser paused", ("pauser",)),
    _Family("pauser_paused_seconds", _C, "seconds a pauser spent pausing", ("pauser",)),
    _Family("disk_free_bytes", _G, "free bytes of a queue's file system (last look)",
            ("queue",)),
    _Family("disk_space_low", _G, "1 when a queue's free disk space is under its threshold",
            ("queue",)),
)

#: PipelineCollector's figures of each service
_PIPELINE_FAMILIES: tuple[_Family, ...] = (
    _Family("service_up", _G, "1 while the service runs", ("service",)),
    _Family("service_restarts", _C, "restarts by the runner", ("service",)),
    _Family("service_inputs_handled", _C, "inputs handled live", ("service",)),
    _Family("service_replayed_inputs", _G, "inputs replayed with outputs suppressed on the "
            "last start", ("service",)),
    _Family("service_lag_excerpts", _G, "input excerpts not yet handled", ("service", "input")),
    _Family("service_lag_seconds", _G, "seconds the oldest input not yet handled has waited",
            ("service", "input")),
    _Family("service_snapshot_age_seconds", _G, "seconds since the service's last snapshot",
            ("service",)),
    _Family("service_restart_seconds", _G, "the last restart's latency", ("service",)),
)


class QueueCollector(Collector):
    """The figures of queues, read again at each scrape (a custom collector).

    Metrics (label ``queue`` is the path as given):

    ``aiochronicle_queue_up``
        1 when the last look at the queue succeeded, else 0 (the other
        figures of the queue are then left out).
    ``aiochronicle_excerpts_total``, ``aiochronicle_bytes_written``
        excerpts in the cycle files (retention lowers it), bytes written.
    ``aiochronicle_last_index_cycle``, ``..._sequence``,
    ``aiochronicle_first_index_cycle``, ``..._sequence``
        the last and first excerpt's index as its cycle and sequence (exact
        integers; absent when empty).
    ``aiochronicle_last_index``, ``aiochronicle_first_index``
        deprecated: the same indices as one float64 (-1 when empty), exact
        only below 2**53 (not so for MINUTELY, TEST_SECONDLY and other short
        cycles); use the cycle and sequence gauges.
    ``aiochronicle_last_excerpt_age_seconds``
        how long ago the last excerpt was written (see the lag in seconds).
    ``aiochronicle_cycle_files``, ``aiochronicle_disk_bytes``, ``aiochronicle_file_size_bytes``
        cycle files, the disk blocks allocated to them (``st_blocks * 512``)
        and their apparent size (sparse files' holes counted).
    ``aiochronicle_named_tailer_lag_excerpts``, ``..._lag_bytes``,
    ``aiochronicle_named_tailer_index`` (labels ``queue``, ``tailer``)
        how far each named tailer is behind the end, and its next index
        (deprecated float64, as ``last_index``; ``..._index_cycle`` and
        ``..._index_sequence`` are exact).
    ``aiochronicle_named_tailer_lag_seconds{queue, tailer, source}``
        how long ago the oldest excerpt the tailer has still to read was
        written (0 when it has read everything): ``source="history"`` from
        the excerpt's message history (exact, same host), ``"cycle"`` from
        the start of its cycle when it carries none (an upper bound).
    ``aiochronicle_named_tailer_reads_total``
        excerpts the named tailer was seen to read (a counter for ``rate()``).
    ``aiochronicle_write_lock_held_seconds``, ``aiochronicle_write_lock_holder``,
    ``aiochronicle_write_lock_holder_alive``, ``aiochronicle_write_lock_dead_seconds``
        how long the write lock has been seen held by a live process with
        no excerpt written (0 when free or dead), the PID holding it (0 when
        free), 1 when that process is alive (0 when it is dead or the lock is
        free), and how long a dead process has been seen holding it.
    ``aiochronicle_exporter_scrape_duration_seconds``,
    ``aiochronicle_exporter_scrape_errors_total``, ``aiochronicle_exporter_scrapes_total``
        the collector's own figures: the last collection's time, the looks
        at a queue that failed, the collections made.
    """

    def __init__(self, paths: Iterable[str], *, wait: bool = False) -> None:
        """Collect the queues at ``paths`` (each must exist now, unless
        ``wait``: a missing queue is reported down until it appears).

        Raises:
            NoSuchQueueError, NotAQueueError, QueueAccessError: a path is not
                a readable queue.
        """
        self._watches = [QueueWatch(p, wait=wait) for p in paths]
        self._lock = threading.Lock()
        self._errors = 0
        self._scrapes = 0
        self._last_duration = 0.0

    def describe(self) -> Iterable[Any]:
        """Nothing up front: the figures are read only when scraped."""
        return []

    def close(self) -> None:
        """Let go of the queues (a later scrape opens them again)."""
        with self._lock:
            for w in self._watches:
                w.close()

    def looks(self) -> list[tuple[str, QueueFigures | None]]:
        """(path, figures) for every queue now; None where a look failed."""
        out: list[tuple[str, QueueFigures | None]] = []
        with self._lock:
            for w in self._watches:
                try:
                    out.append((w.path, w.figures()))
                except Exception as exc:  # a queue gone or damaged: report it down
                    _log.warning("cannot read queue %s: %s", w.path, exc)
                    self._errors += 1
                    out.append((w.path, None))
        return out

    def collect(self) -> Iterator[Any]:
        """The metrics, from a fresh look at every queue."""
        started = time.perf_counter()
        yield from self._queue_metrics()
        with self._lock:
            self._scrapes += 1
            self._last_duration = time.perf_counter() - started
            errors, scrapes, took = self._errors, self._scrapes, self._last_duration
        m = _families(_EXPORTER_FAMILIES)
        m["exporter_scrape_errors"].add_metric([], errors)
        m["exporter_scrapes"].add_metric([], scrapes)
        m["exporter_scrape_duration_seconds"].add_metric([], took)
        yield from m.values()

    def _queue_metrics(self) -> Iterator[Any]:
        looks = self.looks()
        m = _families(_QUEUE_FAMILIES)
        for path, f in looks:
            m["queue_up"].add_metric([path], 0 if f is None else 1)
            if f is None:
                continue
            s = f.stats
            m["excerpts"].add_metric([path], s.total_excerpts)
            m["last_index"].add_metric([path], -1 if s.last_index is None else s.last_index)
            m["first_index"].add_metric([path], -1 if s.first_index is None else s.first_index)
            m["bytes_written"].add_metric([path], s.total_bytes)
            m["cycle_files"].add_metric([path], len(s.cycles))
            m["disk_bytes"].add_metric([path], s.disk_bytes)
            m["file_size_bytes"].add_metric([path], s.file_bytes)
            is_held = f.write_lock_holder is not None
            m["write_lock_held_seconds"].add_metric(
                [path], f.write_lock_held if f.write_lock_alive else 0)
            m["write_lock_holder"].add_metric([path], f.write_lock_holder or 0)
            m["write_lock_holder_alive"].add_metric(
                [path], 1 if is_held and f.write_lock_alive else 0)
            m["write_lock_dead_seconds"].add_metric(
                [path], 0 if f.write_lock_alive else f.write_lock_held)
            rc = f.roll_cycle
            if rc is not None:
                for k, ix in (("last", s.last_index), ("first", s.first_index)):
                    if ix is not None:
                        m[f"{k}_index_cycle"].add_metric([path], ix >> rc.cycle_shift)
                        m[f"{k}_index_sequence"].add_metric([path], rc.to_sequence(ix))
            if f.last_excerpt is not None:
                m["last_excerpt_age_seconds"].add_metric([path, f.last_excerpt.source],
                                                         f.last_excerpt.age)
            for t in s.tailers:
                pt = [path, t.name]
                m["named_tailer_lag_excerpts"].add_metric(pt, t.lag_messages)
                m["named_tailer_lag_bytes"].add_metric(pt, t.lag_bytes)
                m["named_tailer_index"].add_metric(pt, t.index)
                if rc is not None:
                    m["named_tailer_index_cycle"].add_metric(pt, t.index >> rc.cycle_shift)
                    m["named_tailer_index_sequence"].add_metric(pt, rc.to_sequence(t.index))
                lt = f.tailer_lag_time.get(t.name)
                if lt is None:
                    m["named_tailer_lag_seconds"].add_metric([*pt, "none"], 0.0)
                else:
                    m["named_tailer_lag_seconds"].add_metric([*pt, lt.source], lt.age)
                m["named_tailer_reads"].add_metric(pt, f.tailer_reads.get(t.name, 0))
        yield from m.values()


class ServiceMetrics(Collector):
    """A service's own figures on a ``prometheus_client`` registry.

    Add the objects to report with the ``add_*`` methods, each under a name
    (the label value); the figures are read from them at each scrape (their
    counters live in the objects: nothing is counted twice, and nothing is
    added to the per-message path).  Objects are held weakly: one that is
    garbage drops out, as does a tailer whose queue is closed (a closed
    appender keeps its last figures until it is garbage or removed).  One
    ``ServiceMetrics`` per registry (its metric names are fixed).

    Metrics (label in braces):

    ``aiochronicle_appender_excerpts_total{appender}``, ``..._last_index``
        excerpts this appender wrote (:attr:`Appender.excerpts_appended`) and
        the last index.
    ``aiochronicle_tailer_excerpts_total{tailer}``, ``..._index``, ``..._lag_excerpts``
        excerpts the tailer moved past since it was added (for a tailer
        reading forward: the excerpts it read), its next index, and the
        excerpts from there to the end of its queue.
    ``aiochronicle_reader_*_total{reader}``
        a method reader's counters: ``read``, ``dispatched``, ``unknown``,
        ``ignored``, ``errors`` (:meth:`MethodReader.statistics`).
    ``aiochronicle_pauser_pauses_total{pauser}``, ``..._paused_seconds_total``
        a pauser's statistics.
    ``aiochronicle_disk_free_bytes{queue}``, ``aiochronicle_disk_space_low{queue}``
        the free space of a queue's file system and whether it is under the
        queue's ``disk_space_warning`` (1) or not (0), as the disk-space
        monitor last saw them (:attr:`Queue.disk_space`; queues opened
        without ``disk_space_warning`` are left out).
    ``aiochronicle_hop_latency_seconds{hop}``
        a histogram of each hop of the message histories given to
        :meth:`observe_history` (hops named as ``aiochronicle latency`` names them).
    """

    def __init__(self, registry: CollectorRegistry, *,
                 latency_buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS) -> None:
        """Register on ``registry``."""
        self._appenders: dict[str, weakref.ref[Appender]] = {}
        self._tailers: dict[str, tuple[weakref.ref[Tailer], int]] = {}
        self._readers: dict[str, weakref.ref[MethodReader]] = {}
        self._pausers: dict[str, weakref.ref[Pauser]] = {}
        self._queues: dict[str, weakref.ref[Queue]] = {}
        self._lock = threading.Lock()
        self._hops = Histogram("aiochronicle_hop_latency_seconds",
                               "per-hop latency from message histories", ["hop"],
                               registry=registry, buckets=tuple(latency_buckets))
        self._names: dict[tuple[int, tuple[int, ...]], list[str]] = {}
        registry.register(self)

    # -- what to report ---------------------------------------------------
    def add_appender(self, name: str, appender: Appender) -> None:
        """Report ``appender`` under ``name``."""
        with self._lock:
            self._appenders[name] = weakref.ref(appender)

    def add_tailer(self, name: str, tailer: Tailer) -> None:
        """Report ``tailer`` under ``name``; its read count starts at its
        position now."""
        with self._lock:
            self._tailers[name] = (weakref.ref(tailer), tailer.index)

    def add_reader(self, name: str, reader: MethodReader) -> None:
        """Report a method reader's counters under ``name``."""
        with self._lock:
            self._readers[name] = weakref.ref(reader)

    def add_pauser(self, name: str, pauser: Pauser) -> None:
        """Report a pauser's statistics under ``name``."""
        with self._lock:
            self._pausers[name] = weakref.ref(pauser)

    def add_queue(self, name: str, queue: Queue) -> None:
        """Report ``queue``'s disk space (its disk-space monitor's) under ``name``."""
        with self._lock:
            self._queues[name] = weakref.ref(queue)

    def remove(self, name: str) -> None:
        """Stop reporting whatever was added under ``name``."""
        with self._lock:
            for d in (self._appenders, self._tailers, self._readers, self._pausers,
                      self._queues):
                d.pop(name, None)

    def observe_history(self, history: MessageHistory) -> None:
        """Count each hop of ``history`` in the latency histogram, e.g. for
        the message a method-reader handler is handling::

            metrics.observe_history(aiochronicle.current_history())
        """
        lat = history.latencies_ns()
        if not lat:
            return
        shape = (len(history.timings), tuple(s for s, _ in history.sources))
        labels = self._names.get(shape)
        if labels is None:
            labels = self._names[shape] = hop_names(history)
        for label, ns in zip(labels, lat, strict=True):
            self._hops.labels(label).observe(max(0, ns) / 1e9)

    # -- the collector ----------------------------------------------------
    def describe(self) -> Iterable[Any]:
        """Nothing up front: the figures are read when scraped."""
        return []

    def collect(self) -> Iterator[Any]:
        """The figures, read from the objects now."""
        with self._lock:
            appenders = list(self._appenders.items())
            tailers = list(self._tailers.items())
            readers = list(self._readers.items())
            pausers = list(self._pausers.items())
            queues = list(self._queues.items())
        m = _families(_SERVICE_FAMILIES)
        for name, ref in appenders:
            a = ref()
            if a is None:
                continue
            m["appender_excerpts"].add_metric([name], a.excerpts_appended)
            m["appender_last_index"].add_metric([name], a.last_index_appended)
        for name, (tref, start) in tailers:
            t = tref()
            if t is None:
                continue
            try:
                q = t.queue
                now = t.index
                end = q.last_index
                base = start or q.first_index or 0  # added before its first read
                read = q.count_excerpts(base, now) if now else 0
                behind = (0 if end is None or not now or now > end
                          else q.count_excerpts(now, end + 1))
            except QueueClosedError:
                continue
            m["tailer_index"].add_metric([name], now)
            m["tailer_excerpts"].add_metric([name], read)
            m["tailer_lag_excerpts"].add_metric([name], behind)
        for name, rref in readers:
            r = rref()
            if r is None:
                continue
            st = r.statistics()
            for f in _READER_FIELDS:
                m[f"reader_{f}"].add_metric([name], getattr(st, f))
        for name, pref in pausers:
            p = pref()
            if p is None:
                continue
            ps = p.statistics()
            m["pauser_pauses"].add_metric([name], ps.count_paused)
            m["pauser_paused_seconds"].add_metric([name], ps.time_paused_ns / 1e9)
        for name, qref in queues:
            qu = qref()
            ds = qu.disk_space if qu is not None else None
            if ds is None:
                continue
            m["disk_free_bytes"].add_metric([name], ds.free_bytes)
            m["disk_space_low"].add_metric([name], 1 if ds.low else 0)
        yield from m.values()


class PipelineCollector(Collector):
    """The figures of the services ``aiochronicle run`` runs, read at each
    scrape from the runner (beside a :class:`QueueCollector` of the pipeline's
    queues on the same ``/metrics``).

    Metrics (label ``service``; ``input`` is an input queue's path):

    ``aiochronicle_service_up``
        1 while a process of the service runs.
    ``aiochronicle_service_restarts_total``
        restarts by the runner.
    ``aiochronicle_service_inputs_handled_total``
        inputs handled live (replayed ones aside), by every process of it.
    ``aiochronicle_service_replayed_inputs``
        inputs its running process replayed (outputs suppressed) on start.
    ``aiochronicle_service_lag_excerpts{service,input}``, ``..._lag_seconds``
        input excerpts not yet handled, and how long the oldest of them has
        waited (to the period of the service's reports, 0.25 s; 0 when none
        waits).
    ``aiochronicle_service_snapshot_age_seconds``
        seconds since its last snapshot (left out before the first).
    ``aiochronicle_service_restart_seconds``
        the last restart's latency: from the runner seeing the death to the
        new process handling its next live input.
    """

    def __init__(self, figures: Callable[[], Iterable[ServiceFigures]]) -> None:
        """``figures`` gives the services' figures now (``Runner.figures``)."""
        self._figures = figures

    def describe(self) -> Iterable[Any]:
        """Nothing up front: the figures are read when scraped."""
        return []

    def collect(self) -> Iterator[Any]:
        """The figures, read from the runner now."""
        m = _families(_PIPELINE_FAMILIES)
        now = time.time()
        for f in self._figures():
            m["service_up"].add_metric([f.name], 1 if f.up else 0)
            m["service_restarts"].add_metric([f.name], f.restarts)
            m["service_inputs_handled"].add_metric([f.name], f.handled_total)
            m["service_replayed_inputs"].add_metric([f.name], f.replayed)
            for path, n in f.lag.items():
                m["service_lag_excerpts"].add_metric([f.name, path], n)
                m["service_lag_seconds"].add_metric([f.name, path], f.lag_seconds.get(path, 0.0))
            if f.snapshot_time is not None:
                m["service_snapshot_age_seconds"].add_metric([f.name],
                                                             max(0.0, now - f.snapshot_time))
            if f.restart_ms is not None:
                m["service_restart_seconds"].add_metric([f.name], f.restart_ms / 1e3)
        yield from m.values()
