"""An excerpt read in place: :meth:`Tailer.reading_document`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType

from .._core._errors import DocumentClosedError

__all__ = ["ReadingDocument"]


class ReadingDocument:
    """One excerpt as a read-only view into the mapped cycle file, valid inside
    the ``with`` block of :meth:`Tailer.reading_document` (Java's
    ``readingDocument()``).

    ``present`` says whether there was an excerpt; ``payload`` is a read-only
    ``memoryview`` of its bytes in the mapping (no copy), released when the
    block ends: using it afterwards raises ``ValueError`` (``operation
    forbidden on released memoryview object``), and ``payload`` and
    ``rollback_on_close()`` raise :class:`DocumentClosedError` (``index`` and
    ``present`` stay readable).  Slices taken from ``payload`` (and buffers
    exported from it) are views of the same mapping; they stay valid past the
    block, keeping the cycle file mapped until the last of them is gone, even
    if the tailer moves on or the queue closes (copy with ``bytes(view)`` what
    you keep long: a kept view keeps a whole cycle file mapped).  While the
    block is open the tailer counts a call in flight, so closing the tailer
    or its queue from another thread waits for nothing and unmaps nothing.

    On a clean exit the tailer moves past the excerpt, as a read does;
    :meth:`rollback_on_close` (or an exception out of the block) leaves the
    tailer at it, so the next read returns it again.
    """

    __slots__ = ("_done", "_finish", "_index", "_present", "_rollback", "_view")

    def __init__(self, index: int, view: memoryview | None,
                 finish: Callable[[bool], None]) -> None:
        self._index = index
        self._present = view is not None
        self._view = view.toreadonly() if view is not None else None
        if view is not None:
            view.release()
        self._finish = finish  # (consumed) -> None: move on or stay, leave the call
        self._rollback = False
        self._done = False

    def _open(self) -> None:
        if self._done:
            raise DocumentClosedError("the reading document is closed (its with block ended)")

    @property
    def present(self) -> bool:
        """True when an excerpt was there to read (also after the block)."""
        return self._present

    def __bool__(self) -> bool:
        return self.present

    @property
    def index(self) -> int:
        """The excerpt's index (when not present: the index a read would return
        next); also after the block."""
        return self._index

    @property
    def payload(self) -> memoryview:
        """The excerpt's bytes, read-only, in the mapping (valid inside the block).

        Raises:
            DocumentClosedError: the block has ended, or there is no excerpt.
        """
        self._open()
        if self._view is None:
            raise DocumentClosedError("no excerpt is present")
        return self._view

    def __len__(self) -> int:
        return len(self._view) if self._view is not None and not self._done else 0

    def rollback_on_close(self) -> None:
        """Un-read: leave the tailer at this excerpt when the block ends."""
        self._open()
        self._rollback = True

    def __repr__(self) -> str:
        state = "closed" if self._done else ("present" if self._view is not None else "empty")
        return f"<ReadingDocument {self._index:#x} {state}>"

    def __enter__(self) -> ReadingDocument:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(rollback=et is not None)

    def close(self, rollback: bool = False) -> None:
        """End the document: release the view, then move the tailer past the
        excerpt (or leave it there with ``rollback`` or after
        :meth:`rollback_on_close`).  Idempotent."""
        if self._done:
            return
        self._done = True
        view, self._view = self._view, None
        present = view is not None
        if view is not None:
            # a buffer exported from it (numpy's, say) keeps it, and the
            # file, until that buffer is gone
            with contextlib.suppress(BufferError):
                view.release()
        self._finish(present and not (rollback or self._rollback))
