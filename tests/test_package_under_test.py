"""The suite tests the package it means to: the checkout's own (an editable install,
``scripts/setup.sh``), or, in ``scripts/test.sh``'s second pass, the repaired wheel
installed in a fresh venv (``AIOCHRONICLE_INSTALLED`` names its site-packages), where
no C compiler can be found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiochronicle
from aiochronicle._core import _native
from aiochronicle.spark import jar_path

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_under_test_is_the_one_meant() -> None:
    where = Path(aiochronicle.__file__).resolve()
    site = os.environ.get("AIOCHRONICLE_INSTALLED")
    if site is None:
        assert where.is_relative_to(ROOT / "aiochronicle"), where
        return
    assert where.is_relative_to(Path(site).resolve()), where
    assert not (ROOT / "aiochronicle").exists()  # the tests were copied without the package
    for cc in ("cc", "gcc", "clang", os.environ.get("CC", "cc")):
        assert shutil.which(cc) is None, f"{cc} is on PATH: the wheel must need no compiler"
    # the native core and the JVM reader came with the wheel
    assert Path(_native.__file__).resolve().is_relative_to(Path(site).resolve())
    jar = jar_path()
    assert jar is not None and jar.is_relative_to(Path(site).resolve()), jar


def test_the_console_script_runs_the_package_under_test(tmp_path: Path) -> None:
    """The ``aiochronicle`` command the install put beside the interpreter (the
    ``[project.scripts]`` entry point): its help names every command, and a queue it
    writes is the one the package under test reads."""
    script = Path(sys.executable).parent / "aiochronicle"
    assert script.is_file(), f"no console script beside {sys.executable}"
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for command in ("dump", "tail", "write", "stats", "check", "repair"):
        assert command in r.stdout, r.stdout
    r = subprocess.run([str(script), "write", str(tmp_path / "q"), "--format", "hex"],
                       input="6f6e65\n74776f\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with aiochronicle.open_queue(tmp_path / "q", read_only=True) as q:
        assert [e.payload for e in q.tailer()] == [b"one", b"two"]
