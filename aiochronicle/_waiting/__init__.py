"""Waiting: the cross-process notify, the waiter (spin, yield, park, futex, the loop's
notify, the drain) and the pausers that plan its steps.

May import: ``_core``, ``_format`` (and the top-level ``_version``); never a folder
above it, not even inside a function or under TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
