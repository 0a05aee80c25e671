from setuptools import setup

# cffi_modules has no pyproject.toml key; everything else lives in pyproject.toml.
setup(cffi_modules=["native/build_ffi.py:ffibuilder"])
