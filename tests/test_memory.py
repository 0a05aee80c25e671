"""Resident memory stays flat however large a cycle file grows."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    from array import array
    import aiochronicle as ac

    def rss_kib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    path = sys.argv[1]
    size, count = 4096, 16384            # 64 MiB per round
    rounds = 6                           # 384 MiB in one cycle file
    msg = bytes(range(256)) * (size // 256)
    data = msg * count
    offsets = array("q", range(0, size * (count + 1), size))
    with ac.open_queue(path, block_size=1 << 20,
                       roll_cycle=ac.RollCycles.HUGE_DAILY) as q:
        a = q.appender()
        a.append(msg)
        base = rss_kib()
        peak_write = 0
        for _ in range(rounds):
            a.append_packed(data, offsets)
            peak_write = max(peak_write, rss_kib() - base)
        t = q.tailer()
        seen = 0
        peak_read = 0
        while True:
            b = t.read_many(4096, 16 << 20)
            if not len(b):
                break
            seen += len(b)
            del b
            peak_read = max(peak_read, rss_kib() - base)
        assert seen == rounds * count + 1, seen
        print(peak_write, peak_read)
    """
)


def test_rss_flat_while_writing_and_reading_a_large_cycle(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "q")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    peak_write, peak_read = map(int, out.stdout.split())
    # 384 MiB went through one mapping; a process that kept its pages mapped
    # would be ~393,000 KiB above the baseline.  Allow the few chunks in
    # flight plus the 16 MiB read buffer.
    assert peak_write < 64 * 1024, f"writer RSS grew by {peak_write} KiB"
    assert peak_read < 64 * 1024, f"reader RSS grew by {peak_read} KiB"


NO_CYCLES = textwrap.dedent(
    """
    import gc, sys, aiochronicle as ac
    gc.disable()  # what is freed must be freed by reference counts alone
    path = sys.argv[1]
    q = ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_SECONDLY)
    a = q.appender()
    a.append(b"x")
    with a.writing_document() as dc:
        dc.write(b"y")
    t = q.tailer("named")
    t.read_nowait()
    acked = q.tailer(read_after_replica_acknowledged=True)
    acked.read_nowait()
    q.pretoucher().execute()
    q.close()
    del q, a, t, acked, dc
    maps = [line for line in open("/proc/self/maps") if path in line]
    print(len(maps))
    """
)


def test_a_closed_queue_leaves_nothing_mapped_without_the_garbage_collector(tmp_path):
    """No reference cycle keeps a closed queue's files mapped until a GC runs
    (``aiochronicle repair`` refuses to run while a process maps the metadata)."""
    r = subprocess.run([sys.executable, "-c", NO_CYCLES, str(tmp_path / "q")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"]
