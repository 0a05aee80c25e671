import importlib.util
import os
import pathlib
import sys
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = pathlib.Path(__file__).resolve().parent


def _load(name: str, path: pathlib.Path) -> ModuleType | None:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


NO_JAR_ENV = "AIOCHRONICLE_NO_JAR"


def _build_jvm_reader() -> None:
    # the JVM reader (jvm/): Maven against Spark's published artifacts (jvm/pom.xml);
    # a no-op when the jar is newer than its sources, as in an unpacked sdist.  A build
    # that cannot make it fails, unless AIOCHRONICLE_NO_JAR=1 asks for a package without
    # it (Spark reads then use the Python data source).
    if os.environ.get(NO_JAR_ENV, "") not in ("", "0"):
        print(f"setup.py: {NO_JAR_ENV} is set: building without aiochronicle-spark.jar",
              file=sys.stderr)
        return
    jvm = _load("_aiochronicle_jvm_build", ROOT / "jvm" / "build.py")
    if jvm is None or jvm.build() is None:
        raise SystemExit(
            "error: cannot build aiochronicle-spark.jar, the JVM reader (jvm/build.py says why "
            "above: it needs Maven, or javac with PySpark installed). Install Maven and a JDK "
            f"17+, or set {NO_JAR_ENV}=1 to build a package without it (Spark reads then use "
            "the Python data source).")


class BuildPy(build_py):
    def run(self) -> None:
        _build_jvm_reader()
        super().run()


class Sdist(sdist):
    """The sdist carries the built jar, so a wheel built from it needs no Maven."""

    def run(self) -> None:
        _build_jvm_reader()
        super().run()


# cffi_modules has no pyproject.toml key; everything else lives in pyproject.toml.
setup(cffi_modules=["native/build_ffi.py:ffibuilder"],
      cmdclass={"build_py": BuildPy, "sdist": Sdist})
