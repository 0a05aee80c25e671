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
from collections.abc import Callable
from pathlib import Path
from typing import cast

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
            with pytest.raises(TypeError, match="expected a handle of a cq_tailer"):
                tailer._bind_native(cast(NativeHandle, wrong), True)
        with pytest.raises(TypeError, match="handle of a cq_appender"):
            appender._bind_native(handle(tailer_struct))
        with pytest.raises(TypeError, match="handle of a uint32_t"):
            tailer._spin_read(0, cast(NativeHandle, int(ffi.cast("uintptr_t", new_uint32()))), 0)
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


# -- cdata is typed outside the boundary modules -------------------------------------

#: the types ``_native`` gives native memory (cffi's cdata) outside the boundary
CDATA_TYPES = {"Pointer", "Cell", "Array", "CellArray", "StoreStruct", "AppenderStruct",
               "TailerStruct", "NotifyWatch", "Any"}


def _mentions(node: ast.AST | None, names: set[str]) -> bool:
    return node is not None and any(
        (isinstance(n, ast.Name) and n.id in names)
        or (isinstance(n, ast.Attribute) and n.attr in names)
        or (isinstance(n, ast.Constant) and isinstance(n.value, str)
            and any(t in n.value.replace("[", " ").replace("]", " ").replace(",", " ").split()
                    for t in names))
        for n in ast.walk(node))


def _is_any(node: ast.AST | None) -> bool:
    return _mentions(node, {"Any"})


def _native_tree() -> ast.Module:
    path = next(p for n, p in MODULES.items() if n.rsplit(".", 1)[-1] == "_native")
    return ast.parse(path.read_text(), str(path))


def _native_producers() -> tuple[set[str], dict[str, list[bool]]]:
    """From ``_native``: the names whose value or result is cdata, and for each
    callable the positions of its parameters that take cdata (typed ``Any``)."""
    producers: set[str] = set()
    takes: dict[str, list[bool]] = {}
    for node in _native_tree().body:
        if isinstance(node, ast.FunctionDef):
            if _mentions(node.returns, CDATA_TYPES):
                producers.add(node.name)
            takes[node.name] = [_is_any(a.annotation) for a in node.args.args]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann = node.annotation
            name = node.target.id
            if (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name)
                    and ann.value.id == "Callable"):
                assert isinstance(ann.slice, ast.Tuple)
                params, result = ann.slice.elts
                if _mentions(result, CDATA_TYPES):
                    producers.add(name)
                takes[name] = ([_is_any(p) for p in params.elts]
                               if isinstance(params, ast.List) else [True] * 8)
            elif _mentions(ann, CDATA_TYPES - {"Any"}) or (
                    _is_any(ann) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "NULL"):
                producers.add(name)
    return producers, takes


def _local_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr  # self.x, obj.x: by attribute name
    return None


def _any_typed_cdata() -> list[str]:
    """Every place outside the boundary modules where cdata is typed ``Any``:
    ``cast(Any, ...)``; a variable, attribute or return annotated ``Any`` that
    holds or returns cdata (made by ``_native``, by a method returning it, or a
    local that was); a parameter annotated ``Any`` handed to a ``_native``
    call where that takes cdata."""
    producers, takes = _native_producers()
    trees = {name.rsplit(".", 1)[-1]: ast.parse(path.read_text(), str(path))
             for name, path in MODULES.items()}
    # what each module calls the _native names (aliases included)
    aliases: dict[str, dict[str, str]] = {}
    for mod, tree in trees.items():
        aliases[mod] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_native"):
                for a in node.names:
                    aliases[mod][a.asname or a.name] = a.name
    methods: set[str] = set()  # functions anywhere that return cdata (by name)

    def native(mod: str, expr: ast.expr | None, local: set[str]) -> bool:
        if expr is None:
            return False
        if isinstance(expr, ast.IfExp):
            return native(mod, expr.body, local) or native(mod, expr.orelse, local)
        if isinstance(expr, ast.Name):
            return aliases[mod].get(expr.id) in producers or expr.id in local
        if isinstance(expr, ast.Call):
            f = expr.func
            if isinstance(f, ast.Name):
                return aliases[mod].get(f.id) in producers or f.id in methods
            if isinstance(f, ast.Attribute):
                return f.attr in methods or (  # ffi.cast(...), lib.cq_...(): the owners'
                    isinstance(f.value, ast.Name) and f.value.id in ("ffi", "lib"))
        return False

    def walk_functions(mod: str, tree: ast.Module,
                       visit: Callable[[ast.FunctionDef, set[str]], None]) -> None:
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef):
                local: set[str] = set()
                for node in ast.walk(fn):
                    if isinstance(node, ast.Assign) and native(mod, node.value, local):
                        local |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                visit(fn, local)

    for _ in range(3):  # functions returning what others return: a few rounds
        for mod, tree in trees.items():
            def returns(fn: ast.FunctionDef, local: set[str], mod: str = mod) -> None:
                for node in ast.walk(fn):
                    if isinstance(node, ast.Return) and native(mod, node.value, local):
                        methods.add(fn.name)
            walk_functions(mod, tree, returns)

    found: list[str] = []
    for mod, tree in trees.items():
        if mod in OWNERS:
            continue
        cdata_attrs: set[str] = set()  # names assigned cdata anywhere in the module

        def collect(fn: ast.FunctionDef, local: set[str], mod: str = mod,
                    into: set[str] = cdata_attrs) -> None:
            for node in ast.walk(fn):
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, ast.AnnAssign) else [])
                for t in targets:
                    name = _local_name(t)
                    value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
                    if name is not None and native(mod, value, local):
                        into.add(name)
        walk_functions(mod, tree, collect)

        def check(fn: ast.FunctionDef, local: set[str], mod: str = mod,
                  attrs: set[str] = cdata_attrs) -> None:
            if _is_any(fn.returns) and fn.name in methods:
                found.append(f"{mod}.{fn.name}: returns cdata typed Any")
            anys = {a.arg for a in fn.args.args if _is_any(a.annotation)}
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    real = aliases[mod].get(node.func.id)
                    if real in takes:
                        for i, arg in enumerate(node.args):
                            if (isinstance(arg, ast.Name) and arg.id in anys
                                    and i < len(takes[real]) and takes[real][i]):
                                found.append(f"{mod}.{fn.name}: parameter {arg.id} (Any) "
                                             f"passed to {real}")
                    if node.func.id == "cast" and node.args and _is_any(node.args[0]):
                        found.append(f"{mod}.{fn.name}: cast(Any, ...)")
                if isinstance(node, ast.Assign):  # fields set on an Any parameter
                    for t in node.targets:
                        if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                and t.value.id in anys and native(mod, node.value, local)):
                            found.append(f"{mod}.{fn.name}: parameter {t.value.id} (Any) "
                                         "holds cdata fields")
        walk_functions(mod, tree, check)

        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign) and _is_any(node.annotation):
                name = _local_name(node.target)
                if name in cdata_attrs:
                    found.append(f"{mod}: {name} holds cdata typed Any (line {node.lineno})")
    return sorted(set(found))


def test_no_any_typed_cdata_outside_the_boundary_modules() -> None:
    """Outside ``_native``, ``_mapped``, ``_store`` and ``_tablestore``, native
    memory is held as the types ``_native`` defines (``Pointer``, ``Cell``,
    the structs), never as ``Any``."""
    assert _any_typed_cdata() == []
