"""The only importer of the compiled modules: the cffi core ``aiochronicle._core._cq``
and the per-message C API calls ``aiochronicle._core._hot``.

The typed boundary to the native core (docs/native.md): besides this module,
only the owners of mapped memory (``_mapped``), of a cycle file (``_store``)
and of ``metadata.cq4t`` (``_tablestore``) use ``ffi``/``lib``; every other
module calls the typed names below.  Result codes become exceptions in one
function, :func:`check`, with the errno the native core saved where a system
call failed (:func:`last_errno`).  Both modules live in one shared library
(``_cq``'s file; ``_hot`` is loaded from it by its own init function), so they
share one copy of the core's globals."""

from __future__ import annotations

import errno
import glob
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from .._version import __version__
from ._errors import (
    ChronicleError,
    CorruptQueueError,
    DiskFullError,
    IndexFullError,
    MessageTooLargeError,
    NativeBuildError,
    QueueOSError,
    UnalignedCycleError,
    WriteLockLostError,
)


def _not_built_message() -> str:
    """Why ``aiochronicle._core._cq`` is missing, and what to do: most often a source
    checkout (no compiled core in it) comes first on ``sys.path`` and hides the
    package installed in the environment."""
    here = os.path.dirname(os.path.abspath(__file__))
    # the package's folder and the tree holding it, wherever in the package this module is
    inside = __name__.split(".")[:-1]  # ["aiochronicle", ...folders]
    package = here
    for _ in inside[1:]:
        package = os.path.dirname(package)
    tree = os.path.dirname(package)
    if not os.path.isfile(os.path.join(tree, "pyproject.toml")):
        return ("aiochronicle's native core (aiochronicle._core._cq) is not built in "
                f"{here}; install the package with `pip install .`")
    shadowed = [os.path.join(entry, "aiochronicle")
                for entry in sys.path
                if entry and os.path.abspath(entry) != tree
                and glob.glob(os.path.join(entry, *inside, "_cq*.so"))]
    why = (f"Python imported aiochronicle from the source tree {tree} (it comes first on "
           "sys.path: the current directory, PYTHONPATH, or a script that inserts it), and "
           "the native core is not built there")
    if shadowed:
        why += f"; it hides the installed package in {shadowed[0]}"
    return (f"{why}. Run from another directory (or with `python -P`, or without the "
            "checkout on PYTHONPATH) to use the installed package, or build the core in "
            "the checkout with `pip install -e .`")


try:
    from ._cq import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(_not_built_message()) from exc


def _load_hot() -> None:
    """Load the C API module ``aiochronicle._core._hot``: the second module of the
    one shared library ``_cq`` (native/hot.c's ``PyInit__hot``; PEP 489 allows
    several modules in one file), so both share one copy of the core; it is
    registered in ``sys.modules`` so ``from ._hot import ...`` finds it."""
    import importlib.machinery
    import importlib.util

    name = f"{__package__}._hot"
    if name in sys.modules:
        return
    path = sys.modules[f"{__package__}._cq"].__file__
    if path is None:  # pragma: no cover - depends on the build
        raise ImportError(_not_built_message())
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:  # pragma: no cover - depends on the build
        raise ImportError(_not_built_message())
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


try:
    _load_hot()
    from ._hot import (
        HotAppender,
        HotReader,
        HotTailer,
        Incoming,
        NativeHandle,
        Park,
        WireDecoder,
        WireEncoder,
        WriterMethod,
        current_incoming,
        end_park,
        hold,
        new_park,
        outgoing_history,
        park_readable,
        release,
        set_excerpt_type,
        set_history,
        wake_parks,
    )
    from ._hot import _dispatch_mp as dispatch_mp
    from ._hot import _dispatch_one as dispatch_one
    from ._hot import _dispatch_wire as dispatch_wire
    from ._hot import _hot_after as hot_after
    from ._hot import handle as _make_handle
    from ._hot import version as _hot_version
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(_not_built_message()) from exc

for _name, _built in (("_cq", ffi.string(lib.cq_version()).decode()), ("_hot", _hot_version())):
    if _built != __version__:  # pragma: no cover - depends on the build
        raise NativeBuildError(
            f"aiochronicle native module {_name} is version {_built}, the Python package is "
            f"{__version__}: rebuild with `pip install .`"
        )


def last_errno() -> int:
    """The errno of this thread's last failed system call in the native core,
    saved by the C function where it failed, whichever compiled module made
    the call (cffi's ``ffi.errno`` only sees calls made through cffi)."""
    return int(lib.cq_last_errno())


# -- result codes of the native core (native/cq.h), read from the build once --
OK: int = lib.CQ_OK
NONE: int = lib.CQ_NONE
EOF_: int = lib.CQ_EOF
NEED_MAP: int = lib.CQ_NEED_MAP
LOCKED: int = lib.CQ_LOCKED
ROLL: int = lib.CQ_ROLL
CORRUPT: int = lib.CQ_CORRUPT
NOT_FOUND: int = lib.CQ_NOT_FOUND
NOT_REACHED: int = lib.CQ_NOT_REACHED
TOO_LARGE: int = lib.CQ_TOO_LARGE
INDEX_FULL: int = lib.CQ_INDEX_FULL
APPEND_LOCKED: int = lib.CQ_APPEND_LOCKED
ERRNO: int = lib.CQ_ERRNO
NO_SPACE: int = lib.CQ_NO_SPACE
BAD_STATE: int = lib.CQ_BAD_STATE
DUPLICATE: int = lib.CQ_DUPLICATE
GAP: int = lib.CQ_GAP
LOCK_LOST: int = lib.CQ_LOCK_LOST
UNALIGNED: int = lib.CQ_UNALIGNED
UNMARKED_END: int = lib.CQ_UNMARKED_END

# -- header word bits (native/cq.h) --
HDR_LENGTH_MASK: int = lib.CQ_HDR_LENGTH_MASK
HDR_META: int = lib.CQ_HDR_META
HDR_NOT_COMPLETE: int = lib.CQ_HDR_NOT_COMPLETE
HDR_EOF: int = lib.CQ_HDR_EOF

#: a free lock word (Java's Long.MIN_VALUE)
UNLOCKED = -(1 << 63)

_NAMES = {v: k for k, v in list(globals().items())
          if isinstance(v, int) and k.isupper() and not k.startswith(("HDR_", "UNLOCKED"))
          and v <= 0}


def code_name(rc: int) -> str:
    """``CQ_...``: the name of a native result code (for messages)."""
    name = _NAMES.get(rc)
    return f"CQ_{name.rstrip('_')}" if name else str(rc)


def check(rc: int, *, path: str = "", pos: int | None = None, what: str = "",
          detail: str = "", size: int | None = None) -> int:
    """``rc`` when it is not an error code, else raise :func:`error` of it.

    The codes a caller handles itself (NONE, EOF, NEED_MAP, ROLL, LOCKED,
    NOT_REACHED, BAD_STATE, ...) must be dealt with before calling this:
    those reaching it are unexpected and raise ChronicleError.
    """
    if rc >= 0:
        return rc
    raise error(rc, path=path, pos=pos, what=what, detail=detail, size=size)


def error(rc: int, *, path: str = "", pos: int | None = None, what: str = "",
          detail: str = "", size: int | None = None) -> ChronicleError:
    """The named exception the error code ``rc`` stands for: the one place
    result codes become exceptions (as pyzmq's ``_check_rc``); callers that
    read a code as damage (a document past the end of the file) raise
    ``error(CORRUPT, ...)``.  ``path``/``pos`` locate damage; ``what`` says
    what was being done; ``detail`` replaces the generic message; ``size``
    is the payload's length (named when it is too large).  CQ_ERRNO gives
    QueueOSError with the errno the native core saved where the system
    call failed (:func:`last_errno`)."""
    doing = f"{what}: " if what else ""
    if rc == CORRUPT:
        return CorruptQueueError(detail or f"{doing}corrupt header or index", path, pos)
    if rc == LOCK_LOST:
        return WriteLockLostError(
            detail or f"{doing}the write lock was forced away from this writer before it "
            f"committed: nothing of it was written ({path})")
    if rc == TOO_LARGE:
        return MessageTooLargeError(
            detail or (f"an excerpt holds at most {HDR_LENGTH_MASK} bytes, got {size}"
                       if size is not None else
                       f"{doing}an excerpt holds at most {HDR_LENGTH_MASK} bytes"))
    if rc == UNALIGNED:
        return UnalignedCycleError(
            detail or f"{doing}{path} is a packed cycle file (dataFormat 0): it is read but "
            "not appended to; appends go on in the next cycle")
    if rc == INDEX_FULL:
        return IndexFullError(detail or f"{doing}the cycle's index is full")
    if rc == NO_SPACE:
        return DiskFullError(errno.ENOSPC,
                             detail or f"{doing}no space left on the device for {path}")
    if rc == ERRNO:
        err = last_errno()
        return QueueOSError(err, f"{doing}{os.strerror(err)}", path or None)
    return ChronicleError(detail or f"{doing}native call failed with {code_name(rc)}")


# -- typed entry points, for the modules that do not hold ffi/lib --------------
# The slow-path calls are Python functions; the calls a non-C-API path makes
# once per message (a backward or metadata read, a batch, a positioned
# append, a pauser's spin) are the cffi functions themselves under typed names,
# so they cost no extra Python frame.

#: a NULL pointer (for struct fields)
# -- the types of native memory outside this module ---------------------------------
# cffi's objects are untyped (``Any``) here; every other module holds them as
# these types, so mypy checks what they do with them: a Pointer is opaque (only
# the boundary modules read or write through it), a Cell is one integer, and
# the two structs other modules fill are listed field by field (native/cq.h).


class Pointer(Protocol):
    """A pointer into native memory (a cffi ``cdata``): opaque outside the
    boundary modules (``_native``, ``_mapped``, ``_store``, ``_tablestore``),
    which alone read or write through it; others only pass it back in."""


class Cell(Pointer, Protocol):
    """A pointer to one integer (``int64_t *``, ``uint64_t *``, ``uint32_t *``):
    ``cell[0]`` reads or writes it."""

    def __getitem__(self, i: int, /) -> int: ...
    def __setitem__(self, i: int, value: int, /) -> None: ...


class Array(Pointer, Protocol):
    """A pointer to the items of a Python buffer (:data:`from_buffer`): its
    length, and a pointer ``n`` items on (``array + n``)."""

    def __len__(self) -> int: ...
    def __add__(self, n: int, /) -> Array: ...


class StoreStruct(Protocol):
    """A ``cq_store`` (native/cq.h), the mapping of a cycle file, as an
    appender's open document is written through it (``base + offset``)."""

    base: Array


class AppenderStruct(Protocol):
    """A ``cq_appender`` (native/cq.h): the fields the appender's Python side sets and reads."""

    store: StoreStruct
    write_lock: Pointer
    append_lock: Pointer
    pid: int
    clock_cell: Cell
    epoch: int
    length_ms: int
    queue_shift: int
    check_cycle: int
    closed: int
    lock_spin_ns: int
    pos: int
    seq: int
    populated: int
    populate_step: int
    dropped: int
    allocated: int
    notify: Pointer
    last_index: int
    want_cycle: int
    need: int
    err_pos: int
    doc_open: int
    doc_meta: int
    doc_pos: int
    doc_claim: int
    appended: int


class TailerStruct(Protocol):
    """A ``cq_tailer`` (native/cq.h): the fields the tailer's Python side sets and reads."""

    store: Pointer
    queue_shift: int
    include_meta: int
    closed: int
    pos: int
    seq: int
    dropped: int
    scratch: Pointer
    scratch_cap: int
    data: Pointer
    len: int
    index: int
    is_meta: int
    need: int
    err_pos: int
    last_cycle: Pointer
    stall_cycle: int
    stall_pos: int
    stall_polls: int


class CellArray(Protocol):
    """A C array of cell pointers (``int64_t *[n]``)."""

    def __getitem__(self, i: int, /) -> Cell: ...
    def __setitem__(self, i: int, value: Cell, /) -> None: ...


class NotifyWatch(Pointer, Protocol):
    """A ``cq_notify_watch`` (native/notify.h): the notify values an appender
    checks after each commit, as ``_notify`` points it at them."""

    cell: Cell
    meta: Pointer
    meta_len: int
    probe: int
    parked: Cell
    slots: CellArray
    known: int


NULL: Pointer = ffi.NULL
#: NULL where a StoreStruct goes (an appender holding no cycle file)
NULL_STORE: StoreStruct = ffi.NULL
#: NULL where a Cell goes (an appender's clock cell: the system clock)
NULL_CELL: Cell = ffi.NULL
#: word index of cq_tailer.index in a tailer struct viewed as int64 words
TAILER_INDEX_WORD: int = ffi.offsetof("cq_tailer", "index") // 8
#: how many event loops can own a notify slot of one queue
NOTIFY_SLOTS: int = lib.CQ_NOTIFY_SLOTS

#: cq_append(appender, data, len, meta) -> index or code
append: Callable[[Any, Any, int, int], int] = lib.cq_append
#: cq_append_at(appender, data, len, seq) -> index or code
append_at: Callable[[Any, Any, int, int], int] = lib.cq_append_at
#: cq_append_batch(appender, data, offsets, n, done) -> code
append_batch: Callable[[Any, Any, Any, int, Any], int] = lib.cq_append_batch
#: cq_doc_begin(appender, reserve, meta): open an in-place document (takes the lock)
doc_begin: Callable[[Any, int, int], int] = lib.cq_doc_begin
#: cq_doc_ensure(appender, length): room for ``length`` bytes in the open document
doc_ensure: Callable[[Any, int], int] = lib.cq_doc_ensure
#: cq_doc_commit(appender, length): publish the open document
doc_commit: Callable[[Any, int], int] = lib.cq_doc_commit
#: cq_doc_rollback(appender, length): the open document becomes padding
doc_rollback: Callable[[Any, int], int] = lib.cq_doc_rollback


#: cq_doc_abandon(appender): end the open document from another thread (close)
doc_abandon: Callable[[Any], int] = lib.cq_doc_abandon
#: cq_read(tailer) -> length or code
read: Callable[[Any], int] = lib.cq_read
#: cq_read_batch(tailer, out, cap, offsets, indices, max_n, n_out) -> code
read_batch: Callable[[Any, Any, int, Any, Any, int, Any], int] = lib.cq_read_batch
#: cq_spin(budget_ns, stop, stop_seen) -> CQ_SPIN_* (GIL released)
spin: Callable[[int, Any, int], int] = lib.cq_spin
#: cq_park_read(tailer or NULL, park_ns, cell, horizon_ns, stop, stop_seen)
park_read: Callable[[Any, int, Any, int, Any, int], int] = lib.cq_park_read
#: cq_futex_wake(word, n) -> woken or code
futex_wake: Callable[[Any, int], int] = lib.cq_futex_wake
#: cq_futex_wait(word, expected, timeout_ns) -> CQ_WAIT_* or code (GIL released)
futex_wait: Callable[[Any, int, int], int] = lib.cq_futex_wait
#: sched_yield()
yield_cpu: Callable[[], int] = lib.cq_yield
#: bytes at a char pointer: unpack(pointer, length)
unpack: Callable[[Any, int], bytes] = ffi.unpack
#: a pointer to the bytes of a buffer (bytes, bytearray, memoryview, array)
from_buffer: Callable[..., Array] = ffi.from_buffer
#: let go of a from_buffer() pointer now
release_buffer: Callable[[Any], None] = ffi.release
#: copy bytes between pointers and buffers
memmove: Callable[[Any, Any, int], None] = ffi.memmove


def new_appender() -> AppenderStruct:
    """A zeroed native appender (``cq_appender *``), freed with its last reference."""
    typed: AppenderStruct = ffi.new("cq_appender *")
    return typed


def new_tailer() -> TailerStruct:
    """A zeroed native tailer (``cq_tailer *``), freed with its last reference."""
    typed: TailerStruct = ffi.new("cq_tailer *")
    return typed


def new_bytes(size: int) -> Pointer:
    """A zeroed ``char[size]`` (a tailer's scratch buffer)."""
    typed: Pointer = ffi.new("char[]", size)
    return typed


def new_int64(value: int = 0) -> Cell:
    """A heap ``int64_t *`` holding ``value`` (a clock cell)."""
    typed: Cell = ffi.new("int64_t *", value)
    return typed


def new_uint64() -> Cell:
    """A heap ``uint64_t *`` (an out parameter)."""
    typed: Cell = ffi.new("uint64_t *")
    return typed


def new_uint32() -> Cell:
    """A heap ``uint32_t *`` (a pauser's stop word)."""
    typed: Cell = ffi.new("uint32_t *")
    return typed


def handle(ptr: Any) -> NativeHandle:
    """The handle of a typed native pointer (``cq_appender *``, ``cq_tailer *``,
    ``uint32_t *``, ``int64_t *``) for the ``_hot`` methods that take native
    memory: ``_hot`` makes it from a buffer of exactly the pointed-to type
    (checked there: a wrong type or size is a TypeError) and keeps that buffer,
    so the pointer's owner, alive (:class:`NativeHandle`: a struct or word of
    the native core as an object, never an address)."""
    return _make_handle(ffi.buffer(ptr), ffi.typeof(ptr).item.cname)


def int64_at(ptr: Any) -> Cell:
    """``ptr`` (a pointer into mapped memory) as an ``int64_t *``."""
    typed: Cell = ffi.cast("int64_t *", ptr)
    return typed


def struct_words(ptr: Any) -> memoryview:
    """The struct at ``ptr`` as a writable view of int64 words."""
    return memoryview(ffi.buffer(ptr)).cast("q")


def lock(word: Any, pid: int, spin_ns: int) -> bool:
    """cq_lock: take the lock word for ``pid``, spinning at most ``spin_ns``
    (GIL released); False when it stayed held."""
    return int(lib.cq_lock(word, pid, spin_ns)) == OK


def unlock(word: Any, pid: int) -> None:
    """cq_unlock: free the lock word if ``pid`` holds it."""
    lib.cq_unlock(word, pid)


def cas64(ptr: Any, expected: int, value: int) -> bool:
    """Compare-and-set the int64 at ``ptr``."""
    return bool(lib.cq_cas64(ffi.cast("uint8_t *", ptr), expected, value))


def notify_sockname(ident: int) -> bytes:
    """The socket name of a notify slot owner (abstract, or a path in the
    portable build: native/platform.h)."""
    buf = ffi.new("char[40]")
    n = lib.cq_notify_sockname(ident, buf)
    return bytes(ffi.buffer(buf, n))


def notify_park(parked: Any, slot: int) -> None:
    """Set slot ``slot``'s parked bit."""
    lib.cq_notify_park(parked, slot)


def notify_unpark(parked: Any, slot: int) -> None:
    """Clear slot ``slot``'s parked bit."""
    lib.cq_notify_unpark(parked, slot)


def notify_word(cell: Any) -> Cell:
    """The futex word of the notify value at ``cell``."""
    typed: Cell = lib.cq_notify_word(cell)
    return typed


def notify_arm(cell: Any, horizon_ns: int) -> int:
    """Announce a waiter until ``horizon_ns`` from now; the word's snapshot."""
    return int(lib.cq_notify_arm(cell, horizon_ns))


def new_notify_watch() -> NotifyWatch:
    """A native appender's notify watch (``cq_notify_watch *``): its socket
    closes when the watch is garbage."""
    typed: NotifyWatch = ffi.gc(ffi.new("cq_notify_watch *"), lib.cq_notify_watch_close)
    return typed


__all__ = [
    "HotAppender",
    "HotReader",
    "HotTailer",
    "Incoming",
    "NativeHandle",
    "Park",
    "WireDecoder",
    "WireEncoder",
    "WriterMethod",
    "check",
    "code_name",
    "current_incoming",
    "dispatch_mp",
    "dispatch_one",
    "dispatch_wire",
    "end_park",
    "error",
    "ffi",
    "hold",
    "hot_after",
    "lib",
    "new_park",
    "outgoing_history",
    "park_readable",
    "release",
    "set_excerpt_type",
    "set_history",
    "wake_parks",
]
