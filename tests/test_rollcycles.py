"""Tests for aiochronicle._format._rollcycles.

Expected values come from the Chronicle Queue reference (section 2 of
docs/reference chronicle-queue-format.md), from the Java sources it cites, or from
independent oracles (``datetime.strftime``, ``date.isocalendar``), never from the code
under test.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

import pytest

from aiochronicle._format._rollcycles import (
    CycleNamer,
    RollCycle,
    RollCycles,
    candidate_roll_cycles,
    cycle_shift_for,
    make_roll_cycle,
)

DAY_MS = 86_400_000
SUNDAY_1970_01_04 = 259_200_000

# Reference table 2.1, plus an equivalent strftime pattern (oracle for name()).
# name, format, lengthInMillis, indexCount, indexSpacing, cycleShift, maxMessagesPerCycle,
# defaultEpoch, strftime
TABLE: list[tuple[str, str, int, int, int, int, int, int, str | None]] = [
    ("FIVE_MINUTELY", "yyyyMMdd-HHmm'V'", 300000, 2048, 256, 32, 0x40000000, 0, "%Y%m%d-%H%MV"),
    ("TEN_MINUTELY", "yyyyMMdd-HHmm'X'", 600000, 2048, 256, 32, 0x40000000, 0, "%Y%m%d-%H%MX"),
    ("TWENTY_MINUTELY", "yyyyMMdd-HHmm'XX'", 1200000, 2048, 256, 32, 0x40000000, 0,
     "%Y%m%d-%H%MXX"),
    ("HALF_HOURLY", "yyyyMMdd-HHmm'H'", 1800000, 2048, 256, 32, 0x40000000, 0, "%Y%m%d-%H%MH"),
    ("FAST_HOURLY", "yyyyMMdd-HH'F'", 3600000, 4096, 256, 32, 0xFFFFFFFF, 0, "%Y%m%d-%HF"),
    ("TWO_HOURLY", "yyyyMMdd-HH'II'", 7200000, 4096, 256, 32, 0xFFFFFFFF, 0, "%Y%m%d-%HII"),
    ("FOUR_HOURLY", "yyyyMMdd-HH'IV'", 14400000, 4096, 256, 32, 0xFFFFFFFF, 0, "%Y%m%d-%HIV"),
    ("SIX_HOURLY", "yyyyMMdd-HH'VI'", 21600000, 4096, 256, 32, 0xFFFFFFFF, 0, "%Y%m%d-%HVI"),
    ("FAST_DAILY", "yyyyMMdd'F'", 86400000, 4096, 256, 32, 0xFFFFFFFF, 0, "%Y%m%dF"),
    ("WEEKLY", "YYYY'W'ww", 604800000, 4096, 256, 32, 0xFFFFFFFF, 259200000, None),
    ("MINUTELY", "yyyyMMdd-HHmm", 60000, 2048, 16, 32, 0x4000000, 0, "%Y%m%d-%H%M"),
    ("HOURLY", "yyyyMMdd-HH", 3600000, 4096, 16, 32, 0x10000000, 0, "%Y%m%d-%H"),
    ("DAILY", "yyyyMMdd", 86400000, 8192, 64, 32, 0xFFFFFFFF, 0, "%Y%m%d"),
    ("LARGE_HOURLY", "yyyyMMdd-HH'L'", 3600000, 8192, 64, 32, 0xFFFFFFFF, 0, "%Y%m%d-%HL"),
    ("LARGE_DAILY", "yyyyMMdd'L'", 86400000, 32768, 128, 37, 0x1FFFFFFFFF, 0, "%Y%m%dL"),
    ("XLARGE_DAILY", "yyyyMMdd'X'", 86400000, 32768, 256, 38, 0x3FFFFFFFFF, 0, "%Y%m%dX"),
    ("HUGE_DAILY", "yyyyMMdd'H'", 86400000, 32768, 1024, 40, 0xFFFFFFFFFF, 0, "%Y%m%dH"),
    ("SMALL_DAILY", "yyyyMMdd'S'", 86400000, 8192, 8, 32, 0x20000000, 0, "%Y%m%dS"),
    ("LARGE_HOURLY_SPARSE", "yyyyMMdd-HH'LS'", 3600000, 4096, 1024, 34, 0x3FFFFFFFF, 0,
     "%Y%m%d-%HLS"),
    ("LARGE_HOURLY_XSPARSE", "yyyyMMdd-HH'LX'", 3600000, 2048, 1048576, 42, 0x3FFFFFFFFFF, 0,
     "%Y%m%d-%HLX"),
    ("HUGE_DAILY_XSPARSE", "yyyyMMdd'HX'", 86400000, 16384, 1048576, 48, 0xFFFFFFFFFFFF, 0,
     "%Y%m%dHX"),
    ("TEST_SECONDLY", "yyyyMMdd-HHmmss'T'", 1000, 32768, 4, 32, 0xFFFFFFFF, 0, "%Y%m%d-%H%M%ST"),
    ("TEST4_SECONDLY", "yyyyMMdd-HHmmss'T4'", 1000, 32, 4, 32, 0x1000, 0, "%Y%m%d-%H%M%ST4"),
    ("TEST_HOURLY", "yyyyMMdd-HH'T'", 3600000, 16, 4, 32, 0x400, 0, "%Y%m%d-%HT"),
    ("TEST_DAILY", "yyyyMMdd'T1'", 86400000, 8, 1, 32, 0x40, 0, "%Y%m%dT1"),
    ("TEST2_DAILY", "yyyyMMdd'T2'", 86400000, 16, 2, 32, 0x200, 0, "%Y%m%dT2"),
    ("TEST4_DAILY", "yyyyMMdd'T4'", 86400000, 32, 4, 32, 0x1000, 0, "%Y%m%dT4"),
    ("TEST8_DAILY", "yyyyMMdd'T8'", 86400000, 128, 8, 32, 0x20000, 0, "%Y%m%dT8"),
]  # fmt: skip

TABLE_NAMES = [row[0] for row in TABLE]
STRFTIME = {row[0]: row[8] for row in TABLE}


def ms_of(dt: datetime) -> int:
    """Milliseconds since 1970-01-01T00:00Z of an aware datetime (exact integer arithmetic)."""
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def us_week(d: date) -> tuple[int, int]:
    """Week-based year and week per java.util.Locale.US (Sunday start, minimal days 1).

    With minimal days 1, week 1 is the Sunday-started week containing January 1st, so a
    week belongs to the year of its Saturday and is numbered by that Saturday's day of year.
    """
    saturday = d + timedelta(days=(5 - d.weekday()) % 7)
    return saturday.year, (saturday.timetuple().tm_yday - 1) // 7 + 1


def iso_week(d: date) -> tuple[int, int]:
    iso = d.isocalendar()
    return iso.year, iso.week


# ---------------------------------------------------------------------------
# Table and namespace
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("row", TABLE, ids=TABLE_NAMES)
def test_builtin_matches_reference_table(
    row: tuple[str, str, int, int, int, int, int, int, str | None],
) -> None:
    name, fmt, length, count, spacing, shift, max_msgs, epoch, _ = row
    rc = getattr(RollCycles, name)
    assert isinstance(rc, RollCycle)
    assert rc.name == name
    assert rc.format == fmt
    assert rc.length_ms == length
    assert rc.index_count == count
    assert rc.index_spacing == spacing
    assert rc.cycle_shift == shift
    assert rc.sequence_mask == (1 << shift) - 1
    assert rc.max_messages_per_cycle == max_msgs
    assert rc.default_epoch == epoch
    assert RollCycles.by_name(name) is rc
    assert RollCycles.by_format(fmt) is rc


def test_all_is_table_order() -> None:
    assert [rc.name for rc in RollCycles.all()] == TABLE_NAMES
    assert len(RollCycles.all()) == 28
    assert len({rc.format for rc in RollCycles.all()}) == 28


def test_default_is_fast_daily() -> None:
    assert RollCycles.DEFAULT is RollCycles.FAST_DAILY


def test_by_name_unknown() -> None:
    with pytest.raises(ValueError, match="unknown roll cycle 'NOPE'"):
        RollCycles.by_name("NOPE")
    with pytest.raises(KeyError):
        RollCycles.by_name("fast_daily")
    with pytest.raises(ValueError):
        RollCycles.by_name("DEFAULT")


def test_by_format_unknown() -> None:
    assert RollCycles.by_format("yyyyMMdd'Q'") is None
    assert RollCycles.by_format("yyyyMMdd") is RollCycles.DAILY


def test_roll_cycle_is_frozen() -> None:
    with pytest.raises(AttributeError):
        RollCycles.DAILY.length_ms = 1  # type: ignore[misc]


# ---------------------------------------------------------------------------
# Arithmetic
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "spacing", "shift"),
    [
        (4096, 256, 32),
        (2048, 16, 32),
        (8, 1, 32),
        (32768, 128, 37),
        (32768, 256, 38),
        (32768, 1024, 40),
        (4096, 1024, 34),
        (2048, 1 << 20, 42),
        (16384, 1 << 20, 48),
        # raw (non power of 2) arguments: floor(log2(20000)) = 14, floor(log2(1000)) = 9
        (20000, 1000, 37),
        (5000, 256, 32),
    ],
)
def test_cycle_shift_for(count: int, spacing: int, shift: int) -> None:
    assert cycle_shift_for(count, spacing) == shift


def test_cycle_shift_for_rejects_non_positive() -> None:
    with pytest.raises(ValueError):
        cycle_shift_for(0, 256)
    with pytest.raises(ValueError):
        cycle_shift_for(4096, -1)


def test_make_roll_cycle_rounds_like_java() -> None:
    rc = make_roll_cycle("CUSTOM", "yyyyMMdd'Q'", DAY_MS, 20000, 1000)
    assert rc.index_count == 32768  # next power of 2
    assert rc.index_spacing == 1024
    assert rc.cycle_shift == 37  # from the raw arguments, not 2*15 + 10 = 40
    assert rc.sequence_mask == (1 << 37) - 1
    assert rc.max_messages_per_cycle == (1 << 37) - 1  # min(mask, 2**40)
    small = make_roll_cycle("SMALL", "yyyyMMdd'q'", DAY_MS, 1, 1)
    assert small.index_count == 8  # minimum 8
    assert small.index_spacing == 1
    assert small.max_messages_per_cycle == 64
    assert small.default_epoch == 0


@pytest.mark.parametrize(
    ("fmt", "length", "count", "spacing"),
    [
        ("yyyyMMdd'Q'", 0, 4096, 256),
        ("yyyyMMdd'Q'", DAY_MS, 0, 256),
        ("yyMMdd", DAY_MS, 4096, 256),  # unsupported width
        ("yyyyMMddQ", DAY_MS, 4096, 256),  # unquoted letter
        ("yyyyMMdd'Q", DAY_MS, 4096, 256),  # unterminated quote
        ("yyyyMM", DAY_MS, 4096, 256),  # no day
        ("yyyy'W'ww", DAY_MS, 4096, 256),  # mixes calendar and week-based year
        ("yyyyMMdd[HH]", DAY_MS, 4096, 256),  # optional sections are not supported
    ],
)
def test_make_roll_cycle_rejects(fmt: str, length: int, count: int, spacing: int) -> None:
    with pytest.raises(ValueError):
        make_roll_cycle("BAD", fmt, length, count, spacing)


def test_fast_daily_index_examples() -> None:
    rc = RollCycles.FAST_DAILY
    assert rc.to_index(18949, 3) == 0x4A0500000003
    assert rc.to_index(19677, 2) == 84512071483394
    assert rc.to_cycle(0x4A0500000003) == 18949
    assert rc.to_sequence(0x4A0500000003) == 3
    assert rc.to_cycle(84512071483394) == 19677
    assert rc.to_sequence(84512071483394) == 2


def test_index_layout_for_wide_shifts() -> None:
    rc = RollCycles.HUGE_DAILY_XSPARSE  # cycleShift 48
    index = rc.to_index(18949, 0xABCDEF)
    assert index == 18949 * 2**48 + 0xABCDEF
    assert rc.to_cycle(index) == 18949
    assert rc.to_sequence(index) == 0xABCDEF
    large = RollCycles.LARGE_DAILY  # cycleShift 37
    assert large.to_index(1, 0) == 2**37
    assert large.to_sequence(2**37 + 2**36) == 2**36


def test_to_index_masks_sequence_like_java() -> None:
    rc = RollCycles.FAST_DAILY
    assert rc.to_index(5, 2**32 + 7) == 5 * 2**32 + 7
    assert rc.to_index(5, -1) == 5 * 2**32 + 0xFFFFFFFF


def test_to_cycle_rejects_out_of_range() -> None:
    rc = RollCycles.FAST_DAILY
    assert rc.to_cycle(2**63 - 1) == 2**31 - 1  # largest long still has a 31-bit cycle
    with pytest.raises(ValueError):
        rc.to_cycle(2**63)  # cycle 2**31 does not fit in 31 bits
    with pytest.raises(ValueError):
        rc.to_cycle(2**64 + 5)
    with pytest.raises(ValueError):
        rc.to_cycle(-1)
    with pytest.raises(ValueError):
        RollCycles.HUGE_DAILY_XSPARSE.to_cycle(2**63)  # not a Java long


def test_to_index_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        RollCycles.FAST_DAILY.to_index(2**31, 0)
    with pytest.raises(ValueError):
        RollCycles.FAST_DAILY.to_index(-1, 0)
    with pytest.raises(ValueError):
        RollCycles.HUGE_DAILY_XSPARSE.to_index(2**15, 0)  # 2**63 overflows a long
    assert RollCycles.HUGE_DAILY_XSPARSE.to_index(2**15 - 1, 0) == (2**15 - 1) * 2**48


def test_current_cycle_examples() -> None:
    rc = RollCycles.FAST_DAILY
    assert rc.current_cycle(1_637_251_500_000) == 18949
    assert rc.current_cycle(1_637_308_800_000) == 18950
    assert rc.current_cycle(1_637_280_000_000) == 18950  # 2021-11-19T00:00Z
    assert rc.current_cycle(1_637_279_999_999) == 18949
    assert RollCycles.FAST_HOURLY.current_cycle(1_637_251_500_000) == 454792
    assert RollCycles.TEST_SECONDLY.current_cycle(1_637_251_500_999) == 1_637_251_500


def test_current_cycle_truncates_toward_zero() -> None:
    rc = RollCycles.FAST_DAILY
    assert rc.current_cycle(-1) == 0
    assert rc.current_cycle(-DAY_MS + 1) == 0
    assert rc.current_cycle(-DAY_MS) == -1
    assert rc.current_cycle(-DAY_MS - 1) == -1
    assert rc.current_cycle(0, epoch=1) == 0


def test_current_cycle_with_epoch() -> None:
    rc = RollCycles.FAST_DAILY
    hour = 3_600_000
    midnight = ms_of(datetime(2021, 11, 18, tzinfo=UTC))
    assert rc.current_cycle(midnight, epoch=hour) == 18948
    assert rc.current_cycle(midnight + hour - 1, epoch=hour) == 18948
    assert rc.current_cycle(midnight + hour, epoch=hour) == 18949
    weekly = RollCycles.WEEKLY
    assert weekly.current_cycle(SUNDAY_1970_01_04, epoch=weekly.default_epoch) == 0


def test_resolve_epoch() -> None:
    assert RollCycles.WEEKLY.resolve_epoch(0) == SUNDAY_1970_01_04
    assert RollCycles.WEEKLY.resolve_epoch(5) == 5
    assert RollCycles.FAST_DAILY.resolve_epoch(0) == 0


# ---------------------------------------------------------------------------
# Naming
# ---------------------------------------------------------------------------


def test_naming_examples() -> None:
    fast = CycleNamer(RollCycles.FAST_DAILY)
    assert fast.name(18949) == "20211118F"
    assert fast.parse("20211118F") == 18949
    daily = CycleNamer(RollCycles.DAILY)
    assert daily.name(18956) == "20211125"
    assert daily.parse("20211125") == 18956
    assert fast.name(0) == "19700101F"
    assert fast.name(-1) == "19691231F"
    assert fast.parse("19691231F") == -1
    hourly = CycleNamer(RollCycles.FAST_HOURLY)
    assert hourly.name(454792) == "20211118-16F"
    five = CycleNamer(RollCycles.FIVE_MINUTELY)
    assert five.name(1_637_251_500_000 // 300_000) == "20211118-1605V"
    secondly = CycleNamer(RollCycles.TEST4_SECONDLY)
    assert secondly.name(1_637_251_500) == "20211118-160500T4"


def test_epoch_offset_naming_example() -> None:
    """Reference 2.3: epoch = 1 h with FAST_DAILY; cycle d covers [d*24h+1h, (d+1)*24h+1h)
    but the file is named for day d."""
    hour = 3_600_000
    rc = RollCycles.FAST_DAILY
    namer = CycleNamer(rc, epoch=hour)
    assert namer.naming_epoch == 0
    assert namer.epoch == hour
    before = ms_of(datetime(2021, 11, 18, 0, 30, tzinfo=UTC))
    after = ms_of(datetime(2021, 11, 18, 1, 0, tzinfo=UTC))
    assert namer.name(rc.current_cycle(before, epoch=hour)) == "20211117F"
    assert namer.name(rc.current_cycle(after, epoch=hour)) == "20211118F"
    assert namer.parse("20211118F") == 18949


@pytest.mark.parametrize(
    ("epoch", "naming_epoch", "name0"),
    [
        (0, 0, "19700101F"),
        (3_600_000, 0, "19700101F"),
        (DAY_MS + 3_600_000, DAY_MS, "19700102F"),
        (DAY_MS - 1, 0, "19700101F"),
        # negative epochs with a negative Java remainder collapse to -1 day
        (-1, -DAY_MS, "19691231F"),
        (-DAY_MS - 1, -DAY_MS, "19691231F"),
        (-3 * DAY_MS + 5, -DAY_MS, "19691231F"),
        # Java: a remainder of exactly 0 keeps the epoch (epoch % DAY == 0 branch)
        (-2 * DAY_MS, -2 * DAY_MS, "19691230F"),
    ],
)
def test_naming_epoch_truncation(epoch: int, naming_epoch: int, name0: str) -> None:
    namer = CycleNamer(RollCycles.FAST_DAILY, epoch=epoch)
    assert namer.naming_epoch == naming_epoch
    assert namer.name(0) == name0
    assert namer.parse(name0) == 0


ANCHORS = [
    datetime(1970, 1, 1, tzinfo=UTC),
    datetime(2000, 2, 29, 12, tzinfo=UTC),
    datetime(2021, 11, 18, 16, 5, tzinfo=UTC),
    datetime(2021, 12, 31, 23, 50, tzinfo=UTC),
    datetime(2024, 2, 28, 23, 30, tzinfo=UTC),
    datetime(2037, 12, 31, 23, tzinfo=UTC),
]


@pytest.mark.parametrize(
    "rc", [r for r in RollCycles.all() if r.name != "WEEKLY"], ids=lambda rc: rc.name
)
def test_name_parse_round_trip_calendar(rc: RollCycle) -> None:
    namer = CycleNamer(rc)
    oracle = STRFTIME[rc.name]
    assert oracle is not None
    for anchor in ANCHORS:
        base = ms_of(anchor) // rc.length_ms
        names = [namer.name(cycle) for cycle in range(base - 40, base + 40)]
        # reference 2.3: directory order is lexicographic, so names must sort by cycle
        assert names == sorted(set(names))
        for cycle, name in zip(range(base - 40, base + 40), names, strict=True):
            assert name == utc(cycle * rc.length_ms).strftime(oracle)
            assert namer.parse(name) == cycle
            assert namer.matches(name)


def test_round_trip_with_epoch_offsets() -> None:
    for rc in (RollCycles.FAST_DAILY, RollCycles.FAST_HOURLY, RollCycles.FIVE_MINUTELY):
        for epoch in (3_600_000, DAY_MS + 1, -1):
            namer = CycleNamer(rc, epoch=epoch)
            for cycle in range(100, 200):
                assert namer.parse(namer.name(cycle)) == cycle


def _weekly_cycles_around_new_year(epoch: int) -> list[int]:
    cycles: list[int] = []
    for year in range(1971, 2101):
        lo = ms_of(datetime(year - 1, 12, 1, tzinfo=UTC))
        hi = ms_of(datetime(year, 2, 1, tzinfo=UTC))
        cycles.extend(range((lo - epoch) // (7 * DAY_MS), (hi - epoch) // (7 * DAY_MS) + 1))
    return cycles


@pytest.mark.parametrize(("rule", "oracle"), [("US", us_week), ("ISO", iso_week)])
@pytest.mark.parametrize("epoch", [SUNDAY_1970_01_04, 0, 3 * DAY_MS + 7_200_000])
def test_weekly_round_trip_year_boundaries(
    rule: str, oracle: Callable[[date], tuple[int, int]], epoch: int
) -> None:
    rc = RollCycles.WEEKLY
    namer = CycleNamer(rc, epoch=epoch, week_rule=rule)
    naming_epoch = epoch - epoch % DAY_MS
    previous: str | None = None
    for cycle in _weekly_cycles_around_new_year(epoch):
        name = namer.name(cycle)
        start = utc(cycle * rc.length_ms + naming_epoch).date()
        year, week = oracle(start)
        assert name == f"{year:04d}W{week:02d}"
        assert namer.parse(name) == cycle
        if previous is not None and previous.startswith(name[:4]):
            assert name > previous  # file names sort chronologically within a year
        previous = name


def test_weekly_known_names() -> None:
    rc = RollCycles.WEEKLY
    us = CycleNamer(rc, epoch=rc.default_epoch, week_rule="US")
    iso = CycleNamer(rc, epoch=rc.default_epoch, week_rule="ISO")

    def cycle_of(d: date) -> int:
        return (d - date(1970, 1, 4)).days // 7

    assert us.name(0) == "1970W02"  # Sun 4 Jan 1970; US week 1 is Sun 28 Dec - Sat 3 Jan
    assert iso.name(0) == "1970W01"  # ISO week 1 of 1970 is Mon 29 Dec 1969 - Sun 4 Jan
    sunday = cycle_of(date(2021, 12, 26))
    assert us.name(sunday) == "2022W01"  # the week containing 1 Jan 2022
    assert iso.name(sunday) == "2021W51"
    assert us.name(cycle_of(date(2021, 1, 3))) == "2021W02"
    assert iso.name(cycle_of(date(2021, 1, 3))) == "2020W53"
    assert us.name(cycle_of(date(2016, 12, 25))) == "2016W53"
    assert iso.name(cycle_of(date(2016, 12, 25))) == "2016W51"
    assert us.parse("2022W01") == sunday
    assert iso.parse("2021W51") == sunday


@pytest.mark.parametrize(
    ("rule", "stem", "valid"),
    [
        ("US", "2021W52", True),
        ("US", "2021W53", False),
        ("US", "2016W53", True),
        ("US", "2020W53", False),
        ("ISO", "2020W53", True),
        ("ISO", "2021W53", False),
        ("ISO", "2016W52", True),
        ("US", "2021W00", False),
        ("ISO", "2021W00", False),
        ("US", "2021W1", False),
        ("US", "2021W001", False),
        ("US", "2021w01", False),
        ("ISO", "21W01", False),
    ],
)
def test_weekly_parse_validity(rule: str, stem: str, valid: bool) -> None:
    namer = CycleNamer(RollCycles.WEEKLY, epoch=SUNDAY_1970_01_04, week_rule=rule)
    assert namer.matches(stem) is valid
    if not valid:
        with pytest.raises(ValueError):
            namer.parse(stem)


@pytest.mark.parametrize(
    ("rc_name", "stem"),
    [
        ("FAST_HOURLY", "20211118F"),  # FAST_DAILY name
        ("FAST_DAILY", "20211118"),  # DAILY name
        ("DAILY", "20211118F"),
        ("FAST_DAILY", "20211118f"),  # literal is case-sensitive
        ("FAST_DAILY", "2021111F"),
        ("FAST_DAILY", "202111188F"),
        ("FAST_DAILY", "20211318F"),  # month 13
        ("FAST_DAILY", "20210229F"),  # 2021 is not a leap year
        ("FAST_DAILY", "20211100F"),
        ("FAST_DAILY", "00001118F"),  # year 0
        ("FAST_DAILY", "2021111\uff18F"),  # non-ASCII digit
        ("FAST_DAILY", "+2021118F"),
        ("FAST_DAILY", " 20211118F"),
        ("FAST_DAILY", "20211118F "),
        ("FAST_DAILY", "20211118F.cq4"),
        ("FAST_DAILY", ""),
        ("FAST_HOURLY", "20211118-24F"),
        ("FAST_HOURLY", "20211118_12F"),
        ("FIVE_MINUTELY", "20211118-1260V"),
        ("TEST_SECONDLY", "20211118-120060T"),
        ("TEST_SECONDLY", "20211118-120000T4"),
        ("TWENTY_MINUTELY", "20211118-1200X"),
        ("MINUTELY", "20211118-12"),
        ("HUGE_DAILY", "20211118HX"),
    ],
)
def test_strict_parse_rejections(rc_name: str, stem: str) -> None:
    namer = CycleNamer(RollCycles.by_name(rc_name))
    assert not namer.matches(stem)
    with pytest.raises(ValueError):
        namer.parse(stem)


def test_parse_accepts_leap_day() -> None:
    assert CycleNamer(RollCycles.FAST_DAILY).parse("20240229F") == 19782


def test_parse_uses_java_formula_for_unaligned_names() -> None:
    # (epochDay*86400 + secondOfDay - epoch/1000) / (length/1000), truncated
    five = CycleNamer(RollCycles.FIVE_MINUTELY)
    assert five.parse("20211118-1607V") == five.parse("20211118-1605V")
    assert five.parse("20211118-1605V") == 1_637_251_500_000 // 300_000
    two = CycleNamer(RollCycles.TWO_HOURLY)
    assert two.parse("20211118-15II") == two.parse("20211118-14II")


def test_parse_rejects_cycle_outside_int32() -> None:
    namer = CycleNamer(RollCycles.TEST_SECONDLY)
    assert namer.parse("20380119-031407T") == 2**31 - 1
    with pytest.raises(ValueError):
        namer.parse("20380119-031408T")


def test_name_outside_supported_years() -> None:
    namer = CycleNamer(RollCycles.FAST_DAILY)
    assert namer.name(2_932_896) == "99991231F"
    with pytest.raises(ValueError):
        namer.name(2_932_897)


def test_bad_week_rule() -> None:
    with pytest.raises(ValueError):
        CycleNamer(RollCycles.WEEKLY, week_rule="DE")
    with pytest.raises(ValueError):
        candidate_roll_cycles("2021W01", week_rule="iso")


def test_namer_properties() -> None:
    namer = CycleNamer(RollCycles.WEEKLY, epoch=SUNDAY_1970_01_04, week_rule="ISO")
    assert namer.roll_cycle is RollCycles.WEEKLY
    assert namer.week_rule == "ISO"
    assert namer.naming_epoch == SUNDAY_1970_01_04
    assert "WEEKLY" in repr(namer)


def test_quoted_literal_escapes() -> None:
    rc = make_roll_cycle("QUOTED", "yyyy-MM-dd'T''x'", DAY_MS, 4096, 256)
    namer = CycleNamer(rc)
    assert namer.name(18949) == "2021-11-18T'x"
    assert namer.parse("2021-11-18T'x") == 18949


# ---------------------------------------------------------------------------
# Guessing the roll cycle from a file name
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stem", "expected"),
    [
        ("20211118F", ["FAST_DAILY"]),
        ("20211118", ["DAILY"]),
        ("20211118-12", ["HOURLY"]),
        ("20211118-1200", ["MINUTELY"]),
        ("20211118-1205V", ["FIVE_MINUTELY"]),
        ("20211118-12VI", ["SIX_HOURLY"]),
        ("20211118X", ["XLARGE_DAILY"]),
        ("20211118-1200X", ["TEN_MINUTELY"]),
        ("20211118T4", ["TEST4_DAILY"]),
        ("20211118-120000T4", ["TEST4_SECONDLY"]),
        ("2021W46", ["WEEKLY"]),
        ("2020W53", ["WEEKLY"]),  # ISO only
        ("2016W53", ["WEEKLY"]),  # US only
        ("2021W53", []),
        ("20211318F", []),
        ("metadata", []),
        ("", []),
    ],
)
def test_candidate_roll_cycles(stem: str, expected: list[str]) -> None:
    assert [rc.name for rc in candidate_roll_cycles(stem)] == expected


def test_candidate_roll_cycles_week_rule() -> None:
    assert candidate_roll_cycles("2020W53", week_rule="US") == []
    assert candidate_roll_cycles("2020W53", week_rule="ISO") == [RollCycles.WEEKLY]


@pytest.mark.parametrize("rc", RollCycles.all(), ids=lambda rc: rc.name)
def test_every_builtin_name_identifies_its_cycle(rc: RollCycle) -> None:
    namer = CycleNamer(rc, epoch=rc.default_epoch)
    for cycle in range(100, 110):
        assert candidate_roll_cycles(namer.name(cycle)) == [rc]
