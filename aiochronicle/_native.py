"""The only importer of the compiled cffi module ``aiochronicle._cq``."""

from __future__ import annotations

from ._version import __version__

try:
    from ._cq import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        "aiochronicle's native core (aiochronicle._cq) is not built; "
        "install the package with `pip install .`"
    ) from exc

_native_version = ffi.string(lib.cq_version()).decode()
if _native_version != __version__:  # pragma: no cover - depends on the build
    raise ImportError(
        f"aiochronicle native core is version {_native_version}, the Python package is "
        f"{__version__}: rebuild with `pip install .`"
    )

OK = lib.CQ_OK
NONE = lib.CQ_NONE
EOF_ = lib.CQ_EOF
NEED_MAP = lib.CQ_NEED_MAP
LOCKED = lib.CQ_LOCKED
ROLL = lib.CQ_ROLL
CORRUPT = lib.CQ_CORRUPT
NOT_FOUND = lib.CQ_NOT_FOUND
NOT_REACHED = lib.CQ_NOT_REACHED
TOO_LARGE = lib.CQ_TOO_LARGE
INDEX_FULL = lib.CQ_INDEX_FULL
APPEND_LOCKED = lib.CQ_APPEND_LOCKED
ERRNO = lib.CQ_ERRNO
BAD_STATE = lib.CQ_BAD_STATE

UNLOCKED = -(1 << 63)

__all__ = ["ffi", "lib"]
