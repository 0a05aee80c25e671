"""Reading cycle files without the library, for tests that check its bytes."""

from __future__ import annotations

from pathlib import Path

HDR_META = 0x40000000
HDR_NOT_COMPLETE = 0x80000000
HDR_EOF = 0xC0000000
LENGTH_MASK = 0x3FFFFFFF


def raw_documents(path: str | Path) -> list[tuple[str, int, bytes]]:
    """Walk a cycle file's documents (4-byte aligned, dataFormat 1) without the library."""
    data = Path(path).read_bytes()
    pos = 0
    docs: list[tuple[str, int, bytes]] = []
    while pos + 4 <= len(data):
        h = int.from_bytes(data[pos:pos + 4], "little")
        if h == 0:
            break
        if h == HDR_EOF:
            docs.append(("eof", pos, data[pos + 4:pos + 8]))
            break
        if h & HDR_NOT_COMPLETE:
            docs.append(("incomplete", pos, b""))
            break
        n = h & LENGTH_MASK
        docs.append(("meta" if h & HDR_META else "data", pos, data[pos + 4:pos + 4 + n]))
        pos = (pos + 4 + n + 3) & ~3
    return docs
