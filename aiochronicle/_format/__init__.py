"""Chronicle Queue's file format: mapped files, BinaryWire, roll cycles and file names,
cycle-file stores, metadata.cq4t (the table store), message history, time providers,
rendering of documents.

May import: ``_core`` (and the top-level ``_version``); never a folder above it, not
even inside a function or under TYPE_CHECKING (tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
