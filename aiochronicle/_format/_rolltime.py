"""Roll times: a daily queue that rolls at a local time of day in a time zone.

Java's ``builder.rollTime(time, zone)`` records ``rollTime`` and ``rollTimeZone``
in ``metadata.cq4t`` beside ``epoch`` (the time of day in milliseconds). In UTC the
epoch alone places every roll (``(now - epoch) / length``). In another zone (a
Chronicle Queue Enterprise feature; the open-source Java builder refuses it) a day
is not always 24 hours: :class:`ZonedDays` numbers the cycles by the local date
whose roll time starts them, so cycle ``n`` is the day ``1970-01-01 + n`` in the
zone and its file carries that date, over 23 or 25 hours on daylight-saving days.

Pure arithmetic on ``zoneinfo`` rules: no clock, no file system.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "ZonedDays",
    "day_length_ok",
    "epoch_of",
    "is_utc",
    "java_local_time",
    "parse_local_time",
    "zone_name",
    "zone_of",
]

_DAY_MS: Final = 86_400_000
_EPOCH_DAY: Final = date(1970, 1, 1)
_UTC_NAMES: Final = frozenset(("UTC", "Z", "Etc/UTC"))


def zone_of(zone: tzinfo | str | None) -> tzinfo | None:
    """A ``ZoneInfo`` (or UTC) for a zone object or its IANA name; None stays None.

    Raises:
        ValueError: an unknown zone name, or a tzinfo without a name.
    """
    if zone is None:
        return None
    if isinstance(zone, str):
        if zone in _UTC_NAMES:
            return UTC
        try:
            return ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {zone!r}") from None
    if zone is UTC or isinstance(zone, ZoneInfo):
        return zone
    raise ValueError(f"roll_time_zone must be a zoneinfo.ZoneInfo or an IANA name, "
                     f"not {type(zone).__name__}")


def zone_name(zone: tzinfo) -> str:
    """The id Java's ``ZoneId.getId()`` gives: ``UTC`` or the IANA key."""
    return "UTC" if zone is UTC else str(getattr(zone, "key", zone))


def is_utc(zone: tzinfo | None) -> bool:
    """Whether ``zone`` rolls as UTC (no zone at all counts as UTC)."""
    return zone is None or zone is UTC or zone_name(zone) in _UTC_NAMES


def epoch_of(roll_time: time) -> int:
    """The epoch Java stores for a roll time: its seconds of the day, in ms
    (``TimeUnit.SECONDS.toMillis(rollTime.toSecondOfDay())``)."""
    return (roll_time.hour * 3600 + roll_time.minute * 60 + roll_time.second) * 1000


def java_local_time(t: time) -> str:
    """``LocalTime.toString()``: ``HH:mm``, ``HH:mm:ss`` or with 3, 6 or 9 fraction digits."""
    text = f"{t.hour:02d}:{t.minute:02d}"
    if t.second or t.microsecond:
        text += f":{t.second:02d}"
        if t.microsecond:
            us = t.microsecond
            text += f".{us // 1000:03d}" if us % 1000 == 0 else f".{us:06d}"
    return text


def parse_local_time(text: str) -> time:
    """``LocalTime.parse`` for what :func:`java_local_time` (and Java) write.

    Raises:
        ValueError: text that is not a time of day.
    """
    main, _, frac = text.partition(".")
    parts = main.split(":")
    if len(parts) not in (2, 3) or not all(p.isdigit() and len(p) == 2 for p in parts):
        raise ValueError(f"not a time of day: {text!r}")
    us = int((frac + "000000")[:6]) if frac else 0
    return time(int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 0, us)


class ZonedDays:
    """Daily cycles that start at ``roll_time`` local time in ``zone``.

    Cycle ``n`` is the local date ``1970-01-01 + n days``; it starts at that
    date's ``roll_time`` in the zone (a roll time that the clocks skip, in a
    spring-forward gap, starts the day one gap later, as ``java.time`` resolves
    it) and ends where the next date's starts: 23, 24 or 25 hours later.
    """

    __slots__ = ("roll_time", "zone")

    def __init__(self, roll_time: time, zone: tzinfo) -> None:
        self.roll_time = roll_time.replace(tzinfo=None)
        self.zone = zone

    def _offset(self) -> timedelta:
        t = self.roll_time
        return timedelta(hours=t.hour, minutes=t.minute, seconds=t.second,
                         microseconds=t.microsecond)

    def _wall(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, self.zone).replace(tzinfo=None)

    def cycle_at(self, ms: int) -> int:
        """The cycle holding the instant ``ms`` (milliseconds since 1970 UTC): the
        last whose :meth:`start_ms` is not after it (so cycles only go up, also
        through the repeated hour when the clocks go back)."""
        n = ((self._wall(ms) - self._offset()).date() - _EPOCH_DAY).days
        while self.start_ms(n + 1) <= ms:
            n += 1
        while self.start_ms(n) > ms:
            n -= 1
        return n

    def start_ms(self, cycle: int) -> int:
        """The instant (ms since 1970 UTC) cycle ``cycle`` starts: its date at the
        roll time in the zone, resolved as ``java.time.ZonedDateTime.of`` does (the
        earlier instant when the clocks go back over it, one gap later when they
        skip it)."""
        wall = datetime.combine(_EPOCH_DAY + timedelta(days=cycle), self.roll_time)
        # fold=0 reads a repeated wall time at its earlier offset, and one in a gap
        # with the offset before the jump: ZonedDateTime.of's choices
        return int(wall.replace(tzinfo=self.zone).timestamp() * 1000)

    def span_ms(self, cycle: int) -> tuple[int, int]:
        """``(start, end)`` of ``cycle``: its first instant and the next cycle's."""
        return self.start_ms(cycle), self.start_ms(cycle + 1)

    def __repr__(self) -> str:
        return f"ZonedDays({java_local_time(self.roll_time)} {zone_name(self.zone)})"


def day_length_ok(length_ms: int) -> bool:
    """Whether a roll cycle of ``length_ms`` can roll at a zone's local time (daily only)."""
    return length_ms == _DAY_MS
