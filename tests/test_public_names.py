"""The public classes expose only their documented API: no machinery name
(``queue_closed``, ``after_fork`` ...) on a class users hold.  The queue's
close and the fork handler reach appenders and tailers through the registry
of holds that the owner of the queue's files keeps (``_storage._resource``)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import aiochronicle as ac
from aiochronicle._objects._queue import cycles_of

#: the documented names (docs/api.md renders each), per public class: class
#: attributes and the attributes an instance sets
DOCUMENTED: dict[type, set[str]] = {
    ac.Queue: {
        "aclose", "appender", "block_size", "close", "closed", "codec", "count_excerpts",
        "current_cycle", "cycle_path", "cycles", "disk_space", "entry_count", "epoch",
        "excerpts_in_cycle", "first_cycle", "first_index", "last_cycle", "last_index",
        "lock_timeout", "options", "path", "pretoucher", "read_only",
        "refresh_directory_listing", "roll_cycle", "roll_time", "roll_time_zone", "source_id",
        "sync_every", "sync_interval", "sync_interval_ms", "sync_mode", "table_store_get",
        "table_store_put", "tailer", "time_provider", "timeout", "unlock_mode", "week_rule"},
    ac.Appender: {
        "aclose", "append", "append_many", "append_metadata", "append_packed", "append_text",
        "close", "cycle", "excerpts_appended", "last_index_appended", "method_writer", "queue",
        "sync", "wait_replicated", "wait_replicated_blocking", "write_at", "write_packed_at",
        "writing_document"},
    ac.Tailer: {
        "aclose", "binary_search", "checkpoint_every", "close", "cycle", "direction", "index",
        "last_read_index", "method_reader", "move_to_cycle", "move_to_index", "name", "pauser",
        "queue", "read", "read_after_replica_acknowledged", "read_blocking", "read_many",
        "read_nowait", "reading_document", "state", "to_end", "to_start", "until_end"},
    ac.Pretoucher: {"errors", "execute", "headroom", "preroll", "queue", "start", "stop"},
    ac.SetTimeProvider: {"advance_millis", "current_time_millis", "set_millis"},
    ac.MethodReader: {
        "aread_one", "default_handler", "handlers", "metadata_reader", "on_error", "process",
        "read_available", "read_one", "run", "statistics", "stop", "tailer"},
}


class _Handler:
    def on_price(self, value: bytes) -> None:
        pass


def _public(obj: object) -> set[str]:
    return {n for n in dir(obj) if not n.startswith("_")}


def test_the_public_classes_expose_only_their_documented_names(tmp_path: Path) -> None:
    with ac.open_queue(tmp_path / "q") as q, ac.open_queue(tmp_path / "s",
                                                           sync=ac.SyncMode.ASYNC) as s:
        named = q.tailer("n")
        objects: list[object] = [
            q, s, q.appender(), s.appender(), q.appender(listener=lambda i, p: None),
            q.tailer(), named, q.tailer(read_after_replica_acknowledged=True),
            q.pretoucher(), named.method_reader(_Handler()), ac.SetTimeProvider(5)]
        for obj in objects:
            cls = next(c for c in DOCUMENTED if isinstance(obj, c))
            assert _public(obj) - DOCUMENTED[cls] == set(), type(obj)
            assert _public(cls) <= DOCUMENTED[cls]


def test_close_reaches_every_appender_and_tailer_without_a_public_step(
        tmp_path: Path) -> None:
    """A clean close saves a named tailer's place and turns every appender and
    tailer away, through the files' owner's registry."""
    with ac.open_queue(tmp_path / "q") as q:
        appender = q.appender()
        appender.append(b"a")
        appender.append(b"b")
        named = q.tailer("n")
        plain = q.tailer()
        got = named.read_nowait()
        assert got is not None and got.payload == b"a"
    for call in (lambda: appender.append(b"c"), plain.read_nowait):
        try:
            call()
        except ac.QueueClosedError:
            pass
        else:
            raise AssertionError("a call after the queue's close went through")
    with ac.open_queue(tmp_path / "q") as q:
        again = q.tailer("n").read_nowait()
        assert again is not None and again.payload == b"b"  # "a" was saved as done


def test_a_dropped_tailer_leaves_the_registry_at_once(tmp_path: Path) -> None:
    """The registry holds no reference to an appender or tailer: one dropped
    goes by reference counting (no cycle to wait for), its hold with it."""
    with ac.open_queue(tmp_path / "q") as q:
        holds = cycles_of(q).holds
        gc.disable()
        try:
            tailer = q.tailer()
            appender = q.appender()
            refs = [weakref.ref(tailer), weakref.ref(appender)]
            hold_count = len(list(holds._holds))
            assert hold_count == 2
            del tailer, appender
            assert [r() for r in refs] == [None, None]
            assert list(holds._holds) == []
        finally:
            gc.enable()
