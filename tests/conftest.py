"""Shared pytest fixtures.

Golden data written by Java Chronicle Queue lives outside the repository, in
``../shared/fixtures/java`` (see its README.md).  It is read-only: tests copy or
extract what they need into ``tmp_path`` and never write there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

JAVA_FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "java"


@pytest.fixture(scope="session")
def java_fixtures() -> Path:
    """The directory of Java-written golden queues; skips the test if it is absent."""
    if not JAVA_FIXTURES.is_dir():
        pytest.skip(f"Java fixtures not found at {JAVA_FIXTURES}")
    return JAVA_FIXTURES


@pytest.fixture
def extract_fixture(java_fixtures: Path, tmp_path: Path) -> Callable[..., Path]:
    """``extract_fixture("cqv5-sample-input.tar.bz2")`` unpacks a fixture tarball into
    ``tmp_path`` (or ``tmp_path / subdir``), keeping the sparse ``.cq4`` files sparse,
    and returns the directory it was unpacked into."""

    def extract(name: str, subdir: str | None = None) -> Path:
        archive = java_fixtures / name
        if not archive.is_file():
            pytest.skip(f"Java fixture {archive} not found")
        dest = tmp_path / subdir if subdir else tmp_path
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "--sparse", "-xjf", str(archive), "-C", str(dest)],
                       check=True, capture_output=True)
        return dest

    return extract
