"""The native core under AddressSanitizer and UndefinedBehaviorSanitizer.

Runs ``make -C native test`` (C unit tests of cq.c, native/tests/test_native.c)
and ``make -C native fuzz-smoke`` (the fuzz harness native/tests/fuzz_read.c fed
seeded random and mutated cycle files), the same for the BinaryWire method-call
reader (``wire-fuzz-smoke``, native/tests/fuzz_wire.c) and for the appender side
of the notify protocol (``notify-fuzz-smoke``, native/tests/fuzz_notify.c: the walk
over metadata.cq4t's key records and the datagrams to parked owners), plus short
libFuzzer runs when clang is installed.  Build products go to a temporary directory.

The unit tests include regressions of core bugs the fuzzer found (bounds
checks that wrapped for positions near 2^64, unbounded index lookups, an append
that reported failure after publishing its excerpt, ...); the fuzz harness
steers clear of nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from skips import skip_unless

NATIVE = Path(__file__).resolve().parents[1] / "native"

# the native sources and a C compiler
pytestmark = pytest.mark.checkout


SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "invariant failed", "SUMMARY: UndefinedBehaviorSanitizer")


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("native-build")


def make(build_dir: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}
    return subprocess.run(["make", "--no-print-directory", "-C", str(NATIVE),
                           f"BUILD={build_dir}", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def assert_clean(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out[-6000:]}"
    for marker in SANITIZER_MARKERS:
        assert marker not in out, f"{marker!r} in the output:\n{out[-6000:]}"
    return out


# regressions of core bugs found by fuzzing: each must be in the run, and pass
REGRESSIONS = (
    "write_eof_hint_near_map_end",  # cq_write_eof read the header word at a hint past the map
    "read_without_scratch",  # cq_read: memcpy(NULL, p, 0) with no scratch buffer
    "i2i_field_near_2_64",  # array_at: `doc_pos + 4 > map_len` wrapped
    "i2i_slot_near_2_64",  # array_at: an index2index slot near 2^64 wrapped the check
    "index_entry_near_2_64",  # index_floor: `p + 4 > map_len` wrapped
    "write_position_near_2_64",  # write_position: `wp + 4 > map_len` wrapped
    "misaligned_field_offsets",  # header fields not 8-aligned are ignored
    "index_floor_bounded",  # index_floor scanned used x capacity entries
    "append_with_lost_index_page",  # cq_append failed after publishing (a retry duplicated)
    "flips_are_caught",  # a flipped header/index/writePosition bit read as another excerpt
    "notify_duplicate_keys_first_wins",  # a later duplicate key moved the watch off the cell
    "notify_delivered_wakeup_keeps_slot",  # sendto's 1 taken for failure: live owner's slot freed
)


def test_native_unit_tests(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "test"))
    m = re.search(r"^(\d+) passed, (\d+) failed$", out, re.M)
    assert m is not None, out[-3000:]
    assert int(m.group(1)) >= 30 and m.group(2) == "0", out[-3000:]
    passed = set(re.findall(r"^ok +(\S+)$", out, re.M))
    assert set(REGRESSIONS) <= passed, set(REGRESSIONS) - passed


def test_fuzz_smoke(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "fuzz-smoke", "FUZZ_ITERS=40000", "FUZZ_SEED=7"))
    assert "no crash, hang or sanitizer report" in out


@skip_unless(shutil.which("clang") is not None, "clang")
def test_libfuzzer_short_run(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "fuzz", "FUZZ_SECONDS=6"))
    assert "Done" in out


def test_wire_reader_fuzz_smoke(build_dir: Path) -> None:
    """The BinaryWire method-call reader (wire.c, under aiochronicle._core._hot.WireDecoder):
    corrupt bytes are declined (the Python reader then names the error), what it reads
    lies inside the input and reads back the same once written again."""
    out = assert_clean(make(build_dir, "wire-fuzz-smoke", "FUZZ_ITERS=100000", "FUZZ_SEED=7"))
    assert "no crash, hang or sanitizer report" in out
    m = re.search(r"(\d+) read, (\d+) declined", out)
    assert m is not None, out[-2000:]
    read, declined = int(m.group(1)), int(m.group(2))
    assert read > 10_000 and declined > 10_000


@skip_unless(shutil.which("clang") is not None, "clang")
def test_wire_reader_libfuzzer_short_run(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "wire-fuzz", "FUZZ_SECONDS=5"))
    assert "Done" in out


def test_history_fuzz_smoke(build_dir: Path) -> None:
    """Message history in its compact form (history.c, under the C dispatch of
    readers tracking history and the method writers' C calls): damaged Ext
    heads and counts are declined, what is accepted lies inside the input,
    and what is built from it holds it unchanged, one source and two timings
    more, or says it is full."""
    out = assert_clean(make(build_dir, "history-fuzz-smoke", "FUZZ_ITERS=100000",
                            "FUZZ_SEED=7"))
    assert "no crash, hang or sanitizer report" in out
    m = re.search(r"(\d+) read, (\d+) declined, (\d+) full", out)
    assert m is not None, out[-2000:]
    read, declined, full = map(int, m.groups())
    assert read > 20_000 and declined > 5_000 and full > 1_000


@skip_unless(shutil.which("clang") is not None, "clang")
def test_history_libfuzzer_short_run(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "history-fuzz", "FUZZ_SECONDS=4"))
    assert "Done" in out


def test_fuzzer_findings_replay_clean(build_dir: Path) -> None:
    """Inputs libFuzzer once crashed the harness with (native/tests/regressions):
    a layout whose lastIndex field lies in the data, and an index2index pointer
    to the unwritten data ahead; an append then published an excerpt and wrote
    an index counter over the next header, so one append counted twice."""
    assert_clean(make(build_dir, "fuzz-smoke", "FUZZ_ITERS=10"))
    found = sorted((NATIVE / "tests" / "regressions").glob("*.bin"))
    assert len(found) >= 2
    for f in found:
        r = subprocess.run([str(build_dir / "fuzz_smoke"), str(f)], capture_output=True,
                           text=True, timeout=60)
        out = assert_clean(r)
        assert "ran clean" in out, (f.name, out[-2000:])


def test_notify_fuzz_smoke(build_dir: Path) -> None:
    """The appender's walk over metadata.cq4t (notify.c) on valid table stores with
    random keys and paddings, then damaged: what it finds lies inside the mapping,
    8-aligned; a commit writes nothing but the values found, takes exactly the
    parked bits of known slots, sends one datagram a bit to a bound owner, frees
    the slots of owners nobody bound, and every watch closes its socket."""
    out = assert_clean(make(build_dir, "notify-fuzz-smoke", "FUZZ_ITERS=50000", "FUZZ_SEED=7"))
    assert "no crash, hang or sanitizer report" in out
    m = re.search(r"(\d+) cells, (\d+) parked values, (\d+) slots found, (\d+) watches "
                  r"complete; (\d+) commits woke, (\d+) datagrams delivered, (\d+) slots freed",
                  out)
    assert m is not None, out[-2000:]
    cells, parked, slots, complete, woke, sent, freed = map(int, m.groups())
    assert cells > 5000 and parked > 5000 and slots > 50_000 and complete > 100, m.group(0)
    assert woke > 5000 and sent > 5000 and freed > 5000, m.group(0)


@skip_unless(shutil.which("clang") is not None, "clang")
def test_notify_libfuzzer_short_run(build_dir: Path) -> None:
    out = assert_clean(make(build_dir, "notify-fuzz", "FUZZ_SECONDS=5"))
    assert "Done" in out


def test_notify_fuzzer_findings_replay_clean(build_dir: Path) -> None:
    """Inputs the notify harness once failed on (native/tests/regressions/notify):
    a table store holding the notify key twice, whose later copy the walk took."""
    assert_clean(make(build_dir, "notify-fuzz-smoke", "FUZZ_ITERS=10"))
    found = sorted((NATIVE / "tests" / "regressions" / "notify").glob("*.bin"))
    assert found
    for f in found:
        r = subprocess.run([str(build_dir / "fuzz_notify_smoke"), str(f)], capture_output=True,
                           text=True, timeout=60)
        out = assert_clean(r)
        assert "ran clean" in out, (f.name, out[-2000:])
