"""File systems of a test's own: a small tmpfs (to fill a disk), a bind mount,
a loop device.  Mounting needs root, which CI and the dev machines have;
without it the test is skipped with the named reason ``mount``."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import skips


@contextlib.contextmanager
def mounted(args: list[str], mnt: Path, what: str) -> Iterator[Path]:
    """``mount ARGS MNT`` (``mnt`` made if missing) for the ``with`` block,
    lazily unmounted after it; ``what`` names it in the skip's reason."""
    mnt.mkdir(exist_ok=True)
    r = subprocess.run(["mount", *args, str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        skips.skip("mount", f"{what}: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def tmpfs(mnt: Path, size: str) -> contextlib.AbstractContextManager[Path]:
    """A tmpfs of ``size`` (``"3m"``) at ``mnt``: a disk that fills up."""
    return mounted(["-t", "tmpfs", "-o", f"size={size}", "tmpfs"], mnt, f"a {size} tmpfs")


def remount_read_only(mnt: Path) -> None:
    """Make the bind mount at ``mnt`` read-only (not writable even by root)."""
    r = subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        skips.skip("mount", f"a read-only remount: {r.stderr.strip()}")
