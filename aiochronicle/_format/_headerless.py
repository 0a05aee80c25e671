"""Cycle files without a header document: the layout libchronicle writes.

libchronicle (the C implementation) creates its cycle files empty and
appends from offset 0: there is no ``header: !SCQStore`` document, no
``index2index`` and no ``index`` pages, and so no ``writePosition`` either.
Such a file can be read (every lookup is a walk from offset 0) but not
appended to by us: there is nowhere to keep the write position or the
index, and its writer does not take Java's write lock.
"""

from __future__ import annotations

from collections.abc import Callable

from .._core._native import HDR_EOF, HDR_META, HDR_NOT_COMPLETE
from .._core._native import HDR_LENGTH_MASK as LENGTH_MASK

__all__ = ["HEADERLESS_LIMITATION", "headerless_append_message", "is_headerless"]


#: documents looked at before a file is taken for a headerless one
PROBE_DOCUMENTS = 16

HEADERLESS_LIMITATION = (
    "no header document, written by libchronicle (it writes neither the header nor the "
    "index pages): readable by a walk from the start of the file; Java cannot read it, "
    "and it cannot be appended to")


def is_headerless(load32: Callable[[int], int | None], size: int) -> bool:
    """True when a cycle file starts with data instead of a header document.

    ``load32(pos)`` returns the 32-bit header word at ``pos`` (or None past
    the end); ``size`` is the file's length.  The first documents must all be
    complete data excerpts that fit in the file, ending at most with an
    unwritten word or an EOF marker: libchronicle writes no metadata into its
    own files, so a Java file whose header word was overwritten (whose next
    document is the ``index2index`` page) is not mistaken for one.
    """
    pos = 0
    for n in range(PROBE_DOCUMENTS):
        word = load32(pos) if pos + 4 <= size else None
        if word is None or word == 0:
            return n > 0
        if word == HDR_EOF:
            # a bare EOF first: a cycle closed before anything was written in it
            return n > 0 or (size >= 8 and load32(4) == 0)
        if word & (HDR_META | HDR_NOT_COMPLETE):
            return False
        end = pos + 4 + (word & LENGTH_MASK)
        if end > size:
            return False
        pos = (end + 3) & ~3
    return True


def headerless_append_message(path: str) -> str:
    """Why an append to the headerless cycle file at ``path`` is refused."""
    return (f"cannot append to {path}: it has no header document (libchronicle wrote it), "
            "so there is no header to keep the write position or the index in, and its "
            "writer does not take the write lock; append from libchronicle, or to a new "
            "queue")
