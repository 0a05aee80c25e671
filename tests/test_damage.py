"""Damage that must never hide or lose committed excerpts, nor hang a tool.

* every single-bit flip of a small ``metadata.cq4t``: reads return every
  excerpt or raise a named error (never a silent empty or short read, a
  traceback or a hang), and ``repair`` then restores full reads, keeping the
  named tailers whose records were not hit;
* a FIFO named like a queue file: ``dump`` and ``check`` say so instead of
  blocking forever;
* a queue directory or metadata this process may not read: a named
  ``QueueAccessError`` (a ``PermissionError``) from the API and "permission
  denied" from the CLI, not "not a Chronicle queue";
* seeded random damage to cycle files and the table store: ``repair`` never
  moves an excerpt to another index nor loses one that was readable, and
  gives back every excerpt still intact at its index unless it refuses (and
  says why: damage no flipped bit explains, which padding would renumber).

Campaigns run in a child process (this file run as a script), so a hang or a
crash fails the test instead of killing pytest; the CLI runs as real
``python -m aiochronicle`` processes.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import shutil
import stat
import subprocess
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

import pytest
from rawfile import raw_documents

import aiochronicle as ac

T0 = 1_637_251_500_000  # 2021-11-18 16:05:00 UTC
BLOCK = 64 << 10
PER_CYCLE = 5
CYCLES = 3
N = PER_CYCLE * CYCLES
CHILD_TIMEOUT = 240  # seconds for a whole campaign in the child
STEP_TIMEOUT = 20  # seconds one damaged queue may take before the child dumps and dies


def payload(i: int) -> bytes:
    return b"m%04d-" % i + b"p" * (i % 7)


def make_queue(path: Path, roll_cycle: ac.RollCycle = ac.RollCycles.TEST4_SECONDLY,
               per_cycle: int = PER_CYCLE, cycles: int = CYCLES) -> list[bytes]:
    """A queue of ``cycles`` cycle files and a named tailer ``nt`` that read one excerpt."""
    clock = ac.SetTimeProvider(T0)
    out = []
    with ac.open_queue(path, roll_cycle=roll_cycle, time_provider=clock,
                       block_size=BLOCK) as q:
        a = q.appender()
        for c in range(cycles):
            if c:
                clock.advance_millis(roll_cycle.length_ms)
            for _ in range(per_cycle):
                out.append(payload(len(out)))
                a.append(out[-1])
        q.tailer("nt").read_nowait()
    gc.collect()  # a closed queue's mappings go with the objects: repair looks for them
    return out


def read_all(path: str) -> list[bytes]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ac.open_queue(path, read_only=True, timeout=0.01) as q:
            t = q.tailer()
            out = []
            while (e := t.read_nowait()) is not None:
                out.append(e.payload)
                if len(out) > 4 * N + 100:
                    raise AssertionError("the reader does not stop")
            return out


def run_cli(*args: str, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], capture_output=True,
                          text=True, timeout=timeout, **kw)


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if ": error: " in x]
    assert len(lines) == 1, r.stderr
    return lines[0]


def run_child(*args: str) -> list[dict[str, Any]]:
    """Run a campaign of this file in a child; its JSON result lines."""
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                       timeout=CHILD_TIMEOUT)
    assert r.returncode == 0, f"campaign child failed ({r.returncode}):\n{r.stderr[-4000:]}"
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


# --------------------------------------------------------------------------
# 4. single-bit flips of metadata.cq4t
# --------------------------------------------------------------------------


def _used_length(meta: bytes) -> int:
    return min(len(meta), len(meta.rstrip(b"\0")) + 8)


def campaign_metadata_flips(base: str, work: str) -> None:
    """Flip one bit of every used byte of ``base``'s metadata (bit = offset % 8),
    read, repair through the CLI's code, read again; one JSON line per flip."""
    from aiochronicle._cli import main as cli_main

    expected = read_all(base)
    mpath = os.path.join(base, "metadata.cq4t")
    meta = Path(mpath).read_bytes()
    with ac.open_queue(base, read_only=True) as q:
        tailer_pos = q.table_store_get("index.nt")
    nt_at = meta.find(b"index.nt")
    for pos in range(_used_length(meta)):
        faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
        qdir = os.path.join(work, "q")
        shutil.rmtree(qdir, ignore_errors=True)
        shutil.copytree(base, qdir)
        damaged = bytearray(meta)
        damaged[pos] ^= 1 << (pos % 8)
        Path(qdir, "metadata.cq4t").write_bytes(damaged)
        res: dict[str, Any] = {"pos": pos}
        try:
            got = read_all(qdir)
            res["before"] = "all" if got == expected else f"{len(got)} of {len(expected)}"
        except ac.ChronicleError as exc:
            res["before"] = "named"
            res["error"] = f"{type(exc).__name__}: {exc}"
        except Exception:
            res["before"] = "traceback"
            res["error"] = traceback.format_exc()
        try:
            if res["before"] == "all":
                # nothing to restore: repair (the library call) must just not break it
                ac.repair_queue(qdir, lock_timeout=0.1)
            else:
                with open(os.devnull, "w") as null:
                    stdout, stderr = sys.stdout, sys.stderr
                    sys.stdout = sys.stderr = null
                    try:
                        res["repair_rc"] = cli_main(["repair", "--yes", "--no-backup", qdir])
                    finally:
                        sys.stdout, sys.stderr = stdout, stderr
        except ac.QueueBusyError as exc:  # a flipped lock value naming a live process
            res["repair_error"] = str(exc)
        try:
            got = read_all(qdir)
            res["after"] = "all" if got == expected else f"{len(got)} of {len(expected)}"
            with ac.open_queue(qdir, read_only=True) as q:
                kept = q.table_store_get("index.nt")
            # the named tailer survives unless its own record was hit
            if not nt_at - 8 <= pos < nt_at + 24 and kept != tailer_pos:
                res["after"] = f"named tailer lost: {kept} != {tailer_pos}"
        except Exception:
            res["after"] = "traceback"
            res["error"] = traceback.format_exc()
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(res), flush=True)


def test_single_bit_flips_of_metadata_never_hide_the_queue(tmp_path: Path) -> None:
    base = tmp_path / "base"
    make_queue(base)
    results = run_child("metadata-flips", str(base), str(tmp_path))
    meta = (base / "metadata.cq4t").read_bytes()
    assert len(results) == _used_length(meta)
    bad = [r for r in results if r["before"] not in ("all", "named") or r["after"] != "all"]
    assert not bad, json.dumps(bad[:10], indent=1)
    # a flip in the header's key names or roll settings is read, or named
    named = [r for r in results if r["before"] == "named"]
    assert named and all(r["error"].startswith(("CorruptQueueError", "QueueBusyError"))
                         for r in named), named[:3]


def test_metadata_key_flipped_reads_from_the_files_and_repair_rebuilds(tmp_path: Path) -> None:
    """The key ``metadata`` flipped to ``m%tadata``: the roll cycle comes from the
    file names (not FAST_DAILY over TEST_SECONDLY files, reading nothing);
    ``check`` reports it and ``repair`` rewrites the roll settings."""
    q = tmp_path / "q"
    expected = make_queue(q)
    mpath = q / "metadata.cq4t"
    meta = bytearray(mpath.read_bytes())
    at = meta.find(b"metadata")
    meta[at + 1] ^= 0x40  # 'e' -> '%'
    mpath.write_bytes(meta)
    r = run_cli("tail", str(q))
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == len(expected)
    r = run_cli("check", str(q))
    assert r.returncode == 4 and "bad-metadata" in r.stdout, r.stdout
    r = run_cli("repair", "--yes", str(q))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert b"metadata" in mpath.read_bytes()
    assert read_all(str(q)) == expected
    with ac.open_queue(q, read_only=True) as qq:
        assert qq.roll_cycle.name == "TEST4_SECONDLY"
        assert qq.table_store_get("chronicle.write.lock") == -(1 << 63)
        assert qq.table_store_get("index.nt") is not None


def test_roll_settings_that_name_no_file_are_a_named_error(tmp_path: Path) -> None:
    """Roll length 1000 flipped to 968: the files are named by neither; reading
    must not come back empty, and ``repair`` finds the roll cycle again."""
    q = tmp_path / "q"
    expected = make_queue(q)
    mpath = q / "metadata.cq4t"
    meta = bytearray(mpath.read_bytes())
    at = meta.find(b"length") + len(b"length")
    assert meta[at] == 0xA5 and int.from_bytes(meta[at + 1:at + 3], "little") == 1000
    meta[at + 1] ^= 0x20
    mpath.write_bytes(meta)
    with pytest.raises(ac.CorruptQueueError, match="not named by the roll cycle") as err:
        read_all(str(q))
    assert err.value.path == str(mpath)
    del err  # its traceback holds the half-opened queue's mapping of the metadata
    gc.collect()
    line = one_error_line(run_cli("tail", str(q)))
    assert "repair" in line
    r = run_cli("repair", "--yes", str(q))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert read_all(str(q)) == expected
    assert any(p.name.startswith("metadata.cq4t-") and p.name.endswith(".discard")
               for p in q.iterdir())


# --------------------------------------------------------------------------
# 6. a FIFO named like a queue file
# --------------------------------------------------------------------------


def test_a_fifo_named_like_a_cycle_file_does_not_hang_the_tools(tmp_path: Path) -> None:
    q = tmp_path / "q"
    expected = make_queue(q)
    fifo = q / "20211118-160510T4.cq4"
    os.mkfifo(fifo)
    r = run_cli("dump", str(q), timeout=30)
    assert "not a regular file" in one_error_line(r)
    assert r.stdout.count("--- !!data") >= len(expected)  # the rest is still shown
    r = run_cli("dump", str(fifo), timeout=30)
    assert "FIFO" in one_error_line(r)
    r = run_cli("check", str(q), timeout=30)
    assert r.returncode == 4 and "bad-file" in r.stdout and "not a regular file" in r.stdout
    r = run_cli("stats", str(q), timeout=30)
    assert "not a regular file" in one_error_line(r)
    found = ac.check_queue(str(q))
    assert [f.kind for f in found if f.path == str(fifo)] == ["bad-file"]


# --------------------------------------------------------------------------
# 9. permission denied
# --------------------------------------------------------------------------

PERMISSION_PROBE = r"""
import sys, aiochronicle as ac
for read_only in (True, False):
    try:
        ac.open_queue(sys.argv[1], read_only=read_only)
    except ac.QueueAccessError as exc:
        assert isinstance(exc, PermissionError) and exc.path == sys.argv[2], exc
        print("denied", exc)
    else:
        print("opened")
"""


def _without_privilege(argv: list[str]) -> list[str]:
    """``argv`` run so that file permissions apply to it: as root, without the
    capabilities that let root read and search anything (it stays root, so it
    can still run this interpreter wherever it is installed)."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop root's file capabilities"
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]


def test_unreadable_queue_says_permission_denied(tmp_path: Path) -> None:
    q = tmp_path / "q"
    make_queue(q)
    try:
        os.chmod(q, 0)
        probe = _without_privilege([sys.executable, "-c", PERMISSION_PROBE, str(q), str(q)])
        r = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[0].startswith("denied permission denied"), r.stdout
        assert r.stdout.splitlines()[1].startswith("denied"), r.stdout
        for cmd in ("tail", "dump", "check", "stats"):
            r = subprocess.run(_without_privilege([sys.executable, "-m", "aiochronicle", cmd,
                                                   str(q)]),
                               capture_output=True, text=True, timeout=60)
            line = one_error_line(r)
            assert "permission denied" in line and "not a Chronicle queue" not in line, line
        # the directory readable, its metadata not
        os.chmod(q, 0o755)
        meta = q / "metadata.cq4t"
        os.chmod(meta, 0)
        probe = _without_privilege([sys.executable, "-c", PERMISSION_PROBE, str(q), str(meta)])
        r = subprocess.run(probe, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert [x.split()[0] for x in r.stdout.splitlines()] == ["denied", "denied"], r.stdout
    finally:
        os.chmod(q, stat.S_IRWXU)


# --------------------------------------------------------------------------
# 10. repair gives back every intact excerpt
# --------------------------------------------------------------------------

FUZZ_CASES = 320
FUZZ_SEED = 13
DAMAGES = ("bit-flips", "header-flip", "zero-header", "garbage", "truncate", "index-flip",
           "store-header-flip", "metadata-flip")


def fuzz_payload(i: int) -> bytes:
    """Distinct payloads, text and binary, of varied lengths (not all 4-aligned)."""
    body = bytes(((i * 131 + k * 29) ^ (k >> 2)) & 0xFF for k in range(i % 23 + 3))
    return b"m%04d:" % i + (body if i % 3 else body.hex().encode())


def raw_excerpts(path: str) -> list[tuple[int, int]]:
    """(position, end) of every data document of a pristine cycle file, walked
    from the end of its header document by the format alone (4-byte aligned)."""
    data = Path(path).read_bytes()
    out = []
    pos = (4 + (int.from_bytes(data[:4], "little") & 0x3FFFFFFF) + 3) & ~3
    while pos + 4 <= len(data):
        word = int.from_bytes(data[pos:pos + 4], "little")
        if word == 0 or word & 0x80000000:
            break
        end = pos + 4 + (word & 0x3FFFFFFF)
        if not word & 0x40000000:
            out.append((pos, end))
        pos = (end + 3) & ~3
    return out


def _read_until_error(path: str) -> tuple[list[tuple[int, bytes]], str | None]:
    out: list[tuple[int, bytes]] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with ac.open_queue(path, read_only=True, timeout=0.01) as q:
                t = q.tailer()
                while (e := t.read_nowait()) is not None:
                    out.append((e.index, e.payload))
                    if len(out) > 10_000:
                        return out, "runaway"
    except ac.ChronicleError as exc:
        return out, f"{type(exc).__name__}: {exc}"
    return out, None


def _reachable(path: str, wanted: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The (index, payload) pairs of ``wanted`` that move_to_index finds at
    their index with their payload."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with ac.open_queue(path, read_only=True, timeout=0.01) as q:
            t = q.tailer()
            for index, data in wanted:
                try:
                    if t.move_to_index(index) and (e := t.read_nowait()) is not None \
                            and (e.index, e.payload) == (index, data):
                        out.append((index, data))
                except ac.ChronicleError:
                    pass
    return out


def _damage(rng: Any, qdir: str, kind: str) -> str:
    files = sorted(p for p in os.listdir(qdir) if p.endswith(".cq4"))
    path = os.path.join(qdir, rng.choice(files))
    data = bytearray(Path(path).read_bytes())
    docs = raw_excerpts(path)
    start, end = docs[0][0], docs[-1][1]
    what = f"{kind} {os.path.basename(path)}"
    if kind == "bit-flips":
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(start, end)
            data[at] ^= 1 << rng.randrange(8)
            what += f" @{at:#x}"
    elif kind == "header-flip":
        at = rng.choice(docs)[0] + rng.randrange(4)
        data[at] ^= 1 << rng.randrange(8)
        what += f" @{at:#x}"
    elif kind == "zero-header":
        at = rng.choice(docs)[0]
        data[at:at + 4] = bytes(4)
        what += f" @{at:#x}"
    elif kind == "garbage":
        at = rng.randrange(start, end)
        n = rng.randint(4, 64)
        data[at:at + n] = bytes(rng.randrange(256) for _ in range(n))
        what += f" @{at:#x}+{n}"
    elif kind == "truncate":
        at = rng.randrange(start, end)
        del data[at:]
        what += f" @{at:#x}"
    elif kind == "index-flip":
        at = rng.randrange(4, start)  # the header document and the index pages
        data[at] ^= 1 << rng.randrange(8)
        what += f" @{at:#x}"
    elif kind == "store-header-flip":
        at = rng.randrange(0, 64)
        data[at] ^= 1 << rng.randrange(8)
        what += f" @{at:#x}"
    else:
        path = os.path.join(qdir, "metadata.cq4t")
        data = bytearray(Path(path).read_bytes())
        at = rng.randrange(len(data.rstrip(b"\0")))
        data[at] ^= 1 << rng.randrange(8)
        what = f"{kind} @{at:#x}"
    Path(path).write_bytes(data)
    return what


def campaign_repair_fuzz(base: str, work: str, cases: str, seed: str) -> None:
    """Damage copies of ``base`` (seeded), read, repair, read again; one JSON
    line per case with what was intact, readable and read back."""
    import random

    with ac.open_queue(base, read_only=True) as q:
        written = [(e.index, e.payload) for e in q.tailer()]
    index = {p: i for i, (_, p) in enumerate(written)}
    rng = random.Random(int(seed))
    for case in range(int(cases)):
        faulthandler.dump_traceback_later(STEP_TIMEOUT, exit=True)
        qdir = os.path.join(work, "f")
        shutil.rmtree(qdir, ignore_errors=True)
        shutil.copytree(base, qdir)
        before_files = {n: Path(qdir, n).read_bytes() for n in os.listdir(qdir)}
        kind = DAMAGES[case % len(DAMAGES)]
        what = _damage(rng, qdir, kind)
        # intact: header and body unchanged (and still in the file); "shadowed":
        # intact, but the header before it now claims its bytes (a length grown by
        # a flip), so it reads as part of that excerpt, which repair leaves as is
        intact = []
        shadowed = []
        seen = 0
        for name in sorted(n for n in before_files if n.endswith(".cq4")):
            now = Path(qdir, name).read_bytes()
            old = before_files[name]
            reach = 0  # how far damaged headers before this one claim bytes
            for pos, end in raw_excerpts(os.path.join(base, name)):
                if now[pos:end] == old[pos:end]:
                    intact.append(seen)
                    if pos < reach:
                        shadowed.append(seen)
                elif now[pos:pos + 4] != old[pos:pos + 4] and len(now) >= pos + 4:
                    word = int.from_bytes(now[pos:pos + 4], "little")
                    reach = max(reach, pos + 4 + (word & 0x3FFFFFFF))
                seen += 1
        got_before, err_before = _read_until_error(qdir)
        res: dict[str, Any] = {"case": case, "kind": kind, "what": what}
        refused = []
        try:
            found = ac.repair_queue(qdir, lock_timeout=0.1)
            refused = [str(f) for f in found if f.kind == "broken-chain" and not f.repaired]
        except ac.ChronicleError as exc:
            res["repair_error"] = f"{type(exc).__name__}: {exc}"
        except Exception:
            res["repair_error"] = traceback.format_exc()
            res["traceback"] = True
        got, err_after = _read_until_error(qdir)
        ids = [index[p] for _, p in got if p in index]
        # a payload read at an index other than its own: renumbered
        moved = [index[p] for i, p in got if p in index and written[index[p]][0] != i]
        # what a forward read gave before: each still at its index
        readable = {index[p] for i, p in got_before if p in index and written[index[p]][0] == i}
        at_index = {index[p] for _, p in _reachable(qdir, [written[k] for k in intact])}
        res.update({
            "intact": len(intact), "refused": refused,
            "read_before": len(got_before), "error_before": err_before,
            "read_after": len(got), "error_after": err_after,
            "moved": moved,
            "lost_intact": sorted(set(intact) - at_index - set(shadowed)),
            "shadowed": sorted(set(shadowed) - at_index),
            "lost_readable": sorted(readable - set(ids)),
            "duplicated": len(ids) - len(set(ids)),
            "out_of_order": ids != sorted(ids),
            "garbage": len(got) - len(ids),
        })
        faulthandler.cancel_dump_traceback_later()
        print(json.dumps(res), flush=True)


def make_fuzz_queue(path: Path) -> list[bytes]:
    clock = ac.SetTimeProvider(T0)
    out = []
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST4_DAILY, time_provider=clock,
                       block_size=BLOCK) as q:
        a = q.appender()
        for c in range(2):
            if c:
                clock.advance_millis(86_400_000)
            for _ in range(40):
                out.append(fuzz_payload(len(out)))
                a.append(out[-1])
    gc.collect()
    return out


def test_repair_gives_back_every_intact_excerpt(tmp_path: Path) -> None:
    base = tmp_path / "base"
    expected = make_fuzz_queue(base)
    assert read_all(str(base)) == expected
    results = run_child("repair-fuzz", str(base), str(tmp_path), str(FUZZ_CASES),
                        str(FUZZ_SEED))
    assert len(results) == FUZZ_CASES
    # never renumbered, lost when readable, duplicated, reordered; an intact
    # excerpt not back at its index only where repair refused, and then only
    # in the stretch between two index entries around the damage
    spacing = ac.RollCycles.TEST4_DAILY.index_spacing
    bad = [r for r in results if r["moved"] or r["lost_readable"] or r["duplicated"]
           or r["out_of_order"] or r.get("traceback")
           or (r["lost_intact"] and not r["refused"])
           or len(r["lost_intact"]) > 2 * spacing]
    assert not bad, json.dumps(bad[:5], indent=1)
    # the refusals say why
    refused = [r for r in results if r["refused"]]
    unexplained = [r["refused"] for r in refused if "repair refuses" not in r["refused"][0]]
    assert not unexplained, unexplained[:3]


def test_repaired_cycle_file_takes_appends_and_finds_every_index(tmp_path: Path) -> None:
    """After repair joined a damaged chain (a zeroed header, a garbage one, both
    of metadata documents between the excerpts) the cycle file is one a writer
    and an index lookup use as a fresh one: the padding is skipped, the index
    entries and writePosition match what reads, and every excerpt kept its index."""
    q = tmp_path / "q"
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(q, roll_cycle=ac.RollCycles.TEST4_DAILY, time_provider=clock,
                       block_size=BLOCK) as qq:
        a = qq.appender()
        written = []
        for i in range(40):
            if i in (3, 17):
                a.append_metadata(b"note %d" % i)
            written.append((a.append(fuzz_payload(i)), fuzz_payload(i)))
    gc.collect()
    path = sorted(q.glob("*.cq4"))[-1]
    data = bytearray(path.read_bytes())
    metas = [pos for kind, pos, body in raw_documents(path) if kind == "meta"
             and body.startswith(b"note")]
    assert len(metas) == 2
    data[metas[0]:metas[0] + 4] = bytes(4)
    data[metas[1]:metas[1] + 4] = b"\xff\xff\xff\x7f"  # runs past the end
    path.write_bytes(data)
    r = run_cli("repair", "--yes", "--no-backup", str(q))
    assert r.returncode == 0, (r.stdout, r.stderr)
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(q, time_provider=clock, block_size=BLOCK) as qq:
        a = qq.appender()
        for i in range(20):
            written.append((a.append(b"new%d" % i), b"new%d" % i))
    with ac.open_queue(q, read_only=True) as qq:
        assert [(e.index, e.payload) for e in qq.tailer()] == written
        t = qq.tailer()
        for index, pl in written:
            assert t.move_to_index(index)
            e = t.read_nowait()
            assert e is not None and e.payload == pl, hex(index)
    assert ac.check_queue(str(q)) == []


def test_repair_refuses_to_renumber(tmp_path: Path) -> None:
    """A data excerpt's header zeroed: padding over it would move every excerpt
    after it to the index before its own, so repair refuses, says why, and
    changes nothing; move_to_index still reaches the excerpts past the damage."""
    q = tmp_path / "q"
    make_fuzz_queue(q)
    with ac.open_queue(q, read_only=True) as qq:
        written = [(e.index, e.payload) for e in qq.tailer()]
    path = sorted(q.glob("*.cq4"))[-1]
    docs = raw_excerpts(str(path))
    data = bytearray(path.read_bytes())
    data[docs[9][0]:docs[9][0] + 4] = bytes(4)
    path.write_bytes(data)
    r = run_cli("repair", "--yes", "--no-backup", str(q))
    assert r.returncode == 4, (r.stdout, r.stderr)
    assert "repair refuses" in r.stdout and "other indices" in r.stdout, r.stdout
    assert path.read_bytes() == data
    r = run_cli("check", str(q))
    assert r.returncode == 4 and "broken-chain" in r.stdout, r.stdout
    damaged = 40 + 9  # the second cycle's tenth excerpt
    with ac.open_queue(q, read_only=True) as qq:
        t = qq.tailer()
        with pytest.raises(ac.CorruptQueueError):
            while t.read_nowait() is not None:
                pass
        spacing = ac.RollCycles.TEST4_DAILY.index_spacing
        after = (damaged // spacing + 1) * spacing  # the next indexed excerpt
        for index, pl in written[after:]:
            assert t.move_to_index(index)
            e = t.read_nowait()
            assert e is not None and (e.index, e.payload) == (index, pl)


# --------------------------------------------------------------------------
# the child
# --------------------------------------------------------------------------

CAMPAIGNS = {
    "metadata-flips": campaign_metadata_flips,
    "repair-fuzz": campaign_repair_fuzz,
}

if __name__ == "__main__":
    CAMPAIGNS[sys.argv[1]](*sys.argv[2:])
