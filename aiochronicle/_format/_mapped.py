"""Memory-mapped files shared by the native core.

A :class:`MappedFile` maps a whole file with one ``MAP_SHARED`` mapping whose
address and length live in a native ``cq_store`` struct.  When the file grows
the file is mapped again and the struct switched to the new mapping; the old
mapping is kept (retired), so a pointer taken from it a moment earlier stays
valid.  ``close()`` only marks the file closed; the mappings and the
descriptor go with :meth:`MappedFile.release`, which the owner calls once no
call can be using them (a cycle file: when its last holder lets it go, see
``_resource``), or when the object is garbage.  Readers drop the pages behind
them (see ``cq_read``), so resident memory stays flat however large a file
grows.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import stat
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from .._core._errors import (
    CorruptQueueError,
    DiskFullError,
    NoFallocateWarning,
    QueueAccessError,
    QueueClosedError,
)
from .._core._native import ERRNO, NO_SPACE, OK, Cell, check, error, ffi, last_errno, lib

__all__ = ["MappedFile", "MappedWords", "list_dir", "open_regular"]

PAGE = os.sysconf("SC_PAGESIZE")


def open_regular(path: str, flags: int = os.O_RDONLY, what: str = "a queue file") -> int:
    """Open ``path`` (``O_CLOEXEC``) refusing anything but a regular file.

    The open never blocks: a FIFO named like a queue file would otherwise hang
    the caller until a writer came along.

    Raises:
        CorruptQueueError: a directory, FIFO, socket or device stands at ``path``.
    """
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK)
    except PermissionError:
        raise QueueAccessError(path, "write" if flags & (os.O_WRONLY | os.O_RDWR)
                               else "read") from None
    except IsADirectoryError:
        raise CorruptQueueError(f"a directory stands where {what} should be", path, 0) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise CorruptQueueError(f"{kind} stands where {what} should be", path, 0)
        # back to blocking reads and writes for a regular file (O_NONBLOCK changes
        # nothing for one, but keep the descriptor as a plain open makes it)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_dir(path: str) -> list[str]:
    """The names in a queue directory.

    Raises:
        QueueAccessError: this process may not list the directory.
        FileNotFoundError: there is no such directory.
    """
    try:
        return os.listdir(path)
    except PermissionError:
        raise QueueAccessError(path, "list the queue directory") from None


#: the file systems (``st_dev``) already warned about in this process
_no_fallocate_warned: set[int] = set()


def _warn_no_fallocate(fd: int, path: str, err: int, faulting: bool) -> None:
    """Warn once per file system that ``fallocate`` cannot reserve there, and
    whether faulting the pages in does instead."""
    dev = os.fstat(fd).st_dev
    if dev in _no_fallocate_warned:
        return
    _no_fallocate_warned.add(dev)
    how = ("disk blocks are reserved by faulting pages in ahead of the writers instead"
           if faulting else "nor can this kernel fault pages in ahead of the writers: a full "
           "disk may end the process with SIGBUS")
    warnings.warn(f"the file system of {path} cannot fallocate ({os.strerror(err)}); {how}",
                  NoFallocateWarning, stacklevel=4)


class MappedFile:
    """One file mapped in full, growable in ``chunk``-sized steps plus ``overlap``.

    Once constructed it owns ``fd``: the descriptor is closed with the mappings
    when the object is garbage.
    """

    __slots__ = ("_grow_lock", "_retired", "c", "chunk", "closed", "fd", "overlap", "path",
                 "writable")

    def __init__(self, path: str, fd: int, writable: bool, chunk: int, overlap: int,
                 min_size: int = 0) -> None:
        self.path = path
        self.fd = fd
        self.writable = writable
        self.chunk = chunk
        self.overlap = overlap
        self.c: Any = ffi.new("cq_store *")
        self.c.chunk = chunk
        # loads of header words from pages the file does not back ask it
        # first on tmpfs (cq_backed_slow: a hole is a SIGBUS on a full one)
        self.c.fd = fd
        self.c.holes = 1
        self._retired: list[tuple[Any, int]] = []
        # one remap at a time: the pretoucher's thread, appenders and tailers of
        # one queue share this object and may all find the mapping too short
        self._grow_lock = threading.Lock()
        self.closed = False
        try:
            size = os.fstat(fd).st_size
            if writable and size < min_size:
                self._grow(min_size)
                size = os.fstat(fd).st_size
            if size > 0:
                self._map(size)
        except BaseException:
            # the descriptor stays the caller's when construction fails
            self.fd = -1
            raise

    def after_fork(self) -> None:
        """In a forked child: a fresh grow lock (a thread of the parent may
        have held it, and only the forking thread survives)."""
        self._grow_lock = threading.Lock()

    @property
    def size(self) -> int:
        """Bytes currently mapped."""
        return int(self.c.map_len)

    def file_size(self) -> int:
        """The file's size on disk now (it may exceed the mapping)."""
        return os.fstat(self._live()).st_size

    def _live(self) -> int:
        """The descriptor; QueueClosedError once released."""
        if self.fd < 0:
            raise QueueClosedError(f"{self.path} is closed")
        return self.fd

    def _map(self, size: int) -> None:
        """Map ``size`` bytes (more than now) and publish the new mapping to
        native readers in a safe order (``cq_store_remap``); the old one is
        kept until close.  Only under ``_grow_lock`` (or in the constructor)."""
        if size <= self.c.map_len:
            return  # another thread mapped at least as much meanwhile
        out = ffi.new("uint8_t **")
        check(lib.cq_map(self.fd, size, 1 if self.writable else 0, out),
              what=f"mmap of {self.path} failed")
        old_base, old_len = self.c.base, int(self.c.map_len)
        lib.cq_store_remap(self.c, out[0], size)
        if old_base != ffi.NULL:
            # another thread may still be inside a native call with the old
            # address, so the mapping stays until close; its pages are dropped
            # (the data lives on in the page cache and the new mapping)
            lib.cq_release_pages(old_base, 0, old_len)
            self._retired.append((old_base, old_len))

    def _grow(self, need: int) -> None:
        """Extend the file to hold ``need`` bytes, the way Java sizes chunks."""
        target = (need // self.chunk + 1) * self.chunk + self.overlap
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            if os.fstat(self.fd).st_size < target:
                try:
                    os.ftruncate(self.fd, target)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                        raise DiskFullError(
                            exc.errno, f"cannot grow {self.path}: {exc.strerror}") from exc
                    raise
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def reserve(self, start: int, end: int) -> bool:
        """Reserve disk blocks for ``[start, end)`` so writing them through the
        mapping cannot hit a full disk (which would be a SIGBUS).

        ``fallocate`` first; where the file system has none (NFS, FUSE, some
        overlays) the mapped pages of the range are faulted in writable
        instead (:meth:`_reserve_by_faulting`).  Raises DiskFullError; returns
        False only where neither way works (a kernel without
        ``MADV_POPULATE_WRITE`` on such a file system)."""
        if end <= start:
            return True
        rc = lib.cq_reserve(self._live(), start, end - start)
        if rc == OK:
            lib.cq_store_backed(self.c, start, end)  # header loads there need not ask
            return True
        if rc != NO_SPACE:
            err = last_errno()
            rc = self._reserve_by_faulting(start, end)
            _warn_no_fallocate(self.fd, self.path, err, rc != ERRNO)
            if rc == OK:
                lib.cq_store_backed(self.c, start, min(end, int(self.c.map_len)))
                return True
        if rc == NO_SPACE:
            raise error(rc, path=self.path, detail=f"no space left on the device for "
                        f"{self.path}; nothing was written")
        return False

    def _reserve_by_faulting(self, start: int, end: int) -> int:
        """``fallocate`` failed: make the file system give the
        pages of ``[start, end)`` their blocks by faulting them in writable
        (``MADV_POPULATE_WRITE``; bytes are not changed, so a writer in
        another process may be writing there meanwhile).  A fault the file
        system cannot back is reported (``CQ_NO_SPACE``) where a write through
        the mapping would have been a SIGBUS.  Only the mapped part of the
        range can be faulted; the rest is reserved when it is mapped."""
        end = min(end, int(self.c.map_len))
        if end <= start:
            return OK
        return int(lib.cq_populate(self.c.base, start, end))

    def ensure(self, need: int, grow: bool = True) -> bool:
        """Make the mapping cover ``need`` bytes; grow the file if writable
        and ``grow`` (readers pass False: they never change a file).

        Returns False when the mapping cannot cover ``need`` because the file
        is shorter.
        """
        if need <= self.c.map_len:
            return True
        with self._grow_lock:
            size = self.file_size()
            if size < need:
                if not self.writable or not grow:
                    self._map(size)
                    return False
                self._grow(need)
                size = self.file_size()
            self._map(size)
        return True

    def refresh(self) -> bool:
        """Map any growth of the file made by another process; True if it grew."""
        size = self.file_size()
        if size > self.c.map_len:
            with self._grow_lock:
                self._map(size)
            return True
        return False

    def unbacked(self, offset: int) -> bool:
        """Whether the file has no block under ``offset`` (a hole, or past its
        end): such bytes read as zero, but touching them through the mapping
        makes some file systems (tmpfs) allocate a page, and on a full one
        that is a SIGBUS.  A reader of a file it did not reserve asks first."""
        try:
            return os.lseek(self.fd, offset, os.SEEK_DATA) > offset
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data at or after offset
                return True
            if exc.errno == errno.EINVAL:  # no SEEK_DATA here: assume blocks
                return False
            raise

    def pread(self, offset: int, length: int) -> bytes:
        """Read bytes with ``pread`` rather than through the mapping: holes
        read as zeros without a page being allocated for them (see
        :meth:`unbacked`), so a tool can read a file it did not reserve on a
        full disk."""
        return os.pread(self.fd, length, offset)

    def view(self, offset: int, length: int) -> memoryview:
        """A memoryview of mapped bytes (valid until close)."""
        if offset < 0 or offset + length > self.c.map_len:
            raise ValueError(f"range {offset}+{length} outside mapping of {self.c.map_len}")
        return memoryview(ffi.buffer(self.c.base + offset, length))

    def pinned_view(self, offset: int, length: int, on_gone: Callable[[], None]) -> memoryview:
        """A read-only view of mapped bytes that calls ``on_gone`` once it and
        every view taken from it (slices, casts, exports) are gone: the caller
        keeps the mapping until then (a ``ctypes`` array is the exporter, so
        its finalizer runs only when the last view lets go of its buffer)."""
        if offset < 0 or offset + length > self.c.map_len:
            raise ValueError(f"range {offset}+{length} outside mapping of {self.c.map_len}")
        addr = int(ffi.cast("uintptr_t", self.c.base + offset))
        arr = (ctypes.c_char * length).from_address(addr)
        weakref.finalize(arr, on_gone)
        with memoryview(arr) as raw, raw.cast("B") as flat:
            return flat.toreadonly()

    def read(self, offset: int, length: int) -> bytes:
        """Copy mapped bytes; a read-only file's with ``pread`` (:meth:`pread`:
        it reserved nothing, and reading its holes must not allocate)."""
        if offset < 0 or offset + length > self.c.map_len:
            raise ValueError(f"range {offset}+{length} outside mapping of {self.c.map_len}")
        if not self.writable:
            return self.pread(offset, length)
        return bytes(ffi.buffer(self.c.base + offset, length))

    def write(self, offset: int, data: bytes) -> None:
        """Copy bytes into the mapping."""
        if offset < 0 or offset + len(data) > self.c.map_len:
            raise ValueError(f"range {offset}+{len(data)} outside mapping of {self.c.map_len}")
        ffi.memmove(self.c.base + offset, data, len(data))

    def ptr(self, offset: int, width: int = 8) -> Any:
        """A native pointer to ``offset`` (for atomics); checked against the mapping."""
        if self.closed:
            raise QueueClosedError(f"{self.path} is closed")
        if offset < 0 or offset + width > self.c.map_len or offset % width:
            raise ValueError(f"offset {offset} is outside the mapping or misaligned")
        return self.c.base + offset

    def load64(self, offset: int) -> int:
        return int(lib.cq_load64(self.ptr(offset)))

    def store64(self, offset: int, value: int) -> None:
        lib.cq_store64(self.ptr(offset), value)

    def cas64(self, offset: int, expected: int, value: int) -> bool:
        return bool(lib.cq_cas64(self.ptr(offset), expected, value))

    def max64(self, offset: int, value: int) -> int:
        """Raise the 64-bit value at ``offset`` to ``value`` (atomic; never
        lowers it); returns the value now there."""
        return int(lib.cq_max64(self.ptr(offset), value))

    def min64(self, offset: int, value: int) -> int:
        """Lower the 64-bit value at ``offset`` to ``value`` (atomic; never
        raises it); returns the value now there."""
        return int(lib.cq_min64(self.ptr(offset), value))

    def add64(self, offset: int, delta: int) -> int:
        """Atomically add ``delta`` to the 64-bit value at ``offset``; returns the sum."""
        return int(lib.cq_add64(self.ptr(offset), delta))

    def populate(self, start: int, stop: int) -> None:
        """Fault in the pages of ``[start, stop)`` (``stop`` within the mapping)."""
        self._live()
        lib.cq_populate(self.c.base, start, min(stop, int(self.c.map_len)))

    def load32(self, offset: int) -> int:
        return int(lib.cq_load32(self.ptr(offset, 4)))

    def cas32(self, offset: int, expected: int, value: int) -> bool:
        return bool(lib.cq_cas32(self.ptr(offset, 4), expected, value))

    def sync(self, start: int, end: int, wait: bool = True) -> None:
        """msync ``[start, end)``."""
        end = min(end, int(self.c.map_len))
        self._live()
        if end > start:
            check(lib.cq_sync(self.c.base, start, end, 0 if wait else 1),
                  what=f"msync of {self.path} failed")

    def close(self) -> None:
        """Mark the file closed; it stays mapped until :meth:`release` (or
        until it is garbage).

        Another thread, or the call a signal handler interrupted, may be inside
        a native call that reads or writes this mapping: only an owner that
        knows no call can be using it releases it (``Cycles.release``).
        """
        self.closed = True

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # e.g. at interpreter shutdown
            self.release()

    def release(self) -> None:
        """Unmap and close the descriptor now.  Only for an owner that knows no
        native call can be using the mapping (nobody holds it any more)."""
        self.closed = True
        if self.c.base != ffi.NULL:
            # forget the address before unmapping: another thread that runs
            # while this one is inside munmap must not find it still published
            base, length = self.c.base, int(self.c.map_len)
            self.c.base = ffi.NULL
            self.c.map_len = 0
            lib.cq_unmap(base, length)
        for base, length in self._retired:
            lib.cq_unmap(base, length)
        self._retired.clear()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class MappedWords:
    """A writable mapping of its own of the first ``size`` bytes of ``path``,
    for 64-bit words that outlive the queue's mapping of the file (the notify
    values: a helper thread and other loops touch them after the queue may
    have unmapped its own).  Unmapped by :meth:`unmap`, once."""

    def __init__(self, path: str, size: int) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            out = ffi.new("uint8_t **")
            check(lib.cq_map(fd, size, 1, out), what=f"mmap of {path} failed")
        finally:
            os.close(fd)
        self._base: Any = out[0]
        self.size = size

    def int64(self, offset: int) -> Cell:
        """The ``int64_t *`` at ``offset``."""
        typed: Cell = ffi.cast("int64_t *", self._base + offset)
        return typed

    def unmap(self) -> None:
        """Drop the mapping (no pointer from :meth:`int64` may be used after)."""
        lib.cq_unmap(self._base, self.size)
