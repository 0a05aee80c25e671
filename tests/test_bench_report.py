"""bench/_report.py: the marked-block rewrite of docs/performance.md and the table
formatter the benchmarks' ``--write-docs`` use."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import _report  # noqa: E402  (bench/ is not a package)

PAGE = ("# Performance\r\n\nintro, with  trailing spaces  \n\n"
        "<!-- a-bench:begin -->\nold figures\n| 1 | 2 |\n<!-- a-bench:end -->\n"
        "\nbetween\n<!-- b-bench:begin -->\nkept\n<!-- b-bench:end -->\n\nµs tail, no newline")


def test_replace_block_touches_only_the_block(tmp_path: Path) -> None:
    page = tmp_path / "performance.md"
    page.write_bytes(PAGE.encode())
    _report.replace_block(str(page), "a-bench", ["new line 1", "", "new line 2"])
    got = page.read_bytes().decode()
    begin, end = "<!-- a-bench:begin -->", "<!-- a-bench:end -->"
    before, after = PAGE.split(begin)[0], PAGE.split(end)[1]
    assert got == before + begin + "\nnew line 1\n\nnew line 2\n" + end + after
    # byte for byte outside the block (the \r\n, the trailing spaces, no final newline)
    assert got.encode().startswith(before.encode()) and got.encode().endswith(after.encode())
    # again: the same result, the other block untouched
    _report.replace_block(str(page), "a-bench", ["new line 1", "", "new line 2"])
    assert page.read_bytes().decode() == got
    _report.replace_block(str(page), "b-bench", [])
    assert page.read_bytes().decode() == got.replace(
        "<!-- b-bench:begin -->\nkept\n", "<!-- b-bench:begin -->\n\n")


@pytest.mark.parametrize("text", [
    "# Performance\n\nno markers at all\n",
    "<!-- a-bench:begin -->\nonly the beginning\n",
    "only the end\n<!-- a-bench:end -->\n",
    "<!-- a-bench:end -->\nreversed\n<!-- a-bench:begin -->\n",
    "<!-- a-bench:begin -->\n<!-- a-bench:begin -->\ntwice\n<!-- a-bench:end -->\n",
])
def test_replace_block_raises_without_its_markers(tmp_path: Path, text: str) -> None:
    page = tmp_path / "performance.md"
    page.write_text(text)
    with pytest.raises(_report.MarkerError, match="a-bench"):
        _report.replace_block(str(page), "a-bench", ["figures"])
    assert page.read_text() == text  # nothing appended, nothing changed
    assert [p.name for p in tmp_path.iterdir()] == ["performance.md"]


def test_table_aligns_columns() -> None:
    lines = _report.table(["what", "msgs/s", "ratio", "mid"],
                          [["append", "1,234,567", "0.52x", "a"],
                           ["read_many", "12", "13.93x", "bcd"]], "lrrc")
    assert lines == [
        "| what      |    msgs/s |  ratio |  mid  |",
        "| --------- | --------: | -----: | :---: |",
        "| append    | 1,234,567 |  0.52x |   a   |",
        "| read_many |        12 | 13.93x |  bcd  |",
    ]
    # default: first column left, the others right; narrow columns keep a valid rule
    assert _report.table(["a", "b"], [[1, 2.5]]) == [
        "| a   |    b |",
        "| --- | ---: |",
        "| 1   |  2.5 |",
    ]
    # every line as long as the others: the pipes line up in the source
    assert len({len(line) for line in lines}) == 1


def test_table_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="align"):
        _report.table(["a", "b"], [], "l")
    with pytest.raises(ValueError, match="align"):
        _report.table(["a", "b"], [], "lx")
    with pytest.raises(ValueError, match="cells"):
        _report.table(["a", "b"], [["only one"]])


def test_measured_by_line() -> None:
    line = _report.measured_by("throughput.py", 0.42, 1.234, date="2026-01-02", cpus=2)
    assert line == ("Measured by `bench/throughput.py` on 2026-01-02, 2 vCPUs, load average "
                    "0.42 at the start and 1.23 at the end.")
    line = _report.measured_by("spark.py", 0.5, 0.5, ["4,000,000 rows", "best of 3"],
                               date="2026-01-02", cpus=2)
    assert line.endswith("0.50 at the end; 4,000,000 rows, best of 3.")
    assert _report.ratio(1.0, 4.0) == "0.25x" and _report.ratio(1.0, 0.0) == "-"
