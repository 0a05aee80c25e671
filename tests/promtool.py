"""Prometheus' ``promtool`` for the tests of the alert pack, built from the
Prometheus Go module (``go install``) once and cached under
``~/.cache/aiochronicle/promtool-<version>/`` (``AIOCHRONICLE_PROMTOOL``
names a binary to use instead; one on PATH, such as Debian's ``prometheus``
package's, is used when there is no cached build).  ``scripts/test.sh`` runs
this file before the suite: ``python tests/promtool.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: the Prometheus release whose promtool the tests use
VERSION = "v0.316.0"
MODULE = "github.com/prometheus/prometheus/cmd/promtool"
BUILD_TIMEOUT = 3600.0


def cached() -> Path:
    """Where the built binary lives."""
    return Path.home() / ".cache" / "aiochronicle" / f"promtool-{VERSION}" / "promtool"


def find() -> Path | None:
    """The binary if it is there: named by the environment, built before, or
    installed (Debian's ``prometheus`` package, which ``scripts/test.sh``
    installs where it can: a promtool built from the same Go module)."""
    named = os.environ.get("AIOCHRONICLE_PROMTOOL")
    if named:
        return Path(named)
    p = cached()
    if p.is_file() and os.access(p, os.X_OK):
        return p
    installed = shutil.which("promtool")
    return Path(installed) if installed else None


def build() -> tuple[Path | None, str]:
    """Build (or find) promtool: (path, "") or (None, why not)."""
    found = find()
    if found is not None:
        return found, ""
    go = shutil.which("go")
    if go is None:
        return None, "no go on PATH"
    target = cached()
    target.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(target.parent), "GOFLAGS": "-mod=mod"}
    try:
        r = subprocess.run([go, "install", f"{MODULE}@{VERSION}"], env=env, capture_output=True,
                           text=True, timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"go install took more than {BUILD_TIMEOUT:.0f} s"
    if r.returncode != 0 or not target.is_file():
        return None, f"go install failed: {r.stderr.strip()[-400:]}"
    return target, ""


if __name__ == "__main__":
    path, why = build()
    if path is None:
        sys.exit(f"promtool: {why}")
    print(path)
