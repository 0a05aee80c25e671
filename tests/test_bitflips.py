"""One flipped bit in a cycle file, swept: ``bench/bitflips.py`` at CI size.

Bits of every field of the middle cycle file's header document, every bit of
every EOF marker, and random bits of excerpt header words and index pages (of
every cycle, index2index included), each flipped in a fresh copy of a
three-cycle queue and read every way: forward, backward, ``move_to_index`` of
every index written and of absent ones, first/last index and ``to_end()``,
``aiochronicle tail`` (its code in the sweep's process, and a sample as a
process of its own) and ``aiochronicle dump``.  Each read path returns what
it returns on the clean queue or raises a named error; none stops early,
hangs, or calls an existing index absent; ``check`` never calls a queue clean
whose reads changed; ``repair`` keeps every intact excerpt at its index or
refuses and says why.  The same for every field of a Chronicle 4 header
(``wireType``, ``roll``, ``recovery``, ``lastAcknowledgedIndexReplicated``
...), flipped in the queue Java 4.6 wrote (``tests/fixtures/java``).

The sweeps run in one child process at a time (a crash or a hang is counted,
not fatal).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bitflips.py"
V4 = Path(__file__).resolve().parent / "fixtures" / "java" / "cqv4-sample-input.tar.bz2"
RANDOM = 40  # random flips each in excerpt headers and in index pages
PER_FIELD = 20  # random bits of each header field
SWEEP_TIMEOUT = 900  # seconds for a whole sweep (about 20 s here)
# the fields Java 5 writes (and this library, as Java does), and Java 4's others
FIELDS_V5 = {"event", "writePosition", "indexing", "indexCount", "indexSpacing", "index2Index",
             "lastIndex", "dataFormat"}
FIELDS_V4 = {"event", "wireType", "writePosition", "roll", "length", "format", "epoch",
             "indexing", "indexCount", "indexSpacing", "index2Index", "lastIndex",
             "lastAcknowledgedIndexReplicated", "recovery", "timeStamp",
             "deltaCheckpointInterval", "lastIndexReplicated", "sourceId"}
PATHS = {"forward", "backward", "move_to_index", "ends", "tail", "dump"}


def sweep(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "flips.jsonl"
    r = subprocess.run([sys.executable, str(BENCH), "--jobs", "1", "--dir",
                        str(tmp_path / "work"), "--out", str(out), *args],
                       capture_output=True, text=True, timeout=SWEEP_TIMEOUT)
    assert r.returncode == 0, r.stderr[-4000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def silently_wrong(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flips a read path got wrong with no named error (or hung on), or that
    check called clean while a read changed (the undetectable kind aside: a
    length bit that grows an excerpt into its own zero padding)."""
    return [r for r in results if not r["into_padding"] and (
        r["read"] in ("wrong", "hang", "crash")
        or (r["read"] != "correct" and r["check"] == 0))]


def show(rows: list[dict[str, Any]]) -> str:
    return json.dumps([{k: r.get(k) for k in ("file", "off", "bit", "region", "paths",
                                             "check", "detail")} for r in rows[:5]], indent=1)


@pytest.mark.slow
def test_one_flipped_bit_reads_right_or_raises_a_named_error_on_every_path(
        tmp_path: Path) -> None:
    results = sweep(tmp_path, "--roll", "TEST4_DAILY", "--cycles", "3", "--per-cycle", "150",
                    "--head", "-1", "--per-field", str(PER_FIELD), "--random", str(RANDOM),
                    "--tail-subprocess", "16")
    assert len(results) == 8 * PER_FIELD + 2 * RANDOM
    assert sorted(r["n"] for r in results) == list(range(len(results)))
    wrong = silently_wrong(results)
    assert not wrong, show(wrong)
    # the sweep reached every field and the index, through every path, and
    # saw both outcomes on each
    regions = Counter(r["region"] for r in results)
    assert {f"header.{f}" for f in FIELDS_V5} <= set(regions), regions
    assert {"excerpt-header", "index-page"} <= set(regions), regions
    assert all(set(r["paths"]) == PATHS for r in results)
    for path in PATHS - {"ends"}:  # first/last index never open the middle cycle
        kinds = Counter(r["paths"][path] for r in results)
        assert kinds["correct"] and kinds["named"], (path, kinds)
    # issue 31: a flip in the dataFormat field's name reads the excerpts as
    # packed, and move_to_index said indices that exist were absent
    fmt = [r for r in results if r["region"] == "header.dataFormat"]
    assert any(r["paths"]["move_to_index"] == "named" for r in fmt), show(fmt)
    assert 0 < sum(1 for r in results if r["tail_process"]) < len(results)


# issue 31 (c): a flipped bit of an EOF marker's header word turns it into a
# not-ready header (a claim, or Java's in-progress word), and readers stopped
# there for good with the later cycles unread.  Readers now pass a cycle that
# ended without a valid EOF (later cycles written, its writer gone), or name
# the damage.
@pytest.mark.slow
def test_one_flipped_bit_of_an_eof_marker_hides_no_later_cycle(tmp_path: Path) -> None:
    results = sweep(tmp_path, "--roll", "TEST4_DAILY", "--cycles", "3", "--per-cycle", "60",
                    "--head", "0", "--eof", "--random", "0", "--tail-subprocess", "32")
    assert len(results) == 2 * 8 * 8  # two sealed cycles, an 8-byte marker each
    assert {r["region"] for r in results} == {"eof-marker"}
    wrong = silently_wrong(results)
    assert not wrong, show(wrong)


@pytest.mark.slow
def test_one_flipped_bit_of_a_java4_header_reads_right_or_raises_a_named_error(
        tmp_path: Path) -> None:
    results = sweep(tmp_path, "--fixture", str(V4), "--head", "-1", "--per-field", "8",
                    "--random", "0", "--tail-subprocess", "0")
    wrong = silently_wrong(results)
    assert not wrong, show(wrong)
    regions = {r["region"] for r in results}
    assert {f"header.{f}" for f in FIELDS_V4} <= regions, regions
    reads = Counter(r["read"] for r in results)
    assert reads["correct"] and reads["named"], reads


@pytest.mark.slow
def test_repair_after_one_flipped_bit_keeps_every_intact_excerpt_at_its_index(
        tmp_path: Path) -> None:
    results = sweep(tmp_path, "--roll", "TEST4_DAILY", "--cycles", "3", "--per-cycle", "150",
                    "--head", "0", "--random", "60", "--stride", "5", "--repair",
                    "--tail-subprocess", "0")
    assert len(results) == 2 * 60
    outcomes = Counter(r["repair"] for r in results)
    moved = [r for r in results if r["repair"] in ("moved", "crash")]
    assert not moved, json.dumps(moved[:5], indent=1)
    # a refusal says why (damage that padding would renumber)
    refused = [r for r in results if r["repair"] == "refused"]
    assert all("repair refuses" in r["repair_detail"] for r in refused), refused[:3]
    assert outcomes["kept"] > len(results) * 0.9, outcomes
