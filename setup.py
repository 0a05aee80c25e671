import importlib.util
import pathlib
from types import ModuleType

from setuptools import Extension, setup
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


# the cffi build script knows the version stamp and the compile flags
_ffi = _load("_aiochronicle_build_ffi", ROOT / "native" / "build_ffi.py")
assert _ffi is not None
_args, _link = _ffi.compile_flags()

# the per-message calls through the CPython C API (native/hot.c), over the
# same core as the cffi module (native/build_ffi.py)
hot = Extension(
    "aiochronicle._hot",
    sources=[f"native/{name}" for name in _ffi.HOT_SOURCES],
    include_dirs=["native"],
    define_macros=[("AIOCHRONICLE_VERSION", '"%s"' % _ffi._version())],
    extra_compile_args=_args,
    extra_link_args=_link,
)


def _build_jvm_reader() -> None:
    # the JVM reader (jvm/): Maven against Spark's published artifacts (jvm/pom.xml);
    # a no-op when the jar is newer than its sources, as in an unpacked sdist
    jvm = _load("_aiochronicle_jvm_build", ROOT / "jvm" / "build.py")
    if jvm is not None:
        jvm.build()


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
setup(cffi_modules=["native/build_ffi.py:ffibuilder"], ext_modules=[hot],
      cmdclass={"build_py": BuildPy, "sdist": Sdist})
