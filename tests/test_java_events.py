"""Generic events, metadata method calls and the default handler against live Java
(``interop/java``'s ``Events``): the same bytes both ways, each reads the other's."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_java_live import JAVA_OWN_WARNINGS, VERSIONS, _warnings, java
from test_method_events import Gateway, Price, Prices, Recorder

import aiochronicle as ac
import jvm

__all__ = ["java"]


class Gateway2:
    def send2(self, event: str, symbol: str, last: bool) -> None: ...


def events_java(version: str, *args: str) -> list[str]:
    proc = subprocess.run(jvm.command(version, *args, main="aiochronicle.interop.Events"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _warnings(proc.stderr, JAVA_OWN_WARNINGS) == [], proc.stderr
    return proc.stdout.splitlines()


def write_python(path: Path) -> None:
    """What ``Events write`` writes, through aiochronicle's method writers."""
    with ac.open_queue(path) as q, q.appender() as app:
        g = app.method_writer(Gateway, codec="binary_wire", generic_event="send")
        g2 = app.method_writer(Gateway2, codec="binary_wire", generic_event="send2")
        g0 = app.method_writer(Gateway, codec="binary_wire", generic_event="send0")
        meta = app.method_writer(Prices, codec="binary_wire", metadata=True)
        g.send("onPrice", Price("EURUSD", 1.0841, 1.0843, 1_000_000))
        meta.onClose("META", False)
        g2.send2("onClose", "EURUSD", True)
        g.send("onQuote", Price("GBPUSD", 1.25, 1.26, 5))
        g0.send0("heartbeat")


def user_payloads(path: Path) -> list[bytes]:
    """Every excerpt with data and metadata, but the cycle file's own (header, index)."""
    with ac.open_queue(path, read_only=True) as q:
        return [bytes(e.payload) for e in q.tailer(include_metadata=True)
                if not (e.metadata and bytes(e.payload)[2:].startswith((b"header", b"index")))]


@pytest.mark.parametrize("version", VERSIONS)
def test_generic_events_and_metadata_calls_as_java_writes_them(java: None, version: str,
                                                              tmp_path: Path) -> None:
    jdir, pdir = tmp_path / "java", tmp_path / "python"
    assert events_java(version, "write", str(jdir))[-1] == "END 4"
    write_python(pdir)
    if version == jvm.NEWEST:
        # byte for byte (5.21's Wire picks other number encodings for some values,
        # e.g. 1.25 as a float32, which both read as the same)
        assert user_payloads(pdir) == user_payloads(jdir)
    else:
        assert len(user_payloads(pdir)) == len(user_payloads(jdir)) == 5
    # aiochronicle reads Java's: typed calls, metadata calls, the rest by name
    with ac.open_queue(jdir, read_only=True) as q:
        rec, mrec, rest = Recorder(), Recorder(), []
        reader = q.tailer(include_metadata=True).method_reader(
            rec, metadata_handlers=[mrec],
            default_handler=lambda e, a: rest.append((e, a)),
            on_error=lambda exc, ex: pytest.fail(f"{exc} at {ex.index:#x}"))
        assert reader.read_available() == 4
    assert rec.calls == [("onPrice", (Price("EURUSD", 1.0841, 1.0843, 1_000_000),)),
                         ("onClose", ("EURUSD", True)), ("heartbeat", ())]
    assert mrec.calls == [("onClose", ("META", False))]
    assert rest == [("onQuote", {"symbol": "GBPUSD", "bid": 1.25, "ask": 1.26, "qty": 5})]
    # Java's reader (typed handler + default parselet) sees the same in both queues
    java_on_java = events_java(version, "read", str(jdir))
    java_on_python = events_java(version, "read", str(pdir))
    assert java_on_python == java_on_java
    calls: list[Any] = [line for line in java_on_python if line[:2] in ("M ", "D ")]
    assert calls[0].startswith("M onPrice EURUSD") and calls[1] == "M onClose EURUSD true"
    assert calls[2].startswith("D onQuote {symbol=GBPUSD")
    assert calls[3].startswith("D heartbeat")
