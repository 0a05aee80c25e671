"""A DumpMain-style dump of a queue's files (the payloads rendered by ``_render``).

:func:`dump_path` writes every document of a queue (or of one ``.cq4``/``.cq4t``
file) the way Java's ``DumpMain`` shows it: ``--- !!meta-data #binary`` /
``--- !!data #binary`` blocks, ``# position: N, header: S`` lines, index pages
with their trailing zeros elided, and the decoded payloads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from .._core._errors import ChronicleError, CorruptQueueError, NoSuchQueueError, NotAQueueError
from .._core._native import HDR_EOF, HDR_META, HDR_NOT_COMPLETE, OK
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK
from .._format._headerless import HEADERLESS_LIMITATION, is_headerless
from .._format._mapped import list_dir, open_regular
from .._format._render import DecodedPayload, hexdump, render_document
from .._format._rollcycles import CycleNamer, RollCycle
from .._format._store import unwritten_age
from .._format._wire import WireError, parse_document
from .._objects._queue import cycles_of, open_existing_queue

if TYPE_CHECKING:
    from .._format._store import CycleStore

__all__ = ["FileWindow", "RawDocument", "dump_file", "dump_path", "walk_documents"]

_WINDOW = 1 << 20


class FileWindow:
    """Reads a file through a sliding window of ``pread`` calls: memory stays flat
    however large the file is, and growth by other processes is picked up."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = open_regular(path)
        self._start = 0
        self._buf = b""

    def __enter__(self) -> FileWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        start, buf = self._start, self._buf
        if start <= offset and offset + length <= start + len(buf):
            return buf[offset - start:offset - start + length]
        if length > _WINDOW:
            return os.pread(self.fd, length, offset)
        self._buf = os.pread(self.fd, _WINDOW, offset)
        self._start = offset
        return self._buf[:length]

    def u32(self, offset: int) -> int | None:
        b = self.read(offset, 4)
        return int.from_bytes(b, "little") if len(b) == 4 else None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# --------------------------------------------------------------------------
# Walking documents
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawDocument:
    """One document of a file: header position, header word, and what it is."""

    pos: int
    header: int
    kind: str  # "data", "meta", "eof", "end", "incomplete", "truncated"

    @property
    def length(self) -> int:
        return self.header & LENGTH_MASK


def walk_documents(f: FileWindow, start: int = 0, align: int = 4,
                   stop: int | None = None) -> Iterator[RawDocument]:
    """Every document from ``start``; ends with an ``eof``, ``end`` (a zero
    header), ``incomplete`` or ``truncated`` document."""
    pos = start
    size = f.size
    while True:
        if stop is not None and pos >= stop:
            return
        word = f.u32(pos)
        if word is None:
            yield RawDocument(pos, 0, "end")
            return
        if word == 0:
            yield RawDocument(pos, 0, "end")
            return
        if word & HDR_EOF == HDR_EOF and word & LENGTH_MASK == 0:
            yield RawDocument(pos, word, "eof")
            return
        if word & HDR_NOT_COMPLETE:
            yield RawDocument(pos, word, "incomplete")
            return
        length = word & LENGTH_MASK
        if pos + 4 + length > size:
            yield RawDocument(pos, word, "truncated")
            return
        yield RawDocument(pos, word, "meta" if word & HDR_META else "data")
        pos += 4 + length
        if align > 1:
            pos = (pos + align - 1) & ~(align - 1)


# --------------------------------------------------------------------------
# The dump
# --------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def _is_queue_dir(path: str) -> bool:
    try:
        names = list_dir(path)
    except FileNotFoundError:
        return False
    return any(n.endswith((".cq4", ".cq4t")) for n in names)


def _dump_meta_doc(out: TextIO, f: FileWindow, doc: RawDocument) -> None:
    body = f.read(doc.pos + 4, doc.length)
    out.write("--- !!meta-data #binary\n")
    try:
        parsed = parse_document(body, 0, len(body), base=doc.pos + 4)
        out.write(render_document(parsed) + "\n")
    except WireError as exc:
        out.write(f"# not BinaryWire ({exc})\n{hexdump(body, doc.pos + 4)}\n")


def _header_layout(f: FileWindow) -> tuple[int, int]:
    """(align, file cycle shift) from a cycle file's header; (4, 32) when unknown."""
    word = f.u32(0)
    if word is None or not word & HDR_META or word & HDR_NOT_COMPLETE:
        return 4, 32
    body = f.read(4, word & LENGTH_MASK)
    try:
        doc = parse_document(body, 0, len(body), base=4)
        h = doc["header"].as_document()
        df = h.get("dataFormat")
        return (4 if df is not None and df.as_int() == 1 else 1), 32
    except (WireError, KeyError):
        return 4, 32


def dump_file(out: TextIO, path: str, *, decoder: Callable[[bytes], DecodedPayload],
              roll_cycle: RollCycle | None = None, cycle: int | None = None,
              from_seq: int = 0, to_seq: int | None = None, data_only: bool = False,
              progress: Progress | None = None, start_pos: int = 0,
              timeout: float | None = None,
              confirm: Confirm | None = None) -> int:
    """Dump one ``.cq4`` or ``.cq4t`` file; returns the number of data documents shown.

    A cycle file whose header was never written is described, not dumped
    (``timeout``: the queue's, after which its creator counts as gone).

    ``from_seq``/``to_seq`` (inclusive) restrict the data documents shown;
    ``data_only`` leaves out metadata documents.  ``start_pos`` (with
    ``from_seq``) lets the caller skip straight to a known header.
    ``confirm`` (a whole file dumped) is given the header position of every
    data document whose sequence is a multiple of ``spacing`` and of the last
    one, and says what of that the file's index and writePosition contradict.

    Raises:
        CorruptQueueError: after writing what could be read, if the file holds
            a header that runs past its end or is not a cycle file at all.
    """
    shown = 0
    with FileWindow(path) as f:
        size = f.size
        table = path.endswith(".cq4t")
        align = 4 if table else _header_layout(f)[0]
        if not data_only:
            out.write(f"# file: {path}\n# size: {size} bytes")
            if cycle is not None:
                out.write(f", cycle: {cycle}")
            out.write("\n")
        first = f.u32(0)
        if not table and is_headerless(f.u32, size):
            if not data_only:
                out.write(f"# {HEADERLESS_LIMITATION}\n")
        elif not table and first in (0, HDR_NOT_COMPLETE):
            # made but its header never written (libchronicle renames an
            # all-zero file into place first): described as `check` does
            if not data_only:
                out.write(f"# {_unwritten(path, timeout)}\n")
            return 0
        elif first is None or not first & HDR_META or first & HDR_NOT_COMPLETE:
            raise CorruptQueueError(
                f"first header word {first if first is None else hex(first)} is not a "
                "complete metadata document: not a Chronicle Queue file", path, 0)
        seq = from_seq if start_pos else 0
        last_pos = 0
        whole = confirm is not None and not start_pos and not from_seq and to_seq is None
        marks: dict[int, int] = {}
        spacing = confirm.spacing if confirm is not None else 1
        for doc in walk_documents(f, start_pos, align):
            last_pos = doc.pos
            if progress is not None:
                progress(doc.pos, size)
            if doc.kind == "end":
                if not data_only:
                    out.write(f"...\n# {max(0, size - doc.pos)} bytes remaining\n")
                break
            if doc.kind == "eof":
                if not data_only:
                    out.write(f"# position: {doc.pos}, header: -1 # EOF\n"
                              "--- !!not-ready-meta-data #binary\n...\n"
                              f"# {max(0, size - doc.pos - 4)} bytes remaining\n")
                break
            if doc.kind == "incomplete":
                out.write(f"# position: {doc.pos}, header: {doc.header:#010x}\n"
                          "--- !!not-ready-data #binary\n"
                          f"# incomplete header (length {doc.length}): a writer died or "
                          "is still writing here\n...\n")
                break
            if doc.kind == "truncated":
                out.write(f"# position: {doc.pos}, header: {doc.header:#010x}\n"
                          f"# corrupt: a document of {doc.length} bytes runs past the end "
                          f"of the file ({size} bytes)\n")
                raise CorruptQueueError("a document runs past the end of the file", path,
                                        doc.pos)
            if doc.kind == "meta":
                if not data_only:
                    out.write(f"# position: {doc.pos}, header: -1\n")
                    _dump_meta_doc(out, f, doc)
                continue
            # data
            this = seq
            seq += 1
            if whole and this % spacing == 0:
                marks[this] = doc.pos
            if this < from_seq and not table:
                continue
            if to_seq is not None and this > to_seq and not table:
                break
            payload = f.read(doc.pos + 4, doc.length)
            if table:
                out.write(f"# position: {doc.pos}, header: {this}\n--- !!data #binary\n")
                try:
                    parsed = parse_document(payload, 0, len(payload), base=doc.pos + 4)
                    out.write(render_document(parsed) + "\n")
                except WireError:
                    out.write(hexdump(payload, doc.pos + 4) + "\n")
                continue
            where = f"# position: {doc.pos}, header: {this}"
            if roll_cycle is not None and cycle is not None:
                with contextlib.suppress(ValueError):
                    where += f", index: {roll_cycle.to_index(cycle, this):#x}"
            out.write(where + "\n--- !!data #binary\n")
            out.write(decoder(payload).text + "\n")
            shown += 1
        if progress is not None:
            progress(max(last_pos, 0), size)
    if whole and confirm is not None:
        problem = confirm(marks, seq)
        if problem is not None:
            out.write(f"# corrupt: {problem}\n")
            raise problem if isinstance(problem, CorruptQueueError) else CorruptQueueError(
                problem, path, 0)
    return shown


def _unwritten(path: str, timeout: float | None) -> str:
    """What a cycle file without its header is, as ``check`` tells it."""
    age = unwritten_age(path) or 0.0
    if timeout is not None and age >= timeout:
        return (f"the file's header was never written ({age:.0f}s old: its creator died): "
                "readers pass the cycle by; `aiochronicle repair` moves it aside")
    return (f"no header yet, made {age:.1f}s ago: its creator may still be writing it "
            "(readers see nothing there yet)")


class Confirm:
    """What a cycle file's index and writePosition say of the data documents a
    dump walked (see ``dump_file``): the walk of the headers alone shows a
    flipped length bit as excerpts that were never written."""

    def __init__(self, store: CycleStore) -> None:
        self.store = store
        self.spacing = max(1, store.layout.index_spacing)

    def __call__(self, marks: dict[int, int], count: int) -> str | CorruptQueueError | None:
        st = self.store
        try:
            for seq, pos in marks.items():
                code, at = st.seek(seq)
                if code != OK or at != pos:
                    return (f"the headers put excerpt {seq} at {pos}, the index and "
                            "writePosition do not")
            end = st.end()[1]
        except CorruptQueueError as exc:
            return exc
        if end != count:
            return f"the headers show {count} excerpts, the index and writePosition {end}"
        return None


def _queue_files(path: str) -> list[str]:
    names = sorted(n for n in os.listdir(path) if n.endswith((".cq4", ".cq4t")))
    return [os.path.join(path, n) for n in names]


def dump_path(out: TextIO, path: str, *, decoder: Callable[[bytes], DecodedPayload],
              from_index: int | None = None, to_index: int | None = None,
              skip_table_store: bool = False, progress: Progress | None = None) -> int:
    """Dump a queue directory (every ``.cq4t`` and ``.cq4`` in name order, as
    Java's DumpMain) or a single file.  With an index range only the data
    documents of that range are shown.  Returns the number of excerpts shown."""
    if os.path.exists(path) and not os.path.isdir(path):
        if not path.endswith((".cq4", ".cq4t")):
            raise NotAQueueError(f"{path} is not a .cq4 or .cq4t file")
        if from_index is not None or to_index is not None:
            raise ChronicleError("an index range needs the queue directory, not a single file")
        return dump_file(out, path, decoder=decoder, progress=progress)
    if not os.path.isdir(path):
        raise NoSuchQueueError(f"no such queue: {path}")
    if not _is_queue_dir(path):
        raise NotAQueueError(f"not a Chronicle queue: {path} (no .cq4 or .cq4t files)")
    ranged = from_index is not None or to_index is not None
    with open_existing_queue(path) as q:
        rc = q.roll_cycle
        namer = CycleNamer(rc, q.epoch, q.week_rule)
        files = _queue_files(path)
        sizes = {p: os.path.getsize(p) for p in files}
        total = sum(sizes.values()) or 1
        done = 0
        shown = 0
        lo = from_index if from_index is not None else 0
        hi = to_index
        refused: CorruptQueueError | None = None
        for p in files:
            name = os.path.basename(p)
            if not os.path.isfile(p):
                # a FIFO or directory named like a queue file: never opened (a FIFO
                # would block); reported once everything else is shown
                out.write(f"# skipped {p}: not a regular file\n")
                refused = refused or CorruptQueueError(
                    "not a regular file where a queue file should be", p, 0)
                continue
            if name.endswith(".cq4t"):
                if skip_table_store or ranged:
                    done += sizes[p]
                    continue
                shown += dump_file(out, p, decoder=decoder)
                done += sizes[p]
                continue
            stem = name[:-4]
            cyc = namer.parse(stem) if namer.matches(stem) else None
            from_seq, to_seq, start_pos = 0, None, 0
            if ranged:
                if cyc is None:
                    continue
                first, last = rc.to_index(cyc, 0), rc.to_index(cyc, rc.sequence_mask)
                if last < lo or (hi is not None and first > hi):
                    done += sizes[p]
                    continue
                if lo > first:
                    from_seq = rc.to_sequence(lo)
                    st = cycles_of(q).acquire(cyc)
                    if st is not None:
                        try:
                            code, pos = st.seek(from_seq)
                            if code == 0:
                                start_pos = pos
                        finally:
                            cycles_of(q).release(st)
                if hi is not None and hi <= last:
                    to_seq = rc.to_sequence(hi)
            base = done

            def prog(pos: int, size: int, base: int = base) -> None:
                if progress is not None:
                    progress(base + min(pos, size), total)

            st = cycles_of(q).acquire(cyc) if cyc is not None and not ranged else None
            try:
                shown += dump_file(out, p, decoder=decoder, roll_cycle=rc, cycle=cyc,
                                   from_seq=from_seq, to_seq=to_seq, data_only=ranged,
                                   progress=prog, start_pos=start_pos,
                                   timeout=q.timeout,
                                   confirm=Confirm(st) if st is not None else None)
            except CorruptQueueError as exc:
                # the rest of the queue is still shown; the dump then fails
                refused = refused or exc
            finally:
                if st is not None:
                    cycles_of(q).release(st)
            done += sizes[p]
        if refused is not None:
            raise refused
        return shown
