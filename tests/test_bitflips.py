"""One flipped bit in a cycle file, swept: ``bench/bitflips.py`` at CI size.

Every bit of the middle cycle file's header document and index2index page,
and random bits of excerpt header words and index pages (of every cycle),
each flipped in a fresh copy of a three-cycle queue and read every way
(forward, ``move_to_index`` at every third index, first/last index,
``to_end``).  A reader returns what was written or raises a named error;
``check`` never calls a queue clean whose reads changed; ``repair`` keeps every
intact excerpt at its index or refuses and says why.

The sweep runs in child processes (two, one per core), so a crash or a hang
is counted, not fatal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bitflips.py"
HEAD = 0x1E8  # TEST4_DAILY: the header document and the index2index page
RANDOM = 150  # random flips each in excerpt headers and in index pages
SWEEP_TIMEOUT = 900  # seconds for a whole sweep (about 60 s of CPU on 2 cores)


def sweep(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    out = tmp_path / "flips.jsonl"
    r = subprocess.run([sys.executable, str(BENCH), "--roll", "TEST4_DAILY", "--cycles", "3",
                        "--per-cycle", "150", "--jobs", "2", "--dir", str(tmp_path / "work"),
                        "--out", str(out), *args],
                       capture_output=True, text=True, timeout=SWEEP_TIMEOUT)
    assert r.returncode == 0, r.stderr[-4000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_one_flipped_bit_reads_right_or_raises_a_named_error(tmp_path: Path) -> None:
    results = sweep(tmp_path, "--head", hex(HEAD), "--random", str(RANDOM), "--stride", "3")
    assert len(results) == 8 * HEAD + 2 * RANDOM
    assert sorted(r["n"] for r in results) == list(range(len(results)))
    reads = Counter(r["read"] for r in results)
    assert not [r for r in results if r["read"] == "crash"], reads
    # the one kind no reader can catch: a low length bit set so that the
    # excerpt grows into its own zero padding (its aligned end unchanged)
    wrong = [r for r in results if r["read"] == "wrong" and not r["into_padding"]]
    assert not wrong, json.dumps(wrong[:5], indent=1)
    # check says something of every flip that changed a read
    silent = [r for r in results
              if r["read"] != "correct" and r["check"] == 0 and not r["into_padding"]]
    assert not silent, json.dumps(silent[:5], indent=1)
    # the sweep reached every part named in the issue, and both outcomes
    regions = {r["region"] for r in results}
    assert {"header.writePosition", "header.dataFormat", "header.index2Index",
            "excerpt-header", "index-header", "index-page"} <= regions, regions
    assert reads["correct"] and reads["named"], reads


def test_repair_after_one_flipped_bit_keeps_every_intact_excerpt_at_its_index(
        tmp_path: Path) -> None:
    results = sweep(tmp_path, "--head", "0", "--random", str(RANDOM), "--stride", "5",
                    "--repair")
    assert len(results) == 2 * RANDOM
    outcomes = Counter(r["repair"] for r in results)
    moved = [r for r in results if r["repair"] in ("moved", "crash")]
    assert not moved, json.dumps(moved[:5], indent=1)
    # a refusal says why (damage that padding would renumber)
    refused = [r for r in results if r["repair"] == "refused"]
    assert all("repair refuses" in r["repair_detail"] for r in refused), refused[:3]
    assert outcomes["kept"] > len(results) * 0.9, outcomes
