"""Tests skip only for a reason ``tests/skips.py`` names, and under CI a skip for any
other reason fails the run (the hook in ``tests/conftest.py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from skips import REASONS

HERE = Path(__file__).resolve().parent

# every way pytest offers to skip or expect a failure
SKIPPING = re.compile(r"pytest\.skip\(|importorskip\(|mark\.skip(if)?\b|mark\.xfail|"
                      r"pytest\.xfail\(")


def test_tests_skip_only_through_the_named_list() -> None:
    offenders = []
    for path in sorted(HERE.rglob("*.py")):
        if path.name in ("skips.py", "test_skips.py"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if SKIPPING.search(line):
                offenders.append(f"{path.relative_to(HERE)}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_every_named_reason_is_used() -> None:
    sources = "\n".join(p.read_text() for p in HERE.rglob("*.py") if p.name != "skips.py")
    for name in REASONS:
        assert re.search(rf"""(skip|skip_unless)\([^)]*["']{name}["']""", sources), name


RUN = textwrap.dedent("""
    import pytest
    import skips

    def test_listed():
        skips.skip("mount", "permission denied")

    def test_passes():
        pass
""")
UNLISTED = textwrap.dedent("""
    import pytest

    def test_unlisted():
        pytest.skip("pyspark is not installed")
""")
UNLISTED_MODULE = textwrap.dedent("""
    import pytest

    pytest.skip("no Java here", allow_module_level=True)

    def test_never_collected():
        pass
""")


def _pytest(tmp_path: Path, files: dict[str, str],
            ci: str | None) -> subprocess.CompletedProcess[str]:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("conftest.py", "skips.py", "loops.py"):  # what conftest.py imports
        shutil.copy(HERE / name, run / name)
    for name, text in files.items():
        (run / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("PYTEST")}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(run)], cwd=run, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ci", ["1", "true"])
def test_under_ci_an_unlisted_skip_fails_the_run(tmp_path: Path, ci: str) -> None:
    r = _pytest(tmp_path, {"test_a.py": RUN, "test_b.py": UNLISTED}, ci)
    assert r.returncode == 1, r.stdout
    assert "fail this CI run" in r.stdout
    assert "test_b.py::test_unlisted: pyspark is not installed" in r.stdout
    assert "test_listed" not in r.stdout.split("does not name")[1]


def test_under_ci_a_module_level_unlisted_skip_fails_the_run(tmp_path: Path) -> None:
    r = _pytest(tmp_path, {"test_a.py": RUN, "test_c.py": UNLISTED_MODULE}, "1")
    assert r.returncode == 1, r.stdout
    assert "test_c.py: no Java here" in r.stdout


def test_under_ci_listed_skips_pass(tmp_path: Path) -> None:
    r = _pytest(tmp_path, {"test_a.py": RUN}, "1")
    assert r.returncode == 0, r.stdout
    assert "1 passed, 1 skipped" in r.stdout and "does not name" not in r.stdout


@pytest.mark.parametrize("ci", [None, "0", "false"])
def test_outside_ci_an_unlisted_skip_is_reported(tmp_path: Path, ci: str | None) -> None:
    r = _pytest(tmp_path, {"test_a.py": RUN, "test_b.py": UNLISTED}, ci)
    assert r.returncode == 0, r.stdout
    assert "would fail a CI run" in r.stdout
    assert "test_b.py::test_unlisted: pyspark is not installed" in r.stdout
