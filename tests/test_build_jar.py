"""A package build that cannot make the JVM reader's jar fails, unless
``AIOCHRONICLE_NO_JAR=1`` asks for a package without it; and a build that packs the jar
logs no "no files found matching" warning about it.

Each case builds the sdist (``python -m build --sdist``, as users do; no isolation, so no
network) from a copy of the checkout with no jar in it, so ``jvm/build.py`` has to act."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JAR = "aiochronicle/spark/aiochronicle-spark.jar"

pytestmark = [pytest.mark.checkout]


def checkout(tmp_path: Path) -> Path:
    """The tracked files of this checkout (what a fresh clone holds: no jar)."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    copy = tmp_path / "src"
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, copy / name)
    assert not (copy / JAR).exists()
    return copy


def build_sdist(src: Path, out: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("JAVA_HOME", "AIOCHRONICLE_NO_JAR") and not k.startswith("PYTHON")}
    full.update(env, PATH=path)
    return subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation",
                           "--outdir", str(out), str(src)],
                          cwd=src, env=full, capture_output=True, text=True, timeout=600)


def sdist_names(out: Path) -> set[str]:
    (sdist,) = out.glob("aiochronicle-*.tar.gz")
    with tarfile.open(sdist) as tf:
        return {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}


@pytest.fixture
def no_java(tmp_path: Path) -> str:
    """A PATH with no mvn, javac or java on it (an empty directory)."""
    empty = tmp_path / "bin"
    empty.mkdir()
    for tool in ("mvn", "javac"):
        assert shutil.which(tool, path=str(empty)) is None
    return str(empty)


def test_a_build_without_maven_or_javac_fails(tmp_path: Path, no_java: str) -> None:
    r = build_sdist(checkout(tmp_path), tmp_path / "dist", no_java)
    log = r.stdout + r.stderr
    assert r.returncode != 0, log
    assert "cannot build aiochronicle-spark.jar" in log and "AIOCHRONICLE_NO_JAR=1" in log, log
    assert not list((tmp_path / "dist").glob("*.tar.gz"))


def test_aiochronicle_no_jar_builds_without_it(tmp_path: Path, no_java: str) -> None:
    r = build_sdist(checkout(tmp_path), tmp_path / "dist", no_java, AIOCHRONICLE_NO_JAR="1")
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    names = sdist_names(tmp_path / "dist")
    assert "setup.py" in names and JAR not in names
    assert "no files found matching" not in log, log


@pytest.mark.slow
def test_a_build_that_packs_the_jar_logs_no_warning_about_it(tmp_path: Path) -> None:
    """The normal build from a fresh clone: Maven makes the jar (after the build's first
    egg_info run, which lists files before the jar exists) and the sdist packs it."""
    assert shutil.which("mvn"), "Maven is needed to build the JVM reader (jvm/pom.xml)"
    r = build_sdist(checkout(tmp_path), tmp_path / "dist", os.environ["PATH"])
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    assert "built" in log and "with Maven" in log, log
    assert JAR in sdist_names(tmp_path / "dist")
    assert "no files found matching" not in log, log
