"""A writer of queues in the layout libchronicle writes, for interoperability tests.

Built from the format facts in the project's libchronicle notes (not from
libchronicle's code):

* ``metadata.cq4t`` is exactly as long as its content: the ``header: !STStore``
  document (roll length as an INT32, format, epoch, deltaCheckpointInterval,
  sourceId; padded inside ``STStore`` with 0x8F bytes to a multiple of 8), then
  the keys ``listing.highestCycle``, ``listing.lowestCycle``,
  ``listing.modCount``, ``chronicle.write.lock`` (unlocked),
  ``chronicle.lastIndexReplicated`` and
  ``chronicle.lastAcknowledgedIndexReplicated`` (-1), each an aligned INT64.
* a cycle file is created as ``<name>.<pid>.tmp`` of 83,754,496 bytes holding
  nothing, then renamed into place: no header document, no index pages; the
  first excerpt is at offset 0, excerpts are 4-byte aligned, the payload is
  written before its header word.
* a roll writes a bare ``C0 00 00 00`` EOF at the end of the older cycle, then
  raises ``listing.highestCycle`` and adds one to ``listing.modCount``.
* no write lock is taken (so only one such writer may run).

Run as a program it appends in another process, for the live tests::

    python tests/libchronicle_format.py DIR FORMAT LENGTH_MS FIRST_CYCLE COUNT PER_CYCLE
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time
from pathlib import Path

FILE_SIZE = 83_754_496
HDR_EOF = 0xC0000000
UNLOCKED = -(1 << 63)


def _name(tag: int, text: str) -> bytes:
    raw = text.encode()
    return bytes([tag, len(raw)]) + raw


def _field(text: str) -> bytes:
    return bytes([0xC0 + len(text)]) + text.encode()


def _string(text: str) -> bytes:
    return bytes([0xE0 + len(text)]) + text.encode()


def _nest(body: bytes) -> bytes:
    return b"\x82" + struct.pack("<I", len(body)) + body


def metadata_bytes(fmt: str, length_ms: int, cycle: int) -> bytes:
    """The ``metadata.cq4t`` libchronicle writes when it creates a queue at ``cycle``."""
    roll = (_field("length") + b"\xa6" + struct.pack("<i", length_ms)
            + _field("format") + _string(fmt) + _field("epoch") + b"\x00")
    meta = (_field("roll") + _name(0xB6, "SCQSRoll") + _nest(roll)
            + _field("deltaCheckpointInterval") + b"\x40" + _field("sourceId") + b"\x00")
    inner = (_field("wireType") + _name(0xB6, "WireType") + _string("BINARY_LIGHT")
             + _field("metadata") + _name(0xB6, "SCQMeta") + _nest(meta))
    prefix = _name(0xB9, "header") + _name(0xB6, "STStore")
    # pad the STStore body with 0x8F so the document ends on a multiple of 8
    end = 4 + len(prefix) + 5 + len(inner)
    inner += b"\x8f" * (-end % 8)
    body = prefix + _nest(inner)
    out = bytearray(struct.pack("<I", 0x40000000 | len(body)) + body)
    for key, value in (("listing.highestCycle", cycle), ("listing.lowestCycle", cycle),
                       ("listing.modCount", 1), ("chronicle.write.lock", UNLOCKED),
                       ("chronicle.lastIndexReplicated", -1),
                       ("chronicle.lastAcknowledgedIndexReplicated", -1)):
        start = len(out)
        doc = bytearray(_name(0xB9, key))
        gap = (7 - (start + 4 + len(doc))) % 8  # the INT64 code byte sits at 7 mod 8
        doc += b"\x8f" * gap if gap < 5 else b"\x8e" + struct.pack("<I", gap - 5) + bytes(gap - 5)
        doc += b"\xa7" + struct.pack("<q", value)
        doc += bytes(-len(doc) % 4)
        out += struct.pack("<I", len(doc)) + doc
    return bytes(out)


def _key_offset(meta: bytes, key: str) -> int:
    """The offset of ``key``'s INT64 value in a table store image."""
    at = meta.index(_name(0xB9, key))
    return meta.index(b"\xa7", at + 2 + len(key)) + 1


def text_payload(text: str) -> bytes:
    """BinaryWire text as libchronicle's ``wirepad_text`` writes it (< 31 bytes)."""
    assert len(text.encode()) < 31
    return _string(text)


class LibchronicleStyleWriter:
    """Appends to a queue directory the way libchronicle does (one writer only)."""

    def __init__(self, directory: str | Path, fmt: str, length_ms: int, first_cycle: int,
                 cycle_name: str) -> None:
        self.dir = Path(directory)
        self.fmt = fmt
        self.length_ms = length_ms
        self.cycle = first_cycle
        self.dir.mkdir(parents=True, exist_ok=True)
        meta_path = self.dir / "metadata.cq4t"
        if not meta_path.exists():
            tmp = self.dir / f"metadata.cq4t.{os.getpid()}.tmp"
            tmp.write_bytes(metadata_bytes(fmt, length_ms, first_cycle))
            os.rename(tmp, meta_path)
        image = meta_path.read_bytes()
        self._highest = _key_offset(image, "listing.highestCycle")
        self._mod = _key_offset(image, "listing.modCount")
        fd = os.open(meta_path, os.O_RDWR)
        try:
            self._meta = mmap.mmap(fd, len(image))
        finally:
            os.close(fd)
        self._namer = cycle_name
        self._file: mmap.mmap | None = None  # created by the first append, as libchronicle
        self._pos = self._seq = 0

    def path_of(self, cycle: int) -> Path:
        """The cycle file of ``cycle``: its name from the roll format."""
        return self.dir / (time.strftime(self._namer, time.gmtime(cycle * self.length_ms
                                                                     // 1000)) + ".cq4")

    def _open(self, cycle: int) -> None:
        path = self.path_of(cycle)
        if not path.exists():
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            with open(tmp, "wb") as f:
                f.truncate(FILE_SIZE)
            os.rename(tmp, path)
            highest = struct.unpack_from("<q", self._meta, self._highest)[0]
            if cycle > highest:
                struct.pack_into("<q", self._meta, self._highest, cycle)
            mod = struct.unpack_from("<q", self._meta, self._mod)[0]
            struct.pack_into("<q", self._meta, self._mod, mod + 1)
        fd = os.open(path, os.O_RDWR)
        try:
            self._file = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        self.cycle = cycle
        self._pos = self._seq = 0
        while True:  # find the end: a walk from offset 0
            word = struct.unpack_from("<I", self._file, self._pos)[0]
            if word == 0 or word == HDR_EOF:
                break
            self._pos = (self._pos + 4 + (word & 0x3FFFFFFF) + 3) & ~3
            self._seq += 1

    def append(self, payload: bytes, cycle: int | None = None) -> int:
        """Append ``payload`` in ``cycle`` (default: the current one), rolling
        with a bare EOF first when ``cycle`` is later; returns its index
        (cycle << 32 | seq, libchronicle's fixed cycle shift)."""
        if self._file is None:
            self._open(self.cycle if cycle is None else cycle)
        elif cycle is not None and cycle > self.cycle:
            struct.pack_into("<I", self._file, self._pos, HDR_EOF)
            self._file.close()
            self._open(cycle)
        f = self._file
        assert f is not None
        seq = self._seq
        f[self._pos + 4:self._pos + 4 + len(payload)] = payload
        struct.pack_into("<I", f, self._pos, len(payload))  # published last
        self._pos = (self._pos + 4 + len(payload) + 3) & ~3
        self._seq += 1
        return (self.cycle << 32) | seq

    def close(self) -> None:
        """Unmap the files (the queue stays as it is: the current cycle open)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._meta.close()


def _main(argv: list[str]) -> None:
    directory, fmt, length_ms, first, count, per_cycle, strftime = argv
    w = LibchronicleStyleWriter(directory, fmt, int(length_ms), int(first), strftime)
    print("ready", flush=True)
    sys.stdin.readline()  # go
    for i in range(int(count)):
        w.append(f"live {i}".encode(), int(first) + i // int(per_cycle))
        time.sleep(0.0005)
    w.close()
    print("done", flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
