"""Appender listeners (Java's ``appenderListener``): called after each commit
with the index and the payload, outside the write lock; a failing one never
loses the excerpt."""

from __future__ import annotations

import logging

import msgspec

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000


class Tick(msgspec.Struct):
    n: int


class Ticks:
    def on_tick(self, tick: Tick) -> None: ...


def test_every_way_of_appending_is_told(tmp_path):
    seen: list[tuple[int, bytes]] = []
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock,
                       appender_listener=lambda i, p: seen.append((i, p))) as q:
        a = q.appender()
        a.append(b"one")
        a.append(bytearray(b"two"))
        a.append("three")
        a.append_text("four")
        # a packed run across a roll: 5000 excerpts, more than one native batch
        a.append_many([b"m%d" % i for i in range(3000)])
        clock.advance_millis(DAY)
        a.append_many([b"n%d" % i for i in range(2000)])
        with a.writing_document() as doc:
            doc.write(b"in place")
        with a.writing_document(metadata=True) as doc:
            doc.write(b"meta: not told")
        with a.writing_document() as doc:
            doc.write(b"rolled back")
            doc.rollback_on_close()
        a.method_writer(Ticks).on_tick(Tick(7))
        t = q.tailer()
        written = [(ex.index, ex.payload) for ex in t]
    assert seen == written
    assert len(seen) == 4 + 5000 + 1 + 1


def test_a_raising_listener_is_logged_and_loses_nothing(tmp_path, caplog):
    calls = []

    def bad(index: int, payload: bytes) -> None:
        raise RuntimeError("listener bug")

    with ac.open_queue(tmp_path / "q", appender_listener=bad) as q:
        a = q.appender(listener=lambda i, p: calls.append(i))
        with caplog.at_level(logging.ERROR, logger="aiochronicle"):
            i0 = a.append(b"kept")
            i1 = a.append(b"kept too")
        assert calls == [i0, i1]  # the next listener still ran
        assert [r.exc_info[0] for r in caplog.records] == [RuntimeError, RuntimeError]
        assert "listener" in caplog.records[0].getMessage()
        assert [ex.payload for ex in q.tailer()] == [b"kept", b"kept too"]


def test_called_outside_the_write_lock(tmp_path):
    """The write lock is free while a listener runs: it may append itself."""
    path = str(tmp_path / "q")
    with ac.open_queue(path) as q:
        other = q.appender()
        held = []

        def listener(index: int, payload: bytes) -> None:
            held.append([s.locked for s in ac.lock_states(path)])
            if payload == b"first":
                other.append(b"from the listener")

        a = q.appender(listener=listener)
        a.append(b"first")
        with a.writing_document() as doc:
            doc.write(b"doc")
        assert len(held) == 2 and not any(any(h) for h in held), held
        assert [ex.payload for ex in q.tailer()] == [b"first", b"from the listener", b"doc"]


def test_appenders_without_listeners_keep_the_native_append(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        assert type(q.appender()).append is ac.Appender.append
        assert type(q.appender(listener=print)).append is not ac.Appender.append


def test_positioned_writes_are_told(tmp_path):
    """A replication sink's positioned batch (``write_packed_at``) tells the
    listeners too, each excerpt at its index; a replayed write does not."""
    with ac.open_queue(tmp_path / "src") as q:
        a = q.appender()
        first = a.append(b"a")
    seen: list[tuple[int, bytes]] = []
    with ac.open_queue(tmp_path / "dst") as q:
        a = q.appender(listener=lambda i, p: seen.append((i, p)))
        data = bytearray(b"abbccc")
        assert a.write_packed_at(first, data, [0, 1, 3, 6]) == 3
        assert a.write_at(first, b"a") is False  # already there
        assert seen == [(first, b"a"), (first + 1, b"bb"), (first + 2, b"ccc")]
        assert [(ex.index, ex.payload) for ex in q.tailer()] == seen
