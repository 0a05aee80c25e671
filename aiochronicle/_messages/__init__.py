"""Typed messages: msgspec codecs, method-call framing, method writers and method readers
(typed against small Protocols of an appender or tailer), search by a message's key.

May import: ``_core``, ``_format``, ``_waiting``, ``_storage`` (and the top-level
``_version``); never a folder above it, not even inside a function or under
TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
