"""Which path of the platform layer (native/platform.h) the loaded core has.

``scripts/test_portable.sh`` builds the core with ``CQ_PORTABLE=1`` (the code
macOS runs) into a directory of its own and runs the tests of what the layer
changes against it, with ``AIOCHRONICLE_EXPECT_PLATFORM=portable``: these tests
fail there if the default (Linux) build was loaded instead, and in the default run
if the portable one was.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys

import aiochronicle
from aiochronicle._core._native import ffi, lib, notify_sockname


def expected() -> str:
    want = os.environ.get("AIOCHRONICLE_EXPECT_PLATFORM")
    if want:
        return want
    return "linux" if sys.platform.startswith("linux") else "portable"


def test_the_expected_platform_path_is_loaded() -> None:
    assert ffi.string(lib.cq_platform()).decode() == expected(), aiochronicle.__file__


def test_notify_socket_names_follow_the_platform_path() -> None:
    """Abstract names on Linux; paths (and a socket file that the owner
    removes) on the portable path, which has no abstract namespace."""
    name = notify_sockname(0x0123456789ABCDEF)
    if expected() == "linux":
        assert name == b"\0aiochronicle.notify.0123456789abcdef"
        return
    assert name == b"/tmp/aiochronicle.n.0123456789abcdef"
    # an owner binds it and a sender reaches it, as the notify protocol does
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as owner, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        owner.bind(name)
        try:
            sender.sendto(b"\1", name)
            assert owner.recv(1) == b"\1"
        finally:
            os.unlink(name)
