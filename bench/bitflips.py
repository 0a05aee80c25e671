"""Single-bit flips in cycle files: does every read path return what it
returns on the clean queue or raise a named error, and does ``repair`` keep
every intact excerpt at its index?

Run:  .venv/bin/python bench/bitflips.py [--roll FAST_DAILY] [--cycles 3]
          [--per-cycle 1000] [--sizes 1-5120] [--fixture TAR] [--head 0x300]
          [--per-field N] [--eof] [--random 200] [--tail-subprocess N]
          [--spark N] [--repair] [--jobs 2]

The issue-31 sweeps:
  --roll TEST4_SECONDLY --cycles 3 --per-cycle 1000 --seed 8   (6,344 flips)
  --roll DAILY --cycles 2 --per-cycle 2000 --sizes 1-5120 --head -1 --eof
      --random 194 --seed 41                                   (2,020 flips)

A queue of ``--cycles`` cycle files of ``--per-cycle`` excerpts each is made
once (or extracted from a Java fixture, ``--fixture``).  The flips: every bit
of the middle cycle file's first ``--head`` bytes (its header document,
index2index page and first index page; ``-1``: the header document), or
``--per-field`` random bits of each header field; every bit of every EOF
marker (``--eof``); then ``--random`` bits each in excerpt header words and in
index pages (of every cycle).  Regions are named by header field
(``header.dataFormat``, ``header.roll`` ...).  Each flip is made in a fresh
copy of the queue, which is then read every way:

* forward and backward (``TailerDirection.BACKWARD`` from ``to_end()``);
* ``move_to_index`` for every index (or every ``--stride``-th) and for absent
  ones (past each cycle's end, before the first and after the last cycle),
  and the excerpt read there;
* ``first_index``, ``last_index`` and ``to_end()``;
* ``aiochronicle tail`` (its code in the child; every ``--tail-subprocess``-th
  flip as a process of its own) and ``aiochronicle dump``;
* with ``--spark N``, both Spark engines on N flips.

Each path is **correct** when it gives what it gives on the clean queue,
**named** when it raised a ``ChronicleError`` (a command: exited non-zero
saying ``error:``), **wrong** otherwise, **crash** for any other exception.
A flip is **silently wrong** when a path is wrong, the child hung, or
``check`` called the queue clean although a read changed.  One kind of flip no
reader can catch: a low length bit of an excerpt header set so that the
length grows into the excerpt's own zero padding (its 4-byte aligned end
unchanged); ``wrong_into_padding`` counts those.

With ``--repair`` each flipped copy is then repaired (``repair_queue``), and
every excerpt whose bytes the flip did not touch must read at its index with
its payload (``moved`` counts repairs that lost or renumbered one); a repair
may instead refuse, with a named error or by leaving a finding unrepaired.

Flips run in child processes (``--jobs`` of them, each a slice), so a crash or
a hang is counted, not fatal; one JSON line per flip goes to ``--out`` (and,
as they finish, to ``done.jsonl`` in each worker's directory).
``tests/test_bitflips.py`` runs this, smaller, in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import hashlib
import io
import itertools
import json
import os
import random
import re
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
from aiochronicle._format._render import DecodedPayload, register_decoder

T0 = 1_637_251_500_000  # 2021-11-18 16:05:00 UTC
BLOCK = 64 << 10
STEP_TIMEOUT = 30  # seconds one flipped queue may take before its child dumps and dies
HDR_META = 0x40000000
HDR_NOT_COMPLETE = 0x80000000
HDR_EOF = 0xC0000000
LENGTH_MASK = 0x3FFFFFFF


def payload(i: int) -> bytes:
    """Distinct payloads of varied lengths (not all 4-aligned), text and binary."""
    body = bytes(((i * 131 + k * 29) ^ (k >> 2)) & 0xFF for k in range(i % 19 + 1))
    return b"x%05d:" % i + body


def make_queue(path: str, roll: str, cycles: int, per_cycle: int,
               sizes: list[bytes] | None = None) -> list[tuple[int, bytes]]:
    """The queue the flips are made in; (index, payload) of every excerpt
    (``sizes``: these payloads instead of ``payload(i)``)."""
    rc = ac.RollCycles.by_name(roll)
    clock = ac.SetTimeProvider(T0)
    out: list[tuple[int, bytes]] = []
    with ac.open_queue(path, roll_cycle=rc, time_provider=clock, block_size=BLOCK) as q:
        a = q.appender()
        for c in range(cycles):
            if c:
                clock.advance_millis(rc.length_ms)
            for _ in range(per_cycle):
                p = sizes[len(out)] if sizes else payload(len(out))
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
        if word == HDR_EOF:
            out.append(("eof", pos, pos + 8 if data[pos + 4:pos + 8] == b"\xc3EOF" else pos + 4))
            break
        if word == 0 or word & HDR_NOT_COMPLETE:
            break
        end = pos + 4 + (word & LENGTH_MASK)
        out.append(("meta" if word & HDR_META else "data", pos, end))
        pos = (end + 3) & ~3
    return out


def region_of(data: bytes, docs: list[tuple[str, int, int]], off: int) -> str:
    """What the byte at ``off`` of a pristine cycle file is part of."""
    for n, (kind, pos, end) in enumerate(docs):
        if kind == "eof":
            if pos <= off < end:
                return "eof-marker"
            continue
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


# every field name the header documents of Chronicle 4 and 5 hold (Java's
# MetaDataField, SCQSRoll, SCQSIndexing, TimedStoreRecovery)
HEADER_FIELDS = ("wireType", "writePosition", "roll", "length", "format", "epoch", "indexing",
                 "indexCount", "indexSpacing", "index2Index", "lastIndex", "dataFormat",
                 "lastAcknowledgedIndexReplicated", "recovery", "timeStamp",
                 "deltaCheckpointInterval", "lastIndexReplicated", "sourceId")


def header_fields(data: bytes, end: int) -> list[tuple[int, str]]:
    """(offset, name) of every field of the store header document: each is a
    BinaryWire field name (code 0xC0 + length, then the name)."""
    out = []
    for name in HEADER_FIELDS:
        tag = bytes([0xC0 + len(name)]) + name.encode()
        at = data.find(tag, 4, end)
        if at > 0:
            out.append((at, name))
    return sorted(out)


def _header_field(data: bytes, end: int, off: int) -> str:
    """The field of the store header document holding ``off`` (by name; the
    bytes before the first field are the event name and type)."""
    what = "header.event"
    for at, name in header_fields(data, end):
        if off >= at:
            what = f"header.{name}"
    return what


def targets(base: str, head: int, n_random: int, seed: int, *, per_field: int = 0,
            eof: bool = False) -> list[dict[str, Any]]:
    """The flips: every bit of the middle cycle file's first ``head`` bytes (-1:
    its header document), or with ``per_field`` that many random bits of each
    field of that header document and then every bit of the rest of the first
    ``head`` bytes; with ``eof`` every bit of every cycle's EOF marker; then
    random bits of excerpt header words and of index pages (all cycles)."""
    rng = random.Random(seed)
    files = sorted(p for p in os.listdir(base) if p.endswith(".cq4"))
    out: list[dict[str, Any]] = []
    cache: dict[str, tuple[bytes, list[tuple[str, int, int]]]] = {}

    def add(name: str, off: int, bit: int) -> None:
        if name not in cache:
            data = Path(base, name).read_bytes()
            cache[name] = data, documents(data)
        data, docs = cache[name]
        out.append({"file": name, "off": off, "bit": bit, "region": region_of(data, docs, off),
                    "into_padding": into_padding(data, docs, off, bit)})

    mid = files[len(files) // 2]
    mdata = Path(base, mid).read_bytes()
    hdr_end = documents(mdata)[0][2]
    if head < 0:
        head = hdr_end
    start = 0
    if per_field:
        fields = [(0, "event"), *header_fields(mdata, hdr_end), (hdr_end, "")]
        for (lo, _), (hi, _) in itertools.pairwise(fields):
            bits = [(o, b) for o in range(lo, hi) for b in range(8)]
            for o, b in sorted(rng.sample(bits, min(per_field, len(bits)))):
                add(mid, o, b)
        start = hdr_end
    for off in range(start, min(head, len(mdata))):
        for bit in range(8):
            add(mid, off, bit)
    if eof:
        for name in files:
            for kind, pos, end in documents(Path(base, name).read_bytes()):
                if kind == "eof":
                    for off in range(pos, end):
                        for bit in range(8):
                            add(name, off, bit)
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


PATHS = ("forward", "backward", "move_to_index", "ends", "tail", "dump")


def probes(expected: list[tuple[int, bytes]], shift: int, stride: int) -> list[int]:
    """The indices ``move_to_index`` is asked for: every ``stride``-th index
    written (and the last of each cycle), and absent ones: one and two past
    each cycle's last excerpt, the last sequence a cycle can hold, and
    sequence 0 of the cycles before the first and after the last."""
    mask = (1 << shift) - 1
    out = [i for i, _ in expected[::stride]]
    last: dict[int, int] = {}
    for i, _ in expected:
        last[i >> shift] = i
    for cyc, i in sorted(last.items()):
        out += [i, i + 1, i + 2, (cyc << shift) | mask]
    cycles = sorted(last)
    if cycles:
        out += [(cycles[0] - 1) << shift, (cycles[-1] + 1) << shift]
    return list(dict.fromkeys(out))


def _read_all(t: Any, cap: int) -> list[tuple[int, bytes]]:
    got = []
    while (e := t.read_nowait()) is not None:
        got.append((e.index, e.payload))
        if len(got) > cap:
            break
    return got


def _moves(q: Any, indices: list[int]) -> list[Any]:
    """move_to_index of every probe: (found, index, payload read there), or
    the named error's class name for that probe."""
    out: list[Any] = []
    t = q.tailer()
    for index in indices:
        try:
            if not t.move_to_index(index):
                out.append([False])
                continue
            e = t.read_nowait()
            out.append([True, None] if e is None else [True, e.index, e.payload.hex()])
        except ac.ChronicleError as exc:
            out.append(type(exc).__name__)
            t = q.tailer()
    return out


def _cli(argv: list[str], subprocess_: bool) -> tuple[int, str, str]:
    """``aiochronicle ARGV``: (exit status, stdout, stderr)."""
    if subprocess_:
        try:
            r = subprocess.run([sys.executable, "-m", "aiochronicle", *argv],
                               capture_output=True, text=True, timeout=STEP_TIMEOUT / 2)
        except subprocess.TimeoutExpired:
            return -999, "", "timed out"
        return r.returncode, r.stdout, r.stderr
    from aiochronicle._cli import main as cli_main  # the command's own code, in process
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli_main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, out.getvalue(), err.getvalue()


def _digest(payload: bytes) -> str:
    return hashlib.blake2b(payload, digest_size=8).hexdigest()


register_decoder("digest", lambda p: DecodedPayload("digest", _digest(p), _digest(p),
                                                    _digest(p)))
_DUMP_RECORD = re.compile(r"^# position: \d+, header: (\d+), index: (0x[0-9a-f]+)$")
_DUMP_DAMAGE = ("corrupt", "incomplete", "not BinaryWire", "skipped")


def _failed(rc: int, err: str) -> str:
    """A command's failure: named (it said ``error: ...``) or a crash (a
    traceback, a signal, a hang)."""
    return "named" if rc > 0 and ": error: " in err and "Traceback" not in err else "crash"


def observe(path: str, cap: int, indices: list[int], tail_subprocess: bool
            ) -> dict[str, list[Any]]:
    """What every read path gives for the queue at ``path``: per path
    ["ok", value], ["named", message] or ["crash", traceback]."""
    res: dict[str, list[Any]] = {}

    def run(name: str, fn: Any) -> None:
        try:
            res[name] = ["ok", fn()]
        except ac.ChronicleError as exc:
            res[name] = ["named", f"{type(exc).__name__}: {exc}"[:300]]
        except Exception:
            res[name] = ["crash", traceback.format_exc(limit=4)[-600:]]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            q = ac.open_queue(path, read_only=True, timeout=0.05)
        except ac.ChronicleError as exc:
            for name in PATHS[:4]:
                res[name] = ["named", f"{type(exc).__name__}: {exc}"[:300]]
            q = None
        if q is not None:
            with q:
                run("forward", lambda: [[i, p.hex()] for i, p in _read_all(q.tailer(), cap)])
                run("backward", lambda: [[i, p.hex()] for i, p in _read_all(
                    q.tailer(direction=ac.TailerDirection.BACKWARD).to_end(), cap)])
                run("move_to_index", lambda: _moves(q, indices))
                run("ends", lambda: [q.first_index, q.last_index, q.tailer().to_end().index])
    # in this process the payloads print as a short digest (rendering megabytes
    # of hex for every flip would cost more than all the reads); a process of
    # its own prints them in hex, and the digest of that is compared
    rc, out, err = _cli(["tail", "--json", "--decode", "hex" if tail_subprocess else "digest",
                         path], tail_subprocess)
    if rc == 0:
        res["tail"] = ["ok", [[r["index"], _digest(bytes.fromhex(r["payload"]))
                               if tail_subprocess else r["payload"]]
                              for r in map(json.loads, out.splitlines())]]
    else:
        res["tail"] = [_failed(rc, err), f"rc {rc}: {err[-300:]}"]
    rc, out, err = _cli(["dump", "--decode", "digest", path], False)
    lines = out.splitlines()
    recs = [[m.group(2), lines[k + 2] if k + 2 < len(lines) else ""]
            for k, line in enumerate(lines) if (m := _DUMP_RECORD.match(line))]
    if rc == 0 and not any(d in out for d in _DUMP_DAMAGE):
        res["dump"] = ["ok", recs]
    else:
        res["dump"] = [_failed(rc, err) if rc else "named", f"rc {rc}: {err[-300:]}"]
    return res


def compare(ref: dict[str, list[Any]], got: dict[str, list[Any]]) -> dict[str, str]:
    """Per path: correct (as the clean queue), named (a named error), wrong or crash."""
    out = {}
    for name in PATHS:
        kind, value = got[name]
        if kind != "ok":
            out[name] = kind
        elif name == "move_to_index":
            # a probe may raise a named error; any other difference is wrong
            pairs = list(zip(ref[name][1], value, strict=True))
            out[name] = ("wrong" if any(g != r and not isinstance(g, str) for r, g in pairs)
                         else "named" if any(g != r for r, g in pairs) else "correct")
        else:
            out[name] = "correct" if value == ref[name][1] else "wrong"
    return out


def first_difference(ref: dict[str, list[Any]], got: dict[str, list[Any]], name: str) -> str:
    kind, value = got[name]
    if kind != "ok":
        return f"{name}: {value}"
    want = ref[name][1]
    if isinstance(value, list) and isinstance(want, list):
        for k, (g, w) in enumerate(zip(value, want, strict=False)):
            if g != w:
                return f"{name}: #{k} is {str(g)[:60]}, expected {str(w)[:60]}"
        return f"{name}: {len(value)} items of {len(want)}"
    return f"{name}: {value} expected {want}"


def overall(paths: dict[str, str]) -> str:
    """The flip's read outcome: wrong if any path is, then crash, named, correct."""
    for kind in ("wrong", "crash", "named"):
        if kind in paths.values():
            return kind
    return "correct"


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


def copy_queue(src: str, dst: str) -> None:
    """Copy a queue directory, leaving the holes of its sparse files holes."""
    os.makedirs(dst)
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as fi, open(os.path.join(dst, name), "wb") as fo:
            size = os.fstat(fi.fileno()).st_size
            at = 0
            while at < size:
                try:
                    at = os.lseek(fi.fileno(), at, os.SEEK_DATA)
                except OSError:  # only a hole is left
                    break
                end = os.lseek(fi.fileno(), at, os.SEEK_HOLE)
                fi.seek(at)
                fo.seek(at)
                fo.write(fi.read(end - at))
                at = end
            fo.truncate(size)


def run_flips(base: str, work: str, flips: list[dict[str, Any]], first: int,
              plan: dict[str, Any]) -> None:
    """The child: each flip in a fresh copy; one JSON line per flip on stdout."""
    qdir = os.path.join(work, "q")
    expected = [(i, bytes.fromhex(p)) for i, p in plan["expected"]]
    ref = plan["reference"]
    for k, flip in enumerate(flips[first:], first):
        faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
        shutil.rmtree(qdir, ignore_errors=True)
        copy_queue(base, qdir)
        with open(os.path.join(qdir, flip["file"]), "r+b") as f:
            f.seek(flip["off"])
            byte = f.read(1)[0]
            f.seek(flip["off"])
            f.write(bytes([byte ^ (1 << flip["bit"])]))
        res = dict(flip, n=k)
        every = plan["tail_subprocess"]
        res["tail_process"] = bool(every) and k % every == 0
        got = observe(qdir, len(expected) + 16, plan["probes"], res["tail_process"])
        res["paths"] = compare(ref, got)
        res["read"] = overall(res["paths"])
        bad = [n for n in PATHS if res["paths"][n] != "correct"]
        res["detail"] = "; ".join(first_difference(ref, got, n) for n in bad)[:900]
        if res["read"] != "correct":
            res["check"] = check_rc(qdir)
        if plan["repair"]:
            res["repair"], res["repair_detail"] = repaired(qdir, intact(base, flip, expected))
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(res), flush=True)
        with open(os.path.join(work, "done.jsonl"), "a") as f:  # what a cut-short run kept
            f.write(json.dumps(res) + "\n")
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
            hung = "Timeout (" in r.stderr
            out.append(dict(plan["flips"][at], n=at, read="hang" if hung else "crash",
                            paths={}, check=None,
                            detail=f"child died ({r.returncode}): {r.stderr[-600:]}"))
            at += 1
    return out


def sized_payloads(n: int, lo: int, hi: int, seed: int) -> list[bytes]:
    """``n`` payloads of ``lo``..``hi`` bytes (seeded), each starting with its number."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        size = rng.randint(lo, hi)
        body = (b"%d:" % i + bytes(rng.getrandbits(8) for _ in range(min(size, 64))))
        out.append((body * (size // len(body) + 1))[:size])
    return out


def make_base(base: str, args: argparse.Namespace) -> list[tuple[int, bytes]]:
    """The clean queue (made, or a fixture extracted) and what it holds."""
    if args.fixture:
        os.makedirs(base)
        subprocess.run(["tar", "--sparse", "-xjf", args.fixture, "-C", base], check=True)
        inner = [d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))]
        tmp = base + ".x"
        os.rename(os.path.join(base, inner[0]), tmp)
        shutil.rmtree(base)
        os.makedirs(base)
        for name in os.listdir(tmp):  # holes where the archive has zeros
            with open(os.path.join(tmp, name), "rb") as fi, \
                    open(os.path.join(base, name), "wb") as fo:
                while chunk := fi.read(BLOCK):
                    if chunk.count(0) == len(chunk):
                        fo.seek(len(chunk), os.SEEK_CUR)
                    else:
                        fo.write(chunk)
                fo.truncate()
        shutil.rmtree(tmp)
        with ac.open_queue(base, read_only=True) as q:
            return _read_all(q.tailer(), 1 << 30)
    sizes = None
    if args.sizes:
        lo, _, hi = args.sizes.partition("-")
        sizes = sized_payloads(args.cycles * args.per_cycle, int(lo), int(hi), args.seed)
    return make_queue(base, args.roll, args.cycles, args.per_cycle, sizes)


def campaign(work: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    base = os.path.join(work, "base")
    expected = make_base(base, args)
    flips = targets(base, args.head, args.random, args.seed, per_field=args.per_field,
                    eof=args.eof)
    with ac.open_queue(base, read_only=True) as q:
        shift = q.roll_cycle.cycle_shift
    indices = probes(expected, shift, args.stride)
    clean = os.path.join(work, "clean")
    shutil.copytree(base, clean)
    ref = observe(clean, len(expected) + 16, indices, False)
    assert all(v[0] == "ok" for v in ref.values()), ref
    assert ref["forward"][1] == [[i, p.hex()] for i, p in expected]
    Path(work, "plan.json").write_text(json.dumps({
        "base": base, "flips": flips, "expected": [(i, p.hex()) for i, p in expected],
        "probes": indices, "reference": ref, "tail_subprocess": args.tail_subprocess,
        "repair": args.repair}))
    jobs = args.jobs
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
    run_flips(plan["base"], work, plan["flips"][:hi], lo, plan)


def spark_reads(work: str, results: list[dict[str, Any]], n: int, seed: int) -> None:
    """Both Spark engines (``engine=jvm`` and ``engine=python``) on ``n`` of the
    flips (those a library path did not read as on the clean queue first, then
    a seeded sample of the rest), each re-made in a fresh copy: the rows must
    be what the clean queue gives, or the read fails naming the damage.  Sets
    ``spark_jvm`` and ``spark_python`` of those flips."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from aiochronicle.spark import jar_path, register

    plan = json.loads(Path(work, "plan.json").read_text())
    want = sorted((i, bytes.fromhex(p)) for i, p in plan["expected"])
    picked = [r for r in results if r["read"] != "correct"]
    rest = [r for r in results if r["read"] == "correct"]
    random.Random(seed).shuffle(picked)
    random.Random(seed).shuffle(rest)
    picked = (picked + rest)[:n]
    session = (SparkSession.builder.master("local[1]").appName("bitflips")
               .config("spark.jars", str(jar_path())).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    register(session)
    qdir = os.path.join(work, "spark-q")
    try:
        for r in picked:
            shutil.rmtree(qdir, ignore_errors=True)
            copy_queue(plan["base"], qdir)
            with open(os.path.join(qdir, r["file"]), "r+b") as f:
                f.seek(r["off"])
                byte = f.read(1)[0]
                f.seek(r["off"])
                f.write(bytes([byte ^ (1 << r["bit"])]))
            for engine in ("jvm", "python"):
                try:
                    rows = (session.read.format("chronicle").option("engine", engine)
                            .load(qdir).select("index", "payload").collect())
                    got = sorted((row[0], bytes(row[1])) for row in rows)
                    r[f"spark_{engine}"] = "correct" if got == want else "wrong"
                    if got != want:
                        r["detail"] += f"; spark {engine}: {len(got)} rows of {len(want)}"
                except Exception as exc:  # Py4J and PySpark wrap the reader's error
                    text = str(exc)
                    r[f"spark_{engine}"] = ("named" if "Corrupt" in text or "corrupt" in text
                                            else "crash")
                    if r[f"spark_{engine}"] == "crash":
                        r["detail"] += f"; spark {engine}: {text[:300]}"
    finally:
        session.stop()


def silently_wrong(r: dict[str, Any]) -> bool:
    """A read returned other than the clean queue gives with no named error, a
    reader hung, or check called a queue clean whose reads changed (the one
    undetectable kind, a length grown into its own padding, aside)."""
    if r["into_padding"]:
        return False
    spark = {r.get("spark_jvm"), r.get("spark_python")}
    return (r["read"] in ("wrong", "hang") or "wrong" in spark
            or (r["read"] != "correct" and r.get("check") == 0))


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts: flips correct / named error / silently wrong (and crashes), per
    region and per read path the flips that were not correct, check runs that
    said nothing of a changed read, repair outcomes."""
    reads = Counter(r["read"] for r in results)
    regions: dict[str, Counter[str]] = {}
    for r in results:
        regions.setdefault(r["region"], Counter())[
            "silently_wrong" if silently_wrong(r) else r["read"]] += 1
    paths: dict[str, Counter[str]] = {}
    for r in results:
        for name, kind in r.get("paths", {}).items():
            if kind != "correct":
                paths.setdefault(name, Counter())[kind] += 1
    silent = sum(1 for r in results if silently_wrong(r))
    return {
        "flips": len(results),
        "correct": reads["correct"],
        "named": sum(1 for r in results if r["read"] == "named" and not silently_wrong(r)),
        "silently_wrong": silent,
        "crash": reads["crash"],
        "read": dict(reads),
        "wrong_into_padding": sum(1 for r in results
                                  if r["read"] == "wrong" and r["into_padding"]),
        "by_region": {k: dict(v) for k, v in sorted(regions.items())},
        "by_path": {k: dict(v) for k, v in sorted(paths.items())},
        "check_silent": sum(1 for r in results if r.get("check") == 0),
        "spark": {e: dict(Counter(r[f"spark_{e}"] for r in results if f"spark_{e}" in r))
                  for e in ("jvm", "python")},
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
    ap.add_argument("--sizes", metavar="LO-HI", help="payloads of LO..HI bytes (seeded) "
                    "instead of short numbered ones")
    ap.add_argument("--fixture", metavar="TAR", help="flip a queue extracted from this "
                    "archive (tests/fixtures/java) instead of making one")
    ap.add_argument("--head", type=lambda s: int(s, 0), default=0x300,
                    help="every bit of the middle cycle file's first HEAD bytes (-1: its "
                    "header document)")
    ap.add_argument("--per-field", type=int, default=0, help="instead of every bit of the "
                    "header document, this many random bits of each of its fields")
    ap.add_argument("--eof", action="store_true", help="every bit of every EOF marker")
    ap.add_argument("--random", type=int, default=100, help="flips each in excerpt headers "
                    "and in index pages")
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--stride", type=int, default=1, help="move_to_index every n-th index")
    ap.add_argument("--tail-subprocess", type=int, default=1, metavar="N",
                    help="run `aiochronicle tail` as a process of its own for every N-th "
                    "flip (0: never); for the others its code runs in the sweep's process")
    ap.add_argument("--spark", type=int, default=0, metavar="N", help="read N of the flips "
                    "(those not read right first) with both Spark engines too")
    ap.add_argument("--repair", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    ap.add_argument("--out", help="write one JSON line per flip here")
    ap.add_argument("--show", type=int, default=5, help="print this many flips per outcome "
                    "that is not correct")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bitflips-")
    try:
        results = campaign(work, args)
        if args.spark:
            spark_reads(work, results, args.spark, args.seed)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in results))
    for kind in ("wrong", "hang", "crash", "check-silent"):
        for r in [r for r in results if r["read"] == kind or (
                kind == "check-silent" and r.get("check") == 0)][:args.show]:
            print(f"{kind}: {r['file']} @{r['off']:#x} bit {r['bit']} ({r['region']}): "
                  f"{r['detail'][:300]}")
    for r in [r for r in results if r.get("repair") in ("moved", "crash")][:args.show]:
        print(f"repair {r['repair']}: {r['file']} @{r['off']:#x} bit {r['bit']} "
              f"({r['region']}): {r['repair_detail'][:300]}")
    print(json.dumps(summary(results), indent=1))


if __name__ == "__main__":
    main()
