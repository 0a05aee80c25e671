"""The exception hierarchy: every error aiochronicle raises derives from ChronicleError."""

from __future__ import annotations

import errno
import os

__all__ = [
    "AppendLockedError",
    "ChronicleError",
    "CodecError",
    "CodecMismatchError",
    "CorruptQueueError",
    "DiskFullError",
    "DivergenceError",
    "HeaderlessCycleError",
    "IllegalIndexError",
    "IncompatibleQueueError",
    "IndexFullError",
    "InputError",
    "JvmReaderWarning",
    "MessageTooLargeError",
    "NativeBuildError",
    "NoFallocateWarning",
    "NoSuchIndexError",
    "NoSuchQueueError",
    "NondeterministicHandlerError",
    "NotAQueueError",
    "PipelineError",
    "QueueAccessError",
    "QueueBusyError",
    "QueueClosedError",
    "QueueOSError",
    "ReadOnlyQueueError",
    "ReplicationAuthError",
    "ReplicationError",
    "ReplicationGapError",
    "ReplicationProtocolError",
    "ReplicationTimeoutError",
    "RollCycleMismatchWarning",
    "ServiceError",
    "ServiceHandlerError",
    "UnalignedCycleError",
    "UnknownRollCycleError",
    "UsageError",
    "WireError",
    "WriteLockLostError",
    "WriteLockTimeoutError",
]


class ChronicleError(Exception):
    """Base class of every error raised by aiochronicle."""


class QueueClosedError(ChronicleError):
    """The queue, appender or tailer was used after it was closed."""


class CorruptQueueError(ChronicleError):
    """A file of the queue does not hold what Chronicle Queue writes there.

    ``path`` and ``offset`` say where the bad bytes are.
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None,
                 offset: int | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.offset = offset
        where = ""
        if self.path is not None:
            where = f" ({self.path}"
            if offset is not None:
                where += f" at offset {offset:#x}"
            where += ")"
        super().__init__(message + where)


class WriteLockTimeoutError(ChronicleError, TimeoutError):
    """The queue's write lock stayed held by a live process past the timeout."""


class WriteLockLostError(ChronicleError):
    """Another writer forced this appender's write lock away (``UnlockMode.ALWAYS``
    after ``lock_timeout``) before the excerpt was committed.

    Nothing of the excerpt was published: its slot became padding that every
    reader skips, and no other excerpt was touched.  Append it again.
    """


class AppendLockedError(ChronicleError):
    """``chronicle.append.lock`` is held by another live process (a replication sink)."""


class ReadOnlyQueueError(ChronicleError):
    """A write was attempted on a queue opened read-only."""


class MessageTooLargeError(ChronicleError, ValueError):
    """A payload is larger than the format allows (1 GiB - 1 bytes)."""


class IllegalIndexError(ChronicleError, ValueError):
    """A positioned write (``Appender.write_at``) would leave a gap or land in a
    cycle that is already closed."""


class IndexFullError(ChronicleError):
    """The cycle holds as many excerpts as its roll cycle can index."""


class DiskFullError(ChronicleError, OSError):
    """The file system has no room for the queue to grow; nothing was written."""


class QueueOSError(ChronicleError, OSError):
    """A system call the native core made on a queue file (``mmap``, ``msync``,
    ``madvise``, ``fallocate``, a futex) failed for a reason other than a full
    disk; ``errno``, ``strerror`` and ``filename`` say which, as for any
    ``OSError``."""


class HeaderlessCycleError(ChronicleError):
    """An append to a cycle file without a header document (one libchronicle
    wrote): such files are read, never appended to, because there is no header
    to keep the write position or the index in, and their writer does not take
    the write lock."""


class NotAQueueError(ChronicleError):
    """The path exists but is not a Chronicle Queue directory (or file)."""


class NoSuchQueueError(ChronicleError, FileNotFoundError):
    """Nothing exists at the path of a queue that must already exist (the tools,
    :func:`open_existing_queue`)."""


class QueueAccessError(ChronicleError, PermissionError):
    """Permission was denied on the queue directory or one of its files.

    ``path`` says which; the queue may be intact, this process may just not read it.
    """

    def __init__(self, path: str | os.PathLike[str], action: str = "read") -> None:
        self.path = os.fspath(path)
        super().__init__(errno.EACCES, f"permission denied: this process (uid {os.geteuid()}) "
                         f"may not {action} {self.path}")

    def __str__(self) -> str:
        return str(self.args[1])


class NoSuchIndexError(ChronicleError, LookupError):
    """No excerpt exists at the index asked for."""


class QueueBusyError(ChronicleError):
    """A live process holds a lock the operation needs."""


class UnknownRollCycleError(ChronicleError, ValueError, KeyError):
    """Raised by :meth:`RollCycles.by_name` for a name that is not a built-in roll cycle."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CodecError(ChronicleError, ValueError):
    """A payload could not be encoded or decoded by a codec."""


class CodecMismatchError(ChronicleError, ValueError):
    """The queue records a different codec than the one asked for."""


class WireError(ChronicleError, ValueError):
    """Malformed, truncated or unsupported BinaryWire data.

    The message names the absolute offset at which the problem was found.
    """


class RollCycleMismatchWarning(UserWarning):
    """The roll cycle stored in an existing queue differs from the one asked for."""


class NoFallocateWarning(UserWarning):
    """The file system cannot reserve disk blocks with ``fallocate`` (NFS, FUSE,
    some overlay file systems): blocks are reserved by faulting the pages in
    writable ahead of the writers instead, so a full disk is still a
    :class:`DiskFullError`.  Issued once per file system."""


class ReplicationError(ChronicleError):
    """Base class of replication failures."""


class ReplicationTimeoutError(ReplicationError, TimeoutError):
    """No replica acknowledged an index in time (``Appender.wait_replicated``)."""


class ReplicationAuthError(ReplicationError):
    """The peer failed authentication (wrong or missing shared secret, or the
    source could not prove it knows the secret)."""


class DivergenceError(ReplicationError):
    """The sink's queue holds different bytes than the source's at the same
    index (or indices the source never had): the histories diverged.  The sink
    stops instead of continuing; ``index`` is where it was found."""

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ReplicationGapError(ReplicationError):
    """The source no longer holds what the sink needs next (its older cycles
    were deleted), so the sink cannot catch up without a gap."""


class IncompatibleQueueError(ReplicationError):
    """The sink's queue has another roll cycle, epoch or index layout than the
    source's, so the same index would mean different things."""


class ReplicationProtocolError(ReplicationError):
    """A frame that does not follow the protocol (bad checksum, length or
    kind); the connection is dropped and the sink resumes after reconnecting."""


class UnalignedCycleError(ChronicleError):
    """A cycle file in the packed layout (``dataFormat: 0``, written by Chronicle
    Queue before 5.19.11) is read but never appended to: its excerpt headers
    are not 4-byte aligned, and an atomic header update at such an offset is
    undefined behaviour.  Appends resume in the next cycle, which is created in
    the aligned layout."""


class DocumentClosedError(ChronicleError, ValueError):
    """A reading document (``Tailer.reading_document()``) was used after its
    ``with`` block ended: its view into the mapped file is released then."""


class ReentrantReadError(ChronicleError, RuntimeError):
    """A method reader was asked to read while its ``read_available()`` or
    ``run()`` is handling a batch: one of their handlers (or another task,
    while ``run()`` runs) called ``read_one()``, ``read_available()``,
    ``aread_one()`` or ``run()`` of the same reader.  The batch would be
    handled twice.  Read from another tailer, or return and read after.  (A
    handler of ``read_one()`` or ``aread_one()`` may read on: its excerpt was
    consumed before it ran.)"""


class NativeBuildError(ChronicleError, ImportError):
    """The compiled extension (the cffi core ``aiochronicle._core._cq`` and the C
    API module ``aiochronicle._core._hot``, one file) comes from another build: its
    version differs from the Python package's.  Raised when ``aiochronicle``
    is imported; rebuild with ``pip install .``."""


class PipelineError(ChronicleError, ValueError):
    """A ``PIPELINE.toml`` that ``aiochronicle run`` or ``replay`` refuses
    before anything starts (an unknown key, a missing module or class, two
    services of one name, an input with no source id...).  ``file`` and
    ``line`` say where (``line`` 0: the file itself)."""

    def __init__(self, message: str, *, file: str = "", line: int = 0) -> None:
        super().__init__(message)
        self.file = file
        self.line = line


class ServiceError(ChronicleError):
    """A service (:class:`~aiochronicle.Service`) cannot run as configured: an
    input or output queue without a ``sourceId`` (a position cannot be recovered
    from message history without one), two inputs with one source id, an
    output name used twice, a snapshot that does not belong to the service."""


class NondeterministicHandlerError(ServiceError):
    """While a service replayed its inputs after a restart, its handler wrote an
    output that differs from the one it recorded before (another method, other
    arguments, another queue), or more or fewer outputs for one input: the
    handler is not deterministic, and exactly-once cannot hold.

    ``service``, ``source_id`` and ``index`` name the input being replayed;
    ``output`` names the output queue."""

    def __init__(self, message: str, service: str = "", source_id: int = 0,
                 index: int = -1, output: str = "") -> None:
        super().__init__(message)
        self.service = service
        self.source_id = source_id
        self.index = index
        self.output = output

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0] if self.args else "", self.service, self.source_id,
                             self.index, self.output))


class ServiceHandlerError(ServiceError):
    """A service's handler raised while handling an input, and the service's
    policy is ``on_error="stop"``: ``Service.run()`` raises this, the handler's
    exception as its ``__cause__``.  ``service``, ``source_id`` and ``index``
    name the input (``index`` as the 64-bit queue index)."""

    def __init__(self, message: str, service: str = "", source_id: int = 0,
                 index: int = -1) -> None:
        super().__init__(message)
        self.service = service
        self.source_id = source_id
        self.index = index

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0] if self.args else "", self.service, self.source_id,
                             self.index))


# -- warnings of the Spark data source ---------------------------------------------

class JvmReaderWarning(UserWarning):
    """:func:`register` could not give the session the JVM reader (the message says
    why): ``format("chronicle")`` reads with the Python data source."""


# -- the command line's own (exit statuses), never raised to a caller of the API ------

class UsageError(Exception):
    """A bad command line noticed after parsing (exit status 2)."""


class InputError(Exception):
    """Bad input data (exit status 1)."""
