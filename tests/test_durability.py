"""The disk: a full file system, msync modes, read-only users, the pretoucher."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time
import uuid

import mounts
import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000


@pytest.fixture
def small_fs(tmp_path):
    """A 3 MiB tmpfs of our own (this needs root, which CI and dev machines have)."""
    with mounts.tmpfs(tmp_path / "smallfs", "3m") as mnt:
        yield mnt


FULL_DISK = textwrap.dedent(
    """
    import sys, aiochronicle as ac
    path = sys.argv[1]
    clock = ac.SetTimeProvider(%d)
    written = []
    with ac.open_queue(path, time_provider=clock, block_size=256 << 10) as q:
        app = q.appender()
        n = 0
        try:
            while True:
                msg = (b"%%08d" %% n) * 4096        # 32 KiB each
                written.append((app.append(msg), msg))
                n += 1
        except ac.DiskFullError as exc:
            print("full after", n, "messages:", exc, file=sys.stderr)
        # everything committed before stays readable
        got = [(ex.index, ex.payload) for ex in q.tailer()]
        assert got == written, (len(got), len(written))
        try:
            app.append(b"x" * 100_000)
        except ac.DiskFullError:
            pass
        else:
            raise AssertionError("append on a full disk did not fail")
    print(len(written))
    """
) % T0


def test_full_disk_raises_and_keeps_committed_data(small_fs):
    path = str(small_fs / "q")
    r = subprocess.run([sys.executable, "-c", FULL_DISK, path], capture_output=True,
                       text=True, timeout=120)
    # a SIGBUS would show as returncode -7
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    count = int(r.stdout.strip())
    assert count > 10
    assert "no space left" in r.stderr
    # a new process sees exactly what was committed
    with ac.open_queue(path, read_only=True) as q:
        assert q.entry_count() == count


def test_full_disk_when_creating_a_cycle_file(small_fs):
    path = str(small_fs / "q")
    # fill the file system almost completely first
    with open(small_fs / "filler", "wb") as f:
        f.write(b"\0" * (3 * 1024 * 1024 - 64 * 1024))
    code = textwrap.dedent(
        f"""
        import aiochronicle as ac
        try:
            with ac.open_queue({path!r}, time_provider=ac.SetTimeProvider({T0}),
                               block_size=256 << 10) as q:
                q.appender().append(b"x" * 200_000)
        except ac.DiskFullError as exc:
            print("DiskFullError", exc)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert "DiskFullError" in r.stdout
    os.unlink(small_fs / "filler")
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0),
                       block_size=256 << 10) as q:
        i = q.appender().append(b"after")
        assert [ex.payload for ex in q.tailer()] == [b"after"]
        assert q.roll_cycle.to_sequence(i) == 0


ROLL_WRITER = textwrap.dedent(
    """
    import sys, aiochronicle as ac
    path, now, msg = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_HOURLY, block_size=256 << 10,
                       time_provider=ac.SetTimeProvider(now)) as q:
        try:
            print("OK", q.appender().append(msg))
        except ac.DiskFullError:
            print("FULL")
    """
)


def test_full_disk_during_a_roll_with_several_writers(small_fs):
    """Writers roll into a new cycle while the disk is full: each gets
    DiskFullError and nothing is left at the new cycle's name; once space is
    freed, their appends are acknowledged and every reader sees all of them
    (nothing stops readers at a half-made file), and `check` finds no problem."""
    path = str(small_fs / "q")
    hour = 3_600_000
    t0 = 472_222 * hour
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_HOURLY, block_size=256 << 10,
                       time_provider=ac.SetTimeProvider(t0)) as q:
        first = [q.appender().append(b"before %d" % i) for i in range(3)]
        new_name = q.cycle_path(472_223)
    free = shutil.disk_usage(small_fs).free
    with open(small_fs / "filler", "wb") as f:
        f.write(b"\0" * (free - 8192))

    def writers(msgs: list[str]) -> list[str]:
        procs = [subprocess.Popen([sys.executable, "-c", ROLL_WRITER, path, str(t0 + hour), m],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for m in msgs]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-3000:]  # -7 would be a SIGBUS
            outs.append(out.strip())
        return outs

    assert writers(["full-a", "full-b", "full-c"]) == ["FULL"] * 3
    assert not os.path.exists(new_name)
    assert [n for n in os.listdir(path) if n.endswith(".creating")] == []
    os.unlink(small_fs / "filler")
    outs = writers(["after-a", "after-b", "after-c"])
    assert all(o.startswith("OK ") for o in outs), outs
    acked = sorted((int(o.split()[1]), m) for o, m in zip(outs, ["after-a", "after-b",
                                                                 "after-c"], strict=True))
    with ac.open_queue(path, read_only=True) as q:
        got = [(ex.index, ex.payload) for ex in q.tailer()]
    assert got[:3] == [(i, b"before %d" % n) for n, i in enumerate(first)]
    assert got[3:] == [(i, m.encode()) for i, m in acked]
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "check", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "died" not in r.stdout + r.stderr


def test_sync_modes_record_last_index_msynced(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0), sync=ac.SyncMode.SYNC,
                       sync_every=3) as q:
        app = q.appender()
        idx = [app.append(b"m%d" % i) for i in range(7)]
        # synced after the 3rd and the 6th
        assert q.table_store_get("chronicle.lastIndexMSynced") == idx[5]
        app.sync()
        assert q.table_store_get("chronicle.lastIndexMSynced") == idx[6]
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        app = q.appender()
        app.append(b"no sync mode")
        assert q.table_store_get("chronicle.lastIndexMSynced") == idx[6]
        app.sync()
        assert q.table_store_get("chronicle.lastIndexMSynced") == idx[6] + 1


def test_sync_interval(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0), sync=ac.SyncMode.ASYNC,
                       sync_every=1_000_000, sync_interval=0) as q:
        app = q.appender()
        i = app.append(b"a")
        assert q.table_store_get("chronicle.lastIndexMSynced") == i


@pytest.fixture
def read_only_view(tmp_path):
    """A read-only bind mount of tmp_path/src: not writable even by root."""
    src = tmp_path / "src"
    view = tmp_path / "view"
    src.mkdir()
    with mounts.mounted(["--bind", str(src)], view, "a bind mount"):
        mounts.remount_read_only(view)
        yield src, view


def test_reader_without_write_permission(read_only_view):
    src, view = read_only_view
    with ac.open_queue(src / "q", time_provider=ac.SetTimeProvider(T0)) as q:
        for i in range(5):
            q.appender().append(b"m%d" % i)
    before = {n: (src / "q" / n).read_bytes() for n in os.listdir(src / "q")}
    with ac.open_queue(view / "q", read_only=True) as q:
        assert [ex.payload for ex in q.tailer()] == [b"m%d" % i for i in range(5)]
        assert q.last_index is not None
    with pytest.warns(RuntimeWarning, match="no write permission"):
        q = ac.open_queue(view / "q")
    with q:
        assert q.read_only
        with pytest.raises(ac.ReadOnlyQueueError):
            q.appender()
        assert len(list(q.tailer())) == 5
    # live: a writer appends through the writable path, the read-only reader follows
    with ac.open_queue(view / "q", read_only=True) as ro, \
            ac.open_queue(src / "q", time_provider=ac.SetTimeProvider(T0)) as rw:
        t = ro.tailer()
        t.to_end()
        rw.appender().append(b"live")
        ex = t.read_nowait()
        assert ex is not None and ex.payload == b"live"
    after = {n: (src / "q" / n).read_bytes() for n in os.listdir(src / "q")}
    assert set(after) == set(before)


def test_tailers_never_write_to_cycle_files(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        for i in range(100):
            q.appender().append(b"m%d" % i)
    files = sorted(n for n in os.listdir(path) if n.endswith(".cq4"))
    before = {n: pathlib.Path(path, n).read_bytes() for n in files}
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        t = q.tailer("reader")
        assert len(list(t)) == 100
        t.to_start()
        t.to_end()
        t.direction = ac.TailerDirection.BACKWARD
        assert len(list(t)) == 100
        t.move_to_index(q.first_index or 0)
    after = {n: pathlib.Path(path, n).read_bytes() for n in files}
    assert after == before


def test_pretoucher_creates_the_next_cycle_early_without_confusing_appenders(tmp_path):
    path = str(tmp_path / "q")
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(path, time_provider=clock, roll_cycle=ac.RollCycles.FAST_HOURLY,
                       block_size=256 << 10) as q:
        app = q.appender()
        app.append(b"hour0")
        pre = q.pretoucher(headroom=1 << 20, preroll=60.0)
        pre.execute()
        assert len(q.cycles()) == 1
        clock.advance_millis(3_600_000 - 30_000 - (T0 % 3_600_000))  # 30 s before the roll
        pre.execute()
        cycles = q.cycles()
        assert len(cycles) == 2  # the next hour's file exists already
        # appenders still write to the current hour until the clock gets there
        i1 = app.append(b"still hour0")
        assert q.roll_cycle.to_cycle(i1) == cycles[0]
        fresh = q.appender().append(b"fresh appender, hour0")
        assert q.roll_cycle.to_cycle(fresh) == cycles[0]
        clock.advance_millis(60_000)
        i2 = app.append(b"hour1")
        assert q.roll_cycle.to_cycle(i2) == cycles[1]
        assert [ex.payload for ex in q.tailer()] == [
            b"hour0", b"still hour0", b"fresh appender, hour0", b"hour1"]


def test_pretoucher_background_thread(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, block_size=256 << 10) as q:
        with q.pretoucher(headroom=1 << 20).start(interval=0.01) as pre:
            app = q.appender()
            for _ in range(2000):
                app.append(b"x" * 100)
        assert pre.errors == 0
        assert q.entry_count() == 2000


def test_pretoucher_counts_a_full_disk_both_ways(small_fs):
    """One rule for a full disk (issue 31): ``execute()`` counts it and
    returns False, as the background thread counts it and goes on; the
    appenders still write what fits."""
    path = str(small_fs / "q")
    with ac.open_queue(path, block_size=256 << 10) as q:
        app = q.appender()
        app.append(b"before")
        pre = q.pretoucher(headroom=16 << 20)  # more than the 3 MiB disk holds
        assert pre.execute() is False  # DiskFullError was raised into the caller
        assert pre.errors == 1
        with q.pretoucher(headroom=16 << 20).start(interval=0.001) as bg:
            deadline = time.monotonic() + 60
            while bg.errors < 2 and time.monotonic() < deadline:  # went on after the first
                time.sleep(0.001)
            assert bg.errors >= 2
        app.append(b"after")
        assert [e.payload for e in q.tailer()] == [b"before", b"after"]


def test_foreign_cycle_name_does_not_break_listing(tmp_path):
    path = str(tmp_path / "q")
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        q.appender().append(b"a")
    shutil.copy(os.path.join(path, "metadata.cq4t"), os.path.join(path, f"{uuid.uuid4()}.cq4"))
    with ac.open_queue(path, time_provider=ac.SetTimeProvider(T0)) as q:
        assert [ex.payload for ex in q.tailer()] == [b"a"]
