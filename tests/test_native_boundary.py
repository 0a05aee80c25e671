"""The typed boundary to the native core (docs/native.md).

Only four modules hold the cffi objects; the two compiled modules (the cffi
core ``_cq`` and the C API module ``_hot``) agree on the structs they share by
address, and ``aiochronicle`` refuses to load when they do not; a failed
system call's errno is saved by the C side where it failed, so the error names
that call's errno whatever cffi's own errno says by then.
"""

from __future__ import annotations

import ast
import errno
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import threading
from pathlib import Path

import pytest
from test_hot_path import ROOT, hot_sources
from test_layers import MODULES

import aiochronicle as ac
from aiochronicle import _native
from aiochronicle._native import ERRNO, check, ffi, lib

#: the owners of mapped memory, of a cycle file and of metadata.cq4t, and the boundary
OWNERS = {"_native", "_mapped", "_store", "_tablestore"}
#: the structs both compiled modules reach by raw address
SHARED = ("cq_store", "cq_appender", "cq_tailer", "cq_notify_watch")


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


# -- the shared structs' layout -------------------------------------------------

def test_both_modules_report_the_same_layout_of_every_field() -> None:
    core, hot = _native.core_layout(), _native.hot_layout()
    assert core == hot
    # every field of every shared struct is in the table, as cffi sees the struct
    want = {}
    for struct in SHARED:
        want[struct] = ffi.sizeof(struct)
        for field, _ in ffi.typeof(struct).fields:
            want[f"{struct}.{field}"] = ffi.offsetof(struct, field)
    assert core == want


def test_a_table_with_one_offset_changed_is_refused() -> None:
    core = _native.core_layout()
    _native.check_layouts(core, dict(core))
    moved = dict(core, **{"cq_tailer.index": core["cq_tailer.index"] + 8})
    with pytest.raises(ac.NativeBuildError, match=r"cq_tailer\.index: \d+ in _cq, \d+ in _hot"):
        _native.check_layouts(core, moved)
    missing = {k: v for k, v in core.items() if k != "cq_store.chunk"}
    with pytest.raises(ac.NativeBuildError, match=r"cq_store\.chunk: \d+ in _cq, None in _hot"):
        _native.check_layouts(core, missing)


MISMATCHED_IMPORT = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("aiochronicle._hot", sys.argv[1])
    hot = importlib.util.module_from_spec(spec)
    sys.modules["aiochronicle._hot"] = hot
    spec.loader.exec_module(hot)
    try:
        import aiochronicle
    except ImportError as exc:
        print(type(exc).__name__, exc)
        raise SystemExit(3)
    print("loaded")
    """
)


@pytest.mark.checkout
def test_a_hot_module_built_with_another_layout_is_refused_at_import(tmp_path: Path) -> None:
    """A real ``_hot`` compiled from a cq.h with one more field in cq_tailer
    (a stale build): importing aiochronicle with it fails, naming the field."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    assert cc is not None, "a C compiler is needed"
    native = tmp_path / "native"
    shutil.copytree(ROOT / "native", native, ignore=shutil.ignore_patterns("build", "tests"))
    header = native / "cq.h"
    text = header.read_text()
    anchor = "    uint64_t pos;             /* next header to read */"
    assert text.count(anchor) == 1
    header.write_text(text.replace(anchor, "    uint64_t stale;\n" + anchor))
    from aiochronicle._version import __version__

    so = tmp_path / ("_hot" + sysconfig.get_config_var("EXT_SUFFIX"))
    r = subprocess.run(
        [cc, "-shared", "-fPIC", "-O0", "-std=c11", f"-I{sysconfig.get_paths()['include']}",
         f"-I{native}", f'-DAIOCHRONICLE_VERSION="{__version__}"',
         *(str(native / name) for name in hot_sources()), "-o", str(so)],
        capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([sys.executable, "-c", MISMATCHED_IMPORT, str(so)], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.startswith("NativeBuildError "), r.stdout
    size = re.search(r"cq_tailer: (\d+) in _cq, (\d+) in _hot", r.stdout)
    assert size is not None and int(size[2]) == int(size[1]) + 8, r.stdout
    assert "different builds" in r.stdout


# -- errno saved by the C side ----------------------------------------------------

def test_both_modules_save_errno_into_one_cell_per_thread() -> None:
    core, hot = _native.errno_cells()
    assert core == hot
    seen: list[tuple[int, int]] = []
    t = threading.Thread(target=lambda: seen.append(_native.errno_cells()))
    t.start()
    t.join()
    assert seen[0][0] == seen[0][1]
    assert seen[0][0] != core  # a cell of that thread's own


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
