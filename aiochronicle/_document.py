"""An excerpt written in place: :meth:`Appender.writing_document`."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from ._errors import ChronicleError, MessageTooLargeError, QueueClosedError
from ._excerpt import text_bytes
from ._settings import MAX_PAYLOAD

if TYPE_CHECKING:
    from ._appender import Appender

__all__ = ["DocumentContext"]


class DocumentContext:
    """An excerpt being written in place while the write lock is held.

    Created by :meth:`Appender.writing_document`; commits on a clean exit and
    rolls back (zeroes what was written) when the block raises.
    """

    __slots__ = ("_appender", "_done", "_len", "_rollback", "index", "metadata")

    def __init__(self, appender: Appender, metadata: bool) -> None:
        self._appender = appender
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
        if self._appender._closed:
            raise QueueClosedError("the appender is closed")
        raw = data.encode() if isinstance(data, str) else data
        n = len(raw)
        a = self._appender
        end = self._len + n
        if end > MAX_PAYLOAD:
            raise MessageTooLargeError(f"an excerpt holds at most {MAX_PAYLOAD} bytes")
        a._doc_write(self._len, raw, end)
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
        a = self._appender
        if rollback or self._rollback:
            self._rollback = True
            a._doc_rollback(self._len)
            return
        self.index = a._doc_commit(self._len, self.metadata)

