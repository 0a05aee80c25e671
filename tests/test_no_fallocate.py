"""A full disk where ``fallocate`` is missing, and tools on a full disk.

A file system without ``fallocate`` (NFS, FUSE, some overlays; ext2 for
real) must still turn a full disk into :class:`DiskFullError`: blocks are
reserved by faulting pages in ahead of the writers, with one
:class:`NoFallocateWarning`.  Tools (``check``, ``dump``) read files they did
not reserve, so reading a hole on a full tmpfs must not allocate (a SIGBUS).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import mounts
import pytest
from test_durability import FULL_DISK
from test_monitor import Endpoint

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

T0 = 1_637_251_500_000

# fallocate as a file system without it answers: interposed on libc's symbol
# by LD_PRELOAD, so the library's real reserve code sees a real EOPNOTSUPP
NO_FALLOCATE_C = textwrap.dedent(
    """
    #define _GNU_SOURCE
    #include <errno.h>
    #include <fcntl.h>
    static int unsupported(void) { errno = EOPNOTSUPP; return -1; }
    int fallocate(int fd, int mode, off_t off, off_t len) {
        (void)fd; (void)mode; (void)off; (void)len; return unsupported();
    }
    int fallocate64(int fd, int mode, off_t off, off_t len) {
        (void)fd; (void)mode; (void)off; (void)len; return unsupported();
    }
    """
)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 3 MiB tmpfs of our own (mounting needs root, which CI has)."""
    with mounts.tmpfs(tmp_path / "tmpfs", "3m") as mnt:
        yield mnt


@pytest.fixture
def small_ext2(tmp_path):
    """An 8 MiB ext2 file system on a loop device: a file system whose files
    really have no fallocate (ext2 files have no extents)."""
    mkfs = shutil.which("mkfs.ext2") or shutil.which("mkfs.ext2", path="/sbin:/usr/sbin")
    assert mkfs is not None, "no mkfs.ext2 (e2fsprogs) to make an ext2 image"
    image = tmp_path / "ext2.img"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run([mkfs, "-q", "-F", "-m", "0", str(image)], check=True, capture_output=True)
    with mounts.mounted(["-o", "loop", str(image)], tmp_path / "ext2",
                        "an ext2 loop device") as mnt:
        yield mnt


@pytest.fixture(scope="module")
def no_fallocate_lib(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc is not None, "no C compiler to build the fallocate interposer"
    d = tmp_path_factory.mktemp("nofalloc")
    (d / "nofalloc.c").write_text(NO_FALLOCATE_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(d / "nofalloc.so"),
                    str(d / "nofalloc.c")], check=True, capture_output=True)
    return str(d / "nofalloc.so")


def _fill(path: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Append 32 KiB excerpts until the disk is full (test_durability's
    script); every warning shown, so "once" must come from the library."""
    r = subprocess.run([sys.executable, "-W", "always", "-c", FULL_DISK, path],
                       capture_output=True, text=True, timeout=120, env=env)
    # a SIGBUS would be returncode -7
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert "no space left" in r.stderr
    return int(r.stdout.strip()), r.stderr


@pytest.mark.checkout  # compiles an LD_PRELOAD library: no compiler in the installed pass
def test_full_tmpfs_without_fallocate_is_disk_full_not_sigbus(small_tmpfs, no_fallocate_lib):
    path = str(small_tmpfs / "q")
    env = dict(os.environ, LD_PRELOAD=no_fallocate_lib)
    count, err = _fill(path, env)
    assert count > 10
    # one warning, naming the missing fallocate, for the whole run
    assert err.count("NoFallocateWarning") == 1, err
    assert "Operation not supported" in err
    with ac.open_queue(path, read_only=True) as q:
        assert q.entry_count() == count


def test_full_ext2_without_fallocate_is_disk_full_not_sigbus(small_ext2):
    path = str(small_ext2 / "q")
    count, err = _fill(path)
    assert count > 10
    assert err.count("NoFallocateWarning") == 1, err
    with ac.open_queue(path, read_only=True) as q:
        assert q.entry_count() == count


def _copy_sparse(src: str, dst: str) -> None:
    """Copy a queue writing only the 4 KiB blocks that hold a non-zero byte:
    its files are sparse, as a writer that reserved nothing (Java, or one on a
    file system without fallocate) leaves them."""
    os.mkdir(dst)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f:
            data = f.read()
        fd = os.open(os.path.join(dst, name), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for off in range(0, len(data), 4096):
                block = data[off:off + 4096]
                if block.count(0) != len(block):
                    os.pwrite(fd, block, off)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)


def _fill_up(directory: str) -> None:
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\xff" * 4096)
        except OSError as exc:
            assert exc.errno == 28, exc


def test_tools_read_sparse_files_on_a_full_tmpfs(small_tmpfs, tmp_path):
    """`check` and `dump` read the holes of a sparse metadata.cq4t and cycle
    file on a full tmpfs, where touching a hole through a mapping is a SIGBUS."""
    src = str(tmp_path / "src")
    with ac.open_queue(src, time_provider=ac.SetTimeProvider(T0)) as q:
        app = q.appender()
        for i in range(200):
            app.append(b"excerpt %d" % i)
    path = str(small_tmpfs / "q")
    _copy_sparse(src, path)
    meta = os.stat(os.path.join(path, "metadata.cq4t"))
    assert meta.st_blocks * 512 < meta.st_size  # it has holes
    _fill_up(str(small_tmpfs))
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "check", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout + r.stderr[-3000:])
    assert "no problems found" in r.stdout
    r = subprocess.run([sys.executable, "-m", "aiochronicle", "dump", path],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert "excerpt 199" in r.stdout


# -- readers on a full tmpfs, a hole right after the data (issue 31) ----------

HOLE_READERS = textwrap.dedent(
    """
    import asyncio, sys
    import aiochronicle as ac

    path, total = sys.argv[1], int(sys.argv[2])
    with ac.open_queue(path, read_only=True) as q:
        last = q.last_index
        assert q.entry_count() == total, q.entry_count()
        t = q.tailer()
        n = 0
        while t.read_nowait() is not None:
            n += 1
        assert n == total and t.read_nowait() is None, n
        t.to_start()
        n = 0
        while len(got := t.read_many(64)):
            n += len(got)
        assert n == total, n
        assert not t.move_to_index(last + 1) and t.move_to_index(last)
        assert t.read_nowait().index == last and t.read_nowait() is None
        t.to_end()
        assert t.index == last + 1 and t.read_nowait() is None
        b = q.tailer(direction=ac.TailerDirection.BACKWARD).to_end()
        n = 0
        while b.read_nowait() is not None:
            n += 1
        assert n == total, n

        async def forward() -> int:
            it = q.tailer(pauser=ac.Pauser.busy()).__aiter__()
            n = 0
            for _ in range(total):
                await it.__anext__()
                n += 1
            try:  # the next one polls the header on the hole page for a while
                await asyncio.wait_for(it.__anext__(), 0.2)
            except TimeoutError:
                return n
            raise AssertionError("an excerpt past the end")

        assert asyncio.run(forward()) == total
        import uvloop
        assert uvloop.run(forward()) == total
    print("read", total)
    """
)


def test_readers_on_a_full_tmpfs_with_a_hole_after_the_data(small_tmpfs, tmp_path) -> None:
    """The last excerpt of the cycle ends exactly on a page boundary and the
    next page is a hole (as a Java writer or ``cp --sparse`` leaves it), as
    are the unused tails of the index arrays: on a full tmpfs, loading a word
    from such a page through the mapping was a SIGBUS in every reader."""
    src = str(tmp_path / "src")
    with ac.open_queue(src, time_provider=ac.SetTimeProvider(T0)) as q:
        app = q.appender()
        for i in range(300):
            app.append(b"excerpt %d " % i + b"y" * 50)
        st = cycles_of(q).acquire(q.cycles()[-1])
        end = st.end()[0]
        cycles_of(q).release(st)
        room = 4096 - end % 4096
        app.append(b"z" * (room - 4 if room >= 8 else room + 4092))
        st = cycles_of(q).acquire(q.cycles()[-1])
        end = st.end()[0]
        cycles_of(q).release(st)
        assert end % 4096 == 0
        total = q.entry_count()
    path = str(small_tmpfs / "q")
    _copy_sparse(src, path)
    (cycle_file,) = (os.path.join(path, n) for n in os.listdir(path) if n.endswith(".cq4"))
    fd = os.open(cycle_file, os.O_RDONLY)
    try:
        assert os.lseek(fd, end, os.SEEK_DATA) > end  # a hole right after the data
    except OSError as exc:
        assert exc.errno == errno.ENXIO  # nothing but holes after it
    finally:
        os.close(fd)
    _fill_up(str(small_tmpfs))

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              timeout=120)

    r = run("-c", HOLE_READERS, path, str(total))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])  # -7: SIGBUS
    assert f"read {total}" in r.stdout
    r = run("-m", "aiochronicle", "tail", path)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.count("\n") == total and "excerpt 299" in r.stdout
    r = run("-m", "aiochronicle", "stats", path)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert f" {total} " in r.stdout
    r = run("-m", "aiochronicle", "top", "--once", "-i", "0.05", path)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert str(total) in r.stdout
    e = Endpoint(path)  # the metrics server, scraped
    try:
        assert e.scrape()[("aiochronicle_excerpts_total", (("queue", path),))] == total
        assert e.scrape()[("aiochronicle_queue_up", (("queue", path),))] == 1
    finally:
        rc, _, err = e.stop()
    assert rc == 0, (rc, err[-3000:])
