"""Build ``aiochronicle-spark.jar``, the JVM reader behind ``format("chronicle")``.

Compiles ``jvm/src/main/java`` with ``javac --release 17`` against the jars of the
PySpark installed beside it (so it matches the pinned Spark exactly; no Scala or Maven
needed) and writes the jar into ``aiochronicle/spark/``, where the wheel picks it
up as package data.  ``setup.py`` runs it on every build and ``scripts/setup.sh`` after
installing PySpark; run it by hand with ``python jvm/build.py``.

Without ``javac`` or PySpark nothing is built and the Python data source serves every
read (``build()`` returns None and says why).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SOURCES = HERE / "src" / "main"
JAR = ROOT / "aiochronicle" / "spark" / "aiochronicle-spark.jar"


def pyspark_jars() -> Path | None:
    """The ``jars`` directory of the importable PySpark, or None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _newest_source() -> float:
    return max(p.stat().st_mtime for p in SOURCES.rglob("*") if p.is_file())


def build(out: Path = JAR, *, quiet: bool = False) -> Path | None:
    """Compile the reader into ``out`` (skipped when it is newer than every source);
    returns the jar, or None when ``javac`` or PySpark is missing."""
    def say(msg: str) -> None:
        if not quiet:
            print(f"jvm/build.py: {msg}", file=sys.stderr)

    javac = _javac()
    jars = pyspark_jars()
    if javac is None or jars is None:
        say(f"not building {out.name}: {'javac' if javac is None else 'pyspark'} not found "
            "(format('chronicle') uses the Python data source)")
        return None
    if out.is_file() and out.stat().st_mtime >= _newest_source():
        return out
    sources = sorted(str(p) for p in (SOURCES / "java").rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp)
        subprocess.run([javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
                        "-cp", str(jars / "*"), "-d", str(classes), *sources], check=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_suffix(".tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n"
                        "Created-By: aiochronicle jvm/build.py\r\n\r\n")
            for base in (classes, SOURCES / "resources"):
                for p in sorted(base.rglob("*")):
                    if p.is_file():
                        zf.write(p, p.relative_to(base).as_posix())
        partial.replace(out)
    say(f"built {out}")
    return out


if __name__ == "__main__":
    sys.exit(0 if build() is not None else 1)
