"""Watching a service with Prometheus: the queues' figures and the service's own.

A price feed is written to ``md``; a pricing service reads it as the named
tailer ``pricer`` and writes quotes to ``quotes``.  The service registers what
it wants watched on a ``prometheus_client`` registry (its appender, its
tailer, its method reader and pauser, and the per-hop latency of each message
it handles, from the message history), adds the queues' own figures
(``QueueCollector``: what ``aiochronicle metrics`` serves), and serves them on
``/metrics``.  Then it scrapes itself, as Prometheus would.

Run it with ``python examples/monitoring.py [WORK_DIR]``; needs the
``metrics`` extra (``pip install 'aiochronicle[metrics]'``).  From a shell,
``aiochronicle metrics WORK_DIR/md --port 9464`` serves the queue figures,
``aiochronicle top WORK_DIR/md`` shows them live and ``aiochronicle latency
WORK_DIR/quotes`` gives the per-hop percentiles.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import urllib.request

import msgspec
from prometheus_client import CollectorRegistry, start_http_server

import aiochronicle as ac
from aiochronicle.metrics import QueueCollector, ServiceMetrics

PRICES = 5_000
READ = 3_000  # the pricer has read this many when we look


class Price(msgspec.Struct):
    symbol: str
    bid: float
    ask: float


class Quote(msgspec.Struct):
    symbol: str
    mid: float


class Prices:
    def on_price(self, price: Price) -> None: ...


class Quotes:
    def on_quote(self, quote: Quote) -> None: ...


class Pricer:
    """Quotes the mid of every price, and times each hop of its history."""

    def __init__(self, quotes: Quotes, metrics: ServiceMetrics) -> None:
        self.quotes = quotes
        self.metrics = metrics

    def on_price(self, price: Price) -> None:
        self.quotes.on_quote(Quote(price.symbol, (price.bid + price.ask) / 2))
        history = ac.current_history()
        if history is not None:
            self.metrics.observe_history(history)


def main() -> None:
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="aiochronicle-mon-")
    shutil.rmtree(work, ignore_errors=True)
    md, quotes_path = os.path.join(work, "md"), os.path.join(work, "quotes")

    registry = CollectorRegistry()
    metrics = ServiceMetrics(registry)
    with ac.open_queue(md, source_id=1) as feed, ac.open_queue(quotes_path, source_id=2) as out:
        prices = feed.appender()
        metrics.add_appender("feed", prices)
        writer = prices.method_writer(Prices)
        for i in range(PRICES):
            writer.on_price(Price("EURUSD", 1.1 + i * 1e-5, 1.1002 + i * 1e-5))

        quotes = out.appender()
        metrics.add_appender("quotes", quotes)
        pauser = ac.Pauser.balanced()
        tailer = feed.tailer("pricer", pauser=pauser)
        reader = tailer.method_reader(Pricer(quotes.method_writer(Quotes), metrics))
        metrics.add_tailer("pricer", tailer)
        metrics.add_reader("pricer", reader)
        metrics.add_pauser("pricer", pauser)
        for _ in range(READ):
            reader.read_one()

        # the queues' figures (any process may serve these: they are read from the files)
        registry.register(QueueCollector([md, quotes_path]))
        server, thread = start_http_server(0, "127.0.0.1", registry)
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        finally:
            server.shutdown()
            thread.join()
    print(f"scraped {url}:")
    wanted = ("aiochronicle_excerpts_total", "aiochronicle_named_tailer_lag_excerpts",
              "aiochronicle_named_tailer_lag_bytes", "aiochronicle_appender_excerpts_total",
              "aiochronicle_reader_read_total", "aiochronicle_hop_latency_seconds_count")
    lag = -1.0
    for line in text.splitlines():
        if line.startswith(wanted):
            print("  " + line.replace(work, "WORK"))
        if line.startswith("aiochronicle_named_tailer_lag_excerpts"):
            lag = float(line.rsplit(" ", 1)[1])
    print(f"named tailer pricer is {lag:.0f} behind: {PRICES} written - {READ} read")


if __name__ == "__main__":
    main()
