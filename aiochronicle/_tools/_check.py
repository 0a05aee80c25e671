"""``aiochronicle check``: find what is wrong with a queue's files, and say how
``repair`` would fix it.

Each problem is a :class:`CheckFinding`; a repairable one carries the
function that fixes it, which :func:`~aiochronicle.repair_queue` runs under
the write lock with a :class:`RepairContext`.  Incomplete and damaged
excerpt headers, missing EOFs, a stale writePosition, index holes and bad
entries, files without a header, an out-of-date listing, stale locks, stray
and half-built files, damaged metadata::

    import aiochronicle as ac

    for finding in ac.check_queue("/data/md"):
        print(finding)

Damaged excerpt headers are walked past with ``_salvage``; damaged metadata
is rebuilt with ``_rebuild``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._core._errors import ChronicleError, CorruptQueueError
from .._core._native import HDR_EOF, HDR_META, HDR_NOT_COMPLETE, UNLOCKED
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK
from .._format._headerless import HEADERLESS_LIMITATION
from .._format._mapped import list_dir, open_regular
from .._format._rollcycles import cycle_shift_for
from .._format._store import CycleStore, open_store, store_image, unwritten_age
from .._format._tablestore import TableStore
from .._format._wire import I64Array, WireError
from .._objects._queue import Queue, cycles_of, open_existing_queue
from .._storage._cycles import Cycles
from .._storage._settings import METADATA_FILE
from .._storage._writelock import break_lock, lock_states_in, pid_alive
from ._dump import Progress, RawDocument
from ._rebuild import rebuild_metadata
from ._salvage import (
    SALVAGE_SECONDS,
    U64,
    Pages,
    align_up,
    anchor_positions,
    anchor_seqs,
    index_array,
    keep_indices,
    salvage_walk,
    short_lengths,
)

__all__ = ["CheckFinding", "RepairContext", "check_queue", "metadata_findings",
           "open_for_check", "run_check"]


@dataclass(slots=True)
class CheckFinding:
    """One problem (or remark) found by :func:`check_queue`.

    ``kind`` is one of ``bad-file``, ``unfinished-file``, ``pending-file``,
    ``headerless-file``
    (written by libchronicle: readable, not appendable), ``incomplete-header``,
    ``corrupt-header``, ``missing-eof``, ``stale-write-position``,
    ``bad-write-position``, ``index-hole``, ``bad-index-entry``,
    ``missing-index-page``, ``listing-out-of-date``, ``stale-lock``,
    ``lock-held``, ``stray-file``, ``creating-file`` (a new cycle file a process
    is building, or died building), ``bad-metadata``, ``broken-chain``.
    """

    severity: str  # "error", "warning" or "info"
    kind: str
    path: str
    message: str
    offset: int | None = None
    fix: str | None = None  # what --repair would do; None: not repairable
    repaired: bool = False
    _apply: Callable[[RepairContext], None] | None = field(default=None, repr=False)

    @property
    def repairable(self) -> bool:
        """True if :func:`repair_queue` knows how to fix this finding."""
        return self._apply is not None

    def repair(self, ctx: RepairContext) -> None:
        """Run this finding's fix with ``ctx`` and set :attr:`repaired` (for
        :func:`~aiochronicle.repair_queue`, which holds the write lock).

        Raises:
            ValueError: the finding is not :attr:`repairable`.
        """
        if self._apply is None:
            raise ValueError(f"{self.kind} at {self.path} is not repairable")
        self._apply(ctx)
        self.repaired = True

    def __str__(self) -> str:
        where = os.path.basename(self.path)
        if self.offset is not None:
            where += f" @{self.offset:#x}"
        return f"{self.severity}: {self.kind}: {where}: {self.message}"


class RepairContext:
    """Writable handles opened on demand while the write lock is held."""

    def __init__(self, files: Cycles, meta: TableStore | None) -> None:
        self.files = files
        self.meta = meta
        self._stores: dict[str, CycleStore] = {}

    def store(self, path: str, cycle: int) -> CycleStore:
        """The cycle file at ``path``, writable (opened once)."""
        st = self._stores.get(path)
        if st is None:
            st = open_store(path, cycle, writable=True, chunk=self.files.block_size,
                            overlap=self.files.overlap, timeout=1.0,
                            roll_index=self.files.roll_index)
            if st is None:
                raise ChronicleError(f"cannot open {path} for repair")
            self._stores[path] = st
        return st

    def close(self) -> None:
        """Flush and close the files opened."""
        for st in self._stores.values():
            st.file.sync(0, st.file.size)
            st.close()
        self._stores.clear()


def _is_data_header(st: CycleStore, pos: int) -> bool:
    mf = st.file
    if pos <= 0 or pos + 4 > mf.size:
        mf.refresh()
        if pos <= 0 or pos + 4 > mf.size:
            return False
    word = int.from_bytes(mf.read(pos, 4), "little")
    return word != 0 and not word & (HDR_META | HDR_NOT_COMPLETE)


def _short_length_findings(path: str, cycle: int,
                           short: list[tuple[int, int, tuple[int, int] | None]]
                           ) -> list[CheckFinding]:
    out = []
    for pos, word, fix in short:
        def restore(ctx: RepairContext, fix: tuple[int, int] | None = fix) -> None:
            assert fix is not None
            f = ctx.store(path, cycle).file
            if not f.cas32(fix[0], f.load32(fix[0]), fix[1]):
                raise ChronicleError(f"the word at {fix[0]:#x} of {path} changed")

        what = ("repair refuses: a shortened length and a flipped padding bit explain it "
                "alike (or neither does)" if fix is None else
                f"restore the header one flipped bit away ({fix[1]:#010x})" if fix[0] == pos
                else "clear the flipped bit of the padding")
        out.append(CheckFinding(
            "error", "broken-chain", path,
            f"excerpt header {word:#010x} is followed by padding that is not zero: its length "
            "or its padding is damaged" + (f"; {what}" if fix is None else ""), pos,
            None if fix is None else what, _apply=None if fix is None else restore))
    return out


def _file_head(path: str, n: int) -> bytes | None:
    """The first ``n`` bytes of the file at ``path`` (fewer if it is shorter), read
    with pread; None if it cannot be opened."""
    try:
        fd = open_regular(path)
    except (OSError, CorruptQueueError):
        return None
    try:
        return os.pread(fd, n, 0)
    finally:
        os.close(fd)


def _header_rebuild(files: Cycles, path: str, same_length: bool = False
                    ) -> Callable[[RepairContext], None] | None:
    """A repair writing a fresh header document over the damaged one of the
    cycle file at ``path``, if the file is laid out as a new file of the
    queue's roll cycle is (its index2index page where that puts it; with
    ``same_length`` its header word as well)."""
    rc = files.roll_cycle
    image, lay = store_image(rc.index_count, rc.index_spacing)
    header_end = 4 + (int.from_bytes(image[:4], "little") & LENGTH_MASK)
    i2i = int.from_bytes(image[lay.i2i_off:lay.i2i_off + 8], "little")
    data = _file_head(path, lay.data_start)
    if (data is None or len(data) < lay.data_start or data[i2i:i2i + 4] != image[i2i:i2i + 4]
            or (same_length and data[:4] != image[:4])):
        return None

    def apply(ctx: RepairContext) -> None:
        fd = open_regular(path, os.O_RDWR)
        try:
            # writePosition and lastIndex start at 0: the next pass sets them
            os.pwrite(fd, image[4:header_end], 4)
            os.pwrite(fd, image[:4], 0)
            os.fsync(fd)
        finally:
            os.close(fd)

    return apply


def _unwritten_file(files: Cycles, path: str, live: bool) -> list[CheckFinding]:
    """A cycle file without its header: being written (younger than the
    queue's ``timeout`` while writers may run: readers see nothing there yet)
    or left by a creator that died (readers pass it by; repair, which holds
    the write lock every creator takes, moves it aside as an appender would)."""
    age = unwritten_age(path)
    if age is None:
        return []  # gone, or written meanwhile
    if live and age < files.timeout:
        return [CheckFinding(
            "info", "pending-file", path,
            f"no header yet, made {age:.1f}s ago: its creator may still be writing it "
            f"(readers see nothing there yet; without one after {files.timeout:g}s it counts "
            "as left by a creator that died)", 0)]
    discard = f"{path}-{int(time.time() * 1000)}.discard"

    def rename(ctx: RepairContext, path: str = path, discard: str = discard) -> None:
        if unwritten_age(path) is not None:  # (still without a header)
            os.rename(path, discard)
            ctx.files.refresh()  # the listing's range may change next

    return [CheckFinding(
        "warning", "unfinished-file", path,
        f"the file's header was never written ({age:.0f}s old: its creator died): readers "
        "pass the cycle by", 0, f"rename it to {os.path.basename(discard)} as Java does",
        _apply=rename)]


def _check_cycle(files: Cycles, cycle: int, path: str, is_last: bool,
                 progress: Callable[[int], None] | None,
                 live: bool = False) -> list[CheckFinding]:

    out: list[CheckFinding] = []
    try:
        st = open_store(path, cycle, writable=False, chunk=files.block_size,
                        overlap=files.overlap, timeout=files.timeout,
                        roll_index=files.roll_index, wait=False)
    except CorruptQueueError as exc:
        rebuild = _header_rebuild(files, path)
        return [CheckFinding("error", "bad-file", path, f"unreadable cycle file: {exc}", 0,
                             None if rebuild is None else "write a fresh header document (the "
                             "index pages and excerpts after it are where a new file of the "
                             "queue's roll cycle has them)", _apply=rebuild)]
    if st is None:
        return _unwritten_file(files, path, live)
    if st.layout.headerless:
        out.append(CheckFinding("warning", "headerless-file", path, HEADERLESS_LIMITATION, 0))
    try:
        lay = st.layout
        if lay.align != 4:
            # a header as long as a new one, laid out as one, but without
            # dataFormat 1: a damaged field name (Java's older, shorter headers
            # have no dataFormat either, and stay as they are)
            rebuild = _header_rebuild(files, path, same_length=True)
            if rebuild is not None:
                return [CheckFinding("error", "corrupt-header", path, "the header document "
                                     "has lost its dataFormat field", 4, "write a fresh "
                                     "header document", _apply=rebuild)]
        positions: dict[int, int] = {}
        count = 0
        last_data = 0
        end_doc = None
        spacing = lay.index_spacing
        fd = open_regular(path)
        try:
            pages = Pages(fd, time.monotonic() + SALVAGE_SECONDS)
            seqs = anchor_seqs(st, pages.size)
            walked = salvage_walk(pages, lay.data_start, lay.align,
                                   anchor_positions(st, pages.size, seqs))
            walked, refusal = keep_indices(pages, walked, seqs, lay.data_start, lay.align,
                                            spacing)
            short = short_lengths(pages, walked.docs) if lay.align == 4 else []
        finally:
            os.close(fd)
        if refusal is not None:
            return [*out, CheckFinding("error", "broken-chain", path, "damaged excerpt "
                                       f"headers hide excerpts from readers: {refusal[0]}",
                                       refusal[1])]
        out += _short_length_findings(path, cycle, short)
        end_doc = walked.end
        for doc in walked.docs:
            if progress is not None and count % 4096 == 0:
                progress(doc.pos)
            if doc.kind == "data":
                if count % spacing == 0:
                    positions[count] = doc.pos
                count += 1
                last_data = doc.pos
        if walked.gave_up:
            return [CheckFinding(
                "error", "broken-chain", path, "damaged excerpt headers: the search for the "
                f"intact excerpts after them took over {SALVAGE_SECONDS:.0f}s; restore the "
                "file from a backup", end_doc.pos if end_doc is not None else None)]
        if walked.fixes and lay.align == 4:
            def join(ctx: RepairContext, path: str = path, cycle: int = cycle,
                     fixes: list[tuple[int, int, int]] = walked.fixes) -> None:
                s = ctx.store(path, cycle)
                for pos, now, word in fixes:
                    if not s.file.cas32(pos, now, word):
                        raise ChronicleError(f"the header at {pos:#x} of {path} changed")

            pads = sum(1 for _, now, w in walked.fixes if (now ^ w).bit_count() != 1)
            first = walked.fixes[0][0]
            out.append(CheckFinding(
                "error", "broken-chain", path,
                f"{len(walked.fixes)} damaged excerpt header(s) from {first:#x} hide the "
                "excerpts after them from readers", first,
                f"restore {len(walked.fixes) - pads} header(s) one flipped bit away and cover "
                f"{pads} damaged region(s) with padding metadata", _apply=join))
        if progress is not None:
            progress(end_doc.pos if end_doc is not None else last_data)
        eof = end_doc is not None and end_doc.kind == "eof"

        # 1. the end of the data
        if (end_doc is not None and end_doc.kind == "end" and not live
                and walked.garbage_end > end_doc.pos):
            # nothing readable follows the end, but bytes do: zero them (below)
            end_doc = RawDocument(end_doc.pos, 0, "truncated")
        if end_doc is not None and end_doc.kind in ("incomplete", "truncated"):
            bad_pos, bad_word = end_doc.pos, end_doc.header
            garbage = max(walked.garbage_end, bad_pos + 12)
            kind = "incomplete-header" if end_doc.kind == "incomplete" else "corrupt-header"
            what = ("an incomplete excerpt header (a writer died mid-excerpt)"
                    if kind == "incomplete-header" else
                    f"a header of {end_doc.length} bytes that runs past the end of the file")

            def clear(ctx: RepairContext, path: str = path, cycle: int = cycle,
                      pos: int = bad_pos, word: int = bad_word) -> None:
                s = ctx.store(path, cycle)
                if not s.file.cas32(pos, word, 0) and s.file.load32(pos) != 0:
                    raise ChronicleError(f"the header at {pos:#x} of {path} changed")
                # no intact excerpt follows (the walk found none): clear what does
                end = min(garbage, s.file.size)
                for at in range(pos + 4, end, 1 << 20):
                    s.file.write(at, bytes(min(1 << 20, end - at)))

            out.append(CheckFinding(
                "error", kind, path, f"{what}, header word {bad_word:#010x}", bad_pos,
                "clear the header so appenders write there" if is_last
                else "clear the header and close the cycle with an EOF", _apply=clear))
        if not is_last and not eof:
            def close_eof(ctx: RepairContext, path: str = path, cycle: int = cycle) -> None:
                ctx.store(path, cycle).write_eof()

            out.append(CheckFinding(
                "warning", "missing-eof", path,
                "the cycle is not the last one but has no EOF marker: Java's tailers stop at "
                "its end (aiochronicle's pass it once no writer can be inside it)",
                end_doc.pos if end_doc is not None else None, "write the EOF marker",
                _apply=close_eof))

        # 2. writePosition
        if lay.wp_off:
            wp = st.file.load64(lay.wp_off)
            expected = last_data if count else 0
            shift = cycle_shift_for(lay.index_count, lay.index_spacing)
            seq_expected = (((expected << shift) + (count - 1 if count else 0)) & U64)
            wp_seq = st.file.load64(lay.wp_seq_off) & U64 if lay.wp_seq_off else None
            problem = None
            if wp < expected:
                problem = ("warning", "stale-write-position",
                           f"writePosition {wp:#x} is behind the last excerpt at {expected:#x} "
                           "(readers scan forward from it)")
            elif wp > expected and live and _is_data_header(st, wp):
                pass  # committed after the walk passed: a live appender
            elif wp > expected:
                problem = ("error", "bad-write-position",
                           f"writePosition {wp:#x} points past the last excerpt at "
                           f"{expected:#x}")
            elif wp_seq is not None and count and wp_seq != seq_expected:
                problem = ("warning", "stale-write-position",
                           f"writePosition sequence {wp_seq:#x} does not match position "
                           f"{expected:#x} / sequence {count - 1}")
            if problem is not None:
                def set_wp(ctx: RepairContext, path: str = path, cycle: int = cycle,
                           wp_off: int = lay.wp_off, seq_off: int = lay.wp_seq_off,
                           pos: int = expected, seqv: int = seq_expected) -> None:
                    s = ctx.store(path, cycle)
                    s.file.store64(wp_off, pos)
                    if seq_off:
                        s.file.store64(seq_off, seqv - (1 << 64) if seqv >= 1 << 63 else seqv)

                out.append(CheckFinding(problem[0], problem[1], path, problem[2], lay.wp_off,
                                        f"set writePosition to {expected:#x}", _apply=set_wp))

        # 3. the index
        out += _check_index(st, path, cycle, positions, count, spacing)
        return out
    finally:
        st.close()


def _check_index(st: CycleStore, path: str, cycle: int, positions: dict[int, int], count: int,
                 spacing: int) -> list[CheckFinding]:
    lay = st.layout
    out: list[CheckFinding] = []
    if not lay.i2i_off:
        return out
    i2i_pos = st.file.load64(lay.i2i_off)
    if not i2i_pos:
        if count:
            out.append(CheckFinding("warning", "missing-index-page", path,
                                    "the file has no index2index page: readers scan from the "
                                    "start", lay.i2i_off))
        return out
    i2i = index_array(st, i2i_pos, "index2index")
    if i2i is None:
        out.append(CheckFinding("error", "bad-index-entry", path,
                                f"index2Index points at {i2i_pos:#x}, which is not an "
                                "index2index page", lay.i2i_off))
        return out
    count_bits = lay.index_count.bit_length() - 1
    spacing_bits = spacing.bit_length() - 1
    pages: dict[int, I64Array | None] = {}
    holes: list[tuple[int, int, int]] = []  # (seq, slot offset, expected position)
    bad: list[tuple[int, int, int, int]] = []
    missing: dict[int, list[int]] = {}
    for seq in range(0, count, spacing):
        i2 = seq >> (count_bits + spacing_bits)
        i3 = (seq >> spacing_bits) & (lay.index_count - 1)
        if i2 not in pages:
            ppos = i2i.values[i2] if i2 < i2i.capacity else 0
            pages[i2] = index_array(st, ppos, "index") if ppos else None
        page = pages[i2]
        if page is None or i3 >= page.capacity:
            missing.setdefault(i2, []).append(seq)
            continue
        actual = page.values[i3]
        expected = positions.get(seq, 0)
        if actual == 0:
            holes.append((seq, page.value_offset(i3), expected))
        elif actual != expected:
            bad.append((seq, page.value_offset(i3), actual, expected))
    for i2, seqs in missing.items():
        out.append(CheckFinding(
            "warning", "missing-index-page", path,
            f"no index page {i2} for excerpts {seqs[0]}..{seqs[-1] + spacing - 1}: readers "
            "scan linearly there", None))
    # entries for excerpts that do not exist (a live writer may just have added
    # one, after every excerpt seen: one at or before the last is damage)
    last = max(positions.values(), default=0)
    for i2, page in pages.items():
        if page is None:
            continue
        for i3, v in enumerate(page.values):
            seq = ((i2 << count_bits) + i3) << spacing_bits
            if v and seq >= count:
                ok = 0 < v <= st.file.size - 4 and v % lay.align == 0
                word = int.from_bytes(st.file.read(v, 4), "little") if ok else 0
                if not ok or word == 0 or word & (HDR_META | HDR_NOT_COMPLETE) or v <= last:
                    bad.append((seq, page.value_offset(i3), v, 0))

    def write_slots(entries: list[tuple[int, int]]) -> Callable[[RepairContext], None]:
        def apply(ctx: RepairContext) -> None:
            s = ctx.store(path, cycle)
            for off, value in entries:
                s.file.store64(off, value)
        return apply

    if holes:
        some = ", ".join(str(s) for s, _, _ in holes[:5]) + (" ..." if len(holes) > 5 else "")
        out.append(CheckFinding(
            "warning", "index-hole", path,
            f"{len(holes)} index entr{'y is' if len(holes) == 1 else 'ies are'} missing "
            f"(sequence {some}): lookups scan linearly there", holes[0][1],
            "fill in the missing entries",
            _apply=write_slots([(off, exp) for _, off, exp in holes])))
    for seq, off, actual, expected in bad:
        msg = (f"index entry for sequence {seq} points at {actual:#x}, "
               + (f"the excerpt is at {expected:#x}" if expected
                  else "but that excerpt does not exist"))
        out.append(CheckFinding("error", "bad-index-entry", path, msg, off,
                                "correct the entry" if expected else "clear the entry",
                                _apply=write_slots([(off, expected)])))
    return out


REBUILD_FIX = ("rebuild metadata.cq4t from the cycle files (roll cycle from their names and "
               "headers, listing from the directory, locks cleared, readable keys kept)")


def _bad_metadata(path: str, message: str, offset: int | None) -> CheckFinding:
    def rebuild(ctx: RepairContext, path: str = path) -> None:
        rebuild_metadata(path)

    return CheckFinding("error", "bad-metadata", os.path.join(path, METADATA_FILE), message,
                        offset, REBUILD_FIX, _apply=rebuild)


def _checked(path: str, run: Callable[[Cycles], list[CheckFinding]]) -> list[CheckFinding]:
    """``run`` on the queue at ``path`` opened read-only; only a ``bad-metadata``
    finding when its metadata keeps it from opening."""
    try:
        q = open_for_check(path)
    except CorruptQueueError as exc:
        if not _is_metadata_error(path, exc):
            raise
        return [_bad_metadata(path, f"unreadable: {exc}", exc.offset)]
    try:
        return run(cycles_of(q))
    finally:
        q.close()


def metadata_findings(path: str) -> list[CheckFinding]:
    """A ``bad-metadata`` finding if the queue cannot be opened for its metadata,
    or the metadata lacks roll settings or has damaged key records."""
    return [f for f in _checked(path, lambda files: _check_metadata(files, []))
            if f.kind == "bad-metadata"]


def _is_metadata_error(path: str, exc: CorruptQueueError) -> bool:
    return exc.path is not None and os.path.abspath(exc.path) == os.path.abspath(
        os.path.join(path, METADATA_FILE))


def _check_metadata(files: Cycles, cycles: list[int]) -> list[CheckFinding]:
    out: list[CheckFinding] = []
    meta = files.meta
    if meta is None:
        mpath = os.path.join(files.path, METADATA_FILE)
        if os.path.lexists(mpath):  # damaged: the queue was opened by its cycle files
            try:
                TableStore(mpath, read_only=True, timeout=0.05).close()
            except CorruptQueueError as exc:
                out.append(_bad_metadata(files.path, f"unreadable: {exc}", exc.offset))
            else:
                out.append(_bad_metadata(files.path, "its roll settings are unusable: the "
                                         "roll cycle was told from the cycle files", 4))
        return out
    mpath = meta.path
    if meta.header.get("metadata") is None:
        out.append(_bad_metadata(files.path, "the header has no roll settings: the roll cycle "
                                 "was told from the cycle files", 4))
    else:
        damage = meta.damage()
        if damage is not None:
            out.append(_bad_metadata(files.path, f"damaged key records: {damage[1]}", damage[0]))
    if cycles:
        lo, hi = meta.get("listing.lowestCycle"), meta.get("listing.highestCycle")
        if lo != cycles[0] or hi != cycles[-1]:
            def fix_listing(ctx: RepairContext, lo: int = cycles[0], hi: int = cycles[-1]) -> None:
                assert ctx.meta is not None
                ctx.meta.set("listing.lowestCycle", lo)
                ctx.meta.set("listing.highestCycle", hi)
                ctx.meta.add("listing.modCount", 1)

            def show(v: int | None) -> str:
                return "unset" if v is None or v == UNLOCKED else str(v)

            out.append(CheckFinding(
                "warning", "listing-out-of-date", mpath,
                f"listing says cycles {show(lo)}..{show(hi)}, the files hold "
                f"{cycles[0]}..{cycles[-1]}: Java readers may miss cycles", None,
                "rewrite listing.lowestCycle/highestCycle and bump listing.modCount",
                _apply=fix_listing))
    for s in lock_states_in(meta):
        if not s.locked:
            continue
        if s.alive:
            out.append(CheckFinding("info", "lock-held", mpath,
                                    f"{s.key} is held by live process {s.holder}"))
        else:
            def release(ctx: RepairContext, key: str = s.key, value: int = s.value) -> None:
                assert ctx.meta is not None
                break_lock(ctx.meta, key, value)

            out.append(CheckFinding("warning", "stale-lock", mpath,
                                    f"{s.key} is held by process {s.holder}, which is dead",
                                    None, "release the lock", _apply=release))
    return out


def _stray_files(files: Cycles) -> list[CheckFinding]:
    out = []
    for name in sorted(os.listdir(files.path)):
        p = os.path.join(files.path, name)
        if name.endswith(".discard"):
            out.append(CheckFinding("info", "stray-file", p,
                                    "a discarded cycle file (renamed by a writer after its "
                                    "creator died)"))
        elif name.endswith(".cq4") and not files.namer.matches(name[:-4]):
            out.append(CheckFinding("warning", "stray-file", p,
                                    f"the name does not follow the queue's roll cycle "
                                    f"{files.roll_cycle.name} ({files.roll_cycle.format}): "
                                    "ignored"))
    return out


#: ``.NAME.PID.creating``: a cycle file being built aside by process PID (``_store``)
_CREATING = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.creating$")


def _creating_files(files: Cycles) -> list[CheckFinding]:
    """The new cycle files still being built aside: a live builder's are
    reported (info), a dead one's are leftovers ``repair`` removes."""
    out = []
    for name in sorted(list_dir(files.path)):
        m = _CREATING.match(name)
        if m is None:
            continue
        p, pid = os.path.join(files.path, name), int(m["pid"])
        if pid_alive(pid):
            out.append(CheckFinding("info", "creating-file", p,
                                    f"process {pid} is building {m['name']}"))
            continue

        def remove(ctx: RepairContext, p: str = p, pid: int = pid) -> None:
            if not pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)

        out.append(CheckFinding("warning", "creating-file", p,
                                f"process {pid} died building {m['name']}: nothing reads it, "
                                "it only takes disk space", None, "remove it", _apply=remove))
    return out


def _holds_nothing(files: Cycles, cycle: int, path: str) -> bool:
    """True for a cycle file holding only the metadata documents it is made
    with: no excerpt and no EOF yet (the file a pretoucher makes for the next
    cycle shortly before the roll).  Read with pread: nothing is reserved."""
    try:
        st = open_store(path, cycle, writable=False, chunk=files.block_size,
                        overlap=files.overlap, timeout=0.05, roll_index=files.roll_index)
    except (CorruptQueueError, OSError):
        return False
    if st is None:
        return False
    try:
        pos, align = st.layout.data_start, st.layout.align
        for _ in range(64):  # a new file holds a handful of documents
            if pos + 4 > st.file.size:
                return False
            word = int.from_bytes(st.file.read(pos, 4), "little")
            if word == 0:
                return True
            if word == HDR_EOF or word & HDR_NOT_COMPLETE or not word & HDR_META:
                return False
            pos = align_up(pos + 4 + (word & LENGTH_MASK), align)
        return False
    finally:
        st.close()


def _last_cycle(files: Cycles, paths: list[tuple[int, str]]) -> int:
    """Where in ``paths`` the cycle now written to is: the newest whose file
    was completed (a creator may have died) and that is not an empty file made
    ahead of time.  It and the ones after it need no EOF."""
    last = len(paths) - 1
    while last > 0 and not _header_complete(paths[last][1]):
        last -= 1
    while last > 0 and _holds_nothing(files, *paths[last]):
        last -= 1
    return last


def _header_complete(path: str) -> bool:
    """A finished header document, or libchronicle's headerless start (a data
    excerpt or a bare EOF at offset 0): the file's creator completed it."""
    raw = _file_head(path, 4)
    word = int.from_bytes(raw, "little") if raw is not None and len(raw) == 4 else 0
    return word == HDR_EOF or (word != 0 and not word & HDR_NOT_COMPLETE)


def run_check(files: Cycles, progress: Progress | None, live: bool = True) -> list[CheckFinding]:
    """Check every file; ``live``: writers may be appending (recheck the last cycle)."""
    cycles = files.listing()
    paths = [(c, files.path_of(c)) for c in cycles]
    sizes = []
    for _, p in paths:
        try:
            sizes.append(os.path.getsize(p))
        except OSError:
            sizes.append(0)
    total = sum(sizes) or 1
    done = 0
    meta_findings = _check_metadata(files, cycles)
    if live and any(f.kind == "listing-out-of-date" for f in meta_findings):
        # a writer creates the file first and updates the listing right after
        time.sleep(0.02)
        files.refresh()
        meta_findings = _check_metadata(files, files.listing())
    findings = _stray_files(files) + _creating_files(files) + meta_findings
    last = _last_cycle(files, paths)
    for n, (cyc, p) in enumerate(paths):
        base = done

        def prog(pos: int, base: int = base, size: int = sizes[n]) -> None:
            if progress is not None:
                progress(base + min(pos, size), total)

        found = _check_cycle(files, cyc, p, n >= last, prog, live)
        if found and n >= last and live:
            # a live appender may have been between its commit and its writePosition or
            # index update: keep only what is still there a moment later (as it is then)
            time.sleep(0.02)
            first = {_lasting(f) for f in found}
            found = [f for f in _check_cycle(files, cyc, p, True, None, live)
                     if _lasting(f) in first]
        findings += found
        done += sizes[n]
    if progress is not None:
        progress(total, total)
    return findings


#: the findings of a file whose header is not written yet, whose messages give
#: its age (which a second look finds a second older, or past the timeout)
_UNWRITTEN_KINDS = frozenset({"pending-file", "unfinished-file"})


def _lasting(f: CheckFinding) -> tuple[str, str, int | None, str]:
    """What a finding of a live queue's last cycle must still be a moment later
    to be reported: the same finding, or, for a file without its header, that
    file still without it (its age moved on meanwhile)."""
    if f.kind in _UNWRITTEN_KINDS:
        return ("unwritten", f.path, 0, "")
    return (f.kind, f.path, f.offset, f.message)


def open_for_check(path: str) -> Queue:
    """The queue at ``path``, read-only; unreadable metadata is a CorruptQueueError."""
    try:
        return open_existing_queue(path)
    except CorruptQueueError:
        raise
    except WireError as exc:
        raise CorruptQueueError(f"metadata is not readable: {exc}", path) from None


def check_queue(path: str, *, progress: Progress | None = None) -> list[CheckFinding]:
    """Find incomplete headers, missing EOFs, index holes and bad entries, a stale
    writePosition, an out-of-date listing and stale locks; damaged excerpt
    headers and cycle-file headers, and damaged metadata.  Changes nothing."""
    return _checked(path, lambda files: run_check(files, progress))
