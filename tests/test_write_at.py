"""Positioned writes (what a replication sink does): same index on every host."""

from __future__ import annotations

import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000


def _open(path, clock=None):
    return ac.open_queue(path, time_provider=clock or ac.SetTimeProvider(T0),
                         roll_cycle=ac.RollCycles.FAST_HOURLY, block_size=256 << 10)


def test_sink_reproduces_source_indices_across_cycles_and_gaps(tmp_path):
    clock = ac.SetTimeProvider(T0)
    src = _open(tmp_path / "src", clock)
    app = src.appender()
    written = []
    for hour in (0, 0, 0, 1, 4, 4):  # a gap of three hours
        clock.set_millis(T0 + hour * 3_600_000)
        written.append((app.append(b"h%d-%d" % (hour, len(written))), hour))
    # the sink's clock is a day behind: positioned writes ignore it
    with _open(tmp_path / "sink", ac.SetTimeProvider(T0 - 86_400_000)) as sink:
        w = sink.appender()
        for ex in src.tailer():
            assert w.write_at(ex.index, ex.payload)
        # replaying is harmless
        for ex in src.tailer():
            assert not w.write_at(ex.index, ex.payload)
        got = [(ex.index, ex.payload) for ex in sink.tailer()]
        assert got == [(ex.index, ex.payload) for ex in src.tailer()]
        assert sink.cycles() == src.cycles()
        # an index after a missing one is refused
        last = got[-1][0]
        with pytest.raises(ac.IllegalIndexError):
            w.write_at(last + 2, b"gap")
        # a closed cycle cannot take more
        first_cycle_next = sink.roll_cycle.to_index(sink.cycles()[0], 3)
        with pytest.raises(ac.IllegalIndexError):
            w.write_at(first_cycle_next, b"late")
        assert w.write_at(last + 1, b"next")
    src.close()


def test_write_at_on_an_empty_queue_must_start_at_sequence_zero(tmp_path):
    with _open(tmp_path / "q") as q:
        rc = q.roll_cycle
        w = q.appender()
        with pytest.raises(ac.IllegalIndexError):
            w.write_at(rc.to_index(20_000, 5), b"x")
        assert w.write_at(rc.to_index(20_000, 0), b"a")
        assert [ex.index for ex in q.tailer()] == [rc.to_index(20_000, 0)]
