"""Reading in place (Java's ``readingDocument()`` and ``rollbackOnClose()``),
the tailer's state (``TailerState``) and its last read index."""

from __future__ import annotations

import gc
import os
import threading

import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000


def test_view_in_place_then_moves_on(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        big = os.urandom(1 << 20)
        i0 = a.append(b"first")
        i1 = a.append(big)
        t = q.tailer()
        with t.reading_document() as doc:
            assert doc.present and doc.index == i0
            assert bytes(doc.payload) == b"first"
        with t.reading_document() as doc:
            view = doc.payload
            assert doc.index == i1 and len(doc) == len(big)
            assert view.readonly and view == big
            # a view of the mapping, not a copy in a bytes object
            assert not isinstance(view.obj, bytes | bytearray)
            with pytest.raises(TypeError):
                view[0] = 1
        assert t.last_read_index == i1
        assert t.read_nowait() is None
        with t.reading_document() as doc:
            assert not doc.present and not doc and doc.index == i1 + 1
            with pytest.raises(ac.DocumentClosedError):
                doc.payload  # noqa: B018


def test_use_after_the_block_is_a_named_error(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        q.appender().append(b"abc")
        t = q.tailer()
        with t.reading_document() as doc:
            view = doc.payload
        with pytest.raises(ValueError, match="released"):
            bytes(view)
        with pytest.raises(ac.DocumentClosedError):
            doc.payload  # noqa: B018
        with pytest.raises(ac.DocumentClosedError):
            doc.rollback_on_close()


def test_rollback_on_close_and_an_exception_unread(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        i0 = a.append(b"one")
        a.append(b"two")
        t = q.tailer()
        with t.reading_document() as doc:
            doc.rollback_on_close()
        assert t.index == i0
        with pytest.raises(RuntimeError), t.reading_document() as doc:
            raise RuntimeError("parse failed")
        ex = t.read_nowait()
        assert ex is not None and ex.payload == b"one"
        with t.reading_document() as doc:
            assert bytes(doc.payload) == b"two"


def test_across_a_roll_backward_and_named(tmp_path):
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        i0 = a.append(b"day1")
        clock.advance_millis(DAY)
        i1 = a.append(b"day2")
        t = q.tailer("reader")
        seen = []
        for _ in range(2):
            with t.reading_document() as doc:
                seen.append((doc.index, bytes(doc.payload)))
        assert seen == [(i0, b"day1"), (i1, b"day2")]
        t.close()
        assert q.tailer("reader").index == i1 + 1  # the named position was saved
        b = q.tailer(direction=ac.TailerDirection.BACKWARD)
        got = []
        for _ in range(3):
            with b.reading_document() as doc:
                if doc.present:
                    got.append(bytes(doc.payload))
        assert got == [b"day2", b"day1"]
        assert b.state is ac.TailerState.BEYOND_START_OF_CYCLE


@pytest.mark.parametrize("what", ["tailer", "queue"])
def test_close_from_another_thread_waits_for_the_block(tmp_path, what):
    """The file stays mapped while a block is open: another thread's close
    returns at once, and the view stays readable until the block ends."""
    q = ac.open_queue(tmp_path / "q")
    payload = os.urandom(200_000)
    q.appender().append(payload)
    t = q.tailer()
    closed = threading.Event()
    with t.reading_document() as doc:
        view = doc.payload
        th = threading.Thread(target=lambda: ((t if what == "tailer" else q).close(),
                                              closed.set()))
        th.start()
        assert closed.wait(30)
        assert view == payload  # still mapped
    th.join()
    with pytest.raises(ac.QueueClosedError):
        t.read_nowait()
    q.close()


def test_state(tmp_path):
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        t = q.tailer()
        assert t.state is ac.TailerState.UNINITIALISED
        assert t.last_read_index == -1
        a = q.appender()
        i0 = a.append(b"x")
        assert t.read_nowait() is not None
        assert t.state is ac.TailerState.FOUND_IN_CYCLE  # at the end of the open cycle
        assert t.last_read_index == i0
        clock.advance_millis(DAY)
        i1 = a.append(b"y")  # the roll writes the EOF of the first cycle
        assert t.state is ac.TailerState.END_OF_CYCLE
        assert t.read_nowait().index == i1
        assert t.state is ac.TailerState.FOUND_IN_CYCLE
        assert t.move_to_index(i0) and t.state is ac.TailerState.FOUND_IN_CYCLE
        assert t.last_read_index == i1  # moving is no read


def test_cycle_not_found(tmp_path):
    """A named tailer whose cycle file was deleted stands at a cycle without a file."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        a.append(b"x")
        a.append(b"y")
        first = q.cycles()[0]
        t = q.tailer("n")
        t.read_nowait()
        t.read_nowait()
        t.close()
        clock.advance_millis(DAY)
        a.append(b"z")
    os.unlink(os.path.join(tmp_path / "q", os.path.basename(q.cycle_path(first))))
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        t = q.tailer("n")
        assert t.state is ac.TailerState.CYCLE_NOT_FOUND
        assert t.read_nowait().payload == b"z"


def test_last_read_index_of_a_batch_that_stops_at_a_large_excerpt(tmp_path):
    """read_many stops before an excerpt too large for what is left of its
    buffer: the last read index is the last one taken, not that one."""
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        i0 = a.append(b"small")
        a.append(b"L" * 5000)
        t = q.tailer()
        b = t.read_many(max_count=10, max_bytes=1000)
        assert list(b.indices) == [i0]
        assert t.last_read_index == i0
        b = t.read_many(max_count=10, max_bytes=1000)  # too large: comes alone
        assert t.last_read_index == i0 + 1 == b.indices[0]


def test_an_acknowledged_tailer_reads_only_what_a_replica_acknowledged(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        i0 = a.append(b"acked")
        a.append(b"not yet")
        q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", i0)
        t = q.tailer(read_after_replica_acknowledged=True)
        with t.reading_document() as doc:
            assert doc.present and bytes(doc.payload) == b"acked"
        with t.reading_document() as doc:
            assert not doc.present
        q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", i0 + 1)
        with t.reading_document() as doc:
            assert bytes(doc.payload) == b"not yet"


def test_the_file_stays_mapped_when_the_tailer_moves_inside_the_block(tmp_path):
    """Moving the tailer to another cycle inside the block lets go of the
    document's cycle file as far as the tailer goes; the document keeps it
    mapped until the block ends (else reading the view would fault)."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        big = os.urandom(300_000)
        i0 = a.append(big)
        clock.advance_millis(DAY)
        i1 = a.append(b"next day")
        t = q.tailer()
        with t.reading_document() as doc:
            view = doc.payload
            assert t.move_to_index(i1)  # the first cycle's file: only the document holds it
            assert view == big
        assert t.index == i1  # the move inside the block stands
        assert t.read_nowait().payload == b"next day"
        assert t.last_read_index == i1
        assert i0 != i1


def test_not_reached_in_cycle(tmp_path):
    """A named tailer whose saved index lies past what its cycle holds (a
    queue restored from an older copy, say) waits there for it."""
    with ac.open_queue(tmp_path / "q") as q:
        i0 = q.appender().append(b"x")
        q.table_store_put("index.ahead", i0 + 5)
        t = q.tailer("ahead")
        assert t.state is ac.TailerState.NOT_REACHED_IN_CYCLE
        assert t.index == i0 + 5


def test_last_read_index_of_an_acknowledged_tailer(tmp_path):
    """An excerpt a replica has not acknowledged is not read: the last read
    index stays at the one before."""
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        i0 = a.append(b"acked")
        a.append(b"not yet")
        a.append(b"nor this")
        q.table_store_put("chronicle.lastAcknowledgedIndexReplicated", i0)
        t = q.tailer(read_after_replica_acknowledged=True)
        assert t.read_nowait().index == i0
        assert t.read_nowait() is None
        assert t.last_read_index == i0
        t.move_to_index(i0)
        b = t.read_many(10)
        assert list(b.indices) == [i0] and t.last_read_index == i0


def _mapped(path: str) -> bool:
    with open("/proc/self/maps") as f:
        return path in f.read()


def test_a_slice_keeps_the_file_mapped_past_the_block(tmp_path):
    """A slice of the payload taken inside the block and kept past it pins the
    file: the tailer moving to another cycle (which lets go of the first
    file) cannot unmap it; once the slice is gone the file is let go."""
    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        big = os.urandom(300_000)
        a.append(big)
        first = q.current_cycle()
        clock.advance_millis(DAY)
        i1 = a.append(b"next day")
        path0 = q.cycle_path(first)
        t = q.tailer()
        with t.reading_document() as doc:
            part = doc.payload[1000:2000]
            assert part.readonly and not isinstance(part.obj, bytes)  # a view
        assert t.move_to_index(i1)  # the tailer lets go of the first file
        assert part == big[1000:2000]  # still mapped
        assert _mapped(path0)
        del part
        gc.collect()
        assert t.move_to_index(i1)  # the next call on the files lets it go
        assert not _mapped(path0)
        with t.reading_document() as doc:
            assert bytes(doc.payload) == b"next day"


def test_a_buffer_exported_from_the_payload_outlives_the_block(tmp_path):
    """A buffer taken from the payload (numpy's frombuffer, PickleBuffer...)
    holds an export of the view: the block still ends cleanly, and the
    buffer stays readable, the file pinned, until it is gone."""
    import pickle

    clock = ac.SetTimeProvider(T0)
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        i0 = a.append(b"abc" * 1000)
        clock.advance_millis(DAY)
        i1 = a.append(b"next")
        t = q.tailer()
        with t.reading_document() as doc:
            kept = pickle.PickleBuffer(doc.payload)
        assert t.index == i0 + 1  # ended cleanly: moved on
        assert t.move_to_index(i1)
        assert bytes(kept.raw()[:6]) == b"abcabc"
        kept.release()
