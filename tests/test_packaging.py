"""The wheel: it builds, carries the native core, py.typed and the entry points, and the
installed copy (not the source tree) imports and round-trips a queue from an empty directory."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import aiochronicle

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

CHECK = textwrap.dedent("""
    import os, sys, tempfile
    import aiochronicle
    from aiochronicle import _native
    target = sys.argv[1]
    assert aiochronicle.__file__.startswith(target), aiochronicle.__file__
    assert _native._native_version == aiochronicle.__version__ == sys.argv[2], (
        _native._native_version, aiochronicle.__version__)
    assert os.path.exists(os.path.join(os.path.dirname(aiochronicle.__file__), "py.typed"))
    with tempfile.TemporaryDirectory() as d:
        clock = aiochronicle.SetTimeProvider(1_704_067_200_000)
        with aiochronicle.open_queue(os.path.join(d, "q"), time_provider=clock) as q:
            index = q.appender().append(b"from the wheel")
            excerpt = q.tailer().read_nowait()
            assert excerpt is not None and excerpt.payload == b"from the wheel", excerpt
            assert excerpt.index == index
    print("OK", aiochronicle.__version__)
""")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(out),
                    "--no-build-isolation", "--no-deps", "-q"],
                   check=True, cwd=out, capture_output=True, timeout=600)
    (whl,) = out.glob("aiochronicle-*.whl")
    return whl


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "aiochronicle/py.typed" in names
        assert "aiochronicle/testing.py" in names
        assert any(n.startswith("aiochronicle/_cq") and n.endswith(".so") for n in names)
        assert "aiochronicle/spark/__init__.py" in names
        assert "pyspark_aiochronicle.py" in names
        assert not any(n.startswith("tests/") for n in names)
        (ep,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = zf.read(ep).decode()
    assert "aiochronicle = aiochronicle.__main__:main" in entry_points
    assert "[pytest11]" in entry_points
    assert "aiochronicle = aiochronicle.testing" in entry_points


def test_installed_wheel_works_from_an_empty_directory(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(target)
    # the dependencies (cffi, msgspec, ...) come from this interpreter's site-packages;
    # aiochronicle itself from the wheel, which PYTHONPATH puts first
    result = subprocess.run([sys.executable, "-c", CHECK, str(target), aiochronicle.__version__],
                            cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"OK {aiochronicle.__version__}"


def test_wheel_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    """A venv without this interpreter's packages: pip resolves the dependencies itself."""
    try:
        import ensurepip  # noqa: F401
    except ImportError:  # pragma: no cover - a Python built without ensurepip
        pytest.skip("this Python has no ensurepip, so python -m venv cannot install pip")
    # no PYTHONPATH &c. from this process (the Spark tests set one): pip would
    # otherwise find the source tree's package and install nothing
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True,
                   timeout=120, env=env)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)],
                             capture_output=True, text=True, timeout=300, env=env)
    assert install.returncode == 0, install.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    where = "import sysconfig; print(sysconfig.get_path('platlib'))"
    site = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                          check=True, env=env).stdout.strip()
    result = subprocess.run([str(python), "-c", CHECK, site, aiochronicle.__version__],
                            cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"OK {aiochronicle.__version__}"
    cli = subprocess.run([str(venv / "bin" / "aiochronicle"), "--help"], cwd=empty, env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr


def test_sdist_builds_the_native_core(tmp_path: Path) -> None:
    """``pip install .`` from the sdist compiles the cffi core: its sources are all there."""
    sdist_dir = tmp_path / "sdist"
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.build_sdist(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(sdist_dir)], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    (sdist,) = sdist_dir.glob("aiochronicle-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("setup.py", "pyproject.toml", "native/build_ffi.py", "native/cq.c",
                   "native/cq.h", "native/pause.c", "native/pause.h"):
        assert needed in names, needed
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(sdist), "-w", str(out),
                    "--no-build-isolation", "--no-deps", "-q"],
                   check=True, cwd=tmp_path, capture_output=True, timeout=600)
    (whl,) = out.glob("aiochronicle-*.whl")
    with zipfile.ZipFile(whl) as zf:
        assert any(n.startswith("aiochronicle/_cq") and n.endswith(".so") for n in zf.namelist())
