"""A user's code, checked by ``mypy --strict`` from tests/test_typing.py (never run,
nor collected by pytest): every attribute path the docs and examples show, as a
user writes it, against the package under test (the checkout's, or the installed
wheel's).  What works at run time must type-check."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from prometheus_client import CollectorRegistry

import aiochronicle as ac
from aiochronicle.metrics import QueueCollector, ServiceMetrics


class Price(msgspec.Struct):
    symbol: str
    bid: float
    ask: float


class PriceListener:
    def on_price(self, price: Price) -> None:
        self.last = price


def objects(path: Path) -> None:
    clock = ac.SetTimeProvider(1_637_251_500_000)
    with ac.open_queue(path, roll_cycle=ac.RollCycles.FAST_DAILY, time_provider=clock,
                       source_id=1, sync=ac.SyncMode.NONE, block_size=1 << 20) as q:
        queue: ac.Queue = q
        appender: ac.Appender = queue.appender()
        index: int = appender.append(b"raw bytes")
        appender.append_text("hello")
        same: ac.Queue = appender.queue
        tailer: ac.Tailer = same.tailer()
        again: ac.Appender = tailer.queue.appender()        # the queue that made it
        back: ac.Tailer = again.queue.tailer("name", direction=ac.TailerDirection.FORWARD)
        excerpt: ac.Excerpt | None = back.read_nowait()
        if excerpt is not None:
            at: int = excerpt.index
            payload: bytes = excerpt.payload
            is_meta: bool = excerpt.metadata
            print(at, payload, is_meta, excerpt.text)
        with tailer.reading_document() as reading:
            if reading.present:
                view: memoryview = reading.payload
                print(reading.index, bytes(view))
        for ex in tailer.queue.tailer():                    # iterating what is there
            print(ex.index)
        moved: bool = tailer.move_to_index(index)
        tailer.to_start()
        tailer.to_end()
        state: ac.TailerState = tailer.state
        path_again: str = tailer.queue.path
        cycle: ac.RollCycle = tailer.queue.roll_cycle
        print(moved, state, path_again, cycle, queue.first_index, queue.last_index)
        with appender.writing_document() as doc:
            doc.write(b"in place")
        pretoucher: ac.Pretoucher = queue.pretoucher()
        owner: ac.Queue = pretoucher.queue
        print(owner.path)
        prices = appender.method_writer(PriceListener)
        prices.on_price(Price("EURUSD", 1.1, 1.2))
        reader: ac.MethodReader = tailer.method_reader(PriceListener())
        reader.tailer.to_start()                            # the tailer it reads
        over: ac.Queue = reader.tailer.queue
        over.appender().append(b"more")
        handled: bool = reader.read_one()
        stats: ac.MethodReaderStatistics = reader.statistics()
        print(handled, stats)


def annotated(tailer: ac.Tailer, appender: ac.Appender, reader: ac.MethodReader) -> int:
    """Bare annotations of the public classes pass --strict."""
    tailer.queue.appender().append(b"x")
    appender.queue.tailer().to_start()
    reader.tailer.queue.tailer().to_end()
    return tailer.index


async def service(path: Path) -> None:
    async with ac.open_queue(path) as q:
        async for excerpt in q.tailer(pauser=ac.Pauser.balanced()):
            print(excerpt.index)
            break
        got: ac.Excerpt = await q.tailer().read()
        print(got)
        await q.tailer().method_reader(PriceListener()).run()
        for pauser in (ac.Pauser.busy(), ac.Pauser.sleepy(), ac.Pauser.millis(1),
                       ac.Pauser.yielding(), ac.Pauser.timed_busy(), ac.Pauser.notify()):
            t = q.tailer(pauser=pauser)
            mode: ac.PauserMode = t.pauser.mode
            print(mode)


def errors(path: Path) -> None:
    try:
        ac.open_queue(path, read_only=True).close()
    except ac.NoSuchQueueError as exc:
        base: ac.ChronicleError = exc
        print(base)
    except (ac.QueueClosedError, ac.CorruptQueueError, ac.CodecError, ac.WireError,
            ac.ReplicationError, ac.ServiceError) as exc:
        print(exc)


def services(inp: Path, out: Path) -> ac.Service:
    return ac.Service("pricer", lambda **writers: PriceListener(),
                      inputs=[ac.ServiceInput(str(inp), source_id=1)],
                      outputs=[ac.ServiceOutput("out", str(out), PriceListener, source_id=2)])


async def run_service(svc: ac.Service) -> None:
    stats: ac.ServiceStatistics = await svc.run(until_end=True)
    print(stats, svc.statistics)


def metrics(path: Path) -> None:
    registry = CollectorRegistry()
    figures = ServiceMetrics(registry)
    with ac.open_queue(path) as q:
        pauser = ac.Pauser.balanced()
        figures.add_appender("events", q.appender())
        figures.add_tailer("indexer", q.tailer("indexer", pauser=pauser))
        figures.add_pauser("indexer", pauser)
        registry.register(QueueCollector([str(path)]))


if __name__ == "__main__":
    asyncio.run(service(Path("q")))
