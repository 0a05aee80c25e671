"""Cycle files (``.cq4``): creating them as Java does and reading their header."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from array import array
from dataclasses import dataclass

from .._core._errors import CorruptQueueError, QueueAccessError
from .._core._native import (
    CORRUPT,
    HDR_EOF,
    HDR_META,
    HDR_NOT_COMPLETE,
    NEED_MAP,
    NOT_FOUND,
    NOT_REACHED,
    OK,
    check,
    error,
    ffi,
    lib,
)
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK
from ._headerless import is_headerless
from ._mapped import MappedFile
from ._rollcycles import cycle_shift_for
from ._wire import Document, WireError, WireWriter, parse_document

__all__ = ["CycleStore", "StoreLayout", "create_or_open_store", "creator_gone", "first_word",
           "open_store", "precreated_path", "store_image", "unwritten_age"]

MAX_HEADER = 1 << 20
#: in a file without an index, a seek walks at most this many excerpts
MARK_EVERY = 256
#: what a pre-created cycle file's name ends with instead of ``.cq4`` (Java's ``PrecreatedFiles``)
PRECREATED_SUFFIX = ".precreated"


def _align4(n: int) -> int:
    return (n + 3) & ~3


@dataclass(frozen=True, slots=True)
class StoreLayout:
    """Where a cycle file keeps the fields the native core updates."""

    index_count: int
    index_spacing: int
    align: int
    wp_off: int
    wp_seq_off: int
    i2i_off: int
    last_index_off: int
    data_start: int
    roll_length: int | None = None
    roll_format: str | None = None
    roll_epoch: int | None = None
    #: no header document (libchronicle's files): data from offset 0, no index
    headerless: bool = False


def _index_doc(name: str, base: int, capacity: int, values: tuple[int, ...]) -> tuple[bytes, int]:
    w = WireWriter(base)
    w.event_name(name)
    w.int64_array(capacity, values)
    return w.getvalue(), w.pos - base


def store_image(index_count: int, index_spacing: int) -> tuple[bytes, StoreLayout]:
    """The bytes of a new cycle file up to its first excerpt, as Java writes them:
    the ``header: !SCQStore`` document, the ``index2index`` page and the first
    secondary ``index`` page.  The first header word is left 0: the creator
    publishes it last."""
    w = WireWriter(4)
    w.event_name("header")
    w.type_prefix("SCQStore")
    outer = w.begin_length32()
    w.field("writePosition")
    wp_off = w.int128_for_binding(0, 0)
    w.field("indexing")
    w.type_prefix("SCQSIndexing")
    inner = w.begin_length32()
    w.field("indexCount")
    w.int_compact(index_count)
    w.field("indexSpacing")
    w.int_compact(index_spacing)
    w.field("index2Index")
    i2i_off = w.int64_for_binding(0)
    w.field("lastIndex")
    last_off = w.int64_for_binding(0)
    w.end_length32(inner)
    w.field("dataFormat")
    w.int_compact(1)
    w.end_length32(outer)
    mod = w.pos & 63
    if mod > 60:  # Java's padToCacheAlign
        w.align_to(64)
    header = w.getvalue()
    image = bytearray((HDR_META | len(header)).to_bytes(4, "little")) + header
    i2i_pos = _align4(len(image))
    image += bytes(i2i_pos - len(image))
    _, i2i_len = _index_doc("index2index", i2i_pos + 4, index_count, ())
    page_pos = _align4(i2i_pos + 4 + i2i_len)
    i2i_body, _ = _index_doc("index2index", i2i_pos + 4, index_count, (page_pos,))
    image += (HDR_META | len(i2i_body)).to_bytes(4, "little") + i2i_body
    image += bytes(page_pos - len(image))
    page_body, _ = _index_doc("index", page_pos + 4, index_count, ())
    image += (HDR_META | len(page_body)).to_bytes(4, "little") + page_body
    data_start = _align4(len(image))
    image[i2i_off:i2i_off + 8] = i2i_pos.to_bytes(8, "little")
    layout = StoreLayout(index_count, index_spacing, 4, wp_off, wp_off + 8, i2i_off, last_off,
                         data_start)
    return bytes(image), layout


def headerless_layout(index_count: int, index_spacing: int) -> StoreLayout:
    """The layout of a cycle file without a header document: data from offset
    0, 4-byte aligned, no write position and no index (lookups walk)."""
    return StoreLayout(index_count, index_spacing, 4, 0, 0, 0, 0, 0, headerless=True)


def parse_layout(f: MappedFile, roll_index: tuple[int, int] | None = None) -> StoreLayout:
    """Read a cycle file's header document (any Chronicle 4/5 variant).

    ``roll_index`` (the queue's index count and spacing) allows a file without
    a header document, as libchronicle writes them, to be read.
    """
    word = f.load32(0)
    length = word & LENGTH_MASK
    if roll_index is not None and (not word & HDR_META or word == HDR_EOF) and is_headerless(
            lambda pos: f.load32(pos) if pos + 4 <= f.size else None, f.size):
        return headerless_layout(*roll_index)
    if not word & HDR_META or word & HDR_NOT_COMPLETE or length == 0:
        raise CorruptQueueError(f"first header word {word:#010x} is not a complete metadata "
                                "document: not a Chronicle Queue cycle file", f.path, 0)
    if length > MAX_HEADER or 4 + length > f.size:
        raise CorruptQueueError(f"header length {length} is impossible", f.path, 0)
    try:
        doc = parse_document(f.view(0, 4 + length), 4, 4 + length)
    except WireError as exc:
        raise CorruptQueueError(f"header is not BinaryWire: {exc}", f.path, 4) from None
    hv = doc.get("header")
    if hv is None or not isinstance(hv.value, Document):
        raise CorruptQueueError("first document is not `header`: not a Chronicle Queue "
                                "cycle file", f.path, 4)
    h = hv.value
    try:
        wp = h.get("writePosition")
        wp_off = wp_seq_off = 0
        if wp is not None:
            if wp.kind == "int64_array":
                arr = wp.as_array()
                wp_off = arr.values_offset
                wp_seq_off = wp_off + 8 if arr.capacity >= 2 else 0
            elif wp.code == 0xA7:
                wp_off = wp.offset
        iv = h.get("indexing")
        if iv is None:
            raise CorruptQueueError("header has no `indexing`", f.path, 4)
        idx = iv.as_document()
        count = idx["indexCount"].as_int()
        spacing = idx["indexSpacing"].as_int()
        i2i = idx.get("index2Index")
        last = idx.get("lastIndex")
        i2i_off = i2i.offset if i2i is not None and i2i.code == 0xA7 else 0
        last_off = last.offset if last is not None and last.code == 0xA7 else 0
        df = h.get("dataFormat")
        data_format = df.as_int() if df is not None else 0
        roll = h.get("roll")
        r_len = r_fmt = r_epoch = None
        if roll is not None and isinstance(roll.value, Document):
            r = roll.value
            r_len = r["length"].as_int()
            r_fmt = r["format"].as_str()
            ev = r.get("epoch")
            r_epoch = ev.as_int() if ev is not None else 0
    except (WireError, KeyError) as exc:
        raise CorruptQueueError(f"header field is malformed: {exc}", f.path, 4) from None
    for n in (count, spacing):
        if n <= 0 or n & (n - 1) or n > (1 << 24):
            raise CorruptQueueError(f"index count/spacing {n} is not a power of two",
                                    f.path, 4)
    # the native core updates these in place with 8-byte atomics
    wp_off, wp_seq_off, i2i_off, last_off = (
        o if o % 8 == 0 and o + 8 <= 4 + length else 0
        for o in (wp_off, wp_seq_off, i2i_off, last_off))
    if data_format not in (0, 1):
        # 0: excerpts packed (before Chronicle 5.19.11), 1: 4-byte aligned; any
        # other value is damage, and reading with the wrong alignment would stop
        # short at the first excerpt with no error
        raise CorruptQueueError(f"dataFormat {data_format} is neither 0 nor 1", f.path, 4)
    align = 4 if data_format == 1 else 1
    data_start = _align4(4 + length) if align == 4 else 4 + length
    return StoreLayout(count, spacing, align, wp_off, wp_seq_off, i2i_off, last_off, data_start,
                       r_len, r_fmt, r_epoch)


class CycleStore:
    """One open cycle file: its mapping (shared by every appender and tailer of
    this queue object) and its parsed header."""

    __slots__ = ("_marks", "_marks_lock", "cycle", "file", "layout", "path", "refs")

    def __init__(self, path: str, cycle: int, file: MappedFile, layout: StoreLayout) -> None:
        self.path = path
        self.cycle = cycle
        self.file = file
        self.layout = layout
        self.refs = 0
        # a file without an index (libchronicle's): the position of every
        # MARK_EVERY-th excerpt passed so far, so that seeks (and reading
        # backwards) walk at most MARK_EVERY excerpts
        self._marks = array("Q", [0]) if layout.headerless else None
        self._marks_lock = threading.Lock()
        c = file.c
        c.cycle = cycle
        c.align = layout.align
        c.file_shift = cycle_shift_for(layout.index_count, layout.index_spacing)
        c.wp_off = layout.wp_off
        c.wp_seq_off = layout.wp_seq_off
        c.i2i_off = layout.i2i_off
        c.last_index_off = layout.last_index_off
        c.index_count = layout.index_count
        c.index_spacing = layout.index_spacing
        c.count_bits = layout.index_count.bit_length() - 1
        c.spacing_bits = layout.index_spacing.bit_length() - 1
        c.data_start = layout.data_start
        if layout.align == 1 and not layout.headerless:
            self._check_packed()

    def _check_packed(self) -> None:
        """A file whose header says its excerpts are packed (``dataFormat`` 0 or
        missing) while they are 4-byte aligned has a damaged ``dataFormat``
        field (one flipped bit of its name or value): read packed, every lookup
        past an excerpt whose length is not a multiple of 4 would land in its
        padding and say the excerpt is not there.  Told apart by the walk to
        the end of the data: packed it breaks, aligned it reaches the end the
        writePosition and the index record."""
        c = self.file.c
        pos = ffi.new("uint64_t *")
        seq = ffi.new("uint64_t *")
        eof = ffi.new("int *")
        if lib.cq_find_end(c, pos, seq, eof) != CORRUPT:
            return
        c.align = 4
        try:
            aligned = lib.cq_find_end(c, pos, seq, eof) == OK and int(seq[0]) > 0
        finally:
            c.align = 1
        if aligned:
            raise CorruptQueueError("the header says the excerpts are packed (dataFormat 0 "
                                    "or none) but they are 4-byte aligned: the header's "
                                    "dataFormat field is damaged", self.path, 4)

    @property
    def c(self) -> object:
        return self.file.c

    def after_fork(self, refs: int) -> None:
        """In a forked child: ``refs`` holders (the parent's threads that held
        it are not here) and fresh locks (one of them may have held one)."""
        self.refs = refs
        self._marks_lock = threading.Lock()
        self.file.after_fork()

    def end(self) -> tuple[int, int, bool]:
        """(position after the last document, excerpt count, EOF written)."""
        pos = ffi.new("uint64_t *")
        seq = ffi.new("uint64_t *")
        eof = ffi.new("int *")
        for _ in range(64):
            rc = lib.cq_find_end(self.file.c, pos, seq, eof)
            if rc == OK:
                return int(pos[0]), int(seq[0]), bool(eof[0])
            if rc == NEED_MAP:
                if not self.file.refresh():
                    self.check_not_truncated(int(pos[0]), int(seq[0]))
                    return int(pos[0]), int(seq[0]), False
                continue
            # any other code: the headers do not lead to an end
            raise error(CORRUPT, path=self.path, pos=int(pos[0]),
                        detail="cannot find the end of the data")
        raise CorruptQueueError("the file keeps growing while its end is sought", self.path)

    def check_not_truncated(self, at: int, seq: int) -> None:
        """Raise CorruptQueueError when the data, which runs into the end of the file at
        ``at`` (``seq`` excerpts before it), stops short of the last excerpt the header's
        writePosition records: the file was truncated.  (The writePosition is loaded
        before the file's size: an appender grows the file before it writes there.)"""
        off = self.layout.wp_off
        if not off or off + 8 > self.file.size:
            return
        wp = self.file.load64(off)
        if wp <= 0 or wp < at:
            return
        size = self.file.file_size()
        end = at + 4
        if end <= size and end <= self.file.size:
            end += self.file.load32(at) & LENGTH_MASK
        if end > size:
            shift = cycle_shift_for(self.layout.index_count, self.layout.index_spacing)
            raise CorruptQueueError(
                f"the cycle file ends before the last excerpt its header records (at {wp:#x}): "
                f"it was truncated: from index {(self.cycle << shift) | seq:#x} "
                f"(cycle {self.cycle}, sequence {seq}) on, its excerpts are missing",
                self.path, at)

    def seek(self, seq: int) -> tuple[int, int]:
        """(native result code, header position) of data excerpt ``seq``."""
        return self._seek(seq, self._mark_before(seq) if self._marks is not None else None)

    def _mark_before(self, seq: int) -> tuple[int, int]:
        """(sequence, position) of the remembered excerpt nearest before
        ``seq``, remembering every MARK_EVERY-th one up to it first."""
        marks = self._marks
        assert marks is not None
        k = seq // MARK_EVERY
        with self._marks_lock:
            while len(marks) <= k:
                last = (len(marks) - 1) * MARK_EVERY
                code, pos = self._seek(last + MARK_EVERY, (last, marks[-1]))
                if code != OK:
                    break
                marks.append(pos)
            n = min(k, len(marks) - 1)
            return n * MARK_EVERY, marks[n]

    def _seek(self, seq: int, start: tuple[int, int] | None) -> tuple[int, int]:
        pos = ffi.new("uint64_t *")
        while True:
            rc = (lib.cq_seek(self.file.c, seq, pos) if start is None
                  else lib.cq_seek_from(self.file.c, seq, start[1], start[0], pos))
            if rc == NEED_MAP:
                if not self.file.refresh():
                    need = int(pos[0])
                    if need > self.file.file_size() + 4:
                        raise error(CORRUPT, path=self.path, pos=need,
                                    detail="an excerpt runs past the end of the file")
                    return NOT_FOUND, 0
                continue
            if rc == CORRUPT:
                raise error(rc, path=self.path, pos=int(pos[0]),
                            detail="corrupt index or excerpt header")
            return rc, int(pos[0])

    def write_eof(self) -> None:
        """Close the cycle with an EOF marker (the write lock must be held).

        Bounded: raises CorruptQueueError when the file is damaged where its
        data ends (a document runs past the end of a truncated file), and
        WriteLockLostError when another writer forced the lock away meanwhile.
        """
        f = self.file
        if f.writable:
            end = self.end()[0]
            f.ensure(end + 16)
            f.reserve(end, end + 16)
        need = ffi.new("uint64_t *")
        for _ in range(64):
            rc = lib.cq_write_eof(f.c, 0, need)
            if rc == OK:
                return
            n = int(need[0])
            if rc == NEED_MAP:
                if f.ensure(n, grow=False):
                    continue
                raise error(CORRUPT, path=self.path, pos=n,
                            detail="a document runs past the end of the file (it was "
                            "truncated): the cycle cannot be closed")
            if rc == NOT_REACHED:
                f.ensure(n + 8)
                f.reserve(max(0, n - 8), n + 8)
                continue
            check(rc, path=self.path, what="writing the end-of-cycle marker",
                  detail="cannot write the end-of-cycle marker: the headers do not lead to "
                  "the end of the data" if rc == CORRUPT else "")
        raise CorruptQueueError("the end of the cycle moved 64 times while its "
                                "end-of-file marker was written", self.path)

    def close(self, now: bool = False) -> None:
        """Mark the file closed; with ``now`` (nobody holds it: no call can be
        using it) also unmap it at once."""
        self.file.close()
        if now:
            self.file.release()


def _header_settled(word: int) -> bool:
    """Whether a cycle file's first header word is no creator's work in
    progress: complete, a bare EOF (a headerless cycle closed before any
    write), or damage that waiting will not mend.  A creator (Java's or
    ours) moves the word from 0 to ``NOT_COMPLETE`` alone, then to the
    finished header; ``NOT_COMPLETE`` with any other bit is a flipped bit."""
    return bool(word) and word != HDR_NOT_COMPLETE


def unwritten_age(path: str) -> float | None:
    """Seconds since a cycle file whose header is not written yet was last
    changed; None when there is no such file or its header is written.

    Every creator writes the header right after making the file (libchronicle
    renames an all-zero file into place first, Java claims the first word in
    place): a file still without one ``timeout`` seconds on lost its creator.
    A look with ``pread``, no mapping, no wait.
    """
    got = first_word(path)
    if got is None or _header_settled(got[1]):
        return None
    return max(0.0, time.time() - got[0].st_mtime)


def first_word(path: str) -> tuple[os.stat_result, int] | None:
    """(status, first header word) of the regular file at ``path``, read with
    ``pread`` (no mapping); None when there is none or it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return info, int.from_bytes(os.pread(fd, 4, 0).ljust(4, b"\0"), "little")
    except OSError:
        return None
    finally:
        os.close(fd)


def creator_gone(path: str, timeout: float) -> bool:
    """The cycle file at ``path`` has been without its header for ``timeout``
    seconds or more (see :func:`unwritten_age`)."""
    age = unwritten_age(path)
    return age is not None and age >= timeout


def _wait_header(f: MappedFile, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 1e-5
    while True:
        if f.size >= 4 and _header_settled(f.load32(0)):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
        f.refresh()


def _check_regular(fd: int, path: str) -> None:
    """A cycle file must be a regular file (not a directory, FIFO, device...)."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        raise CorruptQueueError("not a regular file where a cycle file should be", path, 0)


def open_store(path: str, cycle: int, *, writable: bool, chunk: int, overlap: int,
               timeout: float, roll_index: tuple[int, int] | None = None,
               wait: bool = True) -> CycleStore | None:
    """Open an existing cycle file; None if it does not exist or its header is
    not written (yet, or ever: its creator died).

    A file without its header is waited for (``wait``) until ``timeout``
    seconds after it was last changed, so one whose creator died long ago is
    not waited for at all; without ``wait`` (readers: "nothing yet" must not
    block) it is not waited for.  :func:`unwritten_age` tells the two apart.

    With ``roll_index`` (index count, spacing) a file without a header
    document (libchronicle's) is opened too, with a headerless layout."""
    try:
        # O_NONBLOCK: a FIFO in the cycle file's place must not block the open
        # (it is refused just below); it changes nothing for a regular file
        fd = os.open(path, (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
                     | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except PermissionError:
        raise QueueAccessError(path, "write" if writable else "read") from None
    except IsADirectoryError:
        raise CorruptQueueError("a directory stands where a cycle file should be", path,
                                0) from None
    try:
        _check_regular(fd, path)
        f = MappedFile(path, fd, writable, chunk, overlap)
    except BaseException:
        os.close(fd)
        raise
    try:
        left = 0.0
        if wait:
            left = min(timeout, max(0.0, timeout - (time.time() - os.fstat(fd).st_mtime)))
        if not _wait_header(f, left):
            f.close()
            f.release()
            return None
        return CycleStore(path, cycle, f, parse_layout(f, roll_index))
    except BaseException:
        f.close()
        raise


def precreated_path(path: str) -> str:
    """Where a pre-created file for the cycle file ``path`` would be: its name
    without ``.cq4`` plus ``.precreated`` (Java's ``PrecreatedFiles``)."""
    return path[:-4] + PRECREATED_SUFFIX if path.endswith(".cq4") else path + PRECREATED_SUFFIX


def _take_precreated(path: str, tmp: str) -> bool:
    """Claim the pre-created file of ``path`` by renaming it to ``tmp`` (one
    creator wins the rename); True if there was one."""
    try:
        os.rename(precreated_path(path), tmp)
    except FileNotFoundError:
        return False
    return True


def _aside_name(path: str) -> str:
    """The temporary name a new cycle file is built under (``.NAME.PID.creating``)."""
    return os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.creating")


def _build_aside(path: str, cycle: int, index_count: int, index_spacing: int, chunk: int,
                 overlap: int, taken: bool = False) -> tuple[str, MappedFile, StoreLayout]:
    """Write a complete new cycle file under a temporary name beside ``path``
    (ignored by every listing: it does not end in ``.cq4``).

    ``taken``: a pre-created file (``<name>.precreated``, made ahead by a
    tool) was renamed to the temporary name (:func:`_take_precreated`), and
    is used instead of a new one, as Java takes it: its blocks are already
    allocated.  Its header is written unless it has one already."""
    tmp = _aside_name(path)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (0 if taken else os.O_TRUNC)
    fd = os.open(tmp, flags, 0o644)
    if taken:
        head = os.pread(fd, 4, 0)
        if int.from_bytes(head.ljust(4, b"\0"), "little") != 0:
            # a header is there already: linked into place as it is, and read
            # by its own fields when opened
            try:
                f = MappedFile(path, fd, True, chunk, overlap)
            except BaseException:
                os.close(fd)
                raise
            return tmp, f, store_image(index_count, index_spacing)[1]
    image, layout = store_image(index_count, index_spacing)
    try:
        f = MappedFile(path, fd, True, chunk, overlap, min_size=len(image) + 64)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    try:
        # blocks for the header first: a full disk must not SIGBUS us
        f.reserve(0, len(image) + 4096)
        f.write(4, image[4:])
        f.cas32(0, 0, int.from_bytes(image[:4], "little"))
    except BaseException:
        f.close()
        f.release()
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp, f, layout


def create_or_open_store(path: str, cycle: int, *, index_count: int, index_spacing: int,
                         chunk: int, overlap: int, timeout: float,
                         roll_index: tuple[int, int] | None = None) -> tuple[CycleStore, bool]:
    """Open the cycle file, creating it first if needed.  Returns (store, created).

    A new file is written in full under a temporary name and then linked into
    place, so no reader ever meets a half-made cycle file, and a failure (a
    full disk, a crash) leaves nothing behind at the cycle's name.  Another
    creator (Java creates in place: it CASes the first header word from 0 to
    NOT_COMPLETE) wins when its file is there first; a file whose creator died
    mid-way is renamed ``.discard`` after ``timeout`` and created again.
    """
    for _ in range(8):
        st = open_store(path, cycle, writable=True, chunk=chunk, overlap=overlap,
                        timeout=timeout, roll_index=roll_index)
        if st is not None:
            return st, False
        if os.path.exists(path):
            _discard(path)
            continue
        taken = _take_precreated(path, _aside_name(path))
        tmp, f, _ = _build_aside(path, cycle, index_count, index_spacing, chunk, overlap, taken)
        try:
            os.link(tmp, path)
        except FileExistsError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
                raise
            if taken:
                # give the pre-created file back, header word cleared, for the
                # creation in place to rename into place as Java does
                f.write(0, bytes(4))
                os.rename(tmp, precreated_path(path))
            # no hard links here: create in place, as Java does
            return _create_in_place(path, cycle, index_count, index_spacing, chunk,
                                    overlap, timeout)
        finally:
            f.close()
            f.release()
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        # opened again by its own name: what /proc shows for this process
        # (retention's "open in process" check) must name the cycle file
        st = open_store(path, cycle, writable=True, chunk=chunk, overlap=overlap,
                        timeout=timeout)
        if st is not None:
            return st, True
    raise CorruptQueueError("could not create the cycle file", path, 0)


def _discard(path: str) -> None:
    """Move aside a cycle file whose creator died before finishing its header
    (only if the name still points at a file with an unfinished header)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            head = os.pread(fd, 4, 0)
        finally:
            os.close(fd)
        word = int.from_bytes(head.ljust(4, b"\0"), "little")
        if word and not word & HDR_NOT_COMPLETE:
            return  # finished meanwhile
        now = os.stat(path)
        if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
            os.rename(path, f"{path}-{int(time.time() * 1000)}.discard")


def _create_in_place(path: str, cycle: int, index_count: int, index_spacing: int,
                     chunk: int, overlap: int, timeout: float) -> tuple[CycleStore, bool]:
    """Create the cycle file at its name (file systems without hard links).

    The creator wins a CAS of the first header word from 0 to NOT_COMPLETE, as
    in Java; a file whose creator died mid-way is renamed ``.discard`` after
    ``timeout`` and created again.
    """
    for _ in range(8):
        if not os.path.exists(path):
            # as Java: a pre-created file is renamed into place, then its header CASed
            with contextlib.suppress(FileNotFoundError):
                os.rename(precreated_path(path), path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except IsADirectoryError:
            raise CorruptQueueError("a directory stands where a cycle file should be", path,
                                    0) from None
        image, layout = store_image(index_count, index_spacing)
        try:
            _check_regular(fd, path)
            f = MappedFile(path, fd, True, chunk, overlap, min_size=len(image) + 64)
        except BaseException:
            os.close(fd)
            raise
        try:
            # blocks for the header first: a full disk must not SIGBUS us
            f.reserve(0, len(image) + 4096)
            if f.cas32(0, 0, HDR_NOT_COMPLETE):
                f.write(4, image[4:])
                f.cas32(0, HDR_NOT_COMPLETE, int.from_bytes(image[:4], "little"))
                return CycleStore(path, cycle, f, layout), True
            if _wait_header(f, timeout):
                return CycleStore(path, cycle, f,
                                  parse_layout(f, (index_count, index_spacing))), False
        except BaseException:
            f.close()
            raise
        f.close()
        _discard(path)
    raise CorruptQueueError("could not create the cycle file", path, 0)
