"""The C core on arm64: cross-compiled and executed under qemu-user.

``make -C native test-arm64`` builds the C unit tests (native/tests/test_native.c)
and the four fuzz-smoke harnesses with ``aarch64-linux-gnu-gcc`` under
AddressSanitizer and UndefinedBehaviorSanitizer, and runs them with
``qemu-aarch64-static``: the arm64 spin hint, the acquire/release instructions,
the futex and socket calls of the core all execute.  LeakSanitizer cannot run
under qemu-user (``make test`` checks leaks on the host).

qemu-user runs the arm64 code on the host's (stronger) memory model, so it cannot
show a missing barrier; :func:`test_arm64_code_orders_the_words_that_publish`
checks instead that the compiled code has the orderings native/README.md states
(acquire on header loads, release on commits and on the unlock).
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
CROSS = "aarch64-linux-gnu-"
HAVE_ARM64 = (shutil.which(CROSS + "gcc") is not None
              and shutil.which(CROSS + "objdump") is not None
              and shutil.which("qemu-aarch64-static") is not None)

pytestmark = [pytest.mark.checkout, skip_unless(HAVE_ARM64, "arm64")]

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "invariant failed",
                     "SUMMARY: UndefinedBehaviorSanitizer")


@pytest.mark.slow
def test_c_tests_pass_on_arm64_under_qemu(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ASAN_OPTIONS", "UBSAN_OPTIONS")}
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(NATIVE),
                           f"BUILD={tmp_path}", "test-arm64"],
                          capture_output=True, text=True, timeout=600, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out[-6000:]}"
    for marker in SANITIZER_MARKERS:
        assert marker not in out, f"{marker!r} in the output:\n{out[-6000:]}"
    # the binaries are arm64 ones, and qemu ran them
    elf = subprocess.run([CROSS + "readelf", "-h", str(tmp_path / "arm64" / "test_native")],
                         capture_output=True, text=True, check=True).stdout
    assert "AArch64" in elf
    m = re.search(r"^(\d+) passed, (\d+) failed$", out, re.M)
    assert m is not None, out[-3000:]
    assert int(m.group(1)) >= 30 and m.group(2) == "0", out[-3000:]
    assert out.count("no crash, hang or sanitizer report") == 4, out[-3000:]
    assert re.search(r"^fuzz-history: \d+ inputs .*no crash", out, re.M), out[-3000:]
    assert "arm64 (qemu-user): unit tests and fuzz smoke ran clean" in out


def _functions(obj: Path) -> dict[str, str]:
    """name -> disassembly (with relocations) of each function in an object file."""
    dis = subprocess.run([CROSS + "objdump", "-dr", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    out = {}
    for chunk in re.split(r"\n(?=[0-9a-f]+ <)", dis):
        m = re.match(r"[0-9a-f]+ <([^>]+)>:", chunk)
        if m:
            out[m.group(1)] = chunk
    return out


# a 32-bit acquire load (the header word): LDAR/LDAPR into a W register
ACQUIRE32 = re.compile(r"\tlda(p)?r\tw\d+")
# a 64-bit acquire load, or a CAS with acquire (outline helper or LSE instruction)
ACQUIRE = re.compile(r"\tlda(p|x)?r\t|__aarch64_\w+_acq(_rel)?\b|\tcasa")
# a 32-bit CAS with release (the header commit): the helper or the LSE instruction
RELEASE32 = re.compile(r"__aarch64_cas4_(acq_)?rel\b|\tcas(a)?l\tw\d+")
# a release store or a CAS with release
RELEASE = re.compile(r"\t(stlr|stlxr|casl|casal|swpl|swpal)\w*\t|__aarch64_\w+_(acq_)?rel\b")
RELAXED32_CAS = re.compile(r"__aarch64_cas4_(relax|acq)\b|\tcas(a)?\tw\d+")


def test_arm64_code_orders_the_words_that_publish(tmp_path: Path) -> None:
    """Built as the package builds it (-O2): the readers' header loads are acquire
    loads, every header CAS (claims, commits, EOF markers) has release ordering,
    the write lock is taken with acquire and given back with release.  A relaxed
    load or CAS in any of them (which x86 forgives and arm64 does not) fails here."""
    obj = tmp_path / "cq.o"
    subprocess.run([CROSS + "gcc", "-std=c11", "-O2", f"-I{NATIVE}",
                    '-DAIOCHRONICLE_VERSION="test"', "-c", str(NATIVE / "cq.c"), "-o", str(obj)],
                   check=True, capture_output=True, text=True)
    f = _functions(obj)
    for name in ("cq_read", "cq_scan", "cq_load32"):
        assert ACQUIRE32.search(f[name]), f"{name}: no 32-bit acquire load\n{f[name][:3000]}"
    for name in ("cq_append_at", "cq_append_batch", "cq_write_eof", "cq_doc_ensure"):
        assert RELEASE32.search(f[name]), f"{name}: no release header CAS\n{f[name][:3000]}"
    every = "\n".join(f.values())
    assert not RELAXED32_CAS.search(every), "a 32-bit CAS without release ordering"
    for name in ("cq_store64", "cq_unlock"):
        assert RELEASE.search(f[name]), f"{name}: no release store\n{f[name][:3000]}"
    assert ACQUIRE.search(f["cq_lock"]), f["cq_lock"][:3000]
