"""Build ``aiochronicle-spark.jar``, the JVM reader behind ``format("chronicle")``.

Maven compiles ``jvm/src/main`` (``jvm/pom.xml``: ``javac --release 17`` against
Spark's published artifacts from Maven Central in ``provided`` scope, so no PySpark
is needed where the package is built) and the jar is written into
``aiochronicle/spark/``, where the sdist and the wheel pick it up as package data.
``setup.py`` runs it on every build (the sdist too: a wheel built from the sdist
then carries the jar without Maven), ``scripts/setup.sh`` after installing; run it
by hand with ``python jvm/build.py``.

Without Maven (or when Maven fails) it falls back to ``javac`` against the jars of
a PySpark installed beside it; with neither nothing is built, ``build()`` returns
None and says why, and ``setup.py`` fails the package build unless
``AIOCHRONICLE_NO_JAR=1`` asks for a package without the jar (whose
``aiochronicle.spark.register`` then warns that Spark reads use the Python data source).
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
POM = HERE / "pom.xml"
JAR = ROOT / "aiochronicle" / "spark" / "aiochronicle-spark.jar"


def pyspark_jars() -> Path | None:
    """The ``jars`` directory of the importable PySpark, or None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    return jars if jars.is_dir() else None


def _tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME") if name == "javac" else None
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def _newest_source() -> float:
    inputs = [POM, *(p for p in SOURCES.rglob("*") if p.is_file())]
    return max(p.stat().st_mtime for p in inputs)


def _maven(mvn: str, out: Path) -> str | None:
    """Package the jar with Maven into ``out``; None, or why it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([mvn, "-q", "-B", "-f", str(POM), f"-Dbuild.dir={tmp}", "package"],
                           capture_output=True, text=True)
        built = Path(tmp) / "aiochronicle-spark.jar"
        if r.returncode != 0 or not built.is_file():
            return f"Maven failed: {(r.stdout + r.stderr).strip()[-2000:]}"
        partial = out.with_suffix(".tmp")
        shutil.copyfile(built, partial)
        partial.replace(out)
    return None


def _javac(javac: str, jars: Path, out: Path) -> None:
    """Compile against the installed PySpark's jars (when there is no Maven)."""
    sources = sorted(str(p) for p in (SOURCES / "java").rglob("*.java"))
    with tempfile.TemporaryDirectory() as tmp:
        classes = Path(tmp)
        subprocess.run([javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
                        "-cp", str(jars / "*"), "-d", str(classes), *sources], check=True)
        partial = out.with_suffix(".tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n"
                        "Created-By: aiochronicle jvm/build.py\r\n\r\n")
            for base in (classes, SOURCES / "resources"):
                for p in sorted(base.rglob("*")):
                    if p.is_file():
                        zf.write(p, p.relative_to(base).as_posix())
        partial.replace(out)


def build(out: Path = JAR, *, quiet: bool = False) -> Path | None:
    """Build the reader into ``out`` (skipped when it is newer than every source and
    the pom); returns the jar, or None when neither Maven nor ``javac`` with an
    installed PySpark could build it."""
    def say(msg: str) -> None:
        if not quiet:
            print(f"jvm/build.py: {msg}", file=sys.stderr)

    if out.is_file() and out.stat().st_mtime >= _newest_source():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    mvn = _tool("mvn")
    failed = "mvn not found" if mvn is None else _maven(mvn, out)
    if failed is None:
        say(f"built {out} with Maven")
        return out
    javac, jars = _tool("javac"), pyspark_jars()
    if javac is None or jars is None:
        say(f"not building {out.name}: {failed}; and no {'javac' if javac is None else 'pyspark'}"
            " to compile against instead (format('chronicle') uses the Python data source)")
        return None
    say(f"{failed}; compiling against the installed PySpark's jars instead")
    _javac(javac, jars, out)
    say(f"built {out} with javac")
    return out


if __name__ == "__main__":
    sys.exit(0 if build() is not None else 1)
