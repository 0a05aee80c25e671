"""Method writers and readers against raw appends and reads of the same bytes.

Run:  .venv/bin/python bench/methods.py [--quick] [--dir DIR] [--codecs msgpack,binary_wire]
      [--cpu] [--write-docs]

For a 5-field Struct (``Quote``: symbol, bid, ask, size, ts) and each codec it
measures, in one process and one run:

* ``method writer``: calls of ``appender.method_writer(QuoteListener).on_quote(q)``
  (encoding included, one excerpt per call);
* ``raw append``: ``appender.append(payload)`` of the very bytes one such call
  writes (what the queue costs without the method layer);
* ``reader read_one()``: ``while reader.read_one(): pass`` over those excerpts,
  ``reader = tailer.method_reader(handler)``, decoding each Quote and calling
  a trivial handler, one call at a time;
* ``reader read_available()``: the same through ``reader.read_available()``;
* ``reader await run()``: the same through ``await reader.run(until_end=True)``
  on uvloop;
* ``service await run() (exactly-once)``: the same excerpts as the input of a
  stateless ``ac.Service`` (no outputs: the tracked dispatch and the
  service's bookkeeping), ``await service.run(until_end=True)``;
* ``reader await run() -> writer`` / ``service ... -> writer (exactly-once)``:
  read-process-write, a handler writing each Quote on through a method writer
  on a second queue: a method reader's ``run()`` (no history), against a
  Service's (the output carries the message history exactly-once resumes from);
* ``raw read_nowait`` / ``raw read_many (batch)``: reading the same excerpts
  without decoding, one by one and in batches (a batch API);
* ``encode only`` / ``decode only``: the codec alone, no queue (BinaryWire: the
  arguments of one call, as the method writer and reader encode and decode them,
  in C).

Ratios are against the raw figures of the same run (this machine is noisy:
compare ratios, not absolute rates, across runs).  ``--cpu`` divides by this
thread's CPU time instead of the wall clock: on a loaded machine, the cost of
the code itself.  ``--write-docs`` puts the
table into docs/performance.md (the ``methods-bench`` block) and plots
docs/methods.png.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Protocol

import _report  # bench/_report.py (this directory is on sys.path)
import msgspec

import aiochronicle as ac
from aiochronicle._messages._codecs import wire_call_decoder
from aiochronicle._messages._methods import interface_methods
from aiochronicle._messages._methodwriter import _wire_encoder


class Quote(msgspec.Struct):
    symbol: str
    bid: float
    ask: float
    size: int
    ts: int


class QuoteListener(Protocol):
    def on_quote(self, quote: Quote) -> None: ...


class Sink:
    """A handler that only counts."""

    def __init__(self) -> None:
        self.n = 0

    def on_quote(self, quote: Quote) -> None:
        self.n += 1


async def _handled(svc: ac.Service) -> int:
    """Run a service over what its input holds; the inputs it handled."""
    stats = await svc.run(until_end=True)
    return stats.inputs_handled


class Relay:
    """A handler that writes each Quote on (read-process-write).  Its own, not
    bench/service.py's: the reader decodes into the class its annotation names,
    and the writer encodes in C only exactly the class its interface declares."""

    def __init__(self, out: QuoteListener) -> None:
        self.out = out
        self.n = 0

    def on_quote(self, quote: Quote) -> None:
        self.n += 1
        self.out.on_quote(quote)


QUOTE = Quote("EURUSD", 1.08421, 1.08424, 1_000_000, 1_700_000_000_000_000_000)


#: what timed() reads: the wall clock, or this thread's CPU time (--cpu)
CLOCK = time.perf_counter


def timed(fn: Callable[[], int]) -> float:
    """Items per second of one run of ``fn`` (which returns the item count)."""
    gc.collect()
    gc.disable()
    try:
        t0 = CLOCK()
        n = fn()
        return n / (CLOCK() - t0)
    finally:
        gc.enable()


Keep = Callable[[str, float], None]


def run_codec(root: str, codec: str, count: int, repeats: int) -> dict[str, float]:
    best: dict[str, float] = {}

    def keep(name: str, rate: float) -> None:
        best[name] = max(best.get(name, 0.0), rate)

    size = 0
    for r in range(repeats):
        size = _queues(os.path.join(root, f"{codec}-{r}"), codec, count, keep)
        _codec_only(codec, count, keep)
    best["payload bytes"] = float(size)
    return best


def _queues(path: str, codec: str, count: int, keep: Keep) -> int:
    """Write and read ``count`` calls through the method layer and raw."""
    raw_path = path + "-raw"
    for p in (path, raw_path):
        shutil.rmtree(p, ignore_errors=True)
    with (ac.open_queue(path, roll_cycle=ac.RollCycles.HUGE_DAILY) as q,
          ac.open_queue(raw_path, roll_cycle=ac.RollCycles.HUGE_DAILY) as raw_q):
        writer = q.appender().method_writer(QuoteListener, codec=codec)
        writer.on_quote(QUOTE)  # the cycle file is created outside the timing
        first = q.tailer().read_nowait()
        assert first is not None
        payload = first.payload
        raw_append = raw_q.appender().append
        raw_append(payload)

        def do_raw_append() -> int:
            append = raw_append
            data = payload
            for _ in range(count):
                append(data)
            return count

        def do_write() -> int:
            call = writer.on_quote
            quote = QUOTE
            for _ in range(count):
                call(quote)
            return count

        # one after the other, so both see the same machine state
        keep("raw append", timed(do_raw_append))
        keep("method writer", timed(do_write))

        def do_raw_read() -> int:
            read = raw_q.tailer().read_nowait
            n = 0
            while read() is not None:
                n += 1
            return n

        def do_raw_read_many() -> int:
            t = raw_q.tailer()
            n = 0
            while True:
                got = len(t.read_many(1024, 256 << 10))
                if not got:
                    return n
                n += got

        def do_read_one() -> int:
            sink = Sink()
            read_one = q.tailer().method_reader(sink).read_one
            n = 0
            while read_one():
                n += 1
            assert sink.n == n == count + 1, (sink.n, n)
            return n

        def do_read() -> int:
            sink = Sink()
            n = q.tailer().method_reader(sink).read_available()
            assert sink.n == n == count + 1, (sink.n, n)
            return n

        def do_async_read() -> int:
            sink = Sink()
            reader = q.tailer().method_reader(sink)

            async def go() -> int:
                return await reader.run(until_end=True)

            n = _run_on_uvloop(go)
            assert sink.n == n == count + 1, (sink.n, n)
            return n

        def do_service() -> int:
            sink = Sink()
            svc = ac.Service("bench", lambda: sink, [ac.ServiceInput(path, 1, (QuoteListener,))],
                             stateless=True)
            n = _run_on_uvloop(lambda: _handled(svc))
            assert sink.n == n == count + 1, (sink.n, n)
            return n

        def do_relay() -> int:
            out_path = path + "-relay"
            with ac.open_queue(out_path, roll_cycle=ac.RollCycles.HUGE_DAILY) as out:
                relay = Relay(out.appender().method_writer(QuoteListener, codec=codec))
                reader = q.tailer().method_reader(relay)

                async def go() -> int:
                    return await reader.run(until_end=True)

                n = _run_on_uvloop(go)
            shutil.rmtree(out_path)
            assert relay.n == n == count + 1, (relay.n, n)
            return n

        def do_service_relay() -> int:
            out_path = path + "-srelay"
            made: list[Relay] = []

            def factory(out: QuoteListener) -> Relay:
                made.append(Relay(out))
                return made[-1]

            svc = ac.Service("relay", factory, [ac.ServiceInput(path, 1, (QuoteListener,))],
                             [ac.ServiceOutput("out", out_path, QuoteListener, 2, codec=codec)],
                             stateless=True)
            n = _run_on_uvloop(lambda: _handled(svc))
            shutil.rmtree(out_path)
            assert made[-1].n == n == count + 1, (made[-1].n, n)
            return n

        keep("service await run() (exactly-once)", timed(do_service))
        keep("reader await run() -> writer", timed(do_relay))
        keep("service await run() -> writer (exactly-once)", timed(do_service_relay))
        keep("raw read_nowait", timed(do_raw_read))
        keep("raw read_many (batch)", timed(do_raw_read_many))
        keep("reader read_one()", timed(do_read_one))
        keep("reader read_available()", timed(do_read))
        keep("reader await run()", timed(do_async_read))
    for p in (path, raw_path):
        shutil.rmtree(p, ignore_errors=True)
    return len(payload)


def _codec_only(codec: str, count: int, keep: Keep) -> None:
    """Encode and decode one Quote ``count`` times, no queue."""
    c = ac.Codecs.get(codec)
    encode_once: Callable[[], object]
    decode_once: Callable[[], object]
    if c is ac.Codecs.BINARY_WIRE:
        put = _wire_encoder(interface_methods(QuoteListener)["on_quote"])
        call = (QUOTE,)

        def encode_wire() -> bytes:
            return put(call)

        body = encode_wire()
        read = wire_call_decoder([Quote])
        assert read is not None
        start = 2 + body[1]  # after the event name

        def decode_wire() -> object:
            return read(body, start)

        encode_once, decode_once = encode_wire, decode_wire
    else:
        enc = c.encoder.encode  # type: ignore[attr-defined]
        dec = c.decoder(Quote).decode  # type: ignore[attr-defined]
        data = enc(QUOTE)

        def encode_msgspec() -> object:
            return enc(QUOTE)

        def decode_msgspec() -> object:
            return dec(data)

        encode_once, decode_once = encode_msgspec, decode_msgspec

    def do_encode() -> int:
        for _ in range(count):
            encode_once()
        return count

    def do_decode() -> int:
        for _ in range(count):
            decode_once()
        return count

    keep("encode only", timed(do_encode))
    keep("decode only", timed(do_decode))


def _run_on_uvloop(coro_fn: Callable[[], object]) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        n: int = runner.run(coro_fn())  # type: ignore[arg-type]
    return n


ROWS = [
    ("method writer", "raw append"),
    ("raw append", None),
    ("reader read_one()", "raw read_nowait"),
    ("reader read_available()", "raw read_nowait"),
    ("reader await run()", "raw read_nowait"),
    ("service await run() (exactly-once)", "reader await run()"),
    ("reader await run() -> writer", "reader await run()"),
    ("service await run() -> writer (exactly-once)", "reader await run() -> writer"),
    ("raw read_nowait", None),
    ("raw read_many (batch)", None),
    ("encode only", None),
    ("decode only", None),
]


Results = list[tuple[str, int, dict[str, float]]]


def docs_lines(results: Results) -> list[str]:
    header = ["what", "compared with"]
    for codec, _n, _rates in results:
        header += [f"{codec} /s", f"{codec} ratio"]
    rows = []
    for what, ref in ROWS:
        row = [what, ref or ""]
        for _codec, _n, rates in results:
            row += [_report.rate(rates[what]), _report.ratio(rates[what], rates[ref])
                    if ref else ""]
        rows.append(row)
    return _report.table(header, rows, "ll" + "rr" * len(results))


def codec_ratios(results: Results) -> str:
    """BinaryWire's method writer and readers against msgpack's, when both ran."""
    by = {codec: rates for codec, _n, rates in results}
    wire, mp = by.get("binary_wire"), by.get("msgpack")
    if wire is None or mp is None:
        return ""
    parts = [f"{what} {_report.ratio(wire[what], mp[what])}"
             for what in ("method writer", "reader read_one()", "reader read_available()",
                          "reader await run()")]
    return "BinaryWire calls against msgpack's in the same run: " + ", ".join(parts)


def plot(results: Results, name: str) -> bool:
    plt = _report.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=_report.FIGSIZE)
    what = [w for w, _ in ROWS]
    width = 0.8 / len(results)
    for k, (codec, _n, rates) in enumerate(results):
        xs = [i + (k - (len(results) - 1) / 2) * width for i in range(len(what))]
        ax.bar(xs, [rates[w] for w in what], width, label=codec)
    ax.set_xticks(range(len(what)))
    ax.set_xticklabels([w.replace(" ", "\n", 1) for w in what], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("calls or excerpts per second (log)")
    ax.set_title("one process: typed method writer/reader beside raw append/read")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _report.save(fig, name)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (smoke run)")
    parser.add_argument("--dir", default=None, help="where to put the queues (default: a temp dir)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000,
                        help="calls per measurement")
    parser.add_argument("--codecs", default="msgpack,binary_wire")
    parser.add_argument("--cpu", action="store_true",
                        help="time with this thread's CPU time (time.thread_time), which "
                             "other work on a loaded machine does not inflate, instead of "
                             "the wall clock")
    parser.add_argument("--write-docs", action="store_true",
                        help="write the table into docs/performance.md and docs/methods.png")
    args = parser.parse_args()
    if args.cpu and args.write_docs:
        parser.error("--write-docs records wall-clock rates: leave out --cpu")
    if args.cpu:
        global CLOCK
        CLOCK = time.thread_time
    count = max(1000, args.count // 20) if args.quick else args.count
    root = args.dir or tempfile.mkdtemp(prefix="aiochronicle-bench-")
    load0 = _report.load()
    t_start = time.monotonic()
    print(f"aiochronicle {ac.__version__} method writers/readers, one process, best of "
          f"{args.repeats}; 5-field Struct; load average {load0:.2f}; queues in {root}"
          + ("; per second of CPU time" if args.cpu else ""))
    results: Results = []
    try:
        for codec in args.codecs.split(","):
            rates = run_codec(root, codec, count, args.repeats)
            results.append((codec, count, rates))
            print(f"\n{codec}: {count:,} calls, {rates['payload bytes']:.0f}-byte excerpts")
            print(f"  {'what':<26}{'per second':>14}   ratio")
            for what, ref in ROWS:
                ratio = f"{rates[what] / rates[ref]:.2f} x {ref}" if ref else ""
                print(f"  {what:<26}{rates[what]:>14,.0f}   {ratio}")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    across = codec_ratios(results)
    if across:
        print(f"\n{across}")
    load1 = _report.load()
    print(f"\ntotal {time.monotonic() - t_start:.0f} s; load average {load1:.2f}")
    if args.write_docs:
        png = "methods.png"
        runs = ", ".join(f"{codec} {n:,} calls of {rates['payload bytes']:.0f}-byte excerpts"
                         for codec, n, rates in results)
        body = [_report.measured_by("methods.py", load0, load1,
                                    [f"best of {args.repeats}", runs]),
                "Calls (writers) or excerpts (readers) per second; each ratio is against the "
                "raw queue operation named beside it, measured in the same run.", "",
                *docs_lines(results)]
        if across:
            body += ["", across + "."]
        if plot(results, png):
            body += ["", f"![method writers and readers beside raw append and read]({png})"]
        else:
            _report.skipped_plot(png)
        _report.replace_block(_report.PERFORMANCE, "methods-bench", body)
        print("wrote docs/performance.md" + (f" and docs/{png}" if "![" in body[-1] else ""))


if __name__ == "__main__":
    main()
