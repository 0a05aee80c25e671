"""Working from a checkout with the package installed elsewhere: the examples and
benchmarks use the installed package, and when a source tree without a built core
shadows it, the import error says so and how to run instead."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted([*(ROOT / "examples").rglob("*.py"), *(ROOT / "bench").glob("*.py")])


def test_programs_do_not_put_the_source_tree_on_sys_path() -> None:
    """No example or benchmark inserts the checkout (a path with "..") into
    sys.path or into its children's PYTHONPATH."""
    assert len(PROGRAMS) >= 10
    offenders = []
    for program in PROGRAMS:
        for node in ast.walk(ast.parse(program.read_text(), str(program))):
            if not isinstance(node, ast.Call):
                continue
            call = ast.unparse(node)
            if call.startswith("sys.path.insert") and '".."' in call:
                offenders.append(f"{program.name}: {call}")
            if "PYTHONPATH" in call and '".."' in call:
                offenders.append(f"{program.name}: {call}")
    assert not offenders, offenders


@pytest.mark.checkout
def test_a_checkout_shadowing_the_installed_package_is_explained(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    pkg = checkout / "aiochronicle"
    pkg.mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'aiochronicle'\n")
    (pkg / "__init__.py").write_text("")
    source = ROOT / "aiochronicle"
    for name in ("_version.py", "_errors.py", "_native.py"):
        # wherever the module sits in the package (a layer's folder, with its __init__)
        (path,) = source.rglob(name)
        rel = path.relative_to(source)
        for folder in reversed(rel.parents[:-1]):
            (pkg / folder).mkdir(exist_ok=True)
            shutil.copy(source / folder / "__init__.py", pkg / folder / "__init__.py")
        shutil.copy(path, pkg / rel)
    installed = tmp_path / "site-packages" / "aiochronicle"
    # an installed package: the compiled core beside _native
    native = next(source.rglob("_native.py")).parent.relative_to(source)
    (installed / native).mkdir(parents=True)
    (installed / native / ("_cq" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"")
    # -S: no site (and no editable-install finder); the checkout is the current directory
    env = dict(os.environ, PYTHONPATH=str(installed.parent))
    r = subprocess.run([sys.executable, "-S", "-c", "import aiochronicle._core._native"],
                       cwd=checkout, env=env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 1
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: Python imported aiochronicle from the source tree "
                           f"{checkout}"), last
    assert f"it hides the installed package in {installed}" in last
    assert "Run from another directory" in last and "pip install -e ." in last


def test_license_is_an_spdx_expression() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert re.fullmatch(r"[A-Za-z0-9.+-]+", project["license"])
    assert "LICENSE" in project.get("license-files", ["LICENSE"])
