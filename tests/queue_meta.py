"""A queue's metadata table store (``metadata.cq4t``) read and written
directly, as tests that stage locks and damaged states need it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aiochronicle._format._tablestore import TableStore


def meta_set(path: Path, key: str, value: int) -> None:
    """Set ``key`` of the queue at ``path``'s table store to ``value``."""
    t = TableStore(str(path / "metadata.cq4t"), read_only=False)
    try:
        t.set(key, value)
    finally:
        t.close()


def meta_get(path: Path, key: str) -> int | None:
    """``key`` of the queue at ``path``'s table store (None: absent)."""
    t = TableStore(str(path / "metadata.cq4t"), read_only=True)
    try:
        return t.get(key)
    finally:
        t.close()


def dead_pid() -> int:
    """The PID of a process that has exited (for a lock naming a dead holder)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid
