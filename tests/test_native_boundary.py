"""The typed boundary to the native core (docs/native.md).

Only four modules hold the cffi objects; the two modules (the cffi core
``_cq`` and the C API module ``_hot``) live in one extension file; a failed
system call's errno is saved by the C side where it failed, so the error names
that call's errno whatever cffi's own errno says by then.
"""

from __future__ import annotations

import ast
import errno
import importlib.machinery
import os
from pathlib import Path

import pytest
from test_layers import MODULES

import aiochronicle as ac
from aiochronicle._native import ERRNO, check, ffi, lib

#: the owners of mapped memory, of a cycle file and of metadata.cq4t, and the boundary
OWNERS = {"_native", "_mapped", "_store", "_tablestore"}


def _holders() -> set[str]:
    """The package modules that import ``ffi`` or ``lib`` from ``_native``
    (or name ``_native.ffi`` / ``_native.lib``), besides ``_native`` itself."""
    found = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            imported = (isinstance(node, ast.ImportFrom)
                        and (node.module or "").endswith("_native")
                        and bool({a.name for a in node.names} & {"ffi", "lib"}))
            named = (isinstance(node, ast.Attribute) and node.attr in ("ffi", "lib")
                     and isinstance(node.value, ast.Name) and node.value.id == "_native")
            if imported or named:
                found.add(name)
    return found | ({"_native"} if "_native" in MODULES else set())


def test_only_the_owners_hold_ffi_and_lib() -> None:
    assert _holders() == OWNERS


# -- one extension file ------------------------------------------------------------

def test_both_modules_come_from_one_extension_file() -> None:
    """``_hot`` is loaded from ``_cq``'s file (one dlopen handle: one copy of
    the core's globals), and the package holds no other compiled module."""
    from aiochronicle import _cq, _hot

    assert _hot.__file__ == _cq.__file__
    assert _hot.__spec__ is not None and _hot.__spec__.origin == _cq.__file__
    package = Path(ac.__file__).parent
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = sorted(p.name for p in package.iterdir() if p.name.endswith(suffixes))
    assert found == [Path(_cq.__file__).name]


def test_the_error_names_the_failed_calls_errno_not_a_later_one(tmp_path: Path) -> None:
    """A real failed mmap (a writable mapping of a read-only descriptor:
    EACCES), then an unrelated native call that leaves errno at EAGAIN (a
    futex wait on a word that already changed): the error raised for the
    mmap's code still says EACCES."""
    path = tmp_path / "file"
    path.write_bytes(bytes(4096))
    fd = os.open(path, os.O_RDONLY)
    try:
        rc = lib.cq_map(fd, 4096, 1, ffi.new("uint8_t **"))
    finally:
        os.close(fd)
    assert rc == ERRNO
    word = ffi.new("uint32_t *", 1)
    assert lib.cq_futex_wait(word, 2, 1_000_000) == lib.CQ_WAIT_CHANGED
    assert ffi.errno == errno.EAGAIN  # what cffi's errno says by now
    with pytest.raises(ac.QueueOSError) as info:
        check(rc, path=str(path), what="mapping")
    assert info.value.errno == errno.EACCES
    assert isinstance(info.value, OSError) and info.value.filename == str(path)
    assert str(info.value) == f"[Errno {errno.EACCES}] mapping: {os.strerror(errno.EACCES)}: " \
                              f"'{path}'"
