"""A queue's settings: the modes, the checks of what ``open_queue`` is given,
the file names, and the header and first keys of a new ``metadata.cq4t``."""

from __future__ import annotations

import enum

from ._clock import TimeProvider
from ._native import UNLOCKED
from ._rollcycles import RollCycle, RollCycles
from ._wire import WireWriter

__all__ = ["ACK_KEY", "INITIAL_KEYS", "METADATA_FILE", "SUFFIX", "SyncMode", "UnlockMode",
           "check_settings", "metadata_header"]

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


def check_settings(roll_cycle: RollCycle | str | None, epoch: int | None,
                    time_provider: TimeProvider | None, index_count: int | None,
                    index_spacing: int | None, timeout: float, source_id: int,
                    lock_timeout: float | None, sync_interval_ms: float | None,
                    week_rule: str) -> RollCycle | None:
    """Reject settings that would fail later, or silently misbehave, with a clear
    error now; returns the roll cycle (a name looked up)."""
    if isinstance(roll_cycle, str):
        roll_cycle = RollCycles.by_name(roll_cycle.upper())
    elif roll_cycle is not None and not isinstance(roll_cycle, RollCycle):
        raise TypeError(f"roll_cycle must be a RollCycle (ac.RollCycles.X) or its name, "
                        f"not {type(roll_cycle).__name__}")
    if time_provider is not None and not callable(
            getattr(time_provider, "current_time_millis", None)):
        raise TypeError(f"time_provider needs a current_time_millis() method "
                        f"({type(time_provider).__name__} has none)")
    for name, value in (("index_count", index_count), ("index_spacing", index_spacing)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if epoch is not None and epoch < 0:
        raise ValueError(f"epoch must be 0 or more milliseconds, got {epoch}")
    if week_rule not in ("US", "ISO"):
        raise ValueError(f"week_rule must be one of ['ISO', 'US'], got {week_rule!r}")
    if not 0 <= source_id < 1 << 31:
        raise ValueError(f"source_id must be in 0..2**31-1 (a Java int), got {source_id}")
    for name, limit in (("timeout", timeout), ("lock_timeout", lock_timeout),
                        ("sync_interval_ms", sync_interval_ms)):
        if limit is not None and not limit >= 0:  # NaN fails too
            raise ValueError(f"{name} must be 0 or more, got {limit}")
    return roll_cycle


INITIAL_KEYS = (
    ("listing.highestCycle", UNLOCKED),
    ("listing.lowestCycle", INT_MAX),
    ("listing.modCount", 0),
    ("chronicle.write.lock", UNLOCKED),
    ("chronicle.lastIndexReplicated", -1),
    ("chronicle.lastAcknowledgedIndexReplicated", -1),
)


def metadata_header(rc: RollCycle, epoch: int, source_id: int) -> bytes:
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

