"""A queue's cycle files and their one owner: settings, the write lock, the cycle cache and
listing, disk space, the excerpt values a read returns, and resource closing.

May import: ``_core``, ``_format``, ``_waiting`` (and the top-level ``_version``); never
a folder above it, not even inside a function or under TYPE_CHECKING
(tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
