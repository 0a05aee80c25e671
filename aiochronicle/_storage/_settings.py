"""A queue's settings: the modes, the checks of what ``open_queue`` is given,
the file names, and the header and first keys of a new ``metadata.cq4t``."""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import time, tzinfo
from typing import Any

from .._core._native import UNLOCKED
from .._format._clock import TimeProvider
from .._format._rollcycles import RollCycle, RollCycles
from .._format._rolltime import day_length_ok, epoch_of, is_utc, java_local_time, zone_name, zone_of
from .._format._wire import WireWriter

__all__ = ["ACK_KEY", "INITIAL_KEYS", "METADATA_FILE", "SUFFIX", "QueueOptions", "SyncMode",
           "UnlockMode", "metadata_header", "options_from"]

METADATA_FILE = "metadata.cq4t"
LEGACY_LISTING_FILE = "directory-listing.cq4t"
SUFFIX = ".cq4"
MAX_PAYLOAD = (1 << 30) - 1
INT_MAX = (1 << 31) - 1


class UnlockMode(enum.Enum):
    """What an appender does when the write lock stays held past its timeout
    (Java's ``queue.force.unlock.mode``)."""

    #: take the lock over only if its holder's PID is dead, else raise (default)
    LOCKING_PROCESS_DEAD = "locking-process-dead"
    #: take the lock over regardless (a stuck live holder loses it)
    ALWAYS = "always"
    #: never take it over: raise WriteLockTimeoutError
    NEVER = "never"


class SyncMode(enum.Enum):
    """When appenders msync what they wrote (the OS writes back eventually anyway)."""

    #: leave write-back to the OS (default)
    NONE = "none"
    #: msync(MS_SYNC): wait until the pages reach the device
    SYNC = "sync"
    #: msync(MS_ASYNC): schedule the write-back and return
    ASYNC = "async"


@dataclass(frozen=True, slots=True)
class QueueOptions:
    """Everything :func:`open_queue` takes besides the path, checked once.

    Invalid values raise at once (``ValueError``, ``TypeError``,
    ``UnknownRollCycleError``) rather than misbehaving later.  Durations are
    seconds; ``epoch`` is milliseconds, as Chronicle counts it.
    """

    roll_cycle: RollCycle | None = None
    epoch: int | None = None
    time_provider: TimeProvider | None = None
    read_only: bool = False
    block_size: int = 64 << 20
    index_count: int | None = None
    index_spacing: int | None = None
    timeout: float = 10.0
    week_rule: str = "US"
    source_id: int = 0
    lock_timeout: float | None = None
    unlock_mode: UnlockMode = UnlockMode.LOCKING_PROCESS_DEAD
    sync: SyncMode = SyncMode.NONE
    sync_every: int = 1
    sync_interval: float | None = None
    appender_listener: Callable[[int, bytes], None] | None = None
    disk_space_warning: float | None = None
    disk_check_interval: float = 1.0
    roll_time: time | None = None
    roll_time_zone: tzinfo | str | None = None

    def __post_init__(self) -> None:
        if self.appender_listener is not None and not callable(self.appender_listener):
            raise TypeError("appender_listener must be callable as listener(index, payload)")
        rc = self.roll_cycle
        if isinstance(rc, str):
            object.__setattr__(self, "roll_cycle", RollCycles.by_name(rc.upper()))
        elif rc is not None and not isinstance(rc, RollCycle):
            raise TypeError(f"roll_cycle must be a RollCycle (ac.RollCycles.X) or its name, "
                            f"not {type(rc).__name__}")
        tp = self.time_provider
        if tp is not None and not callable(getattr(tp, "current_time_millis", None)):
            raise TypeError(f"time_provider needs a current_time_millis() method "
                            f"({type(tp).__name__} has none)")
        for name in ("index_count", "index_spacing"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.epoch is not None and self.epoch < 0:
            raise ValueError(f"epoch must be 0 or more milliseconds, got {self.epoch}")
        if self.week_rule not in ("US", "ISO"):
            raise ValueError(f"week_rule must be one of ['ISO', 'US'], got {self.week_rule!r}")
        if not 0 <= self.source_id < 1 << 31:
            raise ValueError(f"source_id must be in 0..2**31-1 (a Java int), "
                             f"got {self.source_id}")
        dsw = self.disk_space_warning
        if dsw is not None and not dsw > 0:
            raise ValueError(f"disk_space_warning must be more than 0, got {dsw}")
        if not self.disk_check_interval > 0:
            raise ValueError(f"disk_check_interval must be more than 0 seconds, "
                             f"got {self.disk_check_interval}")
        for name in ("timeout", "lock_timeout", "sync_interval"):
            limit = getattr(self, name)
            if limit is not None and not limit >= 0:  # NaN fails too
                raise ValueError(f"{name} must be 0 or more, got {limit}")
        if self.block_size < 64 << 10 or self.block_size & 4095:
            raise ValueError("block_size must be a multiple of 4096 and at least 64 KiB")
        if self.sync_every < 1:
            raise ValueError("sync_every must be at least 1")
        object.__setattr__(self, "unlock_mode", UnlockMode(self.unlock_mode))
        self._check_roll_time()

    def _check_roll_time(self) -> None:
        rt = self.roll_time
        if rt is None:
            if self.roll_time_zone is not None:
                raise ValueError("roll_time_zone needs a roll_time (the local time to roll at)")
            return
        if not isinstance(rt, time):
            raise TypeError(f"roll_time must be a datetime.time, not {type(rt).__name__}")
        if self.epoch not in (None, 0, epoch_of(rt)):
            raise ValueError("give epoch or roll_time, not both (a roll time sets the epoch)")
        zone = zone_of(self.roll_time_zone)
        object.__setattr__(self, "roll_time_zone", zone)
        rc = self.roll_cycle
        if not is_utc(zone) and isinstance(rc, RollCycle) and not day_length_ok(rc.length_ms):
            raise ValueError(f"a roll time in a zone other than UTC needs a daily roll "
                             f"cycle, not {rc.name}")
        object.__setattr__(self, "sync", SyncMode(self.sync))


def options_from(settings: dict[str, Any]) -> QueueOptions:
    """QueueOptions from ``open_queue``'s keywords, with the renamed millisecond
    ``sync_interval_ms`` still taken (DeprecationWarning)."""
    if "sync_interval_ms" in settings:
        ms = settings.pop("sync_interval_ms")
        if settings.get("sync_interval") is not None:
            raise TypeError("give sync_interval or sync_interval_ms, not both")
        warnings.warn("sync_interval_ms is deprecated: give sync_interval in seconds",
                      DeprecationWarning, stacklevel=3)
        if ms is not None and not ms >= 0:
            raise ValueError(f"sync_interval_ms must be 0 or more, got {ms}")
        settings["sync_interval"] = None if ms is None else ms / 1000
    return QueueOptions(**settings)


INITIAL_KEYS = (
    ("listing.highestCycle", UNLOCKED),
    ("listing.lowestCycle", INT_MAX),
    ("listing.modCount", 0),
    ("chronicle.write.lock", UNLOCKED),
    ("chronicle.lastIndexReplicated", -1),
    ("chronicle.lastAcknowledgedIndexReplicated", -1),
)


def metadata_header(rc: RollCycle, epoch: int, source_id: int,
                    roll_time: time | None = None, zone: tzinfo | None = None) -> bytes:
    w = WireWriter(4)
    w.event_name("header")
    w.type_prefix("STStore")
    outer = w.begin_length32()
    w.field("wireType")
    w.type_prefix("WireType")
    w.text("BINARY_LIGHT")
    w.field("metadata")
    w.type_prefix("SCQMeta")
    meta = w.begin_length32()
    w.field("roll")
    w.type_prefix("SCQSRoll")
    roll = w.begin_length32()
    w.field("length")
    w.int_compact(rc.length_ms)
    w.field("format")
    w.text(rc.format)
    w.field("epoch")
    w.int_compact(epoch)
    if roll_time is not None:  # as Java's SCQRoll writes a rollTime(time, zone)
        w.field("rollTime")
        w.local_time(java_local_time(roll_time))
        w.field("rollTimeZone")
        w.text(zone_name(zone) if zone is not None else "UTC")
    w.end_length32(roll)
    w.field("deltaCheckpointInterval")
    w.int_compact(64)
    w.field("sourceId")
    w.int_compact(source_id)
    w.end_length32(meta)
    w.align_to(4)  # inside the STStore body, as Java pads it
    w.end_length32(outer)
    return w.getvalue()


ACK_KEY = "chronicle.lastAcknowledgedIndexReplicated"

