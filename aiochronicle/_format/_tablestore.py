"""``metadata.cq4t``: Chronicle's table store of named 64-bit values.

Layout (as Java writes it): a metadata document ``header: !STStore {...}``
at offset 0, then one data document per key, each ``EVENT_NAME key`` followed
by an 8-aligned ``INT64`` value and padding to 4 bytes.  Values are mutated in
place with atomics; new keys are appended under a POSIX record lock on the
byte at offset 2**63 - 2, which is the lock Java takes.  Key lookup is
case-insensitive.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .._core._errors import (
    ChronicleError,
    CorruptQueueError,
    QueueAccessError,
    QueueClosedError,
    ReadOnlyQueueError,
)
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK
from .._core._native import HDR_META, HDR_NOT_COMPLETE, UNLOCKED, ffi
from .._core._native import Cell as NativeCell
from ._mapped import MappedFile
from ._wire import Document, WireError, WireWriter, parse_document

__all__ = ["Salvage", "TableStore", "salvage_table_store"]

TABLE_CHUNK = 64 << 10
LOCK_OFFSET = (1 << 63) - 2


def _align4(n: int) -> int:
    return (n + 3) & ~3


class _FileLock:
    """The table store's exclusive lock: byte 2**63-2 of the file, as Java locks it."""

    def __init__(self, fd: int, timeout: float) -> None:
        self.fd = fd
        self.timeout = timeout

    def __enter__(self) -> _FileLock:
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, LOCK_OFFSET, os.SEEK_SET)
                return self
            except OSError:
                attempt += 1
                if time.monotonic() >= deadline:
                    raise ChronicleError(
                        f"unable to claim the exclusive lock of the table store within "
                        f"{self.timeout}s"
                    ) from None
                time.sleep(min(250, attempt * attempt) / 1000.0)

    def __exit__(self, *exc: object) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, LOCK_OFFSET, os.SEEK_SET)


def record_bytes(key: str, value: int, base: int) -> tuple[bytes, int]:
    """The body of a key record written at absolute ``base`` (after its header
    word) and the absolute offset of its value."""
    w = WireWriter(base)
    w.event_name(key)
    value_off = w.int64_for_binding(value)
    w.align_to(4)
    return w.getvalue(), value_off


class TableStore:
    """An open ``metadata.cq4t`` (or Chronicle 4's ``directory-listing.cq4t``)."""

    def __init__(self, path: str, *, read_only: bool, timeout: float = 10.0,
                 header: Callable[[], bytes] | None = None,
                 initial_keys: tuple[tuple[str, int], ...] = ()) -> None:
        """Open the table store at ``path``, creating it with ``header`` (the
        body of the header document) and ``initial_keys`` when it does not exist
        yet and the store is writable."""
        self.path = path
        self.read_only = read_only
        self.timeout = timeout
        self._keys: dict[str, int] = {}
        self._end = 0
        flags = os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT
        try:
            # O_NONBLOCK: a FIFO in its place must not block (refused below)
            fd = os.open(path, flags | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except PermissionError:
            raise QueueAccessError(path, "read" if read_only else "write") from None
        except IsADirectoryError:
            raise CorruptQueueError("a directory stands where the table store should be",
                                    path, 0) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CorruptQueueError("not a regular file where the table store should be",
                                        path, 0)
            if not read_only:
                with _FileLock(fd, timeout):
                    if os.fstat(fd).st_size == 0 or self._first_word(fd) == 0:
                        if header is None:
                            raise CorruptQueueError("table store is empty", path, 0)
                        self._initialise(fd, header(), initial_keys)
            else:
                self._wait_ready(fd)
            self.file = MappedFile(path, fd, not read_only, TABLE_CHUNK, 0)
        except BaseException:
            os.close(fd)
            raise
        # from here the mapped file owns fd (closed when it is garbage)
        if not read_only:
            # every page of the table store is written through the mapping
            self.file.reserve(0, self.file.size)
        try:
            self.header = self._parse_header()
            self._scan()
        except BaseException:
            self.file.close()
            raise

    # -- creation ------------------------------------------------------
    @staticmethod
    def _first_word(fd: int) -> int:
        data = os.pread(fd, 4, 0)
        return int.from_bytes(data, "little") if len(data) == 4 else 0

    def _wait_ready(self, fd: int) -> None:
        deadline = time.monotonic() + min(self.timeout, 1.0)
        while True:
            word = self._first_word(fd)
            if word and not word & HDR_NOT_COMPLETE:
                return
            if time.monotonic() >= deadline:
                raise CorruptQueueError("table store has no complete header", self.path, 0)
            time.sleep(0.005)

    @staticmethod
    def _initialise(fd: int, header: bytes, keys: tuple[tuple[str, int], ...]) -> None:
        if os.fstat(fd).st_size < TABLE_CHUNK:
            os.ftruncate(fd, TABLE_CHUNK)
        image = bytearray(4) + header
        image += bytes(_align4(len(image)) - len(image))
        for key, value in keys:
            pos = len(image)
            body, _ = record_bytes(key, value, pos + 4)
            image += len(body).to_bytes(4, "little") + body
        if len(image) > TABLE_CHUNK:
            raise ChronicleError("table store header does not fit its first chunk")
        # the header word goes last: readers wait for it to be complete
        os.pwrite(fd, bytes(image[4:]), 4)
        os.pwrite(fd, (HDR_META | len(header)).to_bytes(4, "little"), 0)

    # -- parsing -------------------------------------------------------
    def _parse_header(self) -> Document:
        f = self.file
        if f.size < 8:
            raise CorruptQueueError("table store is too short", self.path, 0)
        word = f.load32(0)
        if not word & HDR_META or word & HDR_NOT_COMPLETE:
            raise CorruptQueueError(f"table store header word {word:#010x} is not a complete "
                                    "metadata document", self.path, 0)
        length = word & LENGTH_MASK
        if 4 + length > f.size:
            raise CorruptQueueError("table store header runs past the end of the file",
                                    self.path, 0)
        try:
            doc = parse_document(f.view(0, 4 + length), 4, 4 + length)
        except WireError as exc:
            raise CorruptQueueError(f"table store header is not BinaryWire: {exc}",
                                    self.path, 4) from None
        header = doc.get("header")
        if header is None or not isinstance(header.value, Document):
            raise CorruptQueueError("table store has no `header` document", self.path, 4)
        if header.type_name not in (None, "STStore"):
            raise CorruptQueueError(f"expected a `!STStore` table store header, found "
                                    f"`!{header.type_name}` (a cycle file?)", self.path, 4)
        self._end = _align4(4 + length)
        return header.value

    def _scan(self) -> None:
        """Index every complete key record from where the last scan stopped.

        A damaged record stops a read-only store's scan (the keys before it are
        still served; :meth:`damage` says what is wrong) and raises in a
        writable one, which must not add keys after it."""
        f = self.file
        pos = self._end
        while pos + 4 <= f.size:
            # no record can stand in a hole, and a read-only store did not
            # reserve it: touching it would be a SIGBUS on a full tmpfs
            if self.read_only and f.unbacked(pos):
                break
            word = f.load32(pos)
            if word == 0 or word & HDR_NOT_COMPLETE:
                break
            length = word & LENGTH_MASK
            end = pos + 4 + length
            try:
                if end > f.size and not f.ensure(end, grow=False):
                    raise CorruptQueueError("table store record runs past the end of the "
                                            "file", self.path, pos)
                if not word & HDR_META:
                    key, value_off = self._parse_record(pos, end)
                    self._keys.setdefault(key.lower(), value_off)
            except CorruptQueueError:
                if self.read_only:
                    break
                raise
            pos = _align4(end)
            self._end = pos

    def _parse_record(self, pos: int, end: int,
                      buf: bytes | memoryview | None = None) -> tuple[str, int]:
        """The key and value offset of the record at ``pos``, read from the
        mapping or from ``buf`` (the file's bytes from offset 0)."""
        if buf is None:
            buf = self.file.view(0, end)
        try:
            doc = parse_document(buf, pos + 4, end)
        except WireError as exc:
            raise CorruptQueueError(f"bad table store record: {exc}", self.path, pos) from None
        items = doc.items
        if not items:
            raise CorruptQueueError("empty table store record", self.path, pos)
        key, value = items[0]
        if value.code != 0xA7 or not isinstance(key, str):
            raise CorruptQueueError("table store record is not a 64-bit value", self.path, pos)
        return key, value.offset

    @property
    def end(self) -> int:
        """The offset just past the last complete key record scanned so far
        (where the next record goes, or one another process added starts)."""
        return self._end

    # -- values --------------------------------------------------------
    def keys(self) -> Iterator[tuple[str, int]]:
        """Every (key, value) pair, in file order."""
        self._scan()
        f = self.file
        pos = _align4(4 + (f.load32(0) & LENGTH_MASK))
        while pos < self._end:  # the complete records _scan read
            word = f.load32(pos)
            end = pos + 4 + (word & LENGTH_MASK)
            if not word & HDR_META:
                key, off = self._parse_record(pos, end)
                yield key, f.load64(off)
            pos = _align4(end)

    def offset(self, key: str) -> int | None:
        """The value offset of ``key``, or None when the key does not exist."""
        off = self._keys.get(key.lower())
        if off is None:
            self._scan()
            off = self._keys.get(key.lower())
        return off

    def get(self, key: str, default: int | None = None) -> int | None:
        """The current value of ``key``, or ``default`` when it does not exist."""
        off = self.offset(key)
        return default if off is None else self.file.load64(off)

    def acquire(self, key: str, default: int) -> int:
        """The value offset of ``key``, creating it with ``default`` if absent."""
        off = self.offset(key)
        if off is not None:
            return off
        if self.read_only:
            raise ReadOnlyQueueError(f"cannot create key {key!r} in a read-only table store")
        if self.file.closed:  # (once released, its descriptor is gone too)
            raise QueueClosedError(f"{self.path} is closed")
        with _FileLock(self.file.fd, self.timeout):
            self._scan()
            off = self._keys.get(key.lower())
            if off is not None:
                return off
            pos = self._end
            body, off = record_bytes(key, default, pos + 4)
            if not self.file.ensure(pos + 4 + len(body) + 8):
                raise ReadOnlyQueueError("table store cannot grow")
            self.file.reserve(pos, self.file.size)
            if self.file.load32(pos) != 0:
                raise CorruptQueueError("table store end is not free", self.path, pos)
            self.file.write(pos + 4, body)
            if not self.file.cas32(pos, 0, len(body)):
                raise CorruptQueueError("table store record was overwritten", self.path, pos)
            self._scan()
        return off

    def cell(self, key: str, default: int) -> Cell:
        """The value of ``key`` (created if absent) as a :class:`Cell`."""
        return Cell(self.file, self.acquire(key, default))

    def ptr(self, key: str, default: int) -> NativeCell:
        """A native ``int64_t *`` to the value of ``key`` (created if absent)."""
        cell: NativeCell = ffi.cast("int64_t *", self.file.ptr(self.acquire(key, default)))
        return cell

    def set(self, key: str, value: int) -> None:
        """Store ``value`` under ``key``."""
        self.file.store64(self.acquire(key, value), value)

    def set_max(self, key: str, value: int) -> int:
        """Raise ``key`` to ``value`` unless it is already larger; returns the result.

        A key still holding Long.MIN_VALUE (never set) is simply set.
        """
        return self.file.max64(self.acquire(key, UNLOCKED), value)

    def set_min(self, key: str, value: int) -> int:
        """Lower ``key`` to ``value`` unless it is already smaller; returns the result."""
        off = self.acquire(key, value)
        if self.file.load64(off) == UNLOCKED:
            self.file.cas64(off, UNLOCKED, value)
        return self.file.min64(off, value)

    def add(self, key: str, delta: int) -> int:
        """Atomically add ``delta`` to ``key``; returns the new value."""
        off = self.acquire(key, 0)
        if self.file.load64(off) == UNLOCKED:
            self.file.cas64(off, UNLOCKED, 0)
        return self.file.add64(off, delta)

    def cas(self, key: str, expected: int, value: int) -> bool:
        """Compare-and-set ``key``."""
        return self.file.cas64(self.acquire(key, expected), expected, value)

    def damage(self) -> tuple[int, str] | None:
        """Where and how the key records are damaged, or None.

        Looks at every record and at the bytes after the last one (which must be
        zero): what :meth:`keys` cannot read, or a key added later could not be.
        """
        f = self.file
        f.refresh()
        # read with pread, not the mapping: a tool did not reserve this file,
        # and its holes read through a mapping on a full tmpfs are a SIGBUS
        buf = f.pread(0, f.size)
        pos = _align4(4 + (int.from_bytes(buf[:4], "little") & LENGTH_MASK))
        while pos + 4 <= len(buf):
            word = int.from_bytes(buf[pos:pos + 4], "little")
            if word == 0:
                if buf.count(0, pos) != len(buf) - pos:
                    return pos, "non-zero bytes after the last key record"
                return None
            if word & HDR_NOT_COMPLETE:
                return pos, f"an incomplete record header {word:#010x}"
            end = pos + 4 + (word & LENGTH_MASK)
            if end > len(buf):
                return pos, "a record runs past the end of the file"
            if not word & HDR_META:
                try:
                    self._parse_record(pos, end, buf)
                except CorruptQueueError as exc:
                    return pos, str(exc)
            pos = _align4(end)
        return None

    def close(self, now: bool = False) -> None:
        """Mark the table store closed; its mapping and descriptor go when it is
        garbage (see ``MappedFile.close``), or at once with ``now`` (the
        owner knows no native call or pointer of its can still use them)."""
        self.file.close()
        if now:
            self.file.release()


@dataclass
class Salvage:
    """What could still be read from a damaged table store."""

    header: Document | None = None  # the body of ``header: !STStore``, if it parsed
    keys: list[tuple[str, int]] = field(default_factory=list)  # readable records, in order
    damaged: list[int] = field(default_factory=list)  # offsets where records were unreadable


def _salvage_record(buf: bytes, pos: int) -> tuple[str, int, int] | None:
    """(key, value, end) of a plausible key record at ``pos`` of ``buf``, else None."""
    if pos + 4 > len(buf):
        return None
    word = int.from_bytes(buf[pos:pos + 4], "little")
    length = word & LENGTH_MASK
    if word & (HDR_META | HDR_NOT_COMPLETE) or not 4 <= length <= 4096:
        return None
    end = pos + 4 + length
    if end > len(buf):
        return None
    try:
        items = parse_document(buf, pos + 4, end).items
    except WireError:
        return None
    if not items:
        return None
    key, value = items[0]
    if (value.code != 0xA7 or not isinstance(key, str) or not key.isprintable()
            or value.offset + 8 > end):
        return None
    return key, int.from_bytes(buf[value.offset:value.offset + 8], "little", signed=True), end


def salvage_table_store(path: str) -> Salvage:
    """Read what is still readable of the table store at ``path`` without
    trusting it: the header document if it parses, and every key record that
    does, skipping damaged bytes to the next plausible record."""
    out = Salvage()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return out
        buf = os.pread(fd, 16 << 20, 0)
    finally:
        os.close(fd)
    pos = 4
    if len(buf) >= 8:
        length = int.from_bytes(buf[:4], "little") & LENGTH_MASK
        if 4 + length <= len(buf):
            try:
                header = parse_document(buf, 4, 4 + length).get("header")
            except WireError:
                header = None
            if header is not None and isinstance(header.value, Document):
                out.header = header.value
                pos = _align4(4 + length)
    used = len(buf.rstrip(b"\0"))  # nothing but zero bytes from here on
    while pos < used:
        word = int.from_bytes(buf[pos:pos + 4], "little")
        got = _salvage_record(buf, pos)
        if got is not None:
            out.keys.append(got[:2])
            pos = _align4(got[2])
            continue
        if word & HDR_META and not word & HDR_NOT_COMPLETE and word & LENGTH_MASK:
            end = pos + 4 + (word & LENGTH_MASK)
            if end <= len(buf):  # a metadata document between records: skipped
                pos = _align4(end)
                continue
        if word != 0 and (not out.damaged or out.damaged[-1] != pos):
            out.damaged.append(pos)
        pos += 4
    return out


class Cell:
    """One 64-bit value of a mapped table store, read and raised atomically
    (valid while the store is mapped: a closed store stays mapped until it is
    garbage, and the cell keeps it)."""

    __slots__ = ("_file", "_off")

    def __init__(self, file: MappedFile, off: int) -> None:
        self._file = file
        self._off = off

    def load(self) -> int:
        """The value now."""
        return self._file.load64(self._off)

    def max64(self, value: int) -> int:
        """Raise the value to ``value`` (never lowers it); returns the value now."""
        return self._file.max64(self._off, value)
