"""The wheel: it builds, carries the native core, the JVM reader, py.typed and the entry
points, and the installed copy (not the source tree) imports and round-trips a queue from an
empty directory; the sdist carries what a wheel built from it needs.

``scripts/test.sh`` goes further with the real artifacts: ``python -m build`` (isolated),
``auditwheel repair``, and the whole suite against the repaired wheel installed in a fresh
venv with no C compiler (``scripts/test_installed.py``)."""

from __future__ import annotations

import fcntl
import io
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

import aiochronicle

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.checkout]

CHECK = textwrap.dedent("""
    import os, sys, tempfile
    import aiochronicle
    from aiochronicle._core import _native
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
    """The checkout's wheel, built once per run: ``pip wheel`` builds in the
    checkout's ``build/``, so pytest-xdist workers building at the same time
    would link each other's half-written objects (a core without its cffi
    module).  The first worker builds under a lock in the directory all the
    workers' temporary directories share; the others take its wheel."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # popen-gwN's parent: one per run
    out = shared / "checkout-wheel"
    out.mkdir(exist_ok=True)
    with open(shared / "checkout-wheel.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not list(out.glob("aiochronicle-*.whl")):
                subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "-w",
                                str(out / "tmp"), "--no-build-isolation", "--no-deps", "-q"],
                               check=True, cwd=out, capture_output=True, timeout=600)
                (built,) = (out / "tmp").glob("aiochronicle-*.whl")
                built.rename(out / built.name)  # whole, or not there at all
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    (whl,) = out.glob("aiochronicle-*.whl")
    return whl


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        assert "aiochronicle/py.typed" in names
        assert "aiochronicle/testing.py" in names
        # one extension file: the cffi core with the C API module _hot in it
        assert [n for n in names if n.endswith(".so")] == [
            "aiochronicle/_core/_cq" + sysconfig.get_config_var("EXT_SUFFIX")]
        assert "aiochronicle/_core/_hot.pyi" in names
        assert "aiochronicle/spark/__init__.py" in names
        assert "pyspark_aiochronicle.py" in names
        # the JVM reader, built by jvm/build.py with Maven
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
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zf.read(meta).decode()
    assert "aiochronicle = aiochronicle.__main__:main" in entry_points
    # the pytest plugin is opt-in (-p aiochronicle.testing): no pytest11 entry point that
    # would load the package into every pytest session of the environment
    assert "pytest11" not in entry_points and "aiochronicle.testing" not in entry_points
    requires = {line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")}
    by_name = {r.split(";")[0].split(">")[0].split("=")[0].split("[")[0].strip().lower(): r
               for r in requires if "extra ==" not in r}
    # `pip install aiochronicle` pulls no PyYAML: only extras have it (yaml, dev, and
    # metrics and monitor for --web-config)
    assert "pyyaml" not in by_name, sorted(requires)
    assert any(r.lower().startswith("pyyaml") and 'extra == "yaml"' in r for r in requires)
    # uvloop only where it ships wheels: CPython on Linux and macOS
    uvloop = by_name["uvloop"]
    for marker in ('sys_platform == "linux"', 'sys_platform == "darwin"',
                   'platform_python_implementation == "CPython"'):
        assert marker in uvloop, uvloop


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
    # the package loads its native core with its first public name (the
    # package import alone loads nothing native)
    result = subprocess.run([sys.executable, "-c", "import aiochronicle; aiochronicle.Queue"],
                            cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    # NativeBuildError (an ImportError), printed with its module's name
    assert "NativeBuildError: aiochronicle native module _cq is version " in last, last
    assert aiochronicle.__version__ in last and "0.0.0.stale" in last and "rebuild" in last


def test_sdist_builds_the_native_core(tmp_path: Path) -> None:
    """``pip install .`` from the sdist compiles the cffi core: its sources are all there,
    and the JVM reader's jar too, so no Maven (or Java) is needed."""
    sdist_dir = tmp_path / "sdist"
    code = ("import sys; from setuptools import build_meta; "
            "print(build_meta.build_sdist(sys.argv[1]))")
    subprocess.run([sys.executable, "-c", code, str(sdist_dir)], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    (sdist,) = sdist_dir.glob("aiochronicle-*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("setup.py", "pyproject.toml", "LICENSE", "CHANGELOG.md", "README.md",
                   "aiochronicle/spark/aiochronicle-spark.jar", "jvm/pom.xml", "jvm/build.py",
                   "native/build_ffi.py", "native/cq.c",
                   "native/cq.h", "native/pause.c", "native/pause.h", "native/codes.h",
                   "native/atomic.h", "native/notify.c", "native/notify.h", "native/hot.c",
                   "native/wirecall.c", "native/wire.c", "native/wire.h"):
        assert needed in names, needed
    out = tmp_path / "wheel"
    # a PATH with no Maven and no Java: the wheel is built from what the sdist carries
    no_jvm = tmp_path / "bin"
    no_jvm.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = no_jvm / entry.name
            if entry.name in {"mvn", "mvnw", "java", "javac", "jar"} or link.exists():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    env = {k: v for k, v in os.environ.items()
           if k not in {"JAVA_HOME", "M2_HOME", "MAVEN_HOME"}}
    env["PATH"] = str(no_jvm)
    assert shutil.which("mvn", path=env["PATH"]) is None
    assert shutil.which("java", path=env["PATH"]) is None
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(sdist), "-w", str(out),
                    "--no-build-isolation", "--no-deps", "-q"],
                   check=True, cwd=tmp_path, capture_output=True, timeout=600, env=env)
    (whl,) = out.glob("aiochronicle-*.whl")
    with zipfile.ZipFile(whl) as zf:
        assert any(n.startswith("aiochronicle/_core/_cq") and n.endswith(".so")
                   for n in zf.namelist())
        # the jar the sdist carries (no Maven or PySpark needed to build the wheel)
        assert "aiochronicle/spark/aiochronicle-spark.jar" in zf.namelist()


def test_cibuildwheel_configuration(wheel: Path, tmp_path: Path) -> None:
    """Release wheels for manylinux x86-64 and aarch64 and macOS, built from the sdist,
    each checked by a test command that fails on a wheel without the jar."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    assert tool["linux"]["archs"] == ["x86_64", "aarch64"]
    assert set(tool["macos"]["archs"]) == {"x86_64", "arm64"}
    assert "musllinux" in tool["skip"] and "cp311-*" in tool["build"]
    command = shlex.split(tool["test-command"])
    assert command[0] == "python"
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = str(target)
    ok = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    (target / "aiochronicle" / "spark" / "aiochronicle-spark.jar").unlink()
    without = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert without.returncode == 1, without.stderr


def spark_install_commands() -> list[tuple[str, str]]:
    """The ``pip install`` lines of the README's and docs/spark.md's shell blocks that
    install a wheel (with its comment cut off), with the file they come from."""
    found = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "spark.md"):
        text = doc.read_text()
        for block in text.split("```bash\n")[1:]:
            for line in block.split("```")[0].splitlines():
                command = line.split("  #")[0].strip()
                if command.startswith("pip install") and ".whl" in command:
                    found.append((doc.name, command))
    return found


def test_the_docs_wheel_install_commands_run_as_printed(wheel: Path, tmp_path: Path) -> None:
    """Each printed ``pip install`` of a wheel runs in a directory holding the wheel, as
    printed, in bash (with ``--dry-run --no-index`` added: this venv already has every
    dependency, so pip resolves the extras without installing or downloading anything)."""
    commands = spark_install_commands()
    assert ("spark.md", 'pip install "$(ls aiochronicle-*.whl)[spark]"') in commands, commands
    assert any("[spark]" in c for doc, c in commands if doc == "README.md"), commands
    (tmp_path / wheel.name).write_bytes(wheel.read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    for doc, command in commands:
        r = subprocess.run(["bash", "-c", f"{command} --dry-run --no-index"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (doc, command, r.stdout + r.stderr)
        # pip took the wheel the command names: it would install it, or (where the
        # venv has this version already, as a checkout's editable install) says so
        assert ("Would install aiochronicle" in r.stdout
                or "installed with the same version as the provided wheel" in r.stdout), (
            doc, command, r.stdout)
