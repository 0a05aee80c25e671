"""Build and run the Java interop programs (``interop/java``) against pinned Chronicle
Queue versions: used by ``tests/test_java_live.py`` and ``bench/java.py``.

``build(version)`` runs Maven once per version (quiet, batch mode; downloads are cached
in ``~/.m2``) and ``command(version, *args)`` is the ``java`` command line that runs
``aiochronicle.interop.Interop`` with the module flags Chronicle needs on Java 17.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PROJECT = Path(__file__).resolve().parent / "java"

#: (Chronicle Queue version, the slf4j-api version it depends on): the newest
#: open-source release, and a 5.2x one near the 5.20 that wrote the fixtures
VERSIONS: dict[str, str] = {"2026.4": "2.0.17", "5.21.99": "1.7.30"}
NEWEST = "2026.4"
OLDER = "5.21.99"

#: what Chronicle needs opened on Java 17 (without them it fails to map files or to
#: compile its generated method readers and writers)
JAVA17_FLAGS = (
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports=jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-opens=jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)

#: quiet, small JVMs: the CI machine has 2 cores
JVM_OPTIONS = (
    "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-Dchronicle.analytics.disable=true", "-Dchronicle.announcer.disable=true",
    # no disk-space checker thread: at JVM exit it can race the shutdown (loading JNA
    # for thread affinity) and log an ExceptionInInitializerError that is not ours
    "-Dchronicle.disk.monitor.disable=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)

#: the same for a benchmark JVM, with the full JIT
BENCH_JVM_OPTIONS = (
    "-Xms256m", "-Xmx512m",
    "-Dchronicle.analytics.disable=true", "-Dchronicle.announcer.disable=true",
    # no disk-space checker thread: at JVM exit it can race the shutdown (loading JNA
    # for thread affinity) and log an ExceptionInInitializerError that is not ours
    "-Dchronicle.disk.monitor.disable=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)


class JavaBuildError(RuntimeError):
    """Maven could not build the interop programs (its output is in the message)."""


def target(version: str) -> Path:
    return PROJECT / "target" / version


def _up_to_date(version: str) -> bool:
    """The build of ``version`` is newer than the pom and every source, and the jars
    it was built with are still there."""
    stamp, cp = target(version) / "built", target(version) / "classpath.txt"
    if not stamp.is_file() or not cp.is_file():
        return False
    jars = cp.read_text().strip().split(os.pathsep)   # still in ~/.m2
    sources = [PROJECT / "pom.xml", *(PROJECT / "src").rglob("*.java")]
    return (all(os.path.isfile(j) for j in jars)
            and all(s.stat().st_mtime <= stamp.stat().st_mtime for s in sources))


def build(version: str) -> Path:
    """Compile the programs against ``version`` unless that build is newer than every
    source; returns the target directory. A failed build raises ``JavaBuildError``
    with Maven's output.
    """
    if _up_to_date(version):
        return target(version)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaBuildError("mvn not found on PATH: the Java interop tests need Maven")
    cmd = [mvn, "-q", "-B", "-Dstyle.color=never", "-Dmaven.wagon.http.retryHandler.count=3",
           f"-Dchronicle.version={version}", f"-Dslf4j.version={VERSIONS[version]}",
           "-f", str(PROJECT / "pom.xml"), "compile"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise JavaBuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    (target(version) / "built").write_text(f"Chronicle Queue {version}\n")
    return target(version)


def classpath(version: str) -> str:
    t = target(version)
    return f"{t / 'classes'}{os.pathsep}{(t / 'classpath.txt').read_text().strip()}"


def command(version: str, *args: str, bench: bool = False,
            main: str = "aiochronicle.interop.Interop") -> list[str]:
    """The ``java`` command line running ``main`` with ``args`` against ``version``."""
    java = shutil.which("java") or "java"
    opts = BENCH_JVM_OPTIONS if bench else JVM_OPTIONS
    return [java, *JAVA17_FLAGS, *opts, "-cp", classpath(version), main, *args]


if __name__ == "__main__":
    # scripts/test.sh: build every pinned version before the tests, failing loudly
    for v in VERSIONS:
        build(v)
        print(f"interop/java built against Chronicle Queue {v}")
