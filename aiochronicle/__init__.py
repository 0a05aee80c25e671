"""aiochronicle: Chronicle Queue v5 for Python and asyncio.

A queue is a directory of memory-mapped cycle files, byte-compatible with Java
Chronicle Queue v5.  Appenders in any number of processes write; tailers in
any number of processes read every excerpt in one total order; nothing is
consumed by reading.
"""

import ast as _ast
import importlib as _importlib
import typing as _typing

from ._version import __version__ as __version__

# The public names, imported when one is first used (``aiochronicle.Queue``,
# ``from aiochronicle import open_queue``): importing the package alone, as
# ``import aiochronicle.testing`` does, loads no native code.  Type checkers,
# IDEs and the API docs read these imports; ``__getattr__`` below follows them.
if _typing.TYPE_CHECKING:
    from ._core._errors import AppendLockedError as AppendLockedError
    from ._core._errors import ChronicleError as ChronicleError
    from ._core._errors import CodecError as CodecError
    from ._core._errors import CodecMismatchError as CodecMismatchError
    from ._core._errors import CorruptQueueError as CorruptQueueError
    from ._core._errors import DiskFullError as DiskFullError
    from ._core._errors import DivergenceError as DivergenceError
    from ._core._errors import DocumentClosedError as DocumentClosedError
    from ._core._errors import HeaderlessCycleError as HeaderlessCycleError
    from ._core._errors import IllegalIndexError as IllegalIndexError
    from ._core._errors import IncompatibleQueueError as IncompatibleQueueError
    from ._core._errors import IndexFullError as IndexFullError
    from ._core._errors import MessageTooLargeError as MessageTooLargeError
    from ._core._errors import NativeBuildError as NativeBuildError
    from ._core._errors import NoFallocateWarning as NoFallocateWarning
    from ._core._errors import NondeterministicHandlerError as NondeterministicHandlerError
    from ._core._errors import NoSuchIndexError as NoSuchIndexError
    from ._core._errors import NoSuchQueueError as NoSuchQueueError
    from ._core._errors import NotAQueueError as NotAQueueError
    from ._core._errors import PipelineError as PipelineError
    from ._core._errors import QueueAccessError as QueueAccessError
    from ._core._errors import QueueBusyError as QueueBusyError
    from ._core._errors import QueueClosedError as QueueClosedError
    from ._core._errors import QueueOSError as QueueOSError
    from ._core._errors import ReadOnlyQueueError as ReadOnlyQueueError
    from ._core._errors import ReentrantReadError as ReentrantReadError
    from ._core._errors import ReplicationAuthError as ReplicationAuthError
    from ._core._errors import ReplicationError as ReplicationError
    from ._core._errors import ReplicationGapError as ReplicationGapError
    from ._core._errors import ReplicationProtocolError as ReplicationProtocolError
    from ._core._errors import ReplicationTimeoutError as ReplicationTimeoutError
    from ._core._errors import RollCycleMismatchWarning as RollCycleMismatchWarning
    from ._core._errors import ServiceError as ServiceError
    from ._core._errors import ServiceHandlerError as ServiceHandlerError
    from ._core._errors import UnalignedCycleError as UnalignedCycleError
    from ._core._errors import UnknownRollCycleError as UnknownRollCycleError
    from ._core._errors import WireError as WireError
    from ._core._errors import WriteLockLostError as WriteLockLostError
    from ._core._errors import WriteLockTimeoutError as WriteLockTimeoutError
    from ._format._clock import SetTimeProvider as SetTimeProvider
    from ._format._clock import SystemTimeProvider as SystemTimeProvider
    from ._format._clock import TimeProvider as TimeProvider
    from ._format._history import MessageHistory as MessageHistory
    from ._format._history import current_history as current_history
    from ._format._rollcycles import RollCycle as RollCycle
    from ._format._rollcycles import RollCycles as RollCycles
    from ._messages._codecs import Codec as Codec
    from ._messages._codecs import Codecs as Codecs
    from ._messages._methodreader import MethodCall as MethodCall
    from ._messages._methodreader import MethodReaderStatistics as MethodReaderStatistics
    from ._messages._methods import method_id as method_id
    from ._messages._search import SearchStats as SearchStats
    from ._messages._search import binary_search as binary_search
    from ._messages._search import field_key as field_key
    from ._messages._search import history_time as history_time
    from ._messages._search import method_key as method_key
    from ._objects._document import DocumentContext as DocumentContext
    from ._objects._queue import Appender as Appender
    from ._objects._queue import MethodReader as MethodReader
    from ._objects._queue import Pretoucher as Pretoucher
    from ._objects._queue import Queue as Queue
    from ._objects._queue import Tailer as Tailer
    from ._objects._queue import open_queue as open_queue
    from ._objects._queue import set_queue_codec as set_queue_codec
    from ._objects._reading import ReadingDocument as ReadingDocument
    from ._replicas._replication import ReplicationSink as ReplicationSink
    from ._replicas._replication import ReplicationSource as ReplicationSource
    from ._replicas._replication import SinkInfo as SinkInfo
    from ._services._service import Service as Service
    from ._services._service import ServiceInput as ServiceInput
    from ._services._service import ServiceOutput as ServiceOutput
    from ._services._service import ServiceStatistics as ServiceStatistics
    from ._services._service import SnapshotPolicy as SnapshotPolicy
    from ._storage._diskspace import DiskSpace as DiskSpace
    from ._storage._excerpt import Batch as Batch
    from ._storage._excerpt import Excerpt as Excerpt
    from ._storage._excerpt import TailerDirection as TailerDirection
    from ._storage._excerpt import TailerState as TailerState
    from ._storage._settings import QueueOptions as QueueOptions
    from ._storage._settings import SyncMode as SyncMode
    from ._storage._settings import UnlockMode as UnlockMode
    from ._storage._writelock import LockState as LockState
    from ._tools._check import CheckFinding as CheckFinding
    from ._tools._check import check_queue as check_queue
    from ._tools._listeners import StoreFileListener as StoreFileListener
    from ._tools._listeners import add_store_file_listener as add_store_file_listener
    from ._tools._locks import lock_states as lock_states
    from ._tools._locks import unlock_queue as unlock_queue
    from ._tools._repair import repair_queue as repair_queue
    from ._tools._retention import Retention as Retention
    from ._tools._retention import RetentionDecision as RetentionDecision
    from ._tools._stats import CycleStats as CycleStats
    from ._tools._stats import QueueStats as QueueStats
    from ._tools._stats import TailerStats as TailerStats
    from ._tools._stats import queue_stats as queue_stats
    from ._waiting._pauser import Pauser as Pauser
    from ._waiting._pauser import PauserMode as PauserMode
    from ._waiting._pauser import PauserStatistics as PauserStatistics

__all__ = [
    "AppendLockedError",
    "Appender",
    "Batch",
    "CheckFinding",
    "ChronicleError",
    "Codec",
    "CodecError",
    "CodecMismatchError",
    "Codecs",
    "CorruptQueueError",
    "CycleStats",
    "DiskFullError",
    "DiskSpace",
    "DivergenceError",
    "DocumentClosedError",
    "DocumentContext",
    "Excerpt",
    "HeaderlessCycleError",
    "IllegalIndexError",
    "IncompatibleQueueError",
    "IndexFullError",
    "LockState",
    "MessageHistory",
    "MessageTooLargeError",
    "MethodCall",
    "MethodReader",
    "MethodReaderStatistics",
    "NativeBuildError",
    "NoFallocateWarning",
    "NoSuchIndexError",
    "NoSuchQueueError",
    "NondeterministicHandlerError",
    "NotAQueueError",
    "Pauser",
    "PauserMode",
    "PauserStatistics",
    "PipelineError",
    "Pretoucher",
    "Queue",
    "QueueAccessError",
    "QueueBusyError",
    "QueueClosedError",
    "QueueOSError",
    "QueueOptions",
    "QueueStats",
    "ReadOnlyQueueError",
    "ReadingDocument",
    "ReentrantReadError",
    "ReplicationAuthError",
    "ReplicationError",
    "ReplicationGapError",
    "ReplicationProtocolError",
    "ReplicationSink",
    "ReplicationSource",
    "ReplicationTimeoutError",
    "Retention",
    "RetentionDecision",
    "RollCycle",
    "RollCycleMismatchWarning",
    "RollCycles",
    "SearchStats",
    "Service",
    "ServiceError",
    "ServiceHandlerError",
    "ServiceInput",
    "ServiceOutput",
    "ServiceStatistics",
    "SetTimeProvider",
    "SinkInfo",
    "SnapshotPolicy",
    "StoreFileListener",
    "SyncMode",
    "SystemTimeProvider",
    "Tailer",
    "TailerDirection",
    "TailerState",
    "TailerStats",
    "TimeProvider",
    "UnalignedCycleError",
    "UnknownRollCycleError",
    "UnlockMode",
    "WireError",
    "WriteLockLostError",
    "WriteLockTimeoutError",
    "__version__",
    "add_store_file_listener",
    "binary_search",
    "check_queue",
    "current_history",
    "field_key",
    "history_time",
    "lock_states",
    "method_id",
    "method_key",
    "open_queue",
    "queue_stats",
    "repair_queue",
    "set_queue_codec",
    "unlock_queue",
]



def _load() -> None:
    """Import every public name (the ``if TYPE_CHECKING:`` imports of this file) and
    show public classes and functions as ``aiochronicle.X`` (reprs, pickles, docs)."""
    with open(__file__, encoding="utf-8") as f:
        tree = _ast.parse(f.read())
    block = next(node for node in tree.body if isinstance(node, _ast.If)
                 and isinstance(node.test, _ast.Attribute) and node.test.attr == "TYPE_CHECKING")
    found: dict[str, _typing.Any] = {}
    for stmt in block.body:
        if not (isinstance(stmt, _ast.ImportFrom) and stmt.level == 1 and stmt.module):
            raise ImportError(f"aiochronicle/__init__.py:{stmt.lineno}: not a `from .x import`")
        module = _importlib.import_module(f".{stmt.module}", __name__)
        for alias in stmt.names:
            found[alias.asname or alias.name] = getattr(module, alias.name)
    for obj in found.values():
        if isinstance(obj, type) or callable(obj):
            owner = getattr(obj, "__module__", "")
            if isinstance(owner, str) and owner.startswith("aiochronicle._"):
                obj.__module__ = __name__
    globals().update(found)


if not _typing.TYPE_CHECKING:  # (so that a misspelt name stays a type error)

    def __getattr__(name: str) -> object:
        if not (name.startswith("__") and name.endswith("__")):
            _load()
            if name in globals():
                return globals()[name]
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
