"""Roll cycles: index arithmetic and cycle file naming, compatible with Chronicle Queue v5.

A *roll cycle* decides how often a queue starts a new ``.cq4`` file, how a 64-bit
queue index is split into ``(cycle, sequence)`` and how a cycle number is turned
into a file name (and back).  This module mirrors the Java classes
``RollCycles``/``LegacyRollCycles``/``LargeRollCycles``/``SparseRollCycles``/
``TestRollCycles``, ``RollCycleArithmetic`` and ``RollingResourcesCache``.

Everything here is pure arithmetic: no clock, no file system, no locale.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import date
from typing import Final

from .._core._errors import UnknownRollCycleError

__all__ = [
    "CycleNamer",
    "RollCycle",
    "RollCycles",
    "UnknownRollCycleError",
    "candidate_roll_cycles",
    "cycle_shift_for",
    "make_roll_cycle",
]

_DAY_MS: Final = 86_400_000
_UINT31_MAX: Final = 0x7FFF_FFFF
_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_JAVA_INT_POWER2_CAP: Final = 1 << 30
_EPOCH_ORDINAL: Final = date(1970, 1, 1).toordinal()
_MIN_YEAR: Final = 1
_MAX_YEAR: Final = 9999


# ---------------------------------------------------------------------------
# Java-flavoured integer helpers
# ---------------------------------------------------------------------------


def _int_log2(n: int) -> int:
    """``floor(log2(n))`` for ``n > 0`` (Java ``Maths.intLog2``)."""
    if n <= 0:
        raise ValueError(f"positive argument expected, {n} given")
    return n.bit_length() - 1


def _is_power2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _next_power2(n: int, minimum: int) -> int:
    """Java ``Maths.nextPower2(int, int)``: smallest power of 2 >= ``n`` and >= ``minimum``.

    Like the Java ``int`` overload, the result is capped at ``2**30``.
    """
    if not _is_power2(minimum):
        raise ValueError(f"{minimum} must be a power of 2")
    if n < minimum:
        return minimum
    result = n if _is_power2(n) else 1 << (n - 1).bit_length()
    return min(_JAVA_INT_POWER2_CAP, result)


def _java_div(a: int, b: int) -> int:
    """Integer division truncating toward zero, as Java's ``/`` on longs."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _ceil_div(a: int, b: int) -> int:
    """Integer division rounding toward positive infinity (``b > 0``)."""
    return -((-a) // b)


def cycle_shift_for(index_count: int, index_spacing: int) -> int:
    """Return the number of low index bits used for the sequence number.

    ``max(32, intLog2(index_count) * 2 + intLog2(index_spacing))``, computed from the
    *raw* (not power-of-2-rounded) arguments exactly as ``RollCycleArithmetic`` does.

    Raises:
        ValueError: if either argument is not positive.
    """
    return max(32, _int_log2(index_count) * 2 + _int_log2(index_spacing))


# ---------------------------------------------------------------------------
# Roll cycle
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RollCycle:
    """An immutable roll cycle definition plus its derived index arithmetic.

    Build custom instances with :func:`make_roll_cycle`, which derives
    ``index_count``/``index_spacing`` rounding, ``cycle_shift``, ``sequence_mask`` and
    ``max_messages_per_cycle``; the built-ins live on :class:`RollCycles`.

    An index is ``(cycle << cycle_shift) + (sequence & sequence_mask)`` and must fit in
    a signed 64-bit integer; a cycle must fit in 31 bits.
    """

    name: str
    format: str
    length_ms: int
    index_count: int
    index_spacing: int
    default_epoch: int
    cycle_shift: int
    sequence_mask: int
    max_messages_per_cycle: int

    def to_index(self, cycle: int, sequence: int) -> int:
        """Compose a queue index from a cycle and a sequence number.

        The sequence is masked with :attr:`sequence_mask` as Java does.

        Raises:
            ValueError: if ``cycle`` is not in ``[0, 2**31)`` or the index would not
                fit in a signed 64-bit integer.
        """
        if not 0 <= cycle <= _UINT31_MAX:
            raise ValueError(f"cycle {cycle} out of range [0, {_UINT31_MAX}]")
        index = (cycle << self.cycle_shift) + (sequence & self.sequence_mask)
        if index > _INT64_MAX:
            raise ValueError(
                f"index for cycle {cycle} does not fit in 64 bits (cycle_shift {self.cycle_shift})"
            )
        return index

    def to_cycle(self, index: int) -> int:
        """Extract the cycle number from a queue index.

        Raises:
            ValueError: if ``index`` is negative, does not fit in a signed 64-bit
                integer, or its cycle part does not fit in 31 bits (Java
                ``Maths.toUInt31``).
        """
        if not _INT64_MIN <= index <= _INT64_MAX:
            raise ValueError(f"index {index:#x} does not fit in a signed 64-bit integer")
        cycle = index >> self.cycle_shift
        if not 0 <= cycle <= _UINT31_MAX:
            raise ValueError(f"cycle {cycle} of index {index:#x} does not fit in 31 bits")
        return cycle

    def to_sequence(self, index: int) -> int:
        """Extract the sequence number (``index & sequence_mask``) from a queue index."""
        return index & self.sequence_mask

    def current_cycle(self, now_ms: int, epoch: int = 0) -> int:
        """Return the cycle containing ``now_ms`` (milliseconds since 1970-01-01 UTC).

        ``(now_ms - epoch) / length_ms`` with Java's truncation toward zero, so every
        time in ``(-length_ms, length_ms)`` around ``epoch`` maps to cycle 0.  Pass
        the queue's effective epoch (see :meth:`resolve_epoch`).
        """
        return _java_div(now_ms - epoch, self.length_ms)

    def resolve_epoch(self, epoch: int) -> int:
        """Return the epoch a Java queue would actually use for a configured ``epoch``.

        ``SingleChronicleQueue`` replaces an epoch of 0 with the roll cycle's
        :attr:`default_epoch` (only ``WEEKLY`` has a non-zero one).
        """
        return self.default_epoch if epoch == 0 else epoch

    @classmethod
    def custom(cls, name: str, format: str, length_ms: int, index_count: int = 4096,
               index_spacing: int = 256, default_epoch: int = 0) -> RollCycle:
        """Define (and register under ``name``) a roll cycle of your own, as a Java
        application implements ``RollCycle`` and passes it to ``builder.rollCycle(rc)``.

        ``format`` is a ``java.time`` pattern for the file names (letters ``yMdHmsYw``
        and quoted text), ``length_ms`` the cycle's length; ``index_count`` and
        ``index_spacing`` are the cycle's ``defaultIndexCount``/``defaultIndexSpacing``
        and fix its index arithmetic (``cycle_shift``) as Java's
        ``RollCycleArithmetic`` does.  Once defined, ``open_queue(path,
        roll_cycle=name)`` and :meth:`RollCycles.by_name` find it, and a queue
        created with it is reopened with it (Java records only the format, length
        and epoch in ``metadata.cq4t``: the cycle is matched on those).

        Raises:
            ValueError: a built-in's name, a name already defined with other
                settings, or settings :func:`make_roll_cycle` refuses.
        """
        if not name or not isinstance(name, str):
            raise ValueError("a custom roll cycle needs a name")
        if name in _BY_NAME:
            raise ValueError(f"{name} is a built-in roll cycle")
        rc = make_roll_cycle(name, format, length_ms, index_count, index_spacing, default_epoch)
        known = _CUSTOM.get(name)
        if known is not None:
            if known != rc:
                raise ValueError(f"roll cycle {name} is already defined as {known}")
            return known
        _CUSTOM[name] = rc
        return rc

    def with_index(self, index_count: int | None = None,
                   index_spacing: int | None = None) -> RollCycle:
        """This cycle with another index layout in its cycle files, as Java's
        ``builder.indexCount(n)``/``indexSpacing(n)`` give: the files' index arrays
        change (rounded up to powers of two), the numbering of queue indices
        (:attr:`cycle_shift`) stays this cycle's.

        Raises:
            ValueError: a count or spacing below 1.
        """
        for what, v in (("index_count", index_count), ("index_spacing", index_spacing)):
            if v is not None and v < 1:
                raise ValueError(f"{what} must be a positive integer, got {v}")
        count = self.index_count if index_count is None else _next_power2(index_count, 8)
        spacing = self.index_spacing if index_spacing is None else _next_power2(index_spacing, 1)
        if (count, spacing) == (self.index_count, self.index_spacing):
            return self
        return RollCycle(self.name, self.format, self.length_ms, count, spacing,
                         self.default_epoch, self.cycle_shift, self.sequence_mask,
                         min(self.sequence_mask, count * count * spacing))


def make_roll_cycle(
    name: str,
    format: str,
    length_ms: int,
    index_count: int,
    index_spacing: int,
    default_epoch: int = 0,
) -> RollCycle:
    """Create a :class:`RollCycle`, deriving its arithmetic like ``RollCycleArithmetic``.

    ``index_count`` is rounded up to a power of two (minimum 8), ``index_spacing`` to a
    power of two (minimum 1); ``cycle_shift`` uses the raw arguments.

    Raises:
        ValueError: on a non-positive length/count/spacing, a ``cycle_shift`` of 64 or
            more, or a ``format`` using unsupported pattern letters.
    """
    if length_ms <= 0:
        raise ValueError(f"length_ms must be positive, got {length_ms}")
    shift = cycle_shift_for(index_count, index_spacing)
    if shift >= 64:
        raise ValueError(f"cycle_shift {shift} too large for a 64-bit index")
    _compile_pattern(format)  # fail early on an unsupported pattern
    count = _next_power2(index_count, 8)
    spacing = _next_power2(index_spacing, 1)
    mask = (1 << shift) - 1
    return RollCycle(
        name=name,
        format=format,
        length_ms=length_ms,
        index_count=count,
        index_spacing=spacing,
        default_epoch=default_epoch,
        cycle_shift=shift,
        sequence_mask=mask,
        max_messages_per_cycle=min(mask, count * count * spacing),
    )


# ---------------------------------------------------------------------------
# Date pattern mini-language (subset of java.time DateTimeFormatter patterns)
# ---------------------------------------------------------------------------

# letter -> required width; y/M/d/H/m/s are calendar fields, Y/w week-based ones.
_FIELD_WIDTHS: Final[dict[str, int]] = {
    "y": 4,
    "M": 2,
    "d": 2,
    "H": 2,
    "m": 2,
    "s": 2,
    "Y": 4,
    "w": 2,
}
_RESERVED: Final = frozenset("[]{}#")


@dataclass(frozen=True, slots=True)
class _Field:
    letter: str
    width: int


_Token = str | _Field


@dataclass(frozen=True, slots=True)
class _Pattern:
    source: str
    tokens: tuple[_Token, ...]
    regex: re.Pattern[str]
    week_based: bool


def _tokenize(pattern: str) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            tokens.append("".join(literal))
            literal.clear()

    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ("A" <= ch <= "Z") or ("a" <= ch <= "z"):
            j = i
            while j < n and pattern[j] == ch:
                j += 1
            width = j - i
            if _FIELD_WIDTHS.get(ch) != width:
                raise ValueError(f"unsupported pattern letters {pattern[i:j]!r} in {pattern!r}")
            flush()
            tokens.append(_Field(ch, width))
            i = j
        elif ch == "'":
            if pattern.startswith("''", i):
                literal.append("'")
                i += 2
                continue
            i += 1
            while True:
                if i >= n:
                    raise ValueError(f"unterminated quoted literal in {pattern!r}")
                if pattern[i] == "'":
                    if pattern.startswith("''", i):
                        literal.append("'")
                        i += 2
                        continue
                    i += 1
                    break
                literal.append(pattern[i])
                i += 1
        elif ch in _RESERVED:
            raise ValueError(f"unsupported pattern character {ch!r} in {pattern!r}")
        else:
            literal.append(ch)
            i += 1
    flush()
    return tuple(tokens)


@functools.lru_cache(maxsize=128)
def _compile_pattern(pattern: str) -> _Pattern:
    tokens = _tokenize(pattern)
    letters = [t.letter for t in tokens if isinstance(t, _Field)]
    if len(set(letters)) != len(letters):
        raise ValueError(f"repeated field in pattern {pattern!r}")
    present = set(letters)
    week_based = bool(present & {"Y", "w"})
    if week_based:
        if present != {"Y", "w"}:
            raise ValueError(f"week-based pattern {pattern!r} must use exactly YYYY and ww")
    elif not {"y", "M", "d"} <= present:
        raise ValueError(f"pattern {pattern!r} must contain yyyy, MM and dd")
    parts: list[str] = []
    for tok in tokens:
        if isinstance(tok, _Field):
            parts.append(f"(?P<{tok.letter}>[0-9]{{{tok.width}}})")
        else:
            parts.append(re.escape(tok))
    regex = re.compile("".join(parts), re.ASCII)
    return _Pattern(pattern, tokens, regex, week_based)


# ---------------------------------------------------------------------------
# Week rules (java.time.temporal.WeekFields)
# ---------------------------------------------------------------------------

# rule name -> (first day of week as Python weekday (Mon=0), minimal days in first week)
_WEEK_RULES: Final[dict[str, tuple[int, int]]] = {
    "US": (6, 1),  # Locale.US: Sunday, 1
    "ISO": (0, 4),  # WeekFields.ISO: Monday, 4
}


def _jan1_ordinal(year: int) -> int:
    """Proleptic Gregorian ordinal (date.toordinal numbering) of January 1st of ``year``."""
    y = year - 1
    return y * 365 + y // 4 - y // 100 + y // 400 + 1


def _weekday(ordinal: int) -> int:
    """Python weekday (Monday=0) of a proleptic Gregorian ordinal."""
    return (ordinal + 6) % 7


def _week1_start(year: int, rule: tuple[int, int]) -> int:
    """Ordinal of the first day of week 1 of week-based ``year`` under ``rule``."""
    first_dow, min_days = rule
    jan1 = _jan1_ordinal(year)
    offset = (_weekday(jan1) - first_dow) % 7  # days of the week before Jan 1
    start = jan1 - offset
    return start if 7 - offset >= min_days else start + 7


def _week_of(ordinal: int, rule: tuple[int, int]) -> tuple[int, int]:
    """``(week_based_year, week_of_week_based_year)`` of a date ordinal."""
    year = date.fromordinal(ordinal).year
    start = _week1_start(year, rule)
    if ordinal < start:
        year -= 1
        start = _week1_start(year, rule)
    else:
        next_start = _week1_start(year + 1, rule)
        if ordinal >= next_start:
            year += 1
            start = next_start
    return year, (ordinal - start) // 7 + 1


# ---------------------------------------------------------------------------
# Cycle file naming
# ---------------------------------------------------------------------------


def _naming_epoch(epoch: int) -> int:
    """Epoch truncated to a whole UTC day as ``RollingResourcesCache`` does.

    Java: ``millisInDay = epoch % DAY; epoch = millisInDay >= 0 ? epoch - millisInDay : -DAY``
    (``%`` takes the sign of the dividend).
    """
    millis_in_day = epoch - _java_div(epoch, _DAY_MS) * _DAY_MS
    return epoch - millis_in_day if millis_in_day >= 0 else -_DAY_MS


def _format_ms(pattern: _Pattern, ms: int, rule: tuple[int, int]) -> str:
    day, ms_of_day = divmod(ms, _DAY_MS)
    ordinal = _EPOCH_ORDINAL + day
    if not date.min.toordinal() <= ordinal <= date.max.toordinal():
        raise ValueError(f"instant {ms} ms is outside the supported years 1..9999")
    d = date.fromordinal(ordinal)
    seconds = ms_of_day // 1000
    values = {
        "y": d.year,
        "M": d.month,
        "d": d.day,
        "H": seconds // 3600,
        "m": seconds // 60 % 60,
        "s": seconds % 60,
    }
    if pattern.week_based:
        values["Y"], values["w"] = _week_of(ordinal, rule)
        if not _MIN_YEAR <= values["Y"] <= _MAX_YEAR:
            raise ValueError(f"instant {ms} ms is outside the supported years 1..9999")
    out: list[str] = []
    for tok in pattern.tokens:
        if isinstance(tok, _Field):
            out.append(f"{values[tok.letter]:0{tok.width}d}")
        else:
            out.append(tok)
    return "".join(out)


def _parse_ms(pattern: _Pattern, stem: str, rule: tuple[int, int]) -> int:
    """Start (ms since 1970 UTC) of the period named by ``stem``; ValueError if invalid."""
    match = pattern.regex.fullmatch(stem)
    if match is None:
        raise ValueError(f"{stem!r} does not match pattern {pattern.source!r}")
    groups = {k: int(v) for k, v in match.groupdict().items()}
    if pattern.week_based:
        year, week = groups["Y"], groups["w"]
        if not _MIN_YEAR <= year <= _MAX_YEAR:
            raise ValueError(f"{stem!r}: week-based year {year} out of range")
        start = _week1_start(year, rule)
        weeks = (_week1_start(year + 1, rule) - start) // 7
        if not 1 <= week <= weeks:
            raise ValueError(f"{stem!r}: week {week} does not exist in week-based year {year}")
        return (start + (week - 1) * 7 - _EPOCH_ORDINAL) * _DAY_MS
    try:
        d = date(groups["y"], groups["M"], groups["d"])
    except ValueError as exc:
        raise ValueError(f"{stem!r}: invalid date ({exc})") from None
    hour, minute, second = groups.get("H", 0), groups.get("m", 0), groups.get("s", 0)
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"{stem!r}: invalid time of day")
    seconds = (hour * 60 + minute) * 60 + second
    return (d.toordinal() - _EPOCH_ORDINAL) * _DAY_MS + seconds * 1000


class CycleNamer:
    """Formats and parses cycle file stems (the part before ``.cq4``).

    Behaves like Java's ``RollingResourcesCache``: names are always in UTC and the
    epoch used for naming is the queue epoch truncated to a whole day
    (``epoch - epoch % 86400000`` with Java's remainder; if that remainder is
    negative the naming epoch is ``-86400000``).  ``name(cycle)`` formats the instant
    ``cycle * length_ms + naming_epoch``; ``parse`` computes
    ``(period_start - naming_epoch) / length_ms`` truncated toward zero.

    ``epoch`` is taken literally: pass the queue's effective epoch
    (:meth:`RollCycle.resolve_epoch`; e.g. ``WEEKLY`` queues use ``259200000``).

    Week-based patterns (``YYYY``/``ww``, i.e. ``WEEKLY``) depend on the Java default
    locale; ``week_rule`` selects ``"US"`` (weeks start on Sunday, week 1 contains
    January 1st) or ``"ISO"`` (weeks start on Monday, week 1 has at least 4 days).
    Parsing a week name returns the cycle whose start instant falls in that week, so
    ``parse(name(c)) == c`` for any epoch and either rule.  (Java's own parser for
    week-based names is broken: it returns an epoch-day number, not a cycle.)
    """

    __slots__ = ("_epoch", "_naming_epoch", "_pattern", "_roll_cycle", "_rule", "_week_rule")

    def __init__(self, roll_cycle: RollCycle, epoch: int = 0, week_rule: str = "US") -> None:
        rule = _WEEK_RULES.get(week_rule)
        if rule is None:
            raise ValueError(f"week_rule must be one of {sorted(_WEEK_RULES)}, got {week_rule!r}")
        self._roll_cycle = roll_cycle
        self._epoch = epoch
        self._naming_epoch = _naming_epoch(epoch)
        self._week_rule = week_rule
        self._rule = rule
        self._pattern = _compile_pattern(roll_cycle.format)

    @property
    def roll_cycle(self) -> RollCycle:
        """The roll cycle whose format and length are used."""
        return self._roll_cycle

    @property
    def epoch(self) -> int:
        """The queue epoch passed in (milliseconds)."""
        return self._epoch

    @property
    def naming_epoch(self) -> int:
        """The day-truncated epoch actually used for names (milliseconds)."""
        return self._naming_epoch

    @property
    def week_rule(self) -> str:
        """``"US"`` or ``"ISO"``."""
        return self._week_rule

    def __repr__(self) -> str:
        return (
            f"CycleNamer({self._roll_cycle.name}, epoch={self._epoch}, "
            f"week_rule={self._week_rule!r})"
        )

    def name(self, cycle: int) -> str:
        """Return the file stem for ``cycle``.

        Raises:
            ValueError: if the cycle's instant lies outside the years 1..9999.
        """
        ms = cycle * self._roll_cycle.length_ms + self._naming_epoch
        return _format_ms(self._pattern, ms, self._rule)

    def parse(self, stem: str) -> int:
        """Return the cycle named by ``stem`` (inverse of :meth:`name`).

        Parsing is strict: exact digit counts (ASCII only), exact literals and a valid
        date/time are required.

        Raises:
            ValueError: if ``stem`` does not match the format or the cycle does not fit
                in a 32-bit int.
        """
        start_ms = _parse_ms(self._pattern, stem, self._rule)
        delta = start_ms - self._naming_epoch
        length = self._roll_cycle.length_ms
        cycle = _ceil_div(delta, length) if self._pattern.week_based else _java_div(delta, length)
        if not _INT32_MIN <= cycle <= _INT32_MAX:
            raise ValueError(f"{stem!r}: cycle {cycle} does not fit in 32 bits")
        return cycle

    def matches(self, stem: str) -> bool:
        """Return True if :meth:`parse` accepts ``stem``."""
        try:
            self.parse(stem)
        except ValueError:
            return False
        return True


# ---------------------------------------------------------------------------
# Built-in roll cycles
# ---------------------------------------------------------------------------

_SUNDAY_1970_01_04: Final = 259_200_000


class RollCycles:
    """Namespace of the 28 built-in roll cycles, in the Java declaration order.

    Covers ``RollCycles``, ``LegacyRollCycles``, ``LargeRollCycles``,
    ``SparseRollCycles`` and ``TestRollCycles``.  ``DEFAULT`` is ``FAST_DAILY``.
    """

    __slots__ = ()

    # RollCycles
    FIVE_MINUTELY = make_roll_cycle("FIVE_MINUTELY", "yyyyMMdd-HHmm'V'", 300_000, 2048, 256)
    TEN_MINUTELY = make_roll_cycle("TEN_MINUTELY", "yyyyMMdd-HHmm'X'", 600_000, 2048, 256)
    TWENTY_MINUTELY = make_roll_cycle("TWENTY_MINUTELY", "yyyyMMdd-HHmm'XX'", 1_200_000, 2048, 256)
    HALF_HOURLY = make_roll_cycle("HALF_HOURLY", "yyyyMMdd-HHmm'H'", 1_800_000, 2048, 256)
    FAST_HOURLY = make_roll_cycle("FAST_HOURLY", "yyyyMMdd-HH'F'", 3_600_000, 4096, 256)
    TWO_HOURLY = make_roll_cycle("TWO_HOURLY", "yyyyMMdd-HH'II'", 7_200_000, 4096, 256)
    FOUR_HOURLY = make_roll_cycle("FOUR_HOURLY", "yyyyMMdd-HH'IV'", 14_400_000, 4096, 256)
    SIX_HOURLY = make_roll_cycle("SIX_HOURLY", "yyyyMMdd-HH'VI'", 21_600_000, 4096, 256)
    FAST_DAILY = make_roll_cycle("FAST_DAILY", "yyyyMMdd'F'", _DAY_MS, 4096, 256)
    WEEKLY = make_roll_cycle(
        "WEEKLY", "YYYY'W'ww", 7 * _DAY_MS, 4096, 256, default_epoch=_SUNDAY_1970_01_04
    )
    # LegacyRollCycles
    MINUTELY = make_roll_cycle("MINUTELY", "yyyyMMdd-HHmm", 60_000, 2048, 16)
    HOURLY = make_roll_cycle("HOURLY", "yyyyMMdd-HH", 3_600_000, 4096, 16)
    DAILY = make_roll_cycle("DAILY", "yyyyMMdd", _DAY_MS, 8192, 64)
    # LargeRollCycles
    LARGE_HOURLY = make_roll_cycle("LARGE_HOURLY", "yyyyMMdd-HH'L'", 3_600_000, 8192, 64)
    LARGE_DAILY = make_roll_cycle("LARGE_DAILY", "yyyyMMdd'L'", _DAY_MS, 32768, 128)
    XLARGE_DAILY = make_roll_cycle("XLARGE_DAILY", "yyyyMMdd'X'", _DAY_MS, 32768, 256)
    HUGE_DAILY = make_roll_cycle("HUGE_DAILY", "yyyyMMdd'H'", _DAY_MS, 32768, 1024)
    # SparseRollCycles
    SMALL_DAILY = make_roll_cycle("SMALL_DAILY", "yyyyMMdd'S'", _DAY_MS, 8192, 8)
    LARGE_HOURLY_SPARSE = make_roll_cycle(
        "LARGE_HOURLY_SPARSE", "yyyyMMdd-HH'LS'", 3_600_000, 4096, 1024
    )
    LARGE_HOURLY_XSPARSE = make_roll_cycle(
        "LARGE_HOURLY_XSPARSE", "yyyyMMdd-HH'LX'", 3_600_000, 2048, 1 << 20
    )
    HUGE_DAILY_XSPARSE = make_roll_cycle(
        "HUGE_DAILY_XSPARSE", "yyyyMMdd'HX'", _DAY_MS, 16384, 1 << 20
    )
    # TestRollCycles
    TEST_SECONDLY = make_roll_cycle("TEST_SECONDLY", "yyyyMMdd-HHmmss'T'", 1000, 32768, 4)
    TEST4_SECONDLY = make_roll_cycle("TEST4_SECONDLY", "yyyyMMdd-HHmmss'T4'", 1000, 32, 4)
    TEST_HOURLY = make_roll_cycle("TEST_HOURLY", "yyyyMMdd-HH'T'", 3_600_000, 16, 4)
    TEST_DAILY = make_roll_cycle("TEST_DAILY", "yyyyMMdd'T1'", _DAY_MS, 8, 1)
    TEST2_DAILY = make_roll_cycle("TEST2_DAILY", "yyyyMMdd'T2'", _DAY_MS, 16, 2)
    TEST4_DAILY = make_roll_cycle("TEST4_DAILY", "yyyyMMdd'T4'", _DAY_MS, 32, 4)
    TEST8_DAILY = make_roll_cycle("TEST8_DAILY", "yyyyMMdd'T8'", _DAY_MS, 128, 8)

    DEFAULT = FAST_DAILY

    @classmethod
    def all(cls) -> tuple[RollCycle, ...]:
        """Return the 28 built-in roll cycles in table (declaration) order."""
        return _ALL

    @classmethod
    def by_name(cls, name: str) -> RollCycle:
        """Return the built-in roll cycle called ``name`` (e.g. ``"FAST_DAILY"``).

        Raises:
            UnknownRollCycleError: (a ``ValueError`` and ``KeyError``) for an unknown name.
        """
        found = _BY_NAME.get(name) or _CUSTOM.get(name)
        if found is None:
            raise UnknownRollCycleError(
                f"unknown roll cycle {name!r}; expected one of: {', '.join(_BY_NAME)}"
                f"{''.join(', ' + n for n in _CUSTOM)} (or one of RollCycle.custom)"
            )
        return found

    @classmethod
    def by_format(cls, fmt: str) -> RollCycle | None:
        """Return the first built-in roll cycle (table order) whose format is ``fmt``."""
        for rc in _ALL:
            if rc.format == fmt:
                return rc
        return None

    @classmethod
    def for_settings(cls, fmt: str, length_ms: int, index_count: int,
                     index_spacing: int) -> RollCycle:
        """The roll cycle a queue's stored ``format`` and ``length`` name: the
        first built-in with them, else a cycle defined with
        :meth:`RollCycle.custom`, else one named ``custom:<format>:<length>``
        with the given index layout.

        Raises:
            ValueError: settings :func:`make_roll_cycle` refuses.
        """
        rc = cls.by_format(fmt)
        if rc is not None and rc.length_ms == length_ms:
            return rc
        for c in _CUSTOM.values():
            if c.format == fmt and c.length_ms == length_ms:
                return c
        return make_roll_cycle(f"custom:{fmt}:{length_ms}", fmt, length_ms, index_count,
                               index_spacing)


_ALL: Final[tuple[RollCycle, ...]] = tuple(
    value
    for key, value in vars(RollCycles).items()
    if isinstance(value, RollCycle) and key == value.name
)
_BY_NAME: Final[dict[str, RollCycle]] = {rc.name: rc for rc in _ALL}
#: the cycles defined with RollCycle.custom, by name
_CUSTOM: Final[dict[str, RollCycle]] = {}


def candidate_roll_cycles(stem: str, week_rule: str | None = None) -> list[RollCycle]:
    """Return every built-in roll cycle whose format parses the file stem ``stem``.

    Used to guess a queue's roll cycle from its file names when there is no
    metadata.  Results are in table order.  ``week_rule`` restricts week-based
    formats to one rule; by default a week name is accepted under either rule.
    """
    if week_rule is None:
        rules = list(_WEEK_RULES.values())
    else:
        rule = _WEEK_RULES.get(week_rule)
        if rule is None:
            raise ValueError(f"week_rule must be one of {sorted(_WEEK_RULES)}, got {week_rule!r}")
        rules = [rule]
    found: list[RollCycle] = []
    for rc in _ALL:
        pattern = _compile_pattern(rc.format)
        for rule in rules:
            try:
                _parse_ms(pattern, stem, rule)
            except ValueError:
                continue
            found.append(rc)
            break
    return found



def misnamed_cycle_files(namer: CycleNamer, stems: list[str]) -> list[str]:
    """The cycle file ``stems`` showing that ``namer`` is not what the files were
    named with; empty when it fits them.

    A stem is named when it parses and formats back to itself.  When ``namer``
    names none of the stems, all of them are returned; otherwise those that
    parse but format to another name (a roll length or epoch other than the
    files were written with).  Stems that do not look like the format at all,
    beside named ones, are stray files and fit.
    """
    named = 0
    others: list[str] = []
    wrong: list[str] = []
    for stem in stems:
        try:
            cycle = namer.parse(stem)
        except ValueError:
            others.append(stem)
            continue
        try:
            ok = namer.name(cycle) == stem
        except ValueError:
            ok = False
        if ok:
            named += 1
        else:
            wrong.append(stem)
    if not named:
        return wrong + others
    return wrong
