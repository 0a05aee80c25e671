"""Roll cycles against live Java Chronicle Queue: custom cycles, the index_count /
index_spacing overrides and roll times, each way (``interop/java``'s ``Cycles``).

Every expectation about Java is what the JVM printed; the build of the Java programs
failing fails these tests (they never skip).
"""

from __future__ import annotations

import subprocess
from datetime import time
from pathlib import Path

import pytest
from test_java_live import JAVA_OWN_WARNINGS, VERSIONS, _warnings, java, java_excerpts

import aiochronicle as ac
import jvm
from aiochronicle._objects._queue import cycles_of

__all__ = ["java"]  # the session fixture that builds the Java programs

T0 = 1_700_000_000_000          # 2023-11-14 22:13:20 UTC
N = 300                         # excerpts: past several index entries of spacing 8

#: a custom cycle whose own index settings make a 38-bit cycle shift (Java computes
#: max(32, log2(65536) * 2 + log2(64)) from the cycle's defaults)
WIDE = ac.RollCycle.custom("H34B_TWO_MINUTES", "yyyyMMdd-HHmm'M'", 120_000, 65536, 64)

#: (Java's roll spec, Python's roll cycle, index_count, index_spacing): overrides on a
#: built-in (the numbering stays FAST_DAILY's 32-bit shift), and a custom cycle
CASES = [
    ("FAST_DAILY", ac.RollCycles.FAST_DAILY, 32768, 8),
    (f"custom:{WIDE.format}:{WIDE.length_ms}:65536:64", WIDE, 0, 0),
]
IDS = ["fast_daily-32768-8", "custom-shift38"]


def cycles_java(version: str, *args: str) -> list[str]:
    proc = subprocess.run(jvm.command(version, *args, main="aiochronicle.interop.Cycles"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    allowed = (*JAVA_OWN_WARNINGS, "Enterprise", "Non-UTC roll time zone")
    assert _warnings(proc.stderr, allowed) == [], proc.stderr
    return proc.stdout.splitlines()


def overrides(count: int, spacing: int) -> dict[str, int]:
    return {k: v for k, v in (("index_count", count), ("index_spacing", spacing)) if v}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("spec", "rc", "count", "spacing"), CASES, ids=IDS)
def test_java_writes_python_reads_the_same_indices(java: None, version: str, spec: str,
                                                   rc: ac.RollCycle, count: int, spacing: int,
                                                   tmp_path: Path) -> None:
    out = cycles_java(version, "write", str(tmp_path), spec, str(count), str(spacing),
                      str(N), str(T0))
    written = [int(line.split()[1], 16) for line in out if line.startswith("W ")]
    assert len(written) == N
    with ac.open_queue(tmp_path, roll_cycle=rc, **overrides(count, spacing)) as q:
        assert q.roll_cycle.cycle_shift == rc.cycle_shift
        assert q.roll_cycle.name == rc.name
        tailer = q.tailer()
        got = [(e.index, bytes(e.payload)) for e in iter(tailer.read_nowait, None)]
        assert got == [(w, b"x%d" % i) for i, w in enumerate(written)]
        # a seek goes through the files' index arrays (Java's layout)
        assert tailer.move_to_index(written[257])
        e = tailer.read_nowait()
        assert e is not None and (e.index, bytes(e.payload)) == (written[257], b"x257")
        if count:
            assert q.roll_cycle.index_count == count and q.roll_cycle.index_spacing == spacing


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("spec", "rc", "count", "spacing"), CASES, ids=IDS)
def test_python_writes_java_reads_the_same_indices(java: None, version: str, spec: str,
                                                   rc: ac.RollCycle, count: int, spacing: int,
                                                   tmp_path: Path) -> None:
    written = []
    with ac.open_queue(tmp_path, roll_cycle=rc, time_provider=ac.SetTimeProvider(T0),
                       **overrides(count, spacing)) as q, q.appender() as app:
        for i in range(N):
            written.append(app.append(b"x%d" % i))
    assert written[0] == rc.to_index(rc.current_cycle(T0), 0)
    out = cycles_java(version, "tail", str(tmp_path), spec, str(count), str(spacing),
                      f"{written[257]:x}")
    seek = out.index("SEEK")
    want = [(w, b"x%d" % i) for i, w in enumerate(written)]
    assert java_excerpts(out[:seek]) == want
    # Java's moveToIndex goes through Python's index arrays, then reads on
    assert java_excerpts(out[seek:]) == want[257:]


@pytest.mark.parametrize("version", VERSIONS)
def test_utc_roll_time_names_and_cycles_as_java(java: None, version: str,
                                                tmp_path: Path) -> None:
    """``roll_time=`` in UTC: the same cycles, files and metadata as Java's
    ``rollTime(t, UTC)``, both ways; Java (open source) refuses any other zone."""
    times = [T0, T0 + 20_000_000, T0 + 100_000_000]
    jdir, pdir = tmp_path / "java", tmp_path / "python"
    out = cycles_java(version, "rolltime", str(jdir), "FAST_DAILY", "21:15", "UTC",
                      *map(str, times))
    java_cycles = [(int(p[1]), int(p[2]), int(p[3], 16))
                   for p in (line.split() for line in out) if p[0] == "R"]
    java_files = [line.split()[1] for line in out if line.startswith("F ")]
    clock = ac.SetTimeProvider(times[0])
    with ac.open_queue(pdir, roll_cycle="FAST_DAILY", roll_time=time(21, 15),
                       roll_time_zone="UTC", time_provider=clock) as q, q.appender() as app:
        mine = []
        for t in times:
            clock.set_millis(t)
            index = app.append(b"t%d" % t)
            mine.append((t, q.roll_cycle.to_cycle(index), index))
    assert mine == java_cycles
    assert sorted(p.name for p in pdir.iterdir()) == java_files
    # each reads the other's roll settings back
    with ac.open_queue(jdir, read_only=True) as q:
        assert (q.roll_time, str(q.roll_time_zone), q.epoch) == (time(21, 15), "UTC",
                                                                   76_500_000)
    out = cycles_java(version, "tail", str(pdir), "FAST_DAILY", "0", "0")
    assert [i for i, _ in java_excerpts(out)] == [c[2] for c in java_cycles]
    if version == jvm.NEWEST:  # (5.21 refuses it the same way)
        refused = cycles_java(version, "rolltime", str(tmp_path / "zoned"), "FAST_DAILY",
                              "00:00", "Europe/London", str(T0))
        assert refused[0].startswith("REFUSED ")


#: (zone, roll time, dates around its daylight-saving changes in 2024)
ZONE_DAYS = [
    ("Europe/London", "00:00", ["2024-03-30", "2024-03-31", "2024-04-01", "2024-10-26",
                                "2024-10-27", "2024-10-28"]),
    # the roll time inside the skipped hour and inside the repeated one
    ("Europe/London", "01:30", ["2024-03-30", "2024-03-31", "2024-04-01", "2024-10-26",
                                "2024-10-27", "2024-10-28"]),
    # clocks change at midnight there: the roll time itself is skipped
    ("America/Santiago", "00:00", ["2024-04-06", "2024-04-07", "2024-09-07", "2024-09-08",
                                   "2024-09-09"]),
    ("America/New_York", "17:00", ["2024-03-09", "2024-03-10", "2024-11-02", "2024-11-03"]),
]


@pytest.mark.parametrize(("zone", "at", "days"), ZONE_DAYS,
                         ids=[f"{z}-{a}" for z, a, _ in ZONE_DAYS])
def test_zone_days_start_where_java_time_puts_them(java: None, zone: str, at: str,
                                                   days: list[str], tmp_path: Path) -> None:
    """The open-source Java builder refuses a zone (Enterprise only): each cycle's
    start is checked against java.time, and a Python appender at every start (and
    just before it) writes into the cycle and file of that local date."""
    out = cycles_java(jvm.NEWEST, "zonedays", at, zone, *days)
    starts = [(p[1], int(p[2]), int(p[3])) for p in (line.split() for line in out)
              if p[0] == "Z"]
    assert [d for d, _, _ in starts] == days
    hh, mm = map(int, at.split(":"))
    clock = ac.SetTimeProvider(starts[0][2] - 1)
    with ac.open_queue(tmp_path, roll_time=time(hh, mm), roll_time_zone=zone,
                       time_provider=clock) as q, q.appender() as app:
        assert q.epoch == (hh * 60 + mm) * 60_000
        seen = []
        for day, cycle, start in starts:
            assert cycles_of(q).span_ms(cycle)[0] == start
            if seen and seen[-1][0] == cycle - 1:  # consecutive days: 23, 24 or 25 hours
                assert cycles_of(q).span_ms(cycle - 1)[1] == start
            for t, want in ((start - 1, cycle - 1), (start, cycle)):
                clock.set_millis(max(t, clock.current_time_millis()))
                if clock.current_time_millis() != t:
                    continue
                index = app.append(b"%d" % t)
                assert q.roll_cycle.to_cycle(index) == want, (day, t)
                seen.append((want, t))
        names = {p.name for p in tmp_path.iterdir() if p.suffix == ".cq4"}
        assert {d.replace("-", "") + "F.cq4" for d in days} <= names
    with ac.open_queue(tmp_path, read_only=True) as q:
        assert (q.roll_time, str(q.roll_time_zone)) == (time(hh, mm), zone)
        tailer = q.tailer()
        got = [(q.roll_cycle.to_cycle(e.index), int(bytes(e.payload)))
               for e in iter(tailer.read_nowait, None)]
        assert got == seen
