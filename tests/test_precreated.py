"""Pre-created cycle files (Java's ``PrecreatedFiles``): a ``<name>.precreated``
file beside the queue is renamed into place when that cycle is created."""

from __future__ import annotations

import os

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000


def _precreate(q: ac.Queue, cycle: int, size: int = 1 << 20) -> tuple[str, int]:
    cq4 = q.cycle_path(cycle)
    pre = cq4[:-len(".cq4")] + ".precreated"
    with open(pre, "wb") as f:
        f.truncate(size)  # zeros, as a pre-creator leaves them
    return pre, os.stat(pre).st_ino


def test_a_precreated_file_becomes_the_cycle_file(tmp_path):
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        i0 = a.append(b"day one")
        nxt = q.current_cycle() + 1
        pre, inode = _precreate(q, nxt)
        assert os.path.basename(pre).endswith("F.precreated")  # FAST_DAILY: yyyyMMdd'F'
        clock.advance_millis(DAY)
        i1 = a.append(b"day two")
        assert q.roll_cycle.to_cycle(i1) == nxt
        assert not os.path.exists(pre)
        assert os.stat(q.cycle_path(nxt)).st_ino == inode  # the same file, renamed
        assert [(ex.index, ex.payload) for ex in q.tailer()] == [(i0, b"day one"),
                                                                (i1, b"day two")]
        assert not [f for f in ac.check_queue(str(tmp_path / "q")) if f.severity == "error"]
    with ac.open_queue(tmp_path / "q", time_provider=clock, read_only=True) as q:
        assert [ex.payload for ex in q.tailer()] == [b"day one", b"day two"]


def test_precreated_files_of_other_cycles_are_left_alone(tmp_path):
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        later = q.current_cycle() + 5
        pre, _ = _precreate(q, later)
        a.append(b"x")
        assert os.path.exists(pre)
        assert q.cycles() == [q.current_cycle()]


def test_taken_where_files_have_no_hard_links(tmp_path, monkeypatch):
    """Where ``link`` is refused (vfat, some network file systems) cycle files
    are created in place, as Java creates them: the pre-created file is renamed
    into place first, then its header written."""
    import errno

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "no hard links here")

    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        a.append(b"day one")
        nxt = q.current_cycle() + 1
        pre, inode = _precreate(q, nxt)
        monkeypatch.setattr(os, "link", no_links)
        clock.advance_millis(DAY)
        a.append(b"day two")
        assert not os.path.exists(pre)
        assert os.stat(q.cycle_path(nxt)).st_ino == inode
        assert [ex.payload for ex in q.tailer()] == [b"day one", b"day two"]
