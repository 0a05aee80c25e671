"""An appender takes another writer's ``writePosition`` only once its
sequence agrees with the index and the headers (issue 31: ``locate()``
adopted it unchecked, so one flipped bit numbered every later excerpt wrong)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

T0 = 1_637_251_500_000


@pytest.mark.parametrize("written", [5, 300, 1000])  # near the hint, and past a spacing
@pytest.mark.parametrize("delta", [1, -1, 64])
def test_a_damaged_write_position_sequence_is_not_adopted(tmp_path: Path, written: int,
                                                          delta: int) -> None:
    """Appender ``a`` wrote once; ``other`` then wrote ``written`` more, and
    the sequence of the ``writePosition`` it left is damaged (its packed high
    bits still match the position: only the sequence lies).  ``a``'s next
    append walks the headers instead of numbering from the damaged value."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock,
                       roll_cycle=ac.RollCycles.DAILY) as q:
        a, other = q.appender(), q.appender()
        a.append(b"a's first")
        for i in range(written):
            last = other.append(b"excerpt %d" % i)
        files = cycles_of(q)
        st = files.acquire(q.cycles()[-1])
        assert st is not None
        try:
            cycle_file, seq_off = st.path, st.layout.wp_seq_off
        finally:
            files.release(st)
        fd = os.open(cycle_file, os.O_RDWR)  # the same pages as the mapping
        try:
            packed = int.from_bytes(os.pread(fd, 8, seq_off), "little")
            assert packed & 0xFFFF_FFFF == written  # the last excerpt's sequence
            os.pwrite(fd, (packed + delta).to_bytes(8, "little"), seq_off)
        finally:
            os.close(fd)
        index = a.append(b"after the damage")
        assert index == last + 1  # it was last + 1 + delta
        t = q.tailer()
        assert t.move_to_index(index)
        assert t.read_nowait().payload == b"after the damage"
        assert q.entry_count() == written + 2
        assert [e.payload for e in q.tailer()][-2:] == [b"excerpt %d" % (written - 1),
                                                       b"after the damage"]
