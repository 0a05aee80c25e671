"""Binary search (Java's ``BinarySearch.search``): the first excerpt at or
after a key, O(log n) excerpts read, across cycles, by a key of the payload,
a field of a typed call or the time in the message history."""

from __future__ import annotations

import math
import os
import random
import shutil
import struct
import tempfile
from array import array

import msgspec
import pytest

import aiochronicle as ac

T0 = 1_637_251_500_000
DAY = 86_400_000


def _key(payload: bytes) -> int:
    return int.from_bytes(payload, "big")


def _fill(q: ac.Queue, clock: ac.SetTimeProvider, keys_per_cycle: list[list[int]]) -> list[int]:
    """Append the keys (8 bytes, big-endian) cycle by cycle; their indices."""
    a = q.appender()
    out = []
    for keys in keys_per_cycle:
        for k in keys:
            out.append(a.append(k.to_bytes(8, "big")))
        clock.advance_millis(DAY)
    return out


def _first_at_or_after(keys: list[int], key: int) -> int | None:
    for i, k in enumerate(keys):
        if k >= key:
            return i
    return None


def test_lower_bound_matches_a_scan_with_duplicates_and_gaps(tmp_path):
    """Against a scan: duplicates (the first of equal keys is found), keys
    between, before and after all, across four cycles with a missing day and
    a cycle file without excerpts."""
    rng = random.Random(7)
    clock = ac.SetTimeProvider(T0)
    keys = sorted(rng.randrange(0, 400) for _ in range(600))
    split = [keys[:150], keys[150:151], keys[151:420], keys[420:]]
    with ac.open_queue(tmp_path / "q", time_provider=clock) as q:
        a = q.appender()
        indices = []
        for n, part in enumerate(split):
            if n == 2:
                clock.advance_millis(DAY)  # a day without a file
            if n == 3:
                a.append_metadata(b"only metadata")  # a cycle file without excerpts
                clock.advance_millis(DAY)
            for k in part:
                indices.append(a.append(k.to_bytes(8, "big")))
            clock.advance_millis(DAY)
        assert len(q.cycles()) == 5
        assert [q.excerpts_in_cycle(c) for c in q.cycles()].count(0) == 1
        t = q.tailer()
        for key in [-1, 0, 1, 199, 200, 201, 399, 400, 1000, *rng.sample(range(400), 40)]:
            want = _first_at_or_after(keys, key)
            got = t.binary_search(key, key_fn=_key)
            assert got == (None if want is None else indices[want]), key
            ex = t.read_nowait()
            if want is None:
                assert ex is None  # left at the end
            else:
                assert ex is not None and ex.index == indices[want]


def test_excerpts_without_a_key_are_passed_over(tmp_path):
    """A key function returning None (Java's NotComparableException): the probe
    looks at the next excerpt."""
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        idx = {}
        for i in range(200):
            if i % 3 == 1:
                a.append(b"heartbeat")
            else:
                idx[i] = a.append(i.to_bytes(8, "big"))

        def key(p: bytes) -> int | None:
            return None if p == b"heartbeat" else _key(p)

        t = q.tailer()
        for k in range(0, 201):
            want = next((idx[i] for i in sorted(idx) if i >= k), None)
            assert t.binary_search(k, key_fn=key) == want, k


def test_empty_queue_and_the_function_form(tmp_path):
    with ac.open_queue(tmp_path / "q") as q:
        t = q.tailer()
        assert t.binary_search(b"x") is None
        a = q.appender()
        first = a.append(b"b")
        a.append(b"d")
        # the default key is the payload's bytes
        assert ac.binary_search(t, b"a") == first
        assert ac.binary_search(t, b"c") == first + 1
        assert ac.binary_search(t, b"e") is None


class Tick(msgspec.Struct):
    symbol: str
    ts: int


class Ticks:
    def on_tick(self, tick: Tick) -> None: ...


@pytest.mark.parametrize("codec", ["msgpack", "json", "binary_wire"])
def test_field_of_a_typed_call(tmp_path, codec):
    with ac.open_queue(tmp_path / "q") as q:
        w = q.appender().method_writer(Ticks, codec=codec)
        for ts in range(0, 1000, 10):
            w.on_tick(Tick("EURUSD", ts))
        t = q.tailer()
        got = t.binary_search(555, key_fn=ac.field_key("ts", codec))
        assert got is not None
        t.move_to_index(got)
        m = t.method_reader(_Keep())
        assert m.read_one()
        assert m.handlers[0].seen == [560]


@pytest.mark.parametrize("codec", ["msgpack", "json", "binary_wire"])
def test_key_of_a_typed_call(tmp_path, codec):
    """method_key: the typed arguments of one method's calls; other calls
    (and anything else) have no key and are passed over."""
    with ac.open_queue(tmp_path / "q") as q:
        a = q.appender()
        w = a.method_writer(Ticks2, codec=codec)
        for ts in range(0, 1000, 10):
            w.on_tick(Tick("EURUSD", ts))
            w.on_heartbeat(ts)
        a.append(b"not a call")
        key = ac.method_key(Ticks2, "on_tick", lambda tick: tick.ts)
        t = q.tailer()
        got = t.binary_search(555, key_fn=key)
        assert got is not None
        ex = t.read_nowait()
        assert ex is not None and ex.index == got and key(ex.payload) == 560
        assert key(b"not a call") is None
    with pytest.raises(TypeError):
        ac.method_key(Ticks2, "on_nothing", lambda x: x)


class Ticks2:
    def on_tick(self, tick: Tick) -> None: ...

    def on_heartbeat(self, n: int) -> None: ...


class _Keep:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def on_tick(self, tick: Tick) -> None:
        self.seen.append(tick.ts)


def test_time_from_message_history(tmp_path):
    """history_time: the first timing of the history a method writer records."""
    with ac.open_queue(tmp_path / "q", source_id=3) as q:
        w = q.appender().method_writer(Ticks, record_history=True)
        for ts in range(50):
            w.on_tick(Tick("X", ts))
        t = q.tailer()
        times = []
        for ex in t:
            h = ac.history_time(ex.payload)
            assert h is not None
            times.append((h, ex.index))
        mid_time, mid_index = times[20]
        # the first excerpt written at or after that time (timings may repeat)
        want = next(i for h, i in times if h >= mid_time)
        assert t.binary_search(mid_time, key_fn=ac.history_time) == want <= mid_index
        assert ac.history_time(b"\x01\x02") is None


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@pytest.mark.slow
def test_ten_million_excerpts_read_in_log_n():
    """10M excerpts over four cycles (about 2 s to build on tmpfs: packed
    batches of 8-byte keys): every search reads at most 2*log2(n) excerpts
    (a scan would read up to 10M) and lands on the right excerpt."""
    n, cycles = 10_000_000, 4
    per = n // cycles
    d = tempfile.mkdtemp(dir=_shm_dir())
    try:
        clock = ac.SetTimeProvider(T0)
        with ac.open_queue(d, time_provider=clock) as q:
            a = q.appender()
            chunk = 1 << 20
            v = 0
            firsts = []
            for _ in range(cycles):
                done = 0
                while done < per:
                    k = min(chunk, per - done)
                    idx = a.append_packed(struct.pack(f">{k}Q", *range(v, v + k)),
                                          array("q", range(0, 8 * (k + 1), 8)))
                    if done == 0:
                        firsts.append(idx - k + 1)
                    v += k
                    done += k
                clock.advance_millis(DAY)
            assert len(q.cycles()) == cycles
            rc = q.roll_cycle
            t = q.tailer()
            bound = 2 * math.log2(n)
            rng = random.Random(1)
            worst = 0
            for key in [0, 1, per - 1, per, per + 1, 3 * per, n - 1, n, -5,
                        *rng.sample(range(n), 30)]:
                st = ac.SearchStats()
                got = t.binary_search(key, key_fn=_key, stats=st)
                worst = max(worst, st.reads)
                assert st.reads <= bound, (key, st)
                if key >= n:
                    assert got is None
                    continue
                k = max(key, 0)
                c, seq = divmod(k, per)
                assert got == rc.to_index(rc.to_cycle(firsts[c]), seq), key
                ex = t.read_nowait()
                assert ex is not None and _key(ex.payload) == k
            # the bound is meaningful: a scan to the middle reads n/2
            assert worst >= math.log2(per)
    finally:
        shutil.rmtree(d, ignore_errors=True)
