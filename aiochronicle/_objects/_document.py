"""An excerpt written in place: :meth:`Appender.writing_document`."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from .._core._errors import ChronicleError
from .._storage._excerpt import text_bytes

__all__ = ["DocumentContext"]

#: ``write(at, data, end)``: copy ``data`` into the open excerpt at ``at``
#: (``end`` = at + its length); raises when the appender is closed or the
#: excerpt would grow too large
DocWrite = Callable[[int, "bytes | bytearray | memoryview", int], None]


class DocumentContext:
    """An excerpt being written in place while the write lock is held.

    Created by :meth:`Appender.writing_document`, which hands over how to
    write into, commit and roll back the excerpt it opened; commits on a clean
    exit and rolls back (zeroes what was written) when the block raises.
    """

    __slots__ = ("_commit", "_discard", "_done", "_len", "_rollback", "_write", "index",
                 "metadata")

    def __init__(self, write: DocWrite, commit: Callable[[int, bool], int | None],
                 discard: Callable[[int], None], metadata: bool) -> None:
        self._write = write
        self._commit = commit  # (length, metadata) -> the index (None for metadata)
        self._discard = discard  # (length): roll back what was written
        self._len = 0
        self._done = False
        self._rollback = False
        self.metadata = metadata
        self.index: int | None = None

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        if not self._done:
            state = "open"
        elif self._rollback:
            state = "rolled back"
        else:
            state = "committed" + (f" at {self.index:#x}" if self.index is not None else "")
        kind = " metadata" if self.metadata else ""
        return f"<DocumentContext{kind} {self._len} bytes {state}>"

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        """Append bytes (``str`` as UTF-8) to the excerpt."""
        if self._done:
            raise ChronicleError("the document is already closed")
        raw = data.encode() if isinstance(data, str) else data
        end = self._len + len(raw)
        self._write(self._len, raw, end)
        self._len = end

    def write_text(self, text: str) -> None:
        """Append ``text`` as BinaryWire text (Java's ``writeText``)."""
        self.write(text_bytes(text))

    def rollback_on_close(self) -> None:
        """Discard the excerpt instead of committing it when the block ends."""
        self._rollback = True

    def __enter__(self) -> DocumentContext:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(rollback=et is not None)

    def close(self, rollback: bool = False) -> None:
        """Commit the excerpt (or roll it back)."""
        if self._done:
            return
        self._done = True
        if rollback or self._rollback:
            self._rollback = True
            self._discard(self._len)
            return
        self.index = self._commit(self._len, self.metadata)

