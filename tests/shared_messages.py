"""Message Structs used by more than one group of tests, defined once.

Imported by module name (``shared_messages``), so whatever imports it needs
this directory on its path: pytest puts it there for the tests, the fork
server of ``service_pipeline.py`` runs from it, and the Spark tests' conftest
hands it to Spark's Python workers (``spark_messages`` re-exports from here).
"""

from __future__ import annotations

import msgspec


class Tick(msgspec.Struct):
    """A top-of-book update: the service pipeline's market data, and the
    Spark tests' decoded Struct."""

    symbol: str
    bid: float
    ask: float
    seq: int
