"""Rebuilding ``metadata.cq4t`` from a queue's cycle files, when it is lost
or damaged (``aiochronicle repair``, or ``check`` finding ``bad-metadata``):
the roll cycle from the files' names and headers, the listing from the
directory, the locks free, every key still readable kept.
"""

from __future__ import annotations

import contextlib
import os
import time

from .._core._errors import CorruptQueueError, QueueBusyError
from .._format._mapped import list_dir
from .._format._rollcycles import (
    CycleNamer,
    RollCycle,
    RollCycles,
    candidate_roll_cycles,
    misnamed_cycle_files,
)
from .._format._store import open_store
from .._format._tablestore import TableStore, salvage_table_store
from .._format._wire import Document
from .._storage._settings import INITIAL_KEYS, METADATA_FILE, metadata_header
from .._storage._writelock import LOCK_KEYS
from ._listeners import files_open_by_processes

__all__ = ["rebuild_metadata", "roll_cycle_of_files"]


def _cycle_stems(path: str) -> list[str]:
    return sorted(n[:-4] for n in list_dir(path)
                  if n.endswith(".cq4") and os.path.isfile(os.path.join(path, n)))


def _stored_roll(header: Document | None) -> tuple[RollCycle, int, int] | None:
    """(roll cycle, epoch, sourceId) held by a table store header, if usable."""
    if header is None:
        return None
    try:
        meta = header["metadata"].as_document()
        roll = meta["roll"].as_document()
        fmt, length = roll["format"].as_str(), roll["length"].as_int()
        ev, sv = roll.get("epoch"), meta.get("sourceId")
        d = RollCycles.DEFAULT
        rc = RollCycles.for_settings(fmt, length, d.index_count, d.index_spacing)
        CycleNamer(rc, ev.as_int() if ev is not None else 0)
        return (rc, ev.as_int() if ev is not None else 0, sv.as_int() if sv is not None else 0)
    except (KeyError, ValueError, AttributeError):
        return None


def _file_layout(path: str, stems: list[str]) -> tuple[int, int] | None:
    """(index count, index spacing) from the header of the first readable cycle file."""
    for stem in stems:
        with contextlib.suppress(CorruptQueueError, OSError):
            st = open_store(os.path.join(path, stem + ".cq4"), 0, writable=False,
                            chunk=64 << 10, overlap=0, timeout=0.05)
            if st is not None:
                try:
                    return st.layout.index_count, st.layout.index_spacing
                finally:
                    st.close()
    return None


def roll_cycle_of_files(path: str, hint: tuple[RollCycle, int] | None = None
                        ) -> tuple[RollCycle, int]:
    """The roll cycle and epoch that name the cycle files of the queue at ``path``:
    ``hint`` if it fits them, else the built-in roll cycle whose format names
    every file (its index layout chosen from a cycle file's header).

    Raises:
        CorruptQueueError: no built-in roll cycle names the files.
    """
    stems = _cycle_stems(path)
    if hint is not None and not misnamed_cycle_files(CycleNamer(hint[0], hint[1]), stems):
        return hint
    if not stems:
        return hint or (RollCycles.DEFAULT, RollCycles.DEFAULT.default_epoch)
    layout = _file_layout(path, stems)
    fits: list[tuple[RollCycle, int]] = []
    for rc in candidate_roll_cycles(stems[-1]):
        for ep in dict.fromkeys([rc.default_epoch] + ([hint[1]] if hint else [])):
            if not misnamed_cycle_files(CycleNamer(rc, ep), stems):
                fits.append((rc, ep))
                break
    same = [f for f in fits if layout == (f[0].index_count, f[0].index_spacing)]
    if same or fits:
        return (same or fits)[0]
    raise CorruptQueueError(f"no built-in roll cycle names the cycle files (e.g. "
                            f"{stems[-1]}.cq4): cannot tell the queue's roll cycle",
                            os.path.join(path, METADATA_FILE))


def rebuild_metadata(path: str) -> str:
    """Write a new ``metadata.cq4t`` for the queue at ``path`` from its cycle
    files: the roll settings the old file holds if they still name the files,
    else those the file names and headers show; ``listing.*`` from the
    directory; locks free; every other key still readable in the old file
    (named tailers, replication positions) kept.  The old file is kept as
    ``metadata.cq4t-<ms>.discard``.  Returns what was done, in words.

    Raises:
        QueueBusyError: another process has the metadata open.
        CorruptQueueError: the roll cycle of the files cannot be told.
    """
    meta_path = os.path.join(path, METADATA_FILE)
    busy = files_open_by_processes([meta_path], include_self=False).get(meta_path)
    if busy:
        raise QueueBusyError(f"{meta_path} is open in process {busy[0]}: stop it before "
                             "rebuilding the metadata")
    old = salvage_table_store(meta_path) if os.path.isfile(meta_path) else None
    stored = _stored_roll(old.header if old is not None else None)
    rc, ep = roll_cycle_of_files(path, stored[:2] if stored is not None else None)
    namer = CycleNamer(rc, ep)
    cycles = sorted(namer.parse(s) for s in _cycle_stems(path) if namer.matches(s))
    kept: dict[str, tuple[str, int]] = {}
    for key, value in old.keys if old is not None else []:
        low = key.lower()
        if low not in LOCK_KEYS and not low.startswith("listing."):
            kept.setdefault(low, (key, value))
    mod = next((v for k, v in (old.keys if old is not None else [])
                if k.lower() == "listing.modcount" and v >= 0), 0)
    listing = {"listing.modCount": mod + 1}
    if cycles:
        listing.update({"listing.highestCycle": cycles[-1], "listing.lowestCycle": cycles[0]})
    initial = tuple((k, listing.get(k, v)) for k, v in INITIAL_KEYS)
    tmp = f"{meta_path}.rebuild-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    source_id = stored[2] if stored is not None else 0
    ts = TableStore(tmp, read_only=False, timeout=2.0, initial_keys=initial,
                    header=lambda: metadata_header(rc, ep, source_id))
    try:
        for key, value in kept.values():
            ts.set(key, value)
        ts.file.sync(0, ts.file.size)
    finally:
        ts.close()
    if os.path.lexists(meta_path):
        os.rename(meta_path, f"{meta_path}-{int(time.time() * 1000)}.discard")
    os.replace(tmp, meta_path)
    dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return (f"roll cycle {rc.name} ({rc.format!r}), {len(cycles)} cycles, "
            f"{len(kept)} keys kept")
