"""Custom roll cycles, the index layout overrides and roll-time settings (without
Java; ``test_java_cycles.py`` checks them against live Java)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

FIVE = ac.RollCycle.custom("H34B_FIVE_SECONDS", "yyyyMMdd-HHmmss'5'", 5000, 65536, 16)


def test_a_custom_cycle_numbers_as_javas_arithmetic() -> None:
    # max(32, log2(65536) * 2 + log2(16)) = 36
    assert FIVE.cycle_shift == 36 and FIVE.sequence_mask == (1 << 36) - 1
    assert ac.RollCycles.by_name("H34B_FIVE_SECONDS") is FIVE
    # the same definition again is fine; another under that name or a built-in's is not
    assert ac.RollCycle.custom("H34B_FIVE_SECONDS", "yyyyMMdd-HHmmss'5'", 5000, 65536, 16) == FIVE
    with pytest.raises(ValueError, match="already defined"):
        ac.RollCycle.custom("H34B_FIVE_SECONDS", "yyyyMMdd-HHmmss'5'", 5000, 8, 1)
    with pytest.raises(ValueError, match="built-in"):
        ac.RollCycle.custom("FAST_DAILY", "yyyyMMdd'Q'", 86_400_000)


def test_index_overrides_keep_the_cycle_shift() -> None:
    rc = ac.RollCycles.FAST_DAILY.with_index(index_count=32768, index_spacing=8)
    assert (rc.index_count, rc.index_spacing, rc.cycle_shift) == (32768, 8, 32)
    # rounded up to powers of two, as Java's builder rounds them
    assert ac.RollCycles.FAST_DAILY.with_index(index_count=3000).index_count == 4096
    assert ac.RollCycles.FAST_DAILY.with_index() is ac.RollCycles.FAST_DAILY
    with pytest.raises(ValueError):
        ac.RollCycles.FAST_DAILY.with_index(index_spacing=0)


def test_index_overrides_number_as_the_cycle_does(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(1_700_000_000_000)
    with ac.open_queue(tmp_path, index_count=32768, time_provider=clock) as q, \
            q.appender() as app:
        index = app.append(b"x")
        assert q.roll_cycle.cycle_shift == 32
        assert index == ac.RollCycles.FAST_DAILY.to_index(19675, 0)


def test_a_reopened_custom_queue_keeps_its_cycle(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(1_700_000_000_000)
    with ac.open_queue(tmp_path, roll_cycle=FIVE, time_provider=clock) as q, \
            q.appender() as app:
        first = app.append(b"a")
    with ac.open_queue(tmp_path) as q:  # no roll cycle given: the stored one's
        assert q.roll_cycle is FIVE
        with ac.open_queue(tmp_path, roll_cycle="H34B_FIVE_SECONDS") as q2:
            assert q2.roll_cycle is FIVE
    # a process that never defined it: named by the settings Java records
    code = ("import aiochronicle as ac, sys\n"
            "with ac.open_queue(sys.argv[1], read_only=True) as q:\n"
            "    e = q.tailer().read_nowait()\n"
            "    print(q.roll_cycle.name, q.roll_cycle.cycle_shift, e.index)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == ["custom:yyyyMMdd-HHmmss'5':5000", "36", str(first)]


def test_roll_time_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs a roll_time"):
        ac.QueueOptions(roll_time_zone="Europe/London")
    with pytest.raises(ValueError, match="not both"):
        ac.QueueOptions(roll_time=time(1), epoch=5)
    with pytest.raises(ValueError, match="daily"):
        ac.QueueOptions(roll_cycle=ac.RollCycles.FAST_HOURLY, roll_time=time(1),
                        roll_time_zone="Europe/London")
    with pytest.raises(ValueError, match="unknown time zone"):
        ac.QueueOptions(roll_time=time(1), roll_time_zone="Mars/Olympus")
    with pytest.raises(TypeError):
        ac.QueueOptions(roll_time="01:00")  # type: ignore[arg-type]
    o = ac.QueueOptions(roll_time=time(1), roll_time_zone="Europe/London")
    assert o.roll_time_zone == ZoneInfo("Europe/London")
    assert ac.QueueOptions(roll_time=time(1), roll_time_zone="UTC").roll_time_zone is UTC


def test_a_zoned_queue_reopens_with_its_zone(tmp_path: Path) -> None:
    clock = ac.SetTimeProvider(1_711_846_800_000)  # 2024-03-31 01:00 UTC: BST begins
    with ac.open_queue(tmp_path, roll_time=time(0, 0), roll_time_zone=ZoneInfo("Europe/London"),
                       time_provider=clock) as q, q.appender() as app:
        app.append(b"x")
        assert cycles_of(q).span_ms(q.current_cycle())[1] - clock.current_time_millis() \
            == 22 * 3_600_000  # the rest of a 23-hour day
    with ac.open_queue(tmp_path, time_provider=clock) as q:  # the stored zone wins
        assert q.roll_time == time(0, 0) and q.roll_time_zone == ZoneInfo("Europe/London")
        assert [p.name for p in tmp_path.glob("*.cq4")] == ["20240331F.cq4"]
