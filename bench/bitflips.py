"""Single-bit flips in cycle files: does a reader return the right excerpt at
the right index or raise a named error, and does ``repair`` keep every intact
excerpt at its index?

Run:  .venv/bin/python bench/bitflips.py [--roll FAST_DAILY] [--cycles 3]
          [--per-cycle 1000] [--head 0x300] [--random 200] [--repair] [--jobs 2]

A queue of ``--cycles`` cycle files of ``--per-cycle`` excerpts each is made
once.  The flips: every bit of the middle cycle file's first ``--head`` bytes
(its header document, index2index page and first index page), then
``--random`` bits each in excerpt header words and in index pages (of every
cycle).  Each flip is made in a fresh copy of the queue, which is then read:

* forward from the start, every excerpt compared with what was written;
* ``move_to_index`` for every index (or every ``--stride``-th), and the
  excerpt read there;
* ``first_index``, ``last_index`` and ``to_end()``.

A flip is **correct** when all of that agrees with what was written,
**named** when some call raised a ``ChronicleError`` and none returned a wrong
value, **wrong** when any call returned a wrong value (a wrong payload, a
wrong index, a short read that ends with no error, ``move_to_index`` False
for an index that exists), **crash** for any other exception or a dead or
hung child.  For every flip that is not correct, ``check`` must not report
the queue clean (``check_silent`` counts those it did).  One kind of flip no
reader can catch: a low length bit of an excerpt header set so that the
length grows into the excerpt's own zero padding (its 4-byte aligned end
unchanged); ``wrong_into_padding`` counts the wrong reads of that kind.

With ``--repair`` each flipped copy is then repaired (``repair_queue``), and
every excerpt whose bytes the flip did not touch must read at its index with
its payload (``moved`` counts repairs that lost or renumbered one); a repair
may instead refuse, with a named error or by leaving a finding unrepaired.

Flips run in child processes (``--jobs`` of them, each a slice), so a crash or
a hang is counted, not fatal; one JSON line per flip goes to ``--out``.
``tests/test_bitflips.py`` runs this, smaller, in CI.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiochronicle as ac

T0 = 1_637_251_500_000  # 2021-11-18 16:05:00 UTC
BLOCK = 64 << 10
STEP_TIMEOUT = 30  # seconds one flipped queue may take before its child dumps and dies
HDR_META = 0x40000000
HDR_NOT_COMPLETE = 0x80000000
LENGTH_MASK = 0x3FFFFFFF


def payload(i: int) -> bytes:
    """Distinct payloads of varied lengths (not all 4-aligned), text and binary."""
    body = bytes(((i * 131 + k * 29) ^ (k >> 2)) & 0xFF for k in range(i % 19 + 1))
    return b"x%05d:" % i + body


def make_queue(path: str, roll: str, cycles: int, per_cycle: int) -> list[tuple[int, bytes]]:
    """The queue the flips are made in; (index, payload) of every excerpt."""
    rc = ac.RollCycles.by_name(roll)
    clock = ac.SetTimeProvider(T0)
    out: list[tuple[int, bytes]] = []
    with ac.open_queue(path, roll_cycle=rc, time_provider=clock, block_size=BLOCK) as q:
        a = q.appender()
        for c in range(cycles):
            if c:
                clock.advance_millis(rc.length_ms)
            for _ in range(per_cycle):
                p = payload(len(out))
                out.append((a.append(p), p))
    gc.collect()
    return out


# --------------------------------------------------------------------------
# where the bits are
# --------------------------------------------------------------------------


def documents(data: bytes) -> list[tuple[str, int, int]]:
    """(kind, position, end) of every document of a pristine cycle file
    (dataFormat 1: 4-byte aligned), the file's header document first."""
    out = []
    pos = 0
    while pos + 4 <= len(data):
        word = int.from_bytes(data[pos:pos + 4], "little")
        if word == 0 or word & HDR_NOT_COMPLETE:
            break
        end = pos + 4 + (word & LENGTH_MASK)
        out.append(("meta" if word & HDR_META else "data", pos, end))
        pos = (end + 3) & ~3
    return out


def region_of(data: bytes, docs: list[tuple[str, int, int]], off: int) -> str:
    """What the byte at ``off`` of a pristine cycle file is part of."""
    for n, (kind, pos, end) in enumerate(docs):
        if pos <= off < pos + 4:
            return ("store-header-word" if n == 0 else
                    "excerpt-header" if kind == "data" else "index-header")
        if pos + 4 <= off < end:
            if n == 0:
                return _header_field(data, end, off)
            return "excerpt-body" if kind == "data" else "index-page"
        if end <= off < ((end + 3) & ~3):
            return "padding"
    return "beyond-data"


def into_padding(data: bytes, docs: list[tuple[str, int, int]], off: int, bit: int) -> bool:
    """Whether the flip lengthens a data excerpt into its own zero padding
    (its aligned end unchanged): the excerpt then reads with zero bytes more,
    and nothing in the format can tell (no checksums, no other record of the
    length)."""
    for kind, pos, end in docs:
        if kind == "data" and off == pos and bit < 2:
            grown = end + (1 << bit) if not (end - pos - 4) >> bit & 1 else end
            return grown > end and (grown + 3) & ~3 == (end + 3) & ~3
    return False


def _header_field(data: bytes, end: int, off: int) -> str:
    """The field of the store header document holding ``off`` (by name)."""
    names = [b"writePosition", b"indexing", b"indexCount", b"indexSpacing", b"index2Index",
             b"lastIndex", b"dataFormat"]
    found = sorted((data.find(n, 0, end) - 1, n.decode()) for n in names
                   if data.find(n, 0, end) > 0)
    what = "header"
    for at, name in found:
        if off >= at:
            what = f"header.{name}"
    return what


def targets(base: str, head: int, n_random: int, seed: int) -> list[dict[str, Any]]:
    """The flips: every bit of the middle cycle file's first ``head`` bytes, then
    random bits of excerpt header words and of index pages (all cycles)."""
    rng = random.Random(seed)
    files = sorted(p for p in os.listdir(base) if p.endswith(".cq4"))
    out: list[dict[str, Any]] = []

    def add(name: str, off: int, bit: int) -> None:
        data = Path(base, name).read_bytes()
        docs = documents(data)
        out.append({"file": name, "off": off, "bit": bit, "region": region_of(data, docs, off),
                    "into_padding": into_padding(data, docs, off, bit)})

    mid = files[len(files) // 2]
    size = len(Path(base, mid).read_bytes())
    for off in range(min(head, size)):
        for bit in range(8):
            add(mid, off, bit)
    headers: list[tuple[str, int]] = []
    pages: list[tuple[str, int, int]] = []
    for name in files:
        docs = documents(Path(base, name).read_bytes())
        headers += [(name, pos) for kind, pos, _ in docs if kind == "data"]
        pages += [(name, pos, end) for kind, pos, end in docs[1:] if kind == "meta"]
    for _ in range(n_random):
        name, pos = rng.choice(headers)
        add(name, pos + rng.randrange(4), rng.randrange(8))
    for _ in range(n_random):
        name, pos, end = rng.choice(pages)
        add(name, rng.randrange(pos, end), rng.randrange(8))
    return out


# --------------------------------------------------------------------------
# one flip
# --------------------------------------------------------------------------


class Wrong(Exception):
    """A call returned a value other than what was written."""


def read_queue(path: str, expected: list[tuple[int, bytes]], stride: int) -> None:
    """Every way of reading the queue; raises Wrong, a ChronicleError, or nothing."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ac.open_queue(path, read_only=True, timeout=0.05) as q:
            t = q.tailer()
            got = []
            while (e := t.read_nowait()) is not None:
                got.append((e.index, e.payload))
                if len(got) > len(expected) + 16:
                    break
            if got != expected:
                raise Wrong(_first_difference("forward read", got, expected))
            t = q.tailer()
            for index, data in expected[::stride] + expected[-1:]:
                if not t.move_to_index(index):
                    raise Wrong(f"move_to_index({index:#x}) returned False")
                e = t.read_nowait()
                if e is None or (e.index, e.payload) != (index, data):
                    raise Wrong(f"move_to_index({index:#x}) then read gave {e!r}")
            if q.first_index != expected[0][0] or q.last_index != expected[-1][0]:
                raise Wrong(f"first/last index {q.first_index}/{q.last_index}")
            if t.to_end().index != expected[-1][0] + 1:
                raise Wrong(f"to_end() at {t.index:#x}")


def _first_difference(what: str, got: list[tuple[int, bytes]],
                      expected: list[tuple[int, bytes]]) -> str:
    for k, (g, x) in enumerate(zip(got, expected, strict=False)):
        if g != x:
            return f"{what}: #{k} is {g[0]:#x} {g[1][:16]!r}, expected {x[0]:#x} {x[1][:16]!r}"
    return f"{what}: {len(got)} excerpts of {len(expected)}"


def outcome(path: str, expected: list[tuple[int, bytes]], stride: int) -> tuple[str, str]:
    try:
        read_queue(path, expected, stride)
    except Wrong as exc:
        return "wrong", str(exc)
    except ac.ChronicleError as exc:
        return "named", f"{type(exc).__name__}: {exc}"
    except Exception:
        return "crash", traceback.format_exc(limit=4)
    return "correct", ""


def check_rc(path: str) -> int:
    """The exit status ``aiochronicle check`` gives (0 clean, 3 warnings, 4 errors)."""
    try:
        found = ac.check_queue(path)
    except ac.ChronicleError:
        return 4
    sev = {f.severity for f in found}
    return 4 if "error" in sev else 3 if "warning" in sev else 0


def intact(base: str, flip: dict[str, Any], expected: list[tuple[int, bytes]]
           ) -> list[tuple[int, bytes]]:
    """The excerpts whose header and payload the flip left alone."""
    name = flip["file"]
    files = sorted(p for p in os.listdir(base) if p.endswith(".cq4"))
    hit: set[int] = set()
    seen = 0
    for f in files:
        for kind, pos, end in documents(Path(base, f).read_bytes()):
            if kind != "data":
                continue
            if f == name and pos <= flip["off"] < end:
                hit.add(seen)
            seen += 1
    return [x for k, x in enumerate(expected) if k not in hit]


def repaired(path: str, keep: list[tuple[int, bytes]]) -> tuple[str, str]:
    """Repair the flipped copy; then every excerpt in ``keep`` must read at its index."""
    try:
        found = ac.repair_queue(path, lock_timeout=0.5)
    except ac.ChronicleError as exc:
        return "refused", f"{type(exc).__name__}: {exc}"
    except Exception:
        return "crash", traceback.format_exc(limit=4)
    left = [f for f in found if f.severity == "error" and not f.repaired]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with ac.open_queue(path, read_only=True, timeout=0.05) as q:
                t = q.tailer()
                for index, data in keep:
                    if not t.move_to_index(index):
                        return "moved", f"{index:#x} is gone"
                    e = t.read_nowait()
                    if e is None or e.payload != data:
                        return "moved", f"{index:#x} reads {e!r}"
    except ac.ChronicleError as exc:
        if left:
            return "refused", f"{left[0]}; then {type(exc).__name__}: {exc}"
        return "moved", f"after a repair reporting success: {type(exc).__name__}: {exc}"
    return "kept", ""


def run_flips(base: str, work: str, flips: list[dict[str, Any]], first: int,
              expected: list[tuple[int, bytes]], stride: int, repair: bool) -> None:
    """The child: each flip in a fresh copy; one JSON line per flip on stdout."""
    qdir = os.path.join(work, "q")
    for k, flip in enumerate(flips[first:], first):
        faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
        shutil.rmtree(qdir, ignore_errors=True)
        shutil.copytree(base, qdir)
        with open(os.path.join(qdir, flip["file"]), "r+b") as f:
            f.seek(flip["off"])
            byte = f.read(1)[0]
            f.seek(flip["off"])
            f.write(bytes([byte ^ (1 << flip["bit"])]))
        res = dict(flip, n=k)
        res["read"], res["detail"] = outcome(qdir, expected, stride)
        if res["read"] != "correct":
            res["check"] = check_rc(qdir)
        if repair:
            res["repair"], res["repair_detail"] = repaired(qdir, intact(base, flip, expected))
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(res), flush=True)
        gc.collect()


# --------------------------------------------------------------------------
# the parent
# --------------------------------------------------------------------------


def run_slice(work: str, lo: int, hi: int) -> list[dict[str, Any]]:
    """Flips lo..hi in children; a child that dies (crash, hang) costs its flip."""
    out: list[dict[str, Any]] = []
    at = lo
    while at < hi:
        r = subprocess.run([sys.executable, __file__, "--child", work, str(at), str(hi)],
                           capture_output=True, text=True)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        out += lines
        at += len(lines)
        if r.returncode != 0 and at < hi:
            plan = json.loads(Path(work, "plan.json").read_text())
            out.append(dict(plan["flips"][at], n=at, read="crash",
                            detail=f"child died ({r.returncode}): {r.stderr[-600:]}"))
            at += 1
    return out


def campaign(work: str, roll: str, cycles: int, per_cycle: int, head: int, n_random: int,
             seed: int, stride: int, repair: bool, jobs: int) -> list[dict[str, Any]]:
    base = os.path.join(work, "base")
    expected = make_queue(base, roll, cycles, per_cycle)
    flips = targets(base, head, n_random, seed)
    Path(work, "plan.json").write_text(json.dumps({
        "base": base, "flips": flips, "expected": [(i, p.hex()) for i, p in expected],
        "stride": stride, "repair": repair}))
    bounds = [len(flips) * j // jobs for j in range(jobs + 1)]
    procs = []
    for j in range(jobs):
        w = os.path.join(work, f"w{j}")
        os.makedirs(w, exist_ok=True)
        shutil.copy(os.path.join(work, "plan.json"), w)
        procs.append((w, bounds[j], bounds[j + 1]))
    results: list[dict[str, Any]] = []
    if jobs == 1:
        results = run_slice(*procs[0])
    else:
        with ThreadPoolExecutor(jobs) as ex:
            for part in ex.map(lambda p: run_slice(*p), procs):
                results += part
    return results


def child(work: str, lo: int, hi: int) -> None:
    plan = json.loads(Path(work, "plan.json").read_text())
    expected = [(i, bytes.fromhex(p)) for i, p in plan["expected"]]
    run_flips(plan["base"], work, plan["flips"][:hi], lo, expected, plan["stride"],
              plan["repair"])


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts: read outcomes, per region the flips that were not correct, check
    runs that said nothing of a changed read, repair outcomes."""
    reads = Counter(r["read"] for r in results)
    regions: dict[str, Counter[str]] = {}
    for r in results:
        regions.setdefault(r["region"], Counter())[r["read"]] += 1
    return {
        "flips": len(results),
        "read": dict(reads),
        "wrong_into_padding": sum(1 for r in results
                                  if r["read"] == "wrong" and r["into_padding"]),
        "by_region": {k: dict(v) for k, v in sorted(regions.items())},
        "check_silent": sum(1 for r in results if r.get("check") == 0),
        "repair": dict(Counter(r["repair"] for r in results if "repair" in r)),
    }


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--roll", default="FAST_DAILY")
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--per-cycle", type=int, default=1000)
    ap.add_argument("--head", type=lambda s: int(s, 0), default=0x300)
    ap.add_argument("--random", type=int, default=100, help="flips each in excerpt headers "
                    "and in index pages")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--stride", type=int, default=1, help="move_to_index every n-th index")
    ap.add_argument("--repair", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--out", help="write one JSON line per flip here")
    ap.add_argument("--show", type=int, default=5, help="print this many flips per outcome "
                    "that is not correct")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bitflips-")
    try:
        results = campaign(work, args.roll, args.cycles, args.per_cycle, args.head,
                           args.random, args.seed, args.stride, args.repair, args.jobs)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results))
    for kind in ("wrong", "crash"):
        for r in [r for r in results if r["read"] == kind][:args.show]:
            print(f"{kind}: {r['file']} @{r['off']:#x} bit {r['bit']} ({r['region']}): "
                  f"{r['detail'][:300]}")
    for r in [r for r in results if r.get("repair") in ("moved", "crash")][:args.show]:
        print(f"repair {r['repair']}: {r['file']} @{r['off']:#x} bit {r['bit']} "
              f"({r['region']}): {r['repair_detail'][:300]}")
    print(json.dumps(summary(results), indent=1))


if __name__ == "__main__":
    main()
