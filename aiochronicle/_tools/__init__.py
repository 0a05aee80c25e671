"""Operations on a queue: dump, check, repair, rebuild, salvage, stats, locks, store-file
listeners, retention.

May import: ``_core``, ``_format``, ``_waiting``, ``_storage``, ``_messages``,
``_objects`` (and the top-level ``_version``); never a folder above it, not even inside
a function or under TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
