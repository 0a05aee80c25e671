"""The native core's typed boundary (the compiled ``_cq`` and ``_hot`` modules and
``_native``, where C result codes become named exceptions) and every exception of the
package.

May import: no folder (and the top-level ``_version``); never a folder above it, not
even inside a function or under TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
