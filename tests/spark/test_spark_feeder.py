"""The asyncio driver feeder: micro-batches by size or time, back-pressure, resume."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import aiochronicle as ac
from aiochronicle.spark import Feeder
from aiochronicle.spark._feeder import FeedBatch


def _append_later(path: Path, texts: list[str], delay: float = 0.002) -> threading.Thread:
    def run() -> None:
        with ac.open_queue(path) as q:
            a = q.appender()
            for t in texts:
                a.append(t.encode())
                time.sleep(delay)

    th = threading.Thread(target=run)
    th.start()
    return th


async def test_feeder_hands_dataframes_to_the_callback(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        q.appender().append(b"first")
    got: list[FeedBatch] = []
    texts = [f"m{i}" for i in range(200)]

    def on_batch(b: FeedBatch) -> None:  # runs in a thread: Spark calls block
        assert b.df is not None
        rows = b.df.orderBy("index").collect()
        assert [r["index"] for r in rows] == b.table.column("index").to_pylist()
        got.append(b)

    with ac.open_queue(path) as q:
        feeder = Feeder(q, on_batch, spark=spark, name="feed", max_rows=64, linger=0.02)
        task = feeder.start()
        th = _append_later(path, texts)
        for _ in range(600):
            if sum(x.rows for x in got) >= 1 + len(texts):
                break
            await asyncio.sleep(0.05)
        feeder.stop()
        await task
        th.join()
        indices = [i for b in got for i in b.table.column("index").to_pylist()]
        payloads = [bytes(p) for b in got for p in b.table.column("payload").to_pylist()]
        assert payloads == [b"first"] + [t.encode() for t in texts]
        assert indices == sorted(set(indices))
        assert max(b.rows for b in got) <= 64
        # the named position is the one after the last batch handled
        assert q.table_store_get("index.feed") == indices[-1] + 1
        feeder.close()


async def test_feeder_resumes_by_name_and_applies_back_pressure(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        ac.set_queue_codec(q, "msgpack")
        a = q.appender()
        for i in range(50):
            a.append(ac.Codecs.MSGPACK.encode({"n": i}))
    seen: list[int] = []

    async def slow(b: FeedBatch) -> None:  # slower than the queue: the buffer fills
        seen.extend(b.table.column("n").to_pylist())
        await asyncio.sleep(0.02)

    opts = {"struct": "spark_messages:Counter"}
    with ac.open_queue(path) as q:
        feeder = Feeder(q, slow, name="f", max_rows=5, buffer=1, options=opts)
        task = feeder.start()
        for _ in range(200):
            if len(seen) >= 20:
                break
            await asyncio.sleep(0.01)
        feeder.stop()
        await task
        st = feeder.statistics()
        feeder.close()
    assert st.max_buffered <= 1 and st.waits_for_room > 0
    assert seen == list(range(len(seen))) and 20 <= len(seen) < 50
    # a restart under the same name resumes after the last batch handled
    with ac.open_queue(path) as q:
        rest: list[int] = []
        feeder = Feeder(q, lambda b: rest.extend(b.table.column("n").to_pylist()), name="f",
                        options=opts, in_thread=False)
        task = feeder.start()
        for _ in range(200):
            if len(seen) + len(rest) >= 50:
                break
            await asyncio.sleep(0.01)
        feeder.stop()
        await task
        feeder.close()
    assert seen + rest == list(range(50))


async def test_new_named_feeder_starts_where_asked(tmp_path: Path) -> None:
    path = tmp_path / "q"
    with ac.open_queue(path) as q:
        a = q.appender()
        for i in range(5):
            a.append(f"old{i}".encode())
        got: list[bytes] = []
        feeder = Feeder(q, lambda b: got.extend(b.table.column("payload").to_pylist()),
                        name="late", start="end", in_thread=False)
        task = feeder.start()
        for i in range(3):
            a.append(f"new{i}".encode())
        for _ in range(200):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.01)
        feeder.stop()
        await task
        feeder.close()
    assert got == [b"new0", b"new1", b"new2"]
