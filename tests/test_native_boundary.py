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
from aiochronicle._core._native import ERRNO, check, ffi, lib

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
                found.add(name.rsplit(".", 1)[-1])  # the module, whatever its folder
    return found | ({"_native"} if any(m.rsplit(".", 1)[-1] == "_native" for m in MODULES)
                    else set())


def test_only_the_owners_hold_ffi_and_lib() -> None:
    assert _holders() == OWNERS


# -- one extension file ------------------------------------------------------------

def test_both_modules_come_from_one_extension_file() -> None:
    """``_hot`` is loaded from ``_cq``'s file (one dlopen handle: one copy of
    the core's globals), and the package holds no other compiled module."""
    from aiochronicle._core import (
        _cq,
        _hot,
        _native,  # noqa: F401  (loads _hot from _cq's file)
    )

    assert _hot.__file__ == _cq.__file__
    assert _hot.__spec__ is not None and _hot.__spec__.origin == _cq.__file__
    package = Path(ac.__file__).parent
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = sorted(p.name for p in package.rglob("*") if p.name.endswith(suffixes))
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


# -- _hot.pyi states the C API module's whole contract ------------------------------

PYI = Path(ac.__file__).parent / "_core" / "_hot.pyi"


def _pyi_classes() -> dict[str, ast.ClassDef]:
    tree = ast.parse(PYI.read_text(), str(PYI))
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _is_hooks(node: ast.ClassDef) -> bool:
    return any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases)


def _pyi_members(node: ast.ClassDef, classes: dict[str, ast.ClassDef],
                 hooks: bool) -> set[str]:
    """The names ``node`` declares, with its stub bases': the hook protocols'
    names when ``hooks``, else the rest."""
    names: set[str] = set()
    if _is_hooks(node) == hooks:
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            names |= _pyi_members(classes[base.id], classes, hooks)
    return names


def _public(names: list[str]) -> set[str]:
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def test_the_pyi_states_every_name_of_the_module_and_of_each_type() -> None:
    from aiochronicle._core import (
        _hot,
        _native,  # noqa: F401  (loads _hot from _cq's file)
    )

    tree = ast.parse(PYI.read_text(), str(PYI))
    classes = _pyi_classes()
    stub_only = {name for name, node in classes.items()
                 if _is_hooks(node) or name == "_HotCalls"}
    declared = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):  # not the stub's type aliases
            declared.add(node.name)
    assert _public(list(declared - stub_only)) == _public(dir(_hot))
    for name in sorted(declared & set(classes) - stub_only):
        tp = getattr(_hot, name)
        assert isinstance(tp, type), name
        assert _public(list(_pyi_members(classes[name], classes, hooks=False))) \
            == _public(dir(tp)), name


def test_the_python_subclasses_provide_every_hook_c_calls() -> None:
    """C calls these methods by name on ``self``; every concrete subclass in the
    package has each one (a missing one is an AttributeError at run time)."""
    from aiochronicle._core import (
        _hot,
        _native,  # noqa: F401  (loads _hot from _cq's file)
    )

    classes = _pyi_classes()

    def leaves(tp: type) -> list[type]:
        subs = tp.__subclasses__()
        return [tp] if not subs else [leaf for s in subs for leaf in leaves(s)]

    checked = 0
    for name in ("HotAppender", "HotTailer", "HotReader"):
        hooks = _pyi_members(classes[name], classes, hooks=True)
        assert hooks, name
        for leaf in leaves(getattr(_hot, name)):
            if not leaf.__module__.startswith("aiochronicle"):
                continue
            missing = {h for h in hooks if not callable(getattr(leaf, h, None))}
            assert not missing, (leaf, missing)
            checked += 1
    assert checked >= 3


# -- native memory crosses as handles, never as addresses ----------------------------

def test_hot_takes_native_memory_only_as_a_handle_of_its_kind(tmp_path: Path) -> None:
    """``_hot`` refuses an int address, a handle of another kind and a buffer
    of the wrong size with a TypeError (never dereferences them); a tailer
    bound to its handle reads."""
    from aiochronicle._core._hot import handle as make_handle
    from aiochronicle._core._native import (
        NativeHandle,
        handle,
        new_appender,
        new_tailer,
        new_uint32,
    )

    with ac.open_queue(tmp_path / "q") as q:
        appender = q.appender()
        tailer = q.tailer()
        stop = handle(new_uint32())
        tailer_struct = new_tailer()
        address = int(ffi.cast("uintptr_t", tailer_struct))
        for wrong in (address, handle(new_appender()), stop, object()):
            with pytest.raises(TypeError, match="handle of a cq_tailer"):
                tailer._bind_native(NativeHandle(wrong), True)
        with pytest.raises(TypeError, match="handle of a cq_appender"):
            appender._bind_native(handle(tailer_struct))
        with pytest.raises(TypeError, match="handle of a uint32_t"):
            tailer._spin_read(0, NativeHandle(int(ffi.cast("uintptr_t", new_uint32()))), 0)
        with pytest.raises(TypeError, match="handle of a int64_t"):
            tailer._arm_read(stop, 0, stop, 1, True)
        with pytest.raises(TypeError, match="is 4 bytes, the buffer 8"):
            make_handle(bytearray(8), "uint32_t")
        with pytest.raises(TypeError, match="no handle for a char"):
            make_handle(bytearray(1), "char")
        with pytest.raises(BufferError):  # read-only memory
            make_handle(bytes(4), "uint32_t")
        # the refused calls left both bound as they were
        index = appender.append(b"x")
        got = tailer.read_nowait()
        assert got is not None and got.index == index and got.payload == b"x"
        assert tailer._spin_read(0, stop, 0) == lib.CQ_NONE


def test_a_handle_keeps_its_memory_alive() -> None:
    """The handle holds the cffi buffer, which holds the owning pointer: the
    memory lives while the handle does, and goes with it."""
    import gc
    import weakref

    from aiochronicle._core._native import handle, new_uint32

    word = new_uint32()
    ref = weakref.ref(word)
    h = handle(word)
    del word
    gc.collect()
    assert ref() is not None
    del h
    gc.collect()
    assert ref() is None
