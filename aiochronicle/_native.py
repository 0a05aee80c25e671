"""The only importer of the compiled modules: the cffi core ``aiochronicle._cq``
and the per-message C API calls ``aiochronicle._hot``."""

from __future__ import annotations

import glob
import os
import sys

from ._errors import (
    ChronicleError,
    CorruptQueueError,
    DiskFullError,
    IndexFullError,
    MessageTooLargeError,
    QueueOSError,
    UnalignedCycleError,
    WriteLockLostError,
)
from ._version import __version__


def _not_built_message() -> str:
    """Why ``aiochronicle._cq`` is missing, and what to do: most often a source
    checkout (no compiled core in it) comes first on ``sys.path`` and hides the
    package installed in the environment."""
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.dirname(here)
    if not os.path.isfile(os.path.join(tree, "pyproject.toml")):
        return ("aiochronicle's native core (aiochronicle._cq) is not built in "
                f"{here}; install the package with `pip install .`")
    shadowed = [os.path.join(entry, "aiochronicle")
                for entry in sys.path
                if entry and os.path.abspath(entry) != tree
                and glob.glob(os.path.join(entry, "aiochronicle", "_cq*.so"))]
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

try:
    from ._hot import (
        HotAppender,
        HotReader,
        HotTailer,
        WireDecoder,
        WireEncoder,
        WriterMethod,
        set_excerpt_type,
    )
    from ._hot import _dispatch_mp as dispatch_mp
    from ._hot import version as _hot_version
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(_not_built_message()) from exc

for _name, _built in (("_cq", ffi.string(lib.cq_version()).decode()), ("_hot", _hot_version())):
    if _built != __version__:  # pragma: no cover - depends on the build
        raise ImportError(
            f"aiochronicle native module {_name} is version {_built}, the Python package is "
            f"{__version__}: rebuild with `pip install .`"
        )

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


def check(rc: int, *, path: str = "", pos: int = 0, what: str = "",
          detail: str = "") -> int:
    """``rc`` when it is not an error code, else raise the named exception it
    stands for (the one place result codes become exceptions, as pyzmq's
    ``_check_rc``).  ``path``/``pos`` locate damage; ``what`` says what was
    being done; ``detail`` replaces the generic message.

    The codes a caller handles itself (NONE, EOF, NEED_MAP, ROLL, LOCKED,
    NOT_REACHED, BAD_STATE, ...) must be dealt with before calling this:
    those reaching it are unexpected and raise ChronicleError.
    """
    if rc >= 0:
        return rc
    doing = f"{what}: " if what else ""
    if rc == CORRUPT:
        raise CorruptQueueError(detail or f"{doing}corrupt header or index", path, pos)
    if rc == LOCK_LOST:
        raise WriteLockLostError(
            detail or f"{doing}the write lock of {path} was forced away from this writer "
            "before it committed: nothing of it was written")
    if rc == TOO_LARGE:
        raise MessageTooLargeError(detail or f"{doing}an excerpt holds at most "
                                   f"{(1 << 30) - 1} bytes")
    if rc == UNALIGNED:
        raise UnalignedCycleError(
            detail or f"{doing}{path} is a packed cycle file (dataFormat 0): it is read but "
            "not appended to; appends go on in the next cycle")
    if rc == INDEX_FULL:
        raise IndexFullError(detail or f"{doing}the cycle's index is full")
    if rc == NO_SPACE:
        raise DiskFullError(28, detail or f"{doing}no space left on the device for {path}")
    if rc == ERRNO:
        err = ffi.errno
        raise QueueOSError(err, f"{doing}{os.strerror(err)}", path or None)
    raise ChronicleError(detail or f"{doing}native call failed with {code_name(rc)}")


__all__ = ["HotAppender", "HotReader", "HotTailer", "WireDecoder", "WireEncoder",
           "WriterMethod", "check", "code_name", "dispatch_mp", "ffi", "lib",
           "set_excerpt_type"]
