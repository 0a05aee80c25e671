import importlib.util
import os
import pathlib
import re

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (ROOT / "aiochronicle" / "_version.py").read_text()).group(1)

_args = ["-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"]
_link: list[str] = []
if os.environ.get("AIOCHRONICLE_SANITIZE"):
    _args += ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
    _link += ["-fsanitize=address,undefined"]
elif os.environ.get("AIOCHRONICLE_DEBUG"):
    _args += ["-O0", "-g"]
else:
    _args += ["-O2"]

# the per-message calls through the CPython C API (native/hot.c), over the
# same core as the cffi module (native/build_ffi.py)
hot = Extension(
    "aiochronicle._hot",
    sources=["native/hot.c", "native/cq.c", "native/pause.c"],
    include_dirs=["native"],
    define_macros=[("AIOCHRONICLE_VERSION", '"%s"' % VERSION)],
    extra_compile_args=_args,
    extra_link_args=_link,
)


def _build_jar() -> None:
    """The JVM reader (jvm/), compiled against the installed PySpark when javac is there."""
    spec = importlib.util.spec_from_file_location("_aiochronicle_jvm_build",
                                                  ROOT / "jvm" / "build.py")
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
setup(cffi_modules=["native/build_ffi.py:ffibuilder"], ext_modules=[hot],
      cmdclass={"build_py": BuildPy})
