"""Rolling: cycle files, EOF markers, the directory listing, gaps, epochs.

The specification is Java Chronicle Queue v5 (``chronicle-queue-format.md``
sections 2, 3, 6.2, 6.4 and 7).  The clock is a ``SetTimeProvider``: nothing
sleeps across a roll.  Expected indices, cycles and file names are computed
independently (``cycle << 32 | seq``; names with ``datetime.strftime``), and
cycle files are checked by walking their bytes without the library.
"""

from __future__ import annotations

import itertools
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rawfile import raw_documents

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

SECOND = 1000
HOUR = 3_600_000
DAY = 86_400_000
H0 = 472_222  # FAST_HOURLY cycle of 2023-11-14 22:00 UTC
S0 = 1_700_000_000  # TEST4_SECONDLY cycle of 2023-11-14 22:13:20 UTC
DAY0 = 19_675  # 2023-11-14
SMALL = 256 << 10



def ix(cycle: int, seq: int) -> int:
    """Index for roll cycles with cycleShift 32 (all used here; reference §2.2)."""
    return (cycle << 32) | seq


def utc_name(ms: int, fmt: str) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime(fmt)


def hourly_name(cycle: int) -> str:  # FAST_HOURLY: yyyyMMdd-HH'F'
    return utc_name(cycle * HOUR, "%Y%m%d-%HF") + ".cq4"


def secondly_name(cycle: int) -> str:  # TEST4_SECONDLY: yyyyMMdd-HHmmss'T4'
    return utc_name(cycle * SECOND, "%Y%m%d-%H%M%ST4") + ".cq4"


def open_q(path: Path | str, clock: ac.SetTimeProvider, **kw: object) -> ac.Queue:
    kw.setdefault("block_size", SMALL)
    kw.setdefault("roll_cycle", ac.RollCycles.FAST_HOURLY)
    return ac.open_queue(path, time_provider=clock, **kw)  # type: ignore[arg-type]


def read_all(t: ac.Tailer) -> list[ac.Excerpt]:
    out = []
    while (ex := t.read_nowait()) is not None:
        out.append(ex)
    return out


def data_of(path: str | Path) -> list[bytes]:
    return [p for k, _, p in raw_documents(path) if k == "data"]


def ends_with_eof(path: str | Path) -> bool:
    docs = raw_documents(path)
    # EOF marker: C0 00 00 00 then the field name "EOF" (C3 45 4F 46), reference §3
    return bool(docs) and docs[-1][0] == "eof" and docs[-1][2] == b"\xc3EOF"


# ---------------------------------------------------------------------------


def test_roll_through_many_cycles(tmp_path: Path) -> None:
    n_cycles, per_cycle = 220, 3
    clk = ac.SetTimeProvider(H0 * HOUR + 1234)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q, open_q(qdir, clk) as other:
        a = q.appender()
        live = q.tailer()
        live_other = other.tailer()  # a second queue object, as another process would
        live_ro = None
        expected: list[ac.Excerpt] = []
        got_live: list[ac.Excerpt] = []
        got_other: list[ac.Excerpt] = []
        got_ro: list[ac.Excerpt] = []
        mods = []
        for k in range(n_cycles):
            c = H0 + k
            for j in range(per_cycle):
                payload = b"%d/%d" % (c, j)
                assert a.append(payload) == ix(c, j)
                expected.append(ac.Excerpt(ix(c, j), payload))
            assert a.cycle == c
            # the listing in metadata.cq4t is kept current on every roll (§7.1)
            assert q.table_store_get("listing.highestCycle") == c
            assert q.table_store_get("listing.lowestCycle") == H0
            mods.append(q.table_store_get("listing.modCount"))
            # tailers stop at the end of the current cycle (no EOF yet) and cross to the
            # next only once the appender rolls and writes the EOF
            got_live.extend(read_all(live))
            got_other.extend(read_all(live_other))
            if k == 1:
                live_ro = ac.open_queue(qdir, read_only=True, block_size=SMALL)
                t_ro = live_ro.tailer()
            if live_ro is not None:
                got_ro.extend(read_all(t_ro))
            assert got_live == expected
            clk.advance_millis(HOUR)
        assert live_ro is not None
        live_ro.close()

        assert got_other == expected
        assert got_ro == expected
        assert all(m2 > m1 for m1, m2 in itertools.pairwise(mods)), mods
        cycles = list(range(H0, H0 + n_cycles))
        assert q.cycles() == cycles
        assert other.cycles() == cycles
        assert q.first_cycle == H0 and q.last_cycle == H0 + n_cycles - 1
        assert q.first_index == ix(H0, 0)
        assert q.last_index == ix(H0 + n_cycles - 1, per_cycle - 1)
        assert q.entry_count() == n_cycles * per_cycle
        assert sorted(os.listdir(qdir)) == sorted([hourly_name(c) for c in cycles]
                                                  + ["metadata.cq4t"])
        assert all(q.cycle_path(c) == str(qdir / hourly_name(c)) for c in cycles[:3])

        # every closed cycle ends with EOF right after its excerpts; the open one does not
        for c in cycles:
            path = qdir / hourly_name(c)
            assert data_of(path) == [b"%d/%d" % (c, j) for j in range(per_cycle)]
            assert ends_with_eof(path) == (c != cycles[-1]), c

        # fresh readers see everything in order
        assert read_all(q.tailer()) == expected
        t = q.tailer()
        batched: list[ac.Excerpt] = []
        while len(b := t.read_many(max_count=7)):
            batched.extend(b)
        assert batched == expected
        named = q.tailer("roller")
        assert read_all(named) == expected
        assert q.table_store_get("index.roller") == ix(cycles[-1], per_cycle)


def test_tailer_waits_at_a_cycle_without_eof_until_an_appender_normalises_it(
        tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        a = q.appender()
        a.append(b"c0-0")
        a.append(b"c0-1")
        clk.advance_millis(HOUR)
        a.append(b"c1-0")
    # simulate a writer that died before writing the EOF of H0
    p0 = qdir / hourly_name(H0)
    docs = raw_documents(p0)
    assert docs[-1][0] == "eof"
    with open(p0, "r+b") as f:
        f.seek(docs[-1][1])
        f.write(bytes(8))
    assert not ends_with_eof(p0)

    clk.advance_millis(HOUR)  # now in H0 + 2: H0 + 1 has no EOF either
    with open_q(qdir, clk) as q:
        t = q.tailer()
        with cycles_of(q).write_lock:
            # no EOF, a live writer, the file changed just now: the writer may
            # still be in H0, so a tailer does not move on (§7.2)
            got = read_all(t)
            assert [e.index for e in got] == [ix(H0, 0), ix(H0, 1)]
            assert t.read_nowait() is None
            assert t.read_nowait() is None
        a = q.appender()
        assert a.append(b"c2-0") == ix(H0 + 2, 0)
        # the appender closed every older cycle (§6.2), so the tailer goes on
        assert [(e.index, e.payload) for e in read_all(t)] == [
            (ix(H0 + 1, 0), b"c1-0"), (ix(H0 + 2, 0), b"c2-0")]
        assert ends_with_eof(p0)
        assert ends_with_eof(qdir / hourly_name(H0 + 1))
        assert not ends_with_eof(qdir / hourly_name(H0 + 2))
        assert data_of(p0) == [b"c0-0", b"c0-1"]


def _write_with_gaps(q: ac.Queue, clk: ac.SetTimeProvider,
                     plan: dict[int, int], length: int) -> list[ac.Excerpt]:
    a = q.appender()
    expected = []
    for c, n in plan.items():
        clk.set_millis(c * length + length // 2)
        for j in range(n):
            payload = b"%d:%d" % (c, j)
            assert a.append(payload) == ix(c, j)
            expected.append(ac.Excerpt(ix(c, j), payload))
    return expected


PLAN = {H0: 3, H0 + 1: 2, H0 + 5: 4, H0 + 6: 1, H0 + 30: 3}


def test_gaps_between_cycles(tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        live = q.tailer()
        a = q.appender()
        expected = []
        for c, n in PLAN.items():
            clk.set_millis(c * HOUR + 17)
            for j in range(n):
                payload = b"%d:%d" % (c, j)
                assert a.append(payload) == ix(c, j)
                expected.append(ac.Excerpt(ix(c, j), payload))
            # a live tailer follows across the missing cycles
            assert [e.index for e in read_all(live)] == [ix(c, j) for j in range(n)]
        present = list(PLAN)
        assert q.cycles() == present
        assert sorted(os.listdir(qdir)) == sorted([hourly_name(c) for c in present]
                                                  + ["metadata.cq4t"])
        for c in present:
            assert ends_with_eof(qdir / hourly_name(c)) == (c != present[-1])
        assert read_all(q.tailer()) == expected

        # BACKWARD across the cycles and the gaps
        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert read_all(tb) == expected[::-1]

        # navigation
        t = q.tailer()
        for gap in (H0 + 2, H0 + 4, H0 + 7, H0 + 29, H0 + 31, H0 - 1):
            assert not t.move_to_index(ix(gap, 0)), gap
            assert not t.move_to_cycle(gap), gap
        assert t.move_to_cycle(H0 + 5)
        assert t.read_nowait() == ac.Excerpt(ix(H0 + 5, 0), b"%d:0" % (H0 + 5))
        assert t.move_to_index(ix(H0 + 1, 1))
        assert read_all(t) == expected[4:]  # from H0+1 seq 1 to the end, across gaps
        assert t.move_to_index(ix(H0 + 6, 0))
        t.direction = ac.TailerDirection.BACKWARD
        assert [e.index for e in read_all(t)] == [e.index for e in expected[:10]][::-1]

        # queue-wide counts (from inclusive, to exclusive), from what was appended
        all_idx = [e.index for e in expected]
        assert q.entry_count() == len(expected)
        assert q.first_index == ix(H0, 0) and q.last_index == ix(H0 + 30, 2)
        for lo, hi in ((ix(H0, 0), ix(H0 + 30, 3)), (ix(H0, 1), ix(H0 + 6, 1)),
                       (ix(H0 + 1, 1), ix(H0 + 5, 2)), (ix(H0 + 2, 0), ix(H0 + 30, 0)),
                       (ix(H0, 2), ix(H0 + 1, 0)), (ix(H0 + 5, 1), ix(H0 + 5, 3))):
            want = sum(1 for i in all_idx if lo <= i < hi)
            assert q.count_excerpts(lo, hi) == want, (hex(lo), hex(hi))
        assert q.excerpts_in_cycle(H0 + 5) == 4
        assert q.excerpts_in_cycle(H0 + 3) == 0


def test_to_start_and_to_end_across_cycles(tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR)
    with open_q(tmp_path / "q", clk) as q:
        a = q.appender()
        for c in (H0 + 3, H0 + 4, H0 + 8):
            clk.set_millis(c * HOUR)
            for j in range(c - H0):
                a.append(b"%d.%d" % (c, j))
        t = q.tailer()
        t.to_end()
        assert t.index == ix(H0 + 8, 8)  # next index to be written, in the last cycle
        assert t.read_nowait() is None
        t.to_start()
        assert t.index == ix(H0 + 3, 0)  # first cycle present, not cycle 0
        assert t.read_nowait() == ac.Excerpt(ix(H0 + 3, 0), b"%d.0" % (H0 + 3))

        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert tb.to_end().read_nowait() == ac.Excerpt(ix(H0 + 8, 7), b"%d.7" % (H0 + 8))

        t.to_end()
        a.append(b"same cycle")
        assert t.read_nowait() == ac.Excerpt(ix(H0 + 8, 8), b"same cycle")
        t.to_end()
        clk.advance_millis(2 * HOUR)  # the next excerpt goes to H0 + 10
        assert a.append(b"after roll") == ix(H0 + 10, 0)
        assert t.read_nowait() == ac.Excerpt(ix(H0 + 10, 0), b"after roll")
        assert t.read_nowait() is None


def test_backward_reading_across_cycles_with_index_pages(tmp_path: Path) -> None:
    # TEST4_SECONDLY: indexCount 32, spacing 4 -> 128 excerpts per index page
    clk = ac.SetTimeProvider(S0 * SECOND)
    with open_q(tmp_path / "q", clk, roll_cycle=ac.RollCycles.TEST4_SECONDLY) as q:
        plan = {S0: 300, S0 + 1: 129, S0 + 4: 5, S0 + 5: 260}
        expected = _write_with_gaps(q, clk, plan, SECOND)
        assert sorted(os.listdir(tmp_path / "q")) == sorted(
            [secondly_name(c) for c in plan] + ["metadata.cq4t"])
        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert read_all(tb) == expected[::-1]
        assert read_all(q.tailer()) == expected
        t = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert t.move_to_index(ix(S0 + 4, 2))
        assert [e.index for e in read_all(t)] == [
            e.index for e in expected if e.index <= ix(S0 + 4, 2)][::-1]
        assert q.count_excerpts(ix(S0, 250), ix(S0 + 5, 10)) == 50 + 129 + 5 + 10


def test_backward_after_forward_to_end_across_cycles(tmp_path: Path) -> None:
    # Java: toEnd() then direction(BACKWARD) reads the last excerpt first
    # (StoreTailer.inACycleNotForward falls back to index - 1), then all the others.
    clk = ac.SetTimeProvider(S0 * SECOND)
    with open_q(tmp_path / "q", clk, roll_cycle=ac.RollCycles.TEST4_SECONDLY) as q:
        expected = _write_with_gaps(q, clk, {S0: 10, S0 + 2: 6}, SECOND)
        t = q.tailer()
        t.to_end()
        t.direction = ac.TailerDirection.BACKWARD
        assert read_all(t) == expected[::-1]


def test_second_appender_continues_after_the_first_rolled(tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        a1, a2 = q.appender(), q.appender()
        assert a1.append(b"a1-0") == ix(H0, 0)
        assert a2.append(b"a2-0") == ix(H0, 1)
        clk.advance_millis(HOUR)
        assert a1.append(b"a1-1") == ix(H0 + 1, 0)
        assert a2.append(b"a2-1") == ix(H0 + 1, 1)  # not behind the EOF of H0
        assert a1.append(b"a1-2") == ix(H0 + 1, 2)
        assert a2.cycle == H0 + 1
        assert data_of(qdir / hourly_name(H0)) == [b"a1-0", b"a2-0"]
        assert ends_with_eof(qdir / hourly_name(H0))
        assert data_of(qdir / hourly_name(H0 + 1)) == [b"a1-1", b"a2-1", b"a1-2"]
        assert [e.payload for e in read_all(q.tailer())] == [
            b"a1-0", b"a2-0", b"a1-1", b"a2-1", b"a1-2"]


def test_appender_with_a_lagging_clock_does_not_write_behind_eof(tmp_path: Path) -> None:
    # two queue objects (as two processes) whose clocks disagree: the one still in H0
    # finds H0 closed by the other and must not write after the EOF
    fast = ac.SetTimeProvider(H0 * HOUR)
    slow = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, fast) as qf, open_q(qdir, slow) as qs:
        af, as_ = qf.appender(), qs.appender()
        assert af.append(b"f0") == ix(H0, 0)
        assert as_.append(b"s0") == ix(H0, 1)
        fast.advance_millis(HOUR)
        assert af.append(b"f1") == ix(H0 + 1, 0)
        i = as_.append(b"s1")  # its clock still says H0
        assert i > ix(H0 + 1, 0)
        assert i >> 32 >= H0 + 1
        assert data_of(qdir / hourly_name(H0)) == [b"f0", b"s0"]
        assert ends_with_eof(qdir / hourly_name(H0))
        got = read_all(qf.tailer())
        assert [e.payload for e in got] == [b"f0", b"s0", b"f1", b"s1"]
        assert got[-1].index == i


def test_clock_going_backwards_after_a_roll(tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR + 10)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        a = q.appender()
        a.append(b"h0")
        clk.advance_millis(HOUR)
        assert a.append(b"h1") == ix(H0 + 1, 0)
        clk.advance_millis(-HOUR)  # back in H0, which is closed
        i = a.append(b"late")
        assert i > ix(H0 + 1, 0) and i >> 32 >= H0 + 1
        assert data_of(qdir / hourly_name(H0)) == [b"h0"]
        assert ends_with_eof(qdir / hourly_name(H0))
        # a new appender (fresh queue object) with the clock behind behaves the same
        with open_q(qdir, ac.SetTimeProvider(H0 * HOUR + 20)) as q2:
            j = q2.appender().append(b"later")
            assert j > i and j >> 32 >= H0 + 1
        assert data_of(qdir / hourly_name(H0)) == [b"h0"]
        got = read_all(q.tailer())
        assert [e.payload for e in got] == [b"h0", b"h1", b"late", b"later"]
        assert [e.index for e in got] == sorted(e.index for e in got)
        assert q.cycles() == [H0, H0 + 1]


def _naming_epoch(epoch: int) -> int:
    # reference §2.3: the epoch used for file names is truncated to a whole UTC day
    return epoch - epoch % DAY


@pytest.mark.parametrize("epoch", [HOUR, DAY + HOUR, 5 * HOUR + 30 * 60_000])
def test_epoch_offset(tmp_path: Path, epoch: int) -> None:
    def name(cycle: int) -> str:
        return utc_name(cycle * DAY + _naming_epoch(epoch), "%Y%m%dF") + ".cq4"

    def cycle_at(ms: int) -> int:
        return (ms - epoch) // DAY  # all times here are after the epoch

    midnight = DAY0 * DAY
    roll = midnight + epoch % DAY  # the roll happens epoch % DAY after midnight UTC
    clk = ac.SetTimeProvider(roll - 30 * 60_000)
    qdir = tmp_path / "q"
    c_before = cycle_at(roll - 1)
    c_after = cycle_at(roll)
    assert c_after == c_before + 1
    with open_q(qdir, clk, roll_cycle=ac.RollCycles.FAST_DAILY, epoch=epoch) as q:
        assert q.epoch == epoch
        a = q.appender()
        assert a.append(b"before-0") == ix(c_before, 0)
        clk.set_millis(roll - 1)
        assert a.append(b"before-1") == ix(c_before, 1)
        clk.set_millis(roll)
        assert a.append(b"after-0") == ix(c_after, 0)
        clk.set_millis(roll + DAY - 1)
        assert a.append(b"after-1") == ix(c_after, 1)
        assert sorted(os.listdir(qdir)) == sorted([name(c_before), name(c_after),
                                                   "metadata.cq4t"])
        assert q.cycle_path(c_after) == str(qdir / name(c_after))
        assert ends_with_eof(qdir / name(c_before))
    # reopened without an epoch: the stored one is used (§2.4)
    clk.set_millis(roll + DAY)
    with open_q(qdir, clk, roll_cycle=ac.RollCycles.FAST_DAILY) as q:
        assert q.epoch == epoch
        assert q.cycles() == [c_before, c_after]
        assert q.appender().append(b"next") == ix(c_after + 1, 0)
        assert os.path.exists(qdir / name(c_after + 1))
        got = read_all(q.tailer())
        assert [(e.index, e.payload) for e in got] == [
            (ix(c_before, 0), b"before-0"), (ix(c_before, 1), b"before-1"),
            (ix(c_after, 0), b"after-0"), (ix(c_after, 1), b"after-1"),
            (ix(c_after + 1, 0), b"next")]


def test_epoch_one_hour_file_names(tmp_path: Path) -> None:
    # epoch = 1 h with FAST_DAILY: cycle d covers [d*24h + 1h, (d+1)*24h + 1h) UTC and its
    # file is named for day d (reference §2.3 example)
    clk = ac.SetTimeProvider(DAY0 * DAY + 30 * 60_000)  # 2023-11-14 00:30 UTC
    qdir = tmp_path / "q"
    with open_q(qdir, clk, roll_cycle=ac.RollCycles.FAST_DAILY, epoch=HOUR) as q:
        a = q.appender()
        assert a.append(b"x") == ix(DAY0 - 1, 0)
        assert os.path.exists(qdir / "20231113F.cq4")
        clk.set_millis(DAY0 * DAY + HOUR)  # 01:00 UTC: the roll
        assert a.append(b"y") == ix(DAY0, 0)
        assert sorted(os.listdir(qdir)) == ["20231113F.cq4", "20231114F.cq4", "metadata.cq4t"]
        assert q.table_store_get("listing.lowestCycle") == DAY0 - 1
        assert q.table_store_get("listing.highestCycle") == DAY0


def test_empty_cycles_between_data(tmp_path: Path) -> None:
    # a cycle whose file holds only metadata: skipped by tailers in both directions
    clk = ac.SetTimeProvider(H0 * HOUR)
    with open_q(tmp_path / "q", clk) as q:
        a = q.appender()
        a.append(b"first")
        clk.advance_millis(HOUR)
        a.append_metadata(b"only metadata here")
        clk.advance_millis(HOUR)
        assert a.append(b"third") == ix(H0 + 2, 0)
        assert q.cycles() == [H0, H0 + 1, H0 + 2]
        assert q.excerpts_in_cycle(H0 + 1) == 0
        assert [e.index for e in read_all(q.tailer())] == [ix(H0, 0), ix(H0 + 2, 0)]
        tb = q.tailer(direction=ac.TailerDirection.BACKWARD)
        assert [e.index for e in read_all(tb)] == [ix(H0 + 2, 0), ix(H0, 0)]
        assert q.count_excerpts(ix(H0, 0), ix(H0 + 2, 1)) == 2
        assert q.entry_count() == 2
        assert not q.tailer().move_to_index(ix(H0 + 1, 0))  # no data in H0 + 1 (closed)
        assert ends_with_eof(tmp_path / "q" / hourly_name(H0 + 1))


def test_test_secondly_roll_with_index_arrays_larger_than_a_chunk(tmp_path: Path) -> None:
    # TEST_SECONDLY: indexCount 32768 -> the index2index and first index arrays are
    # 256 KiB each, larger than the 256 KiB mapping chunk used here
    clk = ac.SetTimeProvider(S0 * SECOND)
    qdir = tmp_path / "q"
    with open_q(qdir, clk, roll_cycle=ac.RollCycles.TEST_SECONDLY) as q:
        plan = {S0: 5, S0 + 1: 300, S0 + 3: 7}
        expected = _write_with_gaps(q, clk, plan, SECOND)
        names = [utc_name(c * SECOND, "%Y%m%d-%H%M%ST") + ".cq4" for c in plan]
        assert sorted(os.listdir(qdir)) == sorted([*names, "metadata.cq4t"])
        assert read_all(q.tailer()) == expected
        assert read_all(q.tailer(direction=ac.TailerDirection.BACKWARD)) == expected[::-1]
        t = q.tailer()
        for e in expected[::7]:
            assert t.move_to_index(e.index)
            assert t.read_nowait() == e
        for c, name in zip(plan, names, strict=True):
            assert len(data_of(qdir / name)) == plan[c]
            assert ends_with_eof(qdir / name) == (c != S0 + 3)


def test_document_opened_before_a_roll_commits_in_its_cycle(tmp_path: Path) -> None:
    # the cycle is chosen when writing_document() opens (Java StoreAppender.writingDocument)
    clk = ac.SetTimeProvider(H0 * HOUR + HOUR - 1)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        a = q.appender()
        a.append(b"first")
        with a.writing_document() as dc:
            dc.write(b"opened in H0")
            clk.advance_millis(1)  # the clock crosses into H0 + 1 meanwhile
        assert dc.index == ix(H0, 1)
        assert a.append(b"after") == ix(H0 + 1, 0)
        assert data_of(qdir / hourly_name(H0)) == [b"first", b"opened in H0"]
        assert ends_with_eof(qdir / hourly_name(H0))
        assert [e.index for e in read_all(q.tailer())] == [ix(H0, 0), ix(H0, 1), ix(H0 + 1, 0)]


def test_named_tailer_across_cycles_and_to_end(tmp_path: Path) -> None:
    clk = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        expected = _write_with_gaps(q, clk, {H0: 2, H0 + 2: 2}, HOUR)
        t = q.tailer("svc")
        assert [t.read_nowait() for _ in range(3)] == expected[:3]
        # the third excerpt is still in hand (at least once): saved at it
        assert q.table_store_get("index.svc") == ix(H0 + 2, 0)
    # closing cleanly marked it done
    with open_q(qdir, clk) as q:
        t = q.tailer("svc")
        assert read_all(t) == expected[3:]
        t.to_start()
    with open_q(qdir, clk) as q:
        t = q.tailer("svc")
        assert t.index == ix(H0, 0)
        t.to_end()
        assert q.table_store_get("index.svc") == ix(H0 + 2, 2)
    with open_q(qdir, clk) as q:
        t = q.tailer("svc")
        assert t.read_nowait() is None
        clk.advance_millis(HOUR)
        q.appender().append(b"new")
        assert t.read_nowait() == ac.Excerpt(ix(H0 + 3, 0), b"new")


ROLL_PAST_DAMAGE = """
import sys, warnings, aiochronicle as ac
path, t1 = sys.argv[1], int(sys.argv[2])
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_HOURLY,
                       time_provider=ac.SetTimeProvider(t1), lock_timeout=2.0) as q:
        print(q.appender().append(b"after the damage"))
print("WARNED" if any("could not be closed" in str(w.message) for w in seen) else "QUIET")
"""


def test_truncated_older_cycle_does_not_hang_the_roll(tmp_path: Path) -> None:
    """The second-newest cycle file was cut short inside an excerpt and has no
    EOF marker: the roll that closes it used to spin forever holding the write
    lock.  Now it warns, leaves the damaged file as it is, and the append
    lands in the new cycle; other appenders are not locked out."""
    import subprocess
    import sys

    path = str(tmp_path / "q")
    t0 = H0 * HOUR
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_HOURLY,
                       time_provider=ac.SetTimeProvider(t0)) as q:
        app = q.appender()
        for i in range(6):
            app.append(b"m%d-" % i + b"x" * 100)
        older = q.cycle_path(H0)
        docs = raw_documents(older)
    # cut the file 20 bytes into the 4th data excerpt (it never got an EOF)
    data = [pos for kind, pos, _ in docs if kind == "data"]
    os.truncate(older, data[3] + 4 + 20)
    r = subprocess.run([sys.executable, "-c", ROLL_PAST_DAMAGE, path, str(t0 + HOUR)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    index_s, warned = r.stdout.split()
    assert int(index_s) == ix(H0 + 1, 0)
    assert warned == "WARNED"
    # the write lock is free again and the queue takes more appends
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_HOURLY,
                       time_provider=ac.SetTimeProvider(t0 + HOUR), lock_timeout=2.0) as q:
        assert q.table_store_get("chronicle.write.lock") == -(1 << 63)
        with pytest.warns(RuntimeWarning, match="could not be closed"):
            assert q.appender().append(b"more") == ix(H0 + 1, 1)
        t = q.tailer()
        assert t.move_to_index(ix(H0 + 1, 0))
        assert [ex.payload for ex in t] == [b"after the damage", b"more"]
        # the intact excerpts before the damage still read; the damage itself
        # is a named error, never a hang
        t = q.tailer()
        assert [t.read_nowait().payload[:3] for _ in range(3)] == [b"m0-", b"m1-", b"m2-"]
        with pytest.raises(ac.CorruptQueueError):
            t.read_nowait()


def test_the_system_clock_rolls_at_the_cycle_boundary(tmp_path: Path) -> None:
    """With the system clock (no time provider) each excerpt lands in the cycle
    of a moment between the start and the end of its append: the native roll
    check reads a coarse clock far from a boundary and the precise one near
    it, and neither may roll late or early."""
    roll = ac.RollCycles.TEST_SECONDLY
    with ac.open_queue(tmp_path, roll_cycle=roll) as q:
        a = q.appender()
        seen = []
        end = time.time() + 2.3  # crosses at least two boundaries
        while time.time() < end:
            before = time.time_ns() // 1_000_000
            index = a.append(b"tick")
            after = time.time_ns() // 1_000_000
            seen.append((before // roll.length_ms, roll.to_cycle(index), after // roll.length_ms))
            time.sleep(0.0005)
        assert all(lo <= cycle <= hi for lo, cycle, hi in seen), [
            s for s in seen if not s[0] <= s[1] <= s[2]][:5]
        assert len({cycle for _, cycle, _ in seen}) >= 3


def test_tailer_passes_a_cycle_without_eof_once_no_writer_can_be_inside(
        tmp_path: Path) -> None:
    """The same cycle without its EOF, no writer alive (the write lock is
    free) and a later cycle written: a read-until-None loop reads on into it
    (Java's tailer waits there for an appender's EOF)."""
    clk = ac.SetTimeProvider(H0 * HOUR)
    qdir = tmp_path / "q"
    with open_q(qdir, clk) as q:
        a = q.appender()
        a.append(b"c0-0")
        clk.advance_millis(HOUR)
        a.append(b"c1-0")
    p0 = qdir / hourly_name(H0)
    docs = raw_documents(p0)
    with open(p0, "r+b") as f:
        f.seek(docs[-1][1])
        f.write(bytes(8))
    with open_q(qdir, clk) as q:
        assert [e.payload for e in read_all(q.tailer())] == [b"c0-0", b"c1-0"]
    assert not ends_with_eof(p0)  # readers change nothing
