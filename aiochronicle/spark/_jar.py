"""The JVM reader's jar (``aiochronicle-spark.jar``): where this install keeps it, and
why a read cannot use it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["JVM_SOURCE", "NO_JAR", "jar_path", "not_serving"]

JVM_SOURCE = "io.aiochronicle.spark.ChronicleSource"
"""The JVM data source's class (``format("chronicle")`` when its jar is loaded)."""

NO_JAR = ("this aiochronicle install carries no aiochronicle-spark.jar (it was built with "
          "AIOCHRONICLE_NO_JAR=1, which a build without Maven or javac needs: jvm/build.py)")


def jar_path() -> Path | None:
    """The JVM reader's jar shipped in this package, or None if it was not built
    (see ``jvm/build.py``).  :func:`register` adds it to a session (``ADD JAR``);
    ``spark-submit --jars`` gives it to a job from the start.  (A ``spark.jars``
    set on PySpark's builder replaces the jars ``spark.jars.packages`` resolved.)"""
    jar = Path(__file__).resolve().parent / "aiochronicle-spark.jar"
    return jar if jar.is_file() else None


def not_serving() -> str:
    """Why the Python data source, not the JVM reader, is serving a read that asked
    for ``option("engine", "jvm")``."""
    if jar_path() is None:
        return NO_JAR
    return ("the session's JVM has not loaded aiochronicle-spark.jar: call "
            "aiochronicle.spark.register(spark), which adds it and warns if it cannot, or "
            "give it to spark-submit --jars (aiochronicle.spark.jar_path())")
