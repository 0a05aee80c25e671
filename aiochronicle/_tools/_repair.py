"""``aiochronicle repair``: check a queue while holding its write lock, fix
what :mod:`check <aiochronicle._tools._check>` says is repairable, and check again
(one fix can uncover the next); damaged metadata is rebuilt first.  Every
file about to change can be backed up first, holes kept sparse.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable

from .._core._errors import QueueBusyError
from .._format._mapped import open_regular
from .._format._tablestore import TableStore
from .._objects._queue import cycles_of
from .._storage._writelock import WRITE_LOCK, lock_states_in, release_lock, take_lock
from ._check import CheckFinding, RepairContext, metadata_findings, open_for_check, run_check
from ._dump import Progress
from ._rebuild import rebuild_metadata

__all__ = ["backup_files", "files_to_repair", "repair_queue", "sparse_copy"]


REPAIR_PASSES = 4


def _rebuild_bad_metadata(path: str, backup_dir: str | None) -> list[CheckFinding]:
    """Rebuild damaged metadata before anything else (its write lock and keys are
    needed by the rest of a repair); the findings, marked repaired."""
    found = metadata_findings(path)
    for f in found:
        if backup_dir is not None and os.path.isfile(f.path):
            backup_files([f.path], backup_dir)
        rebuild_metadata(path)
        f.repaired = True
    return found


def backup_files(paths: Iterable[str], dest: str) -> list[str]:
    """Copy files into ``dest`` (created), keeping holes sparse; returns the copies."""
    os.makedirs(dest, exist_ok=True)
    out = []
    for p in paths:
        target = os.path.join(dest, os.path.basename(p))
        sparse_copy(p, target)
        out.append(target)
    return out


def sparse_copy(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` writing only the data extents (holes stay holes)."""
    fi = open_regular(src)
    try:
        fo = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            size = os.fstat(fi).st_size
            pos = 0
            while pos < size:
                try:
                    start = os.lseek(fi, pos, os.SEEK_DATA)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break
                    raise
                end = os.lseek(fi, start, os.SEEK_HOLE)
                off = start
                while off < end:
                    chunk = os.pread(fi, min(1 << 20, end - off), off)
                    if not chunk:
                        break
                    if chunk.count(0) != len(chunk):
                        os.pwrite(fo, chunk, off)
                    off += len(chunk)
                pos = end
            os.ftruncate(fo, size)
        finally:
            os.close(fo)
    finally:
        os.close(fi)
    shutil.copystat(src, dst)


def files_to_repair(findings: Iterable[CheckFinding]) -> list[str]:
    """The files a repair of ``findings`` would change."""
    seen: dict[str, None] = {}
    for f in findings:
        if f.repairable:
            seen.setdefault(f.path, None)
    return list(seen)


def repair_queue(path: str, *, backup_dir: str | None = None, lock_timeout: float = 5.0,
                 progress: Progress | None = None) -> list[CheckFinding]:
    """Check the queue while holding its write lock, repair what can be repaired,
    then check again.  Returns the findings of the first check with ``repaired``
    set on the ones fixed; anything still wrong shows in a later
    :func:`check_queue`.  With ``backup_dir`` every file about to change is
    copied there first.

    Raises:
        QueueBusyError: a live process holds the write lock past ``lock_timeout``.
    """
    rebuilt = _rebuild_bad_metadata(path, backup_dir)
    q = open_for_check(path)
    files = cycles_of(q)
    backed: set[str] = set()
    if backup_dir is not None:
        # before anything changes (taking the lock from a dead holder changes metadata)
        first = files_to_repair(run_check(files, None))
        backup_files(first, backup_dir)
        backed.update(first)
    try:
        meta = None
        if files.meta is not None:
            meta = TableStore(files.meta.path, read_only=False, timeout=2.0)
        try:
            if meta is not None:
                # a dead holder's lock is taken over here; report it as repaired below
                before = lock_states_in(meta)
                holder = take_lock(meta, WRITE_LOCK, lock_timeout)
                if holder is not None:
                    raise QueueBusyError(f"{WRITE_LOCK} is held by live process {holder}: "
                                         "stop the writer before repairing")
            try:
                findings = run_check(files, progress, live=False)
                if meta is not None:
                    for s in before:
                        if s.key == WRITE_LOCK and s.locked and not s.alive:
                            findings.append(CheckFinding(
                                "warning", "stale-lock", meta.path,
                                f"{s.key} was held by process {s.holder}, which is dead",
                                None, "release the lock", repaired=True))
                    findings = [f for f in findings
                                if not (f.kind == "lock-held"
                                        and f.message.endswith(f"process {os.getpid()}"))]
                todo = [f for f in findings if f.repairable]
                # one fix can uncover the next (a fresh header lets the excerpts be
                # walked, a joined chain moves the index entries): check again
                for _ in range(REPAIR_PASSES):
                    more = [p for p in files_to_repair(todo) if p not in backed]
                    if more and backup_dir is not None:
                        backup_files(more, backup_dir)
                        backed.update(more)
                    ctx = RepairContext(files, meta)
                    try:
                        for f in todo:
                            f.repair(ctx)
                    finally:
                        ctx.close()
                    if not todo:
                        break
                    seen = {(f.kind, f.path, f.offset, f.message) for f in findings}
                    again = [f for f in run_check(files, None, live=False) if f.repairable]
                    todo = [f for f in again
                            if (f.kind, f.path, f.offset, f.message) not in seen]
                    findings += todo
            finally:
                if meta is not None:
                    release_lock(meta, WRITE_LOCK)
        finally:
            if meta is not None:
                meta.close()
        return rebuilt + findings
    finally:
        q.close()
