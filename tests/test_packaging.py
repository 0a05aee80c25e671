"""The wheel: it builds, carries the native core, py.typed and the entry points, and the
installed copy (not the source tree) imports and round-trips a queue from an empty directory."""

from __future__ import annotations

import importlib.metadata
import io
import os
import shutil
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
    built = (_native.ffi.string(_native.lib.cq_version()).decode(), _native._hot_version())
    assert built == (aiochronicle.__version__,) * 2 and aiochronicle.__version__ == sys.argv[2], (
        built, aiochronicle.__version__)
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
        assert any(n.startswith("aiochronicle/_hot") and n.endswith(".so") for n in names)
        assert "aiochronicle/_hot.pyi" in names
        assert "aiochronicle/spark/__init__.py" in names
        assert "pyspark_aiochronicle.py" in names
        # the JVM reader, compiled against the installed PySpark (javac is on every
        # machine that builds the project)
        jar_name = "aiochronicle/spark/aiochronicle-spark.jar"
        assert jar_name in names
        with zipfile.ZipFile(io.BytesIO(zf.read(jar_name))) as jar:
            inner = set(jar.namelist())
            service = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
            assert jar.read(service).decode().strip() == "io.aiochronicle.spark.ChronicleSource"
        assert "io/aiochronicle/spark/ChronicleSource.class" in inner
        assert not any(n.startswith("tests/") for n in names)
        assert any(n.endswith(".dist-info/LICENSE") or "/licenses/LICENSE" in n
                   for n in names), sorted(names)
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


def test_a_stale_native_core_is_refused(wheel: Path, tmp_path: Path) -> None:
    """The version stamped into the compiled core must match the Python package's:
    a core left over from another version is a clear ImportError, not odd crashes."""
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    (target / "aiochronicle" / "_version.py").write_text('__version__ = "0.0.0.stale"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(target)
    result = subprocess.run([sys.executable, "-c", "import aiochronicle"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: aiochronicle native module _cq is version "), last
    assert aiochronicle.__version__ in last and "0.0.0.stale" in last and "rebuild" in last


def _clean_env() -> dict[str, str]:
    # no PYTHONPATH &c. from this process (the Spark tests set one): pip would
    # otherwise find the source tree's package and install nothing
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A venv without this interpreter's packages, the wheel installed in it (pip
    resolves the dependencies itself), and the test runner: (python, site dir)."""
    try:
        import ensurepip  # noqa: F401
    except ImportError:  # pragma: no cover - a Python built without ensurepip
        pytest.fail("this Python has no ensurepip, so python -m venv cannot install pip")
    env = _clean_env()
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True,
                   timeout=120, env=env)
    python = venv / "bin" / "python"
    # the same test-runner versions as this environment
    runner = [f"{name}=={importlib.metadata.version(name)}"
              for name in ("pytest", "pytest-asyncio", "hypothesis")]
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel), *runner],
                             capture_output=True, text=True, timeout=600, env=env)
    assert install.returncode == 0, install.stderr
    where = "import sysconfig; print(sysconfig.get_path('platlib'))"
    site = subprocess.run([str(python), "-c", where], capture_output=True, text=True,
                          check=True, env=env).stdout.strip()
    return python, site


def test_wheel_in_a_fresh_venv(fresh_venv: tuple[Path, str], tmp_path: Path) -> None:
    python, site = fresh_venv
    env = _clean_env()
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run([str(python), "-c", CHECK, site, aiochronicle.__version__],
                            cwd=empty, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"OK {aiochronicle.__version__}"
    cli = subprocess.run([str(python.parent / "aiochronicle"), "--help"], cwd=empty, env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr


# the part of the suite run again against the installed wheel: every module that
# needs neither the source tree (native sources, docs, examples, bench) nor the
# Spark extra, nor minutes of stress (crash, many writers, memory, tmpfs)
INSTALLED_SUITE = ("test_queue_api.py", "test_java_fixtures.py", "test_async.py",
                   "test_rolling.py", "test_rollcycles.py", "test_codecs.py", "test_wire.py",
                   "test_history.py", "test_cli.py", "test_ops.py", "test_recovery.py",
                   "test_write_at.py", "test_close_race.py", "test_fork.py",
                   "test_libchronicle_queues.py", "test_lock_safety.py")
SUITE_HELPERS = ("conftest.py", "rawfile.py", "workers.py", "libchronicle_format.py")

INSTALLED_CHECK = textwrap.dedent("""
    import os, sys
    import aiochronicle

    def test_this_run_uses_the_installed_wheel():
        site = os.environ["AIOCHRONICLE_SITE"]
        assert aiochronicle.__file__.startswith(site), aiochronicle.__file__
""")


def test_suite_passes_against_the_installed_wheel(fresh_venv: tuple[Path, str],
                                                  tmp_path: Path) -> None:
    """Tests copied to a directory with no source tree near it, run by the venv's
    own pytest: they exercise the installed package, native core included."""
    python, site = fresh_venv
    run = tmp_path / "run"
    (run / "tests").mkdir(parents=True)
    for name in (*INSTALLED_SUITE, *SUITE_HELPERS):
        shutil.copy(ROOT / "tests" / name, run / "tests" / name)
    (run / "tests" / "test_installed.py").write_text(INSTALLED_CHECK)
    shutil.copytree(ROOT / "tests" / "fixtures", run / "tests" / "fixtures")
    (run / "pytest.ini").write_text(
        "[pytest]\naddopts = -ra --strict-markers -p no:cacheprovider\n"
        "asyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "markers =\n    slow: long-running tests\n")
    env = dict(_clean_env(), AIOCHRONICLE_SITE=site)
    result = subprocess.run([str(python), "-m", "pytest", "-q", "tests"], cwd=run, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert "skipped" not in summary and "failed" not in summary, summary
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed > 300, summary  # those modules, not an empty collection


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
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "CHANGELOG.md", "README.md",
                   "native/build_ffi.py", "native/cq.c",
                   "native/cq.h", "native/pause.c", "native/pause.h", "native/codes.h",
                   "native/atomic.h", "native/notify.c", "native/notify.h", "native/hot.c",
                   "native/wirecall.c", "native/wire.c", "native/wire.h"):
        assert needed in names, needed
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(sdist), "-w", str(out),
                    "--no-build-isolation", "--no-deps", "-q"],
                   check=True, cwd=tmp_path, capture_output=True, timeout=600)
    (whl,) = out.glob("aiochronicle-*.whl")
    with zipfile.ZipFile(whl) as zf:
        assert any(n.startswith("aiochronicle/_cq") and n.endswith(".so") for n in zf.namelist())
