"""Walking a damaged cycle file: past the damage to the next intact excerpt.

What ``check`` and ``repair`` read a cycle file's excerpts with.  The walk
follows the headers as readers do; where their chain breaks (a damaged
header word, a document running into the next ones or past the end of the
file) it looks for where intact documents go on, and says how to join the
two: a header word one flipped bit away, else a padding metadata document
over the damage.  The known excerpt positions (index entries, writePosition)
are anchors: a repair must keep every excerpt at its index, or refuse.  Only
reads; bounded in time (:data:`SALVAGE_SECONDS` a file).
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass

from .._core._native import HDR_EOF, HDR_META, HDR_NOT_COMPLETE
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK
from .._format._rollcycles import cycle_shift_for
from .._format._store import CycleStore
from .._format._wire import I64Array, WireError, parse_document
from ._dump import RawDocument

__all__ = ["SALVAGE_SECONDS", "U64", "Pages", "Salvaged", "align_up", "anchor_positions",
           "anchor_seqs", "index_array", "keep_indices", "salvage_walk", "short_lengths"]


U64 = (1 << 64) - 1  #: a 64-bit word read as unsigned


def _read_doc(f: CycleStore, pos: int) -> tuple[int, bytes] | None:
    mf = f.file
    if pos <= 0 or pos + 4 > mf.size:
        return None
    word = int.from_bytes(mf.read(pos, 4), "little")
    n = word & LENGTH_MASK
    if not word & HDR_META or word & HDR_NOT_COMPLETE or pos + 4 + n > mf.size:
        return None
    return word, mf.read(pos + 4, n)


def index_array(st: CycleStore, pos: int, name: str) -> I64Array | None:
    """The array field ``name`` of the metadata document at ``pos`` (an index
    page, the index2index page); None when there is no such readable document."""
    got = _read_doc(st, pos)
    if got is None:
        return None
    body = got[1]
    try:
        doc = parse_document(body, 0, len(body), base=pos + 4)
        v = doc.get(name)
        return v.as_array() if v is not None else None
    except WireError:
        return None

_CHAIN_DOCS = 8  # plausible documents in a row that make a resynchronisation point
SALVAGE_SECONDS = 20.0  # how long one cycle file's damage may be searched


class _GiveUp(Exception):
    """The search past a file's damage ran out of time."""


class Pages:
    """A cycle file read in 4 KiB pages on demand, for walks that jump about
    (a 1 MiB window would be read again on every jump); bounded in time."""

    __slots__ = ("calls", "deadline", "fd", "pages", "patched", "size")

    def __init__(self, fd: int, deadline: float) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.pages: dict[int, bytes] = {}
        self.deadline = deadline
        self.calls = 0
        #: header words as a repair would write them (read instead of the file's)
        self.patched: dict[int, int] = {}

    def u32(self, pos: int) -> int | None:
        """The little-endian word at ``pos``; None past the end of the file."""
        self.calls += 1
        if not self.calls & 0xFFF and time.monotonic() > self.deadline:
            raise _GiveUp
        if pos < 0 or pos + 4 > self.size:
            return None
        if pos in self.patched:
            return self.patched[pos]
        n, off = divmod(pos, 4096)
        if off > 4092:
            return int.from_bytes(os.pread(self.fd, 4, pos).ljust(4, b"\0"), "little")
        page = self.pages.get(n)
        if page is None:
            if len(self.pages) >= 512:
                self.pages.clear()
            page = self.pages[n] = os.pread(self.fd, 4096, n * 4096)
        return int.from_bytes(page[off:off + 4].ljust(4, b"\0"), "little")


def align_up(n: int, align: int) -> int:
    """``n`` rounded up to a multiple of ``align`` (a power of two)."""
    return (n + align - 1) & ~(align - 1)


def _next_nonzero(fd: int, pos: int, size: int) -> int | None:
    """The offset of the first non-zero byte at or after ``pos`` (holes skipped)."""
    step = 4096  # most zero runs are short: a small read first
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:
            return None  # only a hole is left
        chunk = os.pread(fd, min(step, size - pos), pos)
        if not chunk:
            return None
        rest = chunk.lstrip(b"\0")
        if rest:
            return pos + len(chunk) - len(rest)
        pos += len(chunk)
        step = 1 << 20
    return None


def _data_end(fd: int, pos: int, size: int) -> int:
    """The offset just past the last non-zero byte at or after ``pos`` (``pos`` if none)."""
    end = at = pos
    while (nz := _next_nonzero(fd, at, size)) is not None:
        chunk = os.pread(fd, min(1 << 20, size - nz), nz)
        end = nz + len(chunk.rstrip(b"\0"))
        at = nz + len(chunk)
    return end


def _chain_ok(fw: Pages, pos: int, align: int, size: int, anchors: set[int]) -> bool:
    """Whether ``pos`` starts a plausible run of documents: ``_CHAIN_DOCS`` of them,
    or fewer that end at an EOF marker, at zeros up to the end of the file, or at a
    known excerpt position (an index entry or writePosition)."""
    for hop in range(_CHAIN_DOCS):
        if hop and pos in anchors:
            return True
        word = fw.u32(pos)
        if word is None:
            return False
        if word == 0:
            return hop > 0 and _next_nonzero(fw.fd, pos, size) is None
        if word == HDR_EOF:
            return True
        if word & HDR_NOT_COMPLETE or pos + 4 + (word & LENGTH_MASK) > size:
            return False
        pos = align_up(pos + 4 + (word & LENGTH_MASK), align)
    return True


def _resync(fw: Pages, start: int, align: int, size: int, anchors: set[int],
            stop: int | None = None) -> int | None:
    """The first position from ``start`` (and before ``stop``) where intact
    documents go on, or None."""
    pos = align_up(start, align)
    limit = size if stop is None else min(stop, size)
    while pos + 4 <= limit:
        word = fw.u32(pos)
        if word is None:
            return None
        if word == 0:  # skip the zeros
            nz = _next_nonzero(fw.fd, pos, limit)
            if nz is None:
                return None
            pos = nz - nz % align
            continue
        if (word == HDR_EOF or not word & HDR_NOT_COMPLETE) \
                and _chain_ok(fw, pos, align, size, anchors):
            return _unswallow(fw, pos, align, size, anchors)
        pos += align
    return None


def _unswallow(fw: Pages, pos: int, align: int, size: int, anchors: set[int]) -> int:
    """Damaged bytes can look like headers whose lengths happen to land on an
    intact one further on: where a document of the chain from ``pos`` holds a
    chain of its own leading to where it ends or to a known excerpt position,
    that is the intact chain, and it starts there instead."""
    for _ in range(64):
        at = pos
        for _ in range(_CHAIN_DOCS):
            word = fw.u32(at) or 0
            if not word or word & HDR_NOT_COMPLETE:
                return pos
            inner = _swallowed(fw, at, align, size, anchors)
            if inner is not None:
                pos = inner
                break
            at = align_up(at + 4 + (word & LENGTH_MASK), align)
        else:
            return pos
    return pos


def _swallowed(fw: Pages, pos: int, align: int, size: int,
               anchors: set[int]) -> int | None:
    """The first position inside the document at ``pos`` from which a chain of
    headers leads exactly to where that document ends, or to a known excerpt
    position inside it; None if there is none."""
    word = fw.u32(pos) or 0
    if word == HDR_EOF:
        return None
    end = align_up(pos + 4 + (word & LENGTH_MASK), align)
    targets = {end} | {a for a in anchors if pos < a < end}  # no anchors: the end only
    last = max(targets)
    for start in range(pos + align, min(end, pos + (64 << 10)), align):
        at = start
        for _ in range(64):
            if at in targets and (at != start or at in anchors):
                return start
            w = fw.u32(at) or 0
            if not w or w & HDR_NOT_COMPLETE or at + 4 + (w & LENGTH_MASK) > size:
                break
            at = align_up(at + 4 + (w & LENGTH_MASK), align)
            if at > last:
                break
    return None


def _restored_word(word: int, pos: int, target: int, align: int) -> int | None:
    """The header word ``word`` was before one bit of it flipped, if exactly one
    such word makes the document at ``pos`` end at ``target``."""
    found = set()
    for cand in [word & ~HDR_NOT_COMPLETE] + [word ^ (1 << b) for b in range(32)]:
        if cand and not cand & HDR_NOT_COMPLETE \
                and align_up(pos + 4 + (cand & LENGTH_MASK), align) == target:
            found.add(cand)
    return found.pop() if len(found) == 1 else None


@dataclass(slots=True)
class Salvaged:
    docs: list[RawDocument]
    end: RawDocument | None  # where reading stops: eof, end, incomplete or truncated
    fixes: list[tuple[int, int, int]]  # (position, header word now, header word to write)
    garbage_end: int = 0  # past the last non-zero byte after an unrecoverable end
    gave_up: bool = False  # the search ran out of time: nothing may be cleared


def salvage_walk(fw: Pages, start: int, align: int, anchors: set[int]) -> Salvaged:
    """Walk a cycle file's documents as readers do, but where the chain of
    headers breaks (a damaged header word, a document that runs into the next
    ones or past the end of the file) find the next intact document and say how
    to join the two: restore a header word one flipped bit away, else cover the
    damaged bytes with a padding metadata document, which every reader skips."""
    out = Salvaged([], None, [])
    try:
        _walk_into(out, fw, start, align, anchors)
    except _GiveUp:
        out.gave_up = True
        out.end = RawDocument(out.docs[-1].pos if out.docs else start, 0, "end")
    return out


def _walk_into(out: Salvaged, fw: Pages, start: int, align: int, anchors: set[int]) -> None:
    size = fw.size
    pos = start
    marks = sorted(a for a in anchors if a > start)
    while True:
        word = fw.u32(pos)
        if word is None or word == 0:
            kind = "end"
        elif word & HDR_EOF == HDR_EOF and not word & LENGTH_MASK:
            out.end = RawDocument(pos, word, "eof")
            return
        elif word & HDR_NOT_COMPLETE:
            kind = "incomplete"
        elif pos + 4 + (word & LENGTH_MASK) > size:
            kind = "truncated"
        else:
            nxt = align_up(pos + 4 + (word & LENGTH_MASK), align)
            i = bisect.bisect_right(marks, pos)
            # a known excerpt inside it: its length is damaged, unless it ends
            # where plausible documents go on (then the index entry is what is wrong)
            if (i == len(marks) or marks[i] >= nxt
                    or (_chain_ok(fw, nxt, align, size, anchors)
                        and _swallowed(fw, pos, align, size, set()) is None)):
                out.docs.append(RawDocument(pos, word, "meta" if word & HDR_META else "data"))
                pos = nxt
                continue
            kind = "swallows"  # runs over a known excerpt: its length is damaged
        if kind != "swallows":
            # a metadata document (an index page) before the break may be what is
            # damaged: intact documents then start inside it.  An excerpt before it
            # is left as it reads: a readable excerpt is never changed
            prev = out.docs[-1] if out.docs else None
            if prev is not None and prev.kind == "meta":
                inner = _resync(fw, prev.pos + 4, align, size, anchors, stop=pos)
                if inner is not None and inner < pos and _restored_word(
                        prev.header, prev.pos, inner, align) is not None:
                    out.docs.pop()
                    _join(out, fw, prev.pos, prev.header, inner, align)
                    pos = inner
                    continue
            body_end = pos + 4
            if kind == "incomplete":
                body_end = align_up(pos + 4 + ((word or 0) & LENGTH_MASK), align)  # mid-write
            if (kind in ("end", "incomplete") and not any(m >= pos for m in marks)
                    and _next_nonzero(fw.fd, body_end, size) is None):
                out.end = RawDocument(pos, word or 0, kind)
                return
        q = _resync(fw, pos + 4, align, size, anchors)
        if q is None:
            out.end = RawDocument(pos, word or 0, "end" if kind == "swallows" else kind)
            out.garbage_end = _data_end(fw.fd, pos, size)
            return
        _join(out, fw, pos, word or 0, q, align)
        pos = q


def _join(out: Salvaged, fw: Pages, pos: int, word: int, target: int, align: int) -> None:
    """Make the document at ``pos`` end at ``target``: its header word with one
    flipped bit restored, else a padding metadata document over the damage."""
    cand = _restored_word(word, pos, target, align) if word else None
    if cand is None:
        cand = HDR_META | (target - pos - 4)
    out.fixes.append((pos, word, cand))
    out.docs.append(RawDocument(pos, cand, "meta" if cand & HDR_META else "data"))


def _padding_zero(fw: Pages, end: int) -> bool:
    """Whether the alignment padding after a document ending at ``end`` is zero."""
    if not end & 3:
        return True
    word = fw.u32(end & ~3)
    return word is None or not word >> 8 * (end & 3)


def short_lengths(fw: Pages, docs: list[RawDocument]
                   ) -> list[tuple[int, int, tuple[int, int] | None]]:
    """Excerpts whose alignment padding is not zero: (position, header word,
    the repair).  Either a flipped low bit shortened the length (the
    excerpt's last bytes then read as padding; repaired by the header word
    one flipped bit away that ends at the same place with zero padding) or a
    bit of the padding itself flipped (one byte with one bit set; repaired by
    zeroing it): the repair is (offset, word to write there), None when both,
    or neither, explain it."""
    out = []
    for doc in docs:
        end = doc.pos + 4 + doc.length
        if doc.kind != "data" or _padding_zero(fw, end):
            continue
        found = [(doc.pos, w) for w in (doc.header ^ 1, doc.header ^ 2)
                 if (w & LENGTH_MASK) > doc.length and align_up(end, 4) == align_up(
                     doc.pos + 4 + (w & LENGTH_MASK), 4)
                 and _padding_zero(fw, doc.pos + 4 + (w & LENGTH_MASK))]
        word = fw.u32(end & ~3) or 0
        pad = word >> 8 * (end & 3) << 8 * (end & 3)
        if pad and not pad & (pad - 1):  # one bit set
            found.append((end & ~3, word ^ pad))
        out.append((doc.pos, doc.header, found[0] if len(found) == 1 else None))
    return out


def anchor_seqs(st: CycleStore, size: int) -> dict[int, int]:
    """Known excerpt positions with their sequences: the index entries, and
    the writePosition where its packed sequence agrees with its position."""
    lay = st.layout
    out: dict[int, int] = {}
    if lay.i2i_off:
        count_bits = lay.index_count.bit_length() - 1
        spacing_bits = lay.index_spacing.bit_length() - 1
        i2i = index_array(st, st.file.load64(lay.i2i_off), "index2index")
        for i2, page_pos in enumerate(i2i.values if i2i is not None else ()):
            page = index_array(st, page_pos, "index") if page_pos > 0 else None
            for i3, v in enumerate(page.values if page is not None else ()):
                if v > 0:
                    out.setdefault(v, ((i2 << count_bits) + i3) << spacing_bits)
    if lay.wp_off and lay.wp_seq_off:
        shift = cycle_shift_for(lay.index_count, lay.index_spacing)
        wp = st.file.load64(lay.wp_off)
        packed = st.file.load64(lay.wp_seq_off) & U64
        if wp > 0 and packed >> shift == wp & ((1 << (64 - shift)) - 1):
            out.setdefault(wp, packed & ((1 << shift) - 1))
    return {p: q for p, q in out.items()
            if lay.data_start <= p <= size - 4 and p % lay.align == 0}


def _contradicted(docs: list[RawDocument], anchors: dict[int, int]) -> list[int]:
    """The anchors that the documents of a (repaired) walk put elsewhere: no
    data excerpt at the anchor's position, or one of another sequence."""
    seqs: dict[int, int] = {}
    for d in docs:
        if d.kind == "data":
            seqs[d.pos] = len(seqs)
    return sorted(p for p, q in anchors.items() if seqs.get(p) != q)


def _lands(fw: Pages, pos: int, word: int | None, seq: int, target: int,
           target_seq: int | None, align: int, hops: int) -> bool:
    """Whether the headers from ``pos`` (the first one read as ``word``, the
    document there being of sequence ``seq``) lead to data excerpt
    ``target_seq`` (None: of any sequence) exactly at ``target``, every
    excerpt's padding zero."""
    for _ in range(hops):
        if not word or word & HDR_NOT_COMPLETE or pos > target:
            return False
        if pos == target:
            return target_seq in (None, seq) and not word & HDR_META
        end = pos + 4 + (word & LENGTH_MASK)
        if end > fw.size:
            return False
        if not word & HDR_META:
            if align == 4 and not _padding_zero(fw, end):
                return False
            seq += 1
        pos = align_up(end, align)
        word = fw.u32(pos)
    return False


def _broken_span(fw: Pages, anchors: dict[int, int], start: int, align: int, hops: int
                 ) -> tuple[int, int, int, int] | None:
    """The first stretch between two anchors (from the start of the data)
    that the chain of headers does not join: (position, sequence) of both
    ends.  An anchor the chain passes by while it joins the one after is a
    damaged index entry, not a broken chain."""
    points = sorted(anchors.items())
    if not points or points[0][0] != start:
        points.insert(0, (start, 0))
    k = 0
    while k + 1 < len(points):
        p0, q0 = points[k]
        if _lands(fw, p0, fw.u32(p0), q0, *points[k + 1], align, hops):
            k += 1
        elif k + 2 < len(points) and _lands(fw, p0, fw.u32(p0), q0, *points[k + 2], align,
                                             hops):
            k += 2
        else:
            return p0, q0, *points[k + 1]
    return None


def _index_doc(fw: Pages, pos: int) -> bool:
    """Whether the document at ``pos`` is an index page (its event name)."""
    head = b"".join((fw.u32(pos + 4 + k) or 0).to_bytes(4, "little") for k in (0, 4, 8, 12))
    return head.startswith((b"\xb9\x05index", b"\xb9\x0bindex2index"))


def _swallows(fw: Pages, pos: int, word: int, align: int) -> bool:
    """Whether the document at ``pos``, read with header ``word``, holds
    documents of its own that end where it ends (a header restored over a
    lost one must not take in the documents after it)."""
    fw.patched[pos] = word
    try:
        return _swallowed(fw, pos, align, fw.size, set()) is not None
    finally:
        del fw.patched[pos]


def _single_flips(fw: Pages, span: tuple[int, int, int, int], align: int, hops: int
                  ) -> list[tuple[int, int, int]]:
    """The header words on the walk across ``span`` that, with one bit
    flipped back, make the chain join both ends with the right number of
    excerpts: (position, word now, word restored), at most three (one is the
    repair; more, that the bytes cannot tell which).  An index page is never
    taken for an excerpt."""
    p0, q0, p1, q1 = span
    visited = []
    pos, seq, word = p0, q0, fw.u32(p0)
    for _ in range(hops):
        if word is None or pos > p1:
            break
        visited.append((pos, word, seq))
        if pos == p1 or not word or word & HDR_NOT_COMPLETE:
            break
        end = pos + 4 + (word & LENGTH_MASK)
        if end > fw.size:
            break
        seq += 0 if word & HDR_META else 1
        pos = align_up(end, align)
        word = fw.u32(pos)
    found: list[tuple[int, int, int]] = []
    for pos, word, seq in visited:
        for bit in range(32):
            cand = word ^ (1 << bit)
            if not cand or cand & HDR_NOT_COMPLETE:
                continue
            if word & HDR_META and not cand & HDR_META and _index_doc(fw, pos):
                continue
            if _lands(fw, pos, cand, seq, p1, q1, align, hops) \
                    and not _swallows(fw, pos, cand, align):
                found.append((pos, word, cand))
                if len(found) > 2:
                    return found
    return found


def _index_page_restored(fw: Pages, flips: list[tuple[int, int, int]]
                         ) -> list[tuple[int, int, int]]:
    """Of several flips that fit, the one that makes an index page a
    metadata document again (its event name says what it is), if exactly one."""
    found = [f for f in flips if f[2] & HDR_META and not f[1] & HDR_META
             and _index_doc(fw, f[0])]
    return found if len(found) == 1 else flips


def keep_indices(fw: Pages, walked: Salvaged, anchors: dict[int, int], start: int,
                  align: int, spacing: int) -> tuple[Salvaged, tuple[str, int] | None]:
    """A repair must keep every excerpt at its index.  Where the chain of
    headers does not join two anchors (index entries, writePosition), look
    for the one header whose flipped bit explains it and walk again with it
    restored; else the walk's own joins (padding) may stand only if they put
    every anchor where it says.  Returns the walk to repair by, and why there
    is none and where (the walk given back is then not to be repaired by)."""
    damaged_end = walked.end is not None and walked.end.kind in ("incomplete", "truncated")
    if not (walked.fixes or damaged_end or _contradicted(walked.docs, anchors)):
        return walked, None
    hops = 4 * spacing + 1024
    span = _broken_span(fw, anchors, start, align, hops)
    if span is None:
        # the chain joins every anchor: what contradicts it is an index entry
        return walked, None
    flips = _index_page_restored(fw, _single_flips(fw, span, align, hops))
    if len(flips) == 1:
        fix = flips[0]
        # one flipped bit explains the damage: restored, nothing else changes
        fw.patched[fix[0]] = fix[2]
        again = salvage_walk(fw, start, align, set(anchors))
        fw.patched.clear()
        if not _contradicted(again.docs, anchors):
            again.fixes.insert(0, fix)
            return again, None
        flips = []  # it moves an anchor: no explanation
    if (not flips and span[2] == max(anchors)
            and _lands(fw, span[0], fw.u32(span[0]), 0, span[2], None, align, hops)):
        # the chain is whole up to the writePosition, whose sequence no single
        # header explains: that sequence is what is damaged (its own finding)
        return walked, None
    # padding may stand only where no flipped bit explains the damage, every
    # anchor stays put and no excerpt it leaves ends in bytes that are not zero
    if not flips and not _contradicted(walked.docs, anchors) \
            and not short_lengths(fw, walked.docs):
        return walked, None
    if not flips:
        what = "no header one flipped bit away joins"
    elif flips[0][0] != flips[1][0]:
        what = f"headers at {flips[0][0]:#x} and {flips[1][0]:#x} one flipped bit away both join"
    else:
        what = (f"two header words at {flips[0][0]:#x} one flipped bit away "
                f"({flips[0][2]:#010x}, {flips[1][2]:#010x}) both join")
    return walked, (f"{what} the excerpts at {span[0]:#x} (sequence {span[1]}) and "
                    f"{span[2]:#x} (sequence {span[3]}), and padding over the damage would "
                    "lose excerpts or move the ones after it to other indices: repair "
                    "refuses; restore "
                    "the file from a backup (move_to_index still reaches the excerpts past "
                    "the damage)", flips[0][0] if flips else span[0])


def anchor_positions(st: CycleStore, size: int, seqs: dict[int, int]) -> set[int]:
    """Known excerpt positions: the index entries (``seqs``, from
    :func:`anchor_seqs`) and writePosition, whatever its sequence says."""
    lay = st.layout
    wp = st.file.load64(lay.wp_off) if lay.wp_off else 0
    return set(seqs) | ({wp} if lay.data_start <= wp <= size - 4 and wp % lay.align == 0
                        else set())
