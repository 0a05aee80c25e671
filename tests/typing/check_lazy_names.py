"""Checked by mypy from tests/test_exports.py (not run): the package's names are
imported at first use (``aiochronicle/__init__.py``), yet type checkers see every
one with its type, and a misspelt name stays an error (E-marker comment)."""

from __future__ import annotations

from typing import reveal_type

import aiochronicle as ac
from aiochronicle import open_queue


def use(path: str) -> None:
    q = open_queue(path)
    reveal_type(q)
    reveal_type(ac.RollCycles.FAST_DAILY)
    ac.NoSuchQueue(path)  # E: a misspelt name
