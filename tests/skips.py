"""The only reasons a test may skip: what the machine running the suite cannot do,
not what a developer forgot to install.

A test skips through :func:`skip` (or :func:`skip_unless`) with one of the names in
:data:`REASONS`; ``tests/test_skips.py`` checks that no test skips any other way.
Under CI (the ``CI`` environment variable set, as ``.ci/run`` does) a skip whose
reason is not one of these fails the run (``tests/conftest.py``), so a missing
Java, PySpark, compiler or fixture is a failure there, never a silent gap.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

#: name -> the reason a skip gives (its report starts with it)
REASONS: dict[str, str] = {
    # tmpfs and bind mounts (a full disk, a read-only view) need root or CAP_SYS_ADMIN
    "mount": "no permission to mount a filesystem here",
    # the libFuzzer targets of the native core are built with clang (gcc has no libFuzzer)
    "clang": "no clang for the libFuzzer target",
    # a new PID namespace (unshare --pid) needs root or CAP_SYS_ADMIN, and Linux
    "pidns": "no permission to create a PID namespace here",
    # the arm64 run of the C core: a cross compiler and qemu-user (Debian packages
    # gcc-aarch64-linux-gnu and qemu-user-static; scripts/test.sh installs them as root)
    "arm64": "no arm64 cross compiler or qemu-aarch64-static",
    # uvloop does not support Windows (the package depends on it everywhere else)
    "uvloop": "uvloop is not available on this platform",
    # promtool (tests/promtool.py): Debian's prometheus package, which scripts/test.sh
    # installs as root, or a build from the Prometheus Go module with go
    "promtool": "no promtool (Debian's prometheus package, or go to build it)",
    # a process of the suite may open no more than this many descriptors (hard limit)
    "nofile": "the hard limit on open descriptors is too low",
}


def skip(name: str, detail: str = "") -> NoReturn:
    """Skip the running test for the named reason (``detail``: what the machine said)."""
    reason = REASONS[name]
    pytest.skip(f"{reason}: {detail}" if detail else reason)


def skip_unless(condition: bool, name: str) -> pytest.MarkDecorator:
    """A marker skipping the test for the named reason when ``condition`` is false."""
    return pytest.mark.skipif(not condition, reason=REASONS[name])


def listed(reason: str) -> bool:
    """Whether a skip's reason is one of :data:`REASONS`."""
    return any(reason.startswith(r) for r in REASONS.values())


def under_ci() -> bool:
    """Whether this run is CI's (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
