"""The disk-space monitor (Java's ``DiskSpaceMonitor``): a warning on the
``aiochronicle`` logger and a metric when a queue's file system runs low,
looked at from one thread at most every ``disk_check_interval`` seconds."""

from __future__ import annotations

import logging
import os
import threading

import mounts
import pytest
from prometheus_client import CollectorRegistry

import aiochronicle as ac
from aiochronicle.metrics import ServiceMetrics


class _Seen(logging.Handler):
    """Sets an event when a record containing ``text`` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__(logging.DEBUG)
        self.text = text
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


@pytest.fixture
def watch_log():
    log = logging.getLogger("aiochronicle")
    handlers = []
    old = log.level

    def make(text: str) -> threading.Event:
        h = _Seen(text)
        log.addHandler(h)
        handlers.append(h)
        return h.event

    log.setLevel(logging.DEBUG)
    yield make
    for h in handlers:
        log.removeHandler(h)
    log.setLevel(old)


def test_warns_at_open_when_already_low(tmp_path, watch_log):
    low = watch_log("disk space low")
    with ac.open_queue(tmp_path / "q", disk_space_warning=1 << 62) as q:
        ds = q.disk_space
        assert ds is not None and ds.low and ds.checks >= 1
        assert 0 < ds.free_bytes <= ds.total_bytes
        assert low.is_set()  # the first look is made when the queue opens
    with ac.open_queue(tmp_path / "q") as q:
        assert q.disk_space is None  # not watched unless asked
    with pytest.raises(ValueError, match="disk_space_warning"):
        ac.open_queue(tmp_path / "q", disk_space_warning=0)


def test_fraction_of_the_size(tmp_path):
    with ac.open_queue(tmp_path / "q", disk_space_warning=0.5) as q:
        ds = q.disk_space
        assert ds is not None
        assert ds.threshold_bytes == ds.total_bytes // 2
        assert ds.low == (ds.free_bytes < ds.total_bytes // 2)


@pytest.fixture
def small_tmpfs(tmp_path):
    with mounts.tmpfs(tmp_path / "tmpfs", "8m") as mnt:
        yield mnt


def test_a_filling_disk_warns_then_recovers(small_tmpfs, watch_log):
    """On an 8 MiB tmpfs with a 4 MiB threshold: a 5 MiB file written beside
    the queue brings the warning (and the metric) from the monitor's thread;
    deleting it, the all-clear."""
    low = watch_log("disk space low")
    back = watch_log("back above the threshold")
    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry)
    with ac.open_queue(small_tmpfs / "q", block_size=64 << 10, disk_space_warning=4 << 20,
                       disk_check_interval=0.01) as q:
        metrics.add_queue("q", q)
        a = q.appender()
        assert type(a).append is ac.Appender.append  # nothing on the append path
        a.append(b"x" * 1000)
        ds = q.disk_space
        assert ds is not None and not ds.low and not low.is_set()
        assert registry.get_sample_value("aiochronicle_disk_space_low", {"queue": "q"}) == 0
        filler = small_tmpfs / "filler"
        with open(filler, "wb") as f:
            f.write(b"\1" * (5 << 20))
        assert low.wait(60), "no warning from the monitor's thread"
        assert ds.low
        assert registry.get_sample_value("aiochronicle_disk_space_low", {"queue": "q"}) == 1
        free = registry.get_sample_value("aiochronicle_disk_free_bytes", {"queue": "q"})
        assert free is not None and free < 4 << 20
        os.unlink(filler)
        assert back.wait(60), "no all-clear from the monitor's thread"
        assert not ds.low
        a.append(b"still writable")
    assert not ds.watching
