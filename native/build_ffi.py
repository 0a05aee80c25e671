"""cffi build script for the native core (API mode, out-of-line).

``setup.py`` names ``native/build_ffi.py:ffibuilder`` in ``cffi_modules``; the
compiled module is ``aiochronicle._core._cq`` and ``aiochronicle/_core/_native.py`` is its
only importer.

Environment toggles:

* ``AIOCHRONICLE_SANITIZE=1`` builds with AddressSanitizer and
  UndefinedBehaviorSanitizer (run the tests with ``LD_PRELOAD`` of libasan).
* ``AIOCHRONICLE_DEBUG=1`` builds without optimisation and with asserts.
* ``CQ_PORTABLE=1`` builds the platform layer's portable path (native/platform.h:
  no futexes, no size-keeping fallocate, no abstract sockets), the code macOS
  runs; ``lib.cq_platform()`` says which path a build has.
"""

from __future__ import annotations

import os
import pathlib
import re

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def _version() -> str:
    text = (ROOT / "aiochronicle" / "_version.py").read_text()
    match = re.search(r'__version__ = "([^"]+)"', text)
    if match is None:
        raise RuntimeError("aiochronicle/_version.py has no __version__")
    return match.group(1)


HEADERS = ["codes.h", "platform.h", "notify.h", "cq.h", "pause.h"]
SOURCES = ["platform.c", "notify.c", "cq.c", "pause.c"]
HOT_SOURCES = ["hot.c", "wirecall.c", "wire.c", "histcall.c", "history.c", "park.c", *SOURCES]
"""Every native source, in native/: all of them go into the one shared library
``aiochronicle._core._cq``, which holds two modules: the cffi core ``_cq`` and the C
API module ``_hot`` (native/hot.c's ``PyInit__hot``, loaded from the same file
by ``aiochronicle/_core/_native.py``), so both see one copy of the core's globals."""


def _cdef() -> str:
    parts = []
    for name in HEADERS:
        path = HERE / name
        if not path.exists():
            continue
        header = path.read_text()
        start = header.index("/* CDEF-BEGIN */") + len("/* CDEF-BEGIN */")
        end = header.index("/* CDEF-END */")
        parts.append(header[start:end])
    return "\n".join(parts)


ffibuilder = FFI()
ffibuilder.cdef(_cdef())

def compile_flags() -> tuple[list[str], list[str]]:
    """(compile, link) flags of the native library, from the environment
    toggles above."""
    args = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    link: list[str] = []
    if os.environ.get("AIOCHRONICLE_SANITIZE"):
        args += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
        link += ["-fsanitize=address,undefined"]
    elif os.environ.get("AIOCHRONICLE_DEBUG"):
        args += ["-O0", "-g"]
    else:
        args += ["-O2"]
    if os.environ.get("CQ_PORTABLE", "") not in ("", "0"):
        args += ["-DCQ_PORTABLE"]
    return args, link


_args, _link = compile_flags()

ffibuilder.set_source(
    "aiochronicle._core._cq",
    "\n".join(f'#include "{h}"' for h in HEADERS if (HERE / h).exists()),
    sources=[str((HERE / c).relative_to(ROOT)) for c in HOT_SOURCES],
    # hot.c is a CPython C API module (not the limited API): a version-tagged file
    py_limited_api=False,
    include_dirs=[str(HERE.relative_to(ROOT))],
    define_macros=[("AIOCHRONICLE_VERSION", '"%s"' % _version())],
    extra_compile_args=_args,
    extra_link_args=_link,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
