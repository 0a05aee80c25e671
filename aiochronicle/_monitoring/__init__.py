"""Watching queues and services: the monitor's figures (the ``metrics``, ``top`` and
``latency`` commands and ``aiochronicle.metrics`` show them).

May import: ``_core``, ``_format``, ``_waiting``, ``_storage``, ``_messages``,
``_objects``, ``_tools``, ``_replicas``, ``_services`` (and the top-level ``_version``);
never a folder above it, not even inside a function or under TYPE_CHECKING
(tests/test_layers.py).

Private: the public names are exported by ``aiochronicle``.
"""
