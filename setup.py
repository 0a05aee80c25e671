import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def _build_jar() -> None:
    """The JVM reader (jvm/), compiled against the installed PySpark when javac is there."""
    spec = importlib.util.spec_from_file_location(
        "_aiochronicle_jvm_build", Path(__file__).resolve().parent / "jvm" / "build.py")
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.build()


class BuildPy(build_py):
    def run(self) -> None:
        _build_jar()
        super().run()


# cffi_modules has no pyproject.toml key; everything else lives in pyproject.toml.
setup(cffi_modules=["native/build_ffi.py:ffibuilder"], cmdclass={"build_py": BuildPy})
