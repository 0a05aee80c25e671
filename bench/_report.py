"""What the benchmarks share to put their figures into ``docs/performance.md``.

Each benchmark owns one block of that page, between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``; ``--write-docs`` replaces what is between the two
markers and nothing else.  The markers are written into the page by hand, so
a missing marker is an error, never a reason to add a section.

Also here: the one-line "Measured by ..." header every block starts with, a
markdown table formatter, and matplotlib set up for files (Agg) when it is
installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

BENCH = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(BENCH), "docs")
PERFORMANCE = os.path.join(DOCS, "performance.md")

# plots: small enough to keep in the repository
FIGSIZE = (8.0, 4.5)
DPI = 100


class MarkerError(ValueError):
    """The page lacks a block's markers (or has them twice, or in the wrong order)."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_block(path: str, name: str, lines: Sequence[str]) -> None:
    """Replace the text between the ``name`` markers of the file ``path`` by ``lines``.

    The markers stay, each on its own line around the new text; every byte
    before the begin marker and after the end marker is kept as it was.
    Raises :class:`MarkerError` unless each marker occurs exactly once, begin
    first.
    """
    begin, end = markers(name)
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    for marker in (begin, end):
        n = text.count(marker)
        if n != 1:
            raise MarkerError(
                f"{path}: expected the marker {marker} once, found it {n} times; "
                f"put {begin} and {end} around the place for this benchmark's figures")
    i = text.index(begin) + len(begin)
    j = text.index(end)
    if j < i:
        raise MarkerError(f"{path}: {end} comes before {begin}")
    new = text[:i] + "\n" + "\n".join(lines) + "\n" + text[j:]
    # write next to it, then rename: an interrupted run leaves the page whole
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(new)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def measured_by(script: str, load_start: float, load_end: float,
                details: Sequence[str] = (), date: str | None = None,
                cpus: int | None = None) -> str:
    """The line a block starts with: which script, when, on how many CPUs, under
    what load; ``details`` (the sizes and flags of the run) follow after a
    semicolon."""
    date = date or time.strftime("%Y-%m-%d")
    cpus = cpus if cpus is not None else os.cpu_count()
    line = (f"Measured by `bench/{script}` on {date}, {cpus} vCPUs, load average "
            f"{load_start:.2f} at the start and {load_end:.2f} at the end")
    if details:
        line += "; " + ", ".join(details)
    return line + "."


_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def table(header: Sequence[str], rows: Sequence[Sequence[object]],
          align: str | None = None) -> list[str]:
    """A markdown table as lines, columns padded so the source lines up too.

    ``align`` has one letter per column: ``l`` (left), ``r`` (right) or ``c``
    (centre); by default the first column is left-aligned and the others right.
    Cells are written with ``str()``: format numbers before.
    """
    ncol = len(header)
    align = align if align is not None else "l" + "r" * (ncol - 1)
    if len(align) != ncol or set(align) - set(_RULES):
        raise ValueError(f"align {align!r}: want one of l, r, c per column ({ncol})")
    cells = [[str(c) for c in header]]
    for row in rows:
        if len(row) != ncol:
            raise ValueError(f"row {row!r} has {len(row)} cells, the header {ncol}")
        cells.append([str(c) for c in row])
    width = [max(len(_RULES[a]), *(len(r[k]) for r in cells))
             for k, a in enumerate(align)]

    def line(row: Sequence[str]) -> str:
        out = []
        for text, a, w in zip(row, align, width, strict=True):
            out.append(text.rjust(w) if a == "r" else text.center(w) if a == "c"
                       else text.ljust(w))
        return "| " + " | ".join(out) + " |"

    rule = []
    for a, w in zip(align, width, strict=True):
        r = _RULES[a]
        fill = "-" * (w - len(r))
        rule.append(r[:1] + fill + r[1:] if a == "c" else (fill + r if a == "r" else r + fill))
    return [line(cells[0]), "| " + " | ".join(rule) + " |", *(line(r) for r in cells[1:])]


def ratio(a: float, b: float, digits: int = 2) -> str:
    """``a / b`` as ``1.23x`` (``-`` when there is no ``b``)."""
    return f"{a / b:.{digits}f}x" if b else "-"


def rate(x: float) -> str:
    """A rate with thousands separators, no decimals."""
    return f"{x:,.0f}"


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, or None when it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(fig: Any, name: str) -> str:
    """Save ``fig`` as ``docs/NAME`` (small PNG), close it; return the path."""
    path = os.path.join(DOCS, name)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    fig.clear()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def skipped_plot(name: str) -> None:
    print(f"matplotlib is not installed: skipped the plot docs/{name}", file=sys.stderr)
