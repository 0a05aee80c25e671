"""The only importer of the compiled modules: the cffi core ``aiochronicle._cq``
and the per-message C API calls ``aiochronicle._hot``."""

from __future__ import annotations

import glob
import os
import sys

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
    from ._hot import HotAppender, HotTailer, set_excerpt_type
    from ._hot import version as _hot_version
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(_not_built_message()) from exc

for _name, _built in (("_cq", ffi.string(lib.cq_version()).decode()), ("_hot", _hot_version())):
    if _built != __version__:  # pragma: no cover - depends on the build
        raise ImportError(
            f"aiochronicle native module {_name} is version {_built}, the Python package is "
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

__all__ = ["HotAppender", "HotTailer", "ffi", "lib", "set_excerpt_type"]
