"""The user objects: Queue, Appender, Tailer, their document contexts, the async reads, the
pretoucher.

May import: ``_core``, ``_format``, ``_waiting``, ``_storage``, ``_messages`` (and the
top-level ``_version``); never a folder above it, not even inside a function or under
TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
