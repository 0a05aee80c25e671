"""The ``aiochronicle`` command line, run for real as ``python -m aiochronicle``
against queues written by the library and by Java (the fixtures)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from queue_meta import dead_pid, meta_get, meta_set

import aiochronicle as ac

DAY = 86_400_000
START = 19_000 * DAY
LONG_TEXT = "a much longer item that will need encoding as variable length text"
COMMANDS = ["dump", "tail", "write", "stats", "check", "repair", "unlock", "retention",
            "ping-pong"]
V5 = [0x4A0500000000, 0x4A0500000001, 0x4A0500000002, 0x4A0500000003]


def run(*args: str, stdin: str | None = None, timeout: float = 60,
        **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aiochronicle", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout,
                          **kw)  # type: ignore[call-overload]


def assert_one_line_error(r: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert r.returncode == code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    error_lines = [x for x in lines if ": error: " in x]
    assert len(error_lines) == 1, r.stderr
    return error_lines[0]


@pytest.fixture
def v5(extract_fixture: Callable[..., Path]) -> Path:
    return extract_fixture("cqv5-sample-input.tar.bz2") / "qv5"


@pytest.fixture
def v4(extract_fixture: Callable[..., Path]) -> Path:
    return extract_fixture("cqv4-sample-input.tar.bz2") / "cqv4"


def make_queue(path: Path, cycles: int = 2, per_cycle: int = 5) -> None:
    clock = ac.SetTimeProvider(START)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.TEST_DAILY, time_provider=clock) as q:
        a = q.appender()
        for c in range(cycles):
            if c:
                clock.advance_millis(DAY)
            for i in range(per_cycle):
                a.append_text(f"c{c}-{i}")


def payloads(path: Path) -> list[bytes]:
    with ac.open_queue(path, read_only=True) as q:
        return [e.payload for e in q.tailer()]


# --------------------------------------------------------------------------
# help and usage
# --------------------------------------------------------------------------


def test_help_everywhere() -> None:
    r = run("--help")
    assert r.returncode == 0
    for c in COMMANDS:
        assert c in r.stdout
    for c in COMMANDS:
        r = run(c, "--help")
        assert r.returncode == 0, c
        assert r.stdout.startswith(f"usage: aiochronicle {c}"), c


def test_usage_errors_exit_2() -> None:
    for args in ([], ["frobnicate"], ["tail"], ["tail", "q", "-n", "zz"],
                 ["tail", "q", "-m", "0"], ["tail", "q", "-i", "("],
                 ["retention", "q", "--max-age", "soon"], ["write", "q", "--roll-cycle", "X"]):
        r = run(*args)
        assert r.returncode == 2, args
        assert "Traceback" not in r.stderr
        assert "error:" in r.stderr


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    for cmd in ("dump", "tail", "check"):
        line = assert_one_line_error(run(cmd, missing))
        assert "no such queue" in line
    assert not os.path.exists(missing)
    line = assert_one_line_error(run("tail", str(tmp_path)))
    assert "not a Chronicle queue" in line
    (tmp_path / "notes.txt").write_text("hi")
    assert "not a .cq4" in assert_one_line_error(run("dump", str(tmp_path / "notes.txt")))
    # a corrupt cycle file
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "20220101F.cq4").write_bytes(b"\x99" * 4096)
    assert "not a" in assert_one_line_error(run("dump", str(bad / "20220101F.cq4")))
    # an excerpt header whose length runs past the end of the file
    q = tmp_path / "q"
    assert run("write", str(q), "-q", stdin="a\nb\nc\n").returncode == 0
    (f,) = q.glob("*.cq4")
    with open(f, "r+b") as fh:
        data = fh.read(1 << 17)
        second = data.find(b"\x02\x00\x00\x00\xe1b")  # header of "b" (E1 b)
        assert second > 0
        fh.seek(second)
        fh.write(struct.pack("<I", 0x3FFFFFF0))
    for cmd in ("tail", "dump"):
        line = assert_one_line_error(run(cmd, str(q)))
        assert f"runs past the end of the file ({f} at offset {second:#x})" in line
    r = run("check", str(q))
    assert r.returncode == 4 and "broken-chain" in r.stdout and "0 repairable" in r.stdout
    # no flipped bit explains the header, and padding over "b" would move "c" to
    # index 1: repair refuses, says why, and leaves the file as it is
    before = f.read_bytes()
    r = run("repair", "--yes", "--no-backup", str(q))
    assert r.returncode == 4 and "repair refuses" in r.stdout, (r.stdout, r.stderr)
    assert f.read_bytes() == before


# --------------------------------------------------------------------------
# dump
# --------------------------------------------------------------------------


def test_dump_java_queue(v5: Path) -> None:
    r = run("dump", str(v5))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # no progress bar when stderr is not a terminal
    out = r.stdout
    assert "--- !!meta-data #binary\nheader: !SCQStore {" in out
    assert "# position: 65800, header: 0, index: 0x4a0500000000\n--- !!data #binary\none\n" \
        in out
    assert f"--- !!data #binary\n{LONG_TEXT}\n" in out
    assert "listing.highestCycle: 18949" in out
    r = run("dump", str(v5), "--skip-table-store")
    assert "listing.highestCycle" not in r.stdout
    r = run("dump", str(v5), "--from", "0x4a0500000001", "--to", str(V5[2]), "--decode", "hex")
    assert r.returncode == 0
    assert "e3 74 77 6f" in r.stdout and "e5 74 68 72 65 65" in r.stdout  # E3 two, E5 three
    assert "e3 6f 6e 65" not in r.stdout
    r = run("dump", str(v5 / "20211118F.cq4"))
    assert r.returncode == 0 and "three" in r.stdout


def test_dump_java_v4_queue_and_old_file(v4: Path, java_fixtures: Path, tmp_path: Path) -> None:
    r = run("dump", str(v4))
    assert r.returncode == 0, r.stderr
    assert "# position: 131584, header: 0, index: 0x4a0c00000000\n--- !!data #binary\none" \
        in r.stdout
    assert "listing.exclusiveLock" in r.stdout  # v4 directory-listing.cq4t
    r = run("dump", str(java_fixtures / "cq4-header-then-eof" / "20170320.cq4"),
            "-o", str(tmp_path / "out.txt"))
    assert r.returncode == 0 and r.stdout == ""
    text = (tmp_path / "out.txt").read_text()
    assert "--- !!not-ready-meta-data" in text and "recovery: !TimedStoreRecovery" in text


def test_progress_bar_only_on_a_terminal(v5: Path) -> None:
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "aiochronicle", "dump", str(v5)],
                             stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        assert p.stdout is not None
        out = p.stdout.read()
        assert p.wait(timeout=30) == 0
        got = b""
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        os.close(master)
    assert b"one" in out
    assert b"\rdump [" in got and b"%" in got


# --------------------------------------------------------------------------
# tail
# --------------------------------------------------------------------------


def test_tail_java_queue(v5: Path, v4: Path) -> None:
    r = run("tail", str(v5))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "0x4a0500000000: one", "0x4a0500000001: two", "0x4a0500000002: three",
        f"0x4a0500000003: {LONG_TEXT}"]
    r = run("tail", "-d", str(v4), "-s")
    assert r.stdout.splitlines() == ["one", "two", "three", LONG_TEXT]


def test_tail_positioning_and_filters(v5: Path) -> None:
    assert run("tail", str(v5), "-n", "0x4a0500000002", "-s").stdout.split("\n")[:2] == \
        ["three", LONG_TEXT]
    assert run("tail", str(v5), "-n", str(V5[1]), "-x", "1", "-s").stdout == "two\n"
    assert run("tail", str(v5), "-m", "2", "-s").stdout == f"three\n{LONG_TEXT}\n"
    assert run("tail", str(v5), "-m", "10", "-s").stdout.splitlines()[0] == "one"
    assert run("tail", str(v5), "-k", "-s").stdout.splitlines() == \
        [LONG_TEXT, "three", "two", "one"]
    assert run("tail", str(v5), "-k", "-m", "2", "-s").stdout.splitlines() == \
        [LONG_TEXT, "three"]
    assert run("tail", str(v5), "-i", "o", "-e", "^tw", "-s").stdout.splitlines() == \
        ["one", LONG_TEXT]
    assert run("tail", str(v5), "-i", "o", "-i", "n", "-s").stdout.splitlines() == \
        ["one", LONG_TEXT]
    line = assert_one_line_error(run("tail", str(v5), "-n", "0x4a0600000000"))
    assert "no excerpt at index 0x4a0600000000" in line and "0x4a0500000003" in line


def test_tail_json_and_decoders(v5: Path) -> None:
    r = run("tail", str(v5), "--json")
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["index"] for x in recs] == V5
    assert recs[0] == {"index": V5[0], "index_hex": "0x4a0500000000", "cycle": 18949,
                       "sequence": 0, "kind": "text", "payload": "one"}
    r = run("tail", str(v5), "--decode", "hex", "-x", "1", "-l")
    assert r.stdout == "0x4a0500000000: e36f6e65\n"


def test_tail_named_tailer_resumes(tmp_path: Path) -> None:
    q = tmp_path / "q"
    make_queue(q)
    r = run("tail", str(q), "--named", "audit", "-x", "3", "-s")
    assert r.stdout.splitlines() == ["c0-0", "c0-1", "c0-2"]
    r = run("tail", str(q), "--named", "audit", "-x", "4", "-s")
    assert r.stdout.splitlines() == ["c0-3", "c0-4", "c1-0", "c1-1"]
    st = run("stats", str(q), "--json")
    (tailer,) = json.loads(st.stdout)["tailers"]
    assert tailer["name"] == "audit"
    assert tailer["index"] == ac.RollCycles.TEST_DAILY.to_index(19001, 2)
    assert tailer["lag_messages"] == 3


def test_tail_method_calls(tmp_path: Path) -> None:
    q = tmp_path / "q"
    calls = '{"onPrice": {"symbol": "EURUSD", "bid": 1.1}}\n{"onTrade": [7]}\n'
    assert run("write", str(q), "--json", stdin=calls).returncode == 0
    assert run("write", str(q), stdin="plain text\n").returncode == 0
    mod = tmp_path / "ifaces.py"
    mod.write_text("class Prices:\n    def onPrice(self, p): ...\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = run("tail", str(q), "-r", "ifaces:Prices", "-s", "-l", env=env)
    assert r.stdout == "onPrice: { symbol: EURUSD, bid: 1.1 }\n"
    r = run("tail", str(q), "-r", "any", "-s", "-l")
    assert r.stdout.splitlines() == ["onPrice: { symbol: EURUSD, bid: 1.1 }", "onTrade: 7"]
    assert run("tail", str(q), "-r", "nosuchmodule:X").returncode == 2


WRITER = textwrap.dedent("""
    import sys, time
    import aiochronicle as ac
    with ac.open_queue(sys.argv[1]) as q:
        a = q.appender()
        for i in range(8):
            a.append_text(f"live-{i}")
            time.sleep(0.25)
""")


def test_tail_follow_while_another_process_writes(tmp_path: Path) -> None:
    q = tmp_path / "q"
    # TEST_SECONDLY rolls every second: the follower crosses cycles while reading
    r = run("write", str(q), "--roll-cycle", "TEST_SECONDLY", stdin="before\n")
    assert r.returncode == 0, r.stderr
    tail = subprocess.Popen([sys.executable, "-m", "aiochronicle", "tail", "-f", "-s", str(q)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer = None
    try:
        assert tail.stdout is not None
        os.set_blocking(tail.stdout.fileno(), False)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(q)])
        want = ["before"] + [f"live-{i}" for i in range(8)]
        got = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if select.select([tail.stdout], [], [], 0.2)[0]:
                chunk = tail.stdout.read()
                if chunk:
                    got += chunk
            if got.decode().splitlines() == want:
                break
        assert got.decode().splitlines() == want
        assert writer.wait(timeout=30) == 0
        assert len(list(q.glob("*.cq4"))) >= 2
        tail.send_signal(signal.SIGINT)
        assert tail.wait(timeout=30) == 130  # a hang guard (the machine may be loaded)
        assert tail.stderr is not None and b"Traceback" not in tail.stderr.read()
    finally:
        for p in (tail, writer):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# --------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------


def test_write_lines_formats(tmp_path: Path) -> None:
    q = tmp_path / "q"
    r = run("write", str(q), "--print-index", stdin="hello\nworld\n")
    assert r.returncode == 0, r.stderr
    idx = [int(x, 16) for x in r.stdout.split()]
    assert idx[1] == idx[0] + 1
    assert r.stderr.startswith("wrote 2 excerpts")
    f = tmp_path / "in.txt"
    f.write_text("raw line\n")
    assert run("write", str(q), "--format", "raw", str(f), "-q").stderr == ""
    assert run("write", str(q), "--format", "hex", "-q", stdin="00ff10\n").returncode == 0
    # Java writeText is E0+len + UTF-8 (reference §9.1)
    assert payloads(q) == [b"\xe5hello", b"\xe5world", b"raw line", b"\x00\xff\x10"]


def test_write_method_calls_as_java_writes_them(tmp_path: Path) -> None:
    q = tmp_path / "q"
    lines = '{"event": ["two", "two"]}\n\n{"ping": []}\n[{"a": 1}, {"b": null}]\n'
    assert run("write", str(q), "--json", stdin=lines).returncode == 0
    yaml = "handle: {value: 0}\n---\n# comment\nsay: hi\n"
    assert run("write", str(q), "--yaml", stdin=yaml).returncode == 0
    assert run("write", str(q), "--json", "-m", "onTick", stdin="[1.5, -3]\n").returncode == 0
    got = payloads(q)
    # reference §10.1: two arguments -> 82 <u32 len> then each value (MethodWriterTest)
    assert got[0] == b"\xb9\x05event\x82\x08\x00\x00\x00\xe3two\xe3two"
    # no arguments -> E0 (empty text)
    assert got[1] == b"\xb9\x04ping\xe0"
    assert got[2] == b"\xb9\x01a\x01"
    assert got[3] == b"\xb9\x01b\xbb"
    # a marshallable argument: 82 <len> + fields (ClassAliasPoolTest, without the type)
    assert got[4] == b"\xb9\x06handle\x82\x07\x00\x00\x00\xc5value\x00"
    assert got[5] == b"\xb9\x03say\xe2hi"
    assert got[6].startswith(b"\xb9\x06onTick\x82")
    r = run("tail", str(q), "-s", "-l", "-x", "1")
    assert r.stdout == "event: [ two, two ]\n"


def test_write_yaml_without_pyyaml_names_the_extra(tmp_path: Path) -> None:
    """PyYAML comes only with the ``yaml`` extra: without it, YAML input is a one-line
    error naming the extra (the interpreter runs with ``yaml`` unimportable), before
    the queue is created; the other formats work as before."""
    q = tmp_path / "q"
    block = ("import sys; sys.modules['yaml'] = None; "
             "from aiochronicle._cli import main; sys.exit(main(sys.argv[1:]))")

    def run_without_yaml(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", block, *args], input=stdin,
                              capture_output=True, text=True, timeout=60)

    line = assert_one_line_error(run_without_yaml("write", str(q), "--yaml", stdin="a: 1\n"))
    assert 'pip install "aiochronicle[yaml]"' in line
    assert not q.exists()
    assert run_without_yaml("write", str(q), "--json", "-q", stdin='{"a": [1]}\n').returncode == 0
    assert len(payloads(q)) == 1


def test_write_bad_input(tmp_path: Path) -> None:
    q = tmp_path / "q"
    line = assert_one_line_error(run("write", str(q), "--json", stdin='{"ok": 1}\nnot json\n'))
    assert "stdin line 2: invalid JSON" in line
    assert len(payloads(q)) == 1  # the good line before it was written
    line = assert_one_line_error(run("write", str(q), "--json", stdin='"just a string"\n'))
    assert "expected a method call" in line
    assert "line 1: not hex" in assert_one_line_error(
        run("write", str(q), "--format", "hex", stdin="zz\n"))
    assert "cannot read" in assert_one_line_error(run("write", str(q), str(tmp_path / "nope")))


# --------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------


def test_stats_text_json_and_watch(v5: Path, tmp_path: Path) -> None:
    r = run("stats", str(v5))
    assert r.returncode == 0, r.stderr
    assert "FAST_DAILY" in r.stdout
    assert "4 in 1 cycle, first 0x4a0500000000, last 0x4a0500000003" in r.stdout
    assert "20211118F.cq4" in r.stdout and "chronicle.write.lock: free" in r.stdout
    d = json.loads(run("stats", str(v5), "--json").stdout)
    assert d["total_excerpts"] == 4 and d["cycles"][0]["cycle"] == 18949
    q = tmp_path / "q"
    make_queue(q)
    r = run("stats", str(q), "--watch", "0.1", "--count", "2")
    assert r.returncode == 0
    assert r.stdout.count("TEST_DAILY") == 2 and "rate:" in r.stdout
    lines = run("stats", str(q), "--watch", "0.1", "--count", "2", "--json").stdout.splitlines()
    assert [json.loads(x)["total_excerpts"] for x in lines] == [10, 10]


# --------------------------------------------------------------------------
# check, repair, unlock
# --------------------------------------------------------------------------


def break_queue(q: Path) -> None:
    f0 = sorted(q.glob("*.cq4"))[0]
    data = bytearray(f0.read_bytes()[:1 << 16])
    eof = data.find(struct.pack("<I", 0xC0000000) + b"\xc3EOF")
    assert eof > 0
    with open(f0, "r+b") as fh:
        fh.seek(eof)
        fh.write(bytes(8))
    meta_set(q, "chronicle.write.lock", dead_pid())


def test_check_and_repair(tmp_path: Path, v5: Path) -> None:
    assert run("check", str(v5)).stdout.endswith("no problems found\n")
    q = tmp_path / "q"
    make_queue(q)
    before = payloads(q)
    r = run("check", str(q))
    assert r.returncode == 0 and "no problems found" in r.stdout
    break_queue(q)
    r = run("check", str(q))
    assert r.returncode == 3  # warnings only
    assert "warning: missing-eof: 20220108T1.cq4" in r.stdout
    assert "warning: stale-lock: metadata.cq4t" in r.stdout
    assert "2 repairable (run: aiochronicle repair" in r.stdout
    kinds = {f["kind"] for f in json.loads(run("check", str(q), "--json").stdout)}
    assert kinds == {"missing-eof", "stale-lock"}
    # not on a terminal and no --yes: refuse
    r = run("repair", str(q), stdin="")
    assert "--yes" in assert_one_line_error(r, 2)
    assert run("check", str(q)).returncode == 3
    assert run("check", str(q), "--json").returncode == 3
    assert_one_line_error(run("check", str(tmp_path / "nothing-here")), 1)
    backup = tmp_path / "bk"
    r = run("check", str(q), "--repair", "--yes", "--backup", str(backup))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "repaired: missing-eof: 20220108T1.cq4: write the EOF marker" in r.stdout
    assert "is consistent now" in r.stdout
    assert sorted(p.name for p in backup.iterdir()) == ["20220108T1.cq4", "metadata.cq4t"]
    assert run("check", str(q)).returncode == 0
    assert payloads(q) == before


def test_repair_prompts_on_a_terminal(tmp_path: Path) -> None:
    q = tmp_path / "q"
    make_queue(q)
    break_queue(q)
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([sys.executable, "-m", "aiochronicle", "repair", str(q)],
                             stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                             cwd=str(tmp_path))
        os.close(slave)
        got = b""
        deadline = time.monotonic() + 30
        while b"[Y/n/q]" not in got and time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                got += os.read(master, 4096)
        assert b"Back them up to" in got
        os.write(master, b"\n")  # default: yes, back up
        assert p.stdout is not None
        out = p.stdout.read().decode()
        assert p.wait(timeout=30) == 0, out
    finally:
        os.close(master)
    assert "backed up 2 file(s)" in out
    assert len(list(tmp_path.glob("q.backup-*"))) == 1
    assert run("check", str(q)).returncode == 0


def test_unlock(tmp_path: Path) -> None:
    q = tmp_path / "q"
    make_queue(q)
    unlocked = -(1 << 63)
    assert run("unlock", str(q)).stdout == "chronicle.write.lock: free\n"
    pid = dead_pid()
    meta_set(q, "chronicle.write.lock", pid)
    assert f"held by process {pid} (dead)" in run("unlock", str(q), "--dry-run").stdout
    assert meta_get(q, "chronicle.write.lock") == pid
    r = run("unlock", str(q))
    assert r.returncode == 0
    assert r.stdout == f"chronicle.write.lock: held by process {pid} (dead) -> released\n"
    assert meta_get(q, "chronicle.write.lock") == unlocked
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        meta_set(q, "chronicle.write.lock", sleeper.pid)
        line = assert_one_line_error(run("unlock", str(q)))
        assert f"live process {sleeper.pid}" in line and "--force" in line
        assert meta_get(q, "chronicle.write.lock") == sleeper.pid
        r = run("unlock", str(q), "--force")
        assert "released by force" in r.stdout
        assert meta_get(q, "chronicle.write.lock") == unlocked
    finally:
        sleeper.kill()
        sleeper.wait()
    line = assert_one_line_error(run("unlock", str(tmp_path)))
    assert "not a Chronicle queue" in line


# --------------------------------------------------------------------------
# retention
# --------------------------------------------------------------------------


def test_retention(tmp_path: Path) -> None:
    q = tmp_path / "q"
    make_queue(q, cycles=4, per_cycle=2)
    files = sorted(p.name for p in q.glob("*.cq4"))
    r = run("retention", str(q), "--max-age", "1d", "--dry-run")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # these cycles ended years ago, but the newest file is the current cycle
    assert lines[0].startswith(f"would delete  {files[0]}")
    assert lines[3].startswith(f"keep    {files[3]}") and "the current cycle" in lines[3]
    assert lines[-1].startswith("3 of 4 cycle files; would free")
    assert sorted(p.name for p in q.glob("*.cq4")) == files
    # a named tailer in the third cycle keeps it
    meta_set(q, "index.reporting", ac.RollCycles.TEST_DAILY.to_index(19002, 1))
    r = run("retention", str(q), "--max-age", "3600", "--move-to", str(tmp_path / "old"))
    assert r.returncode == 0, r.stderr
    assert "named tailer 'reporting' still needs it" in r.stdout
    assert sorted(p.name for p in (tmp_path / "old").iterdir()) == files[:2]
    assert sorted(p.name for p in q.glob("*.cq4")) == files[2:]
    assert meta_get(q, "listing.lowestCycle") == 19002
    r = run("tail", str(q), "-s")
    assert r.stdout.splitlines() == ["c2-0", "c2-1", "c3-0", "c3-1"]
    assert run("retention", str(q)).returncode == 2


# --------------------------------------------------------------------------
# ping-pong
# --------------------------------------------------------------------------


def test_ping_pong(tmp_path: Path) -> None:
    r = run("ping-pong", "-n", "300", "--warmup", "20", "--path", str(tmp_path / "pp"))
    assert r.returncode == 0, r.stderr
    first, times, rate = r.stdout.splitlines()
    assert first.startswith("ping-pong: 300 round trips of 40 B between two processes")
    m = re.fullmatch(r"round trip \(us\): min (\S+)  p50 (\S+)  p90 (\S+)  p99 (\S+)  "
                     r"p99.9 (\S+)  max (\S+)", times)
    assert m is not None, times
    values = [float(x) for x in m.groups()]
    assert values[0] > 0 and values == sorted(values)
    assert "round trips/s" in rate
    # the queues it used are left for inspection when --path is given
    assert run("tail", str(tmp_path / "pp" / "pong"), "-x", "1", "-s", "-l").stdout == "ready\n"
