"""The watching commands of the command line: ``aiochronicle metrics`` (a
Prometheus endpoint), ``top`` (a live table) and ``latency`` (per-hop
percentiles and plots from message histories).  ``_cli`` registers them
with :func:`add_parsers`.

prometheus-client, rich and matplotlib are optional (the ``monitor`` extra):
each is imported when the command that needs it runs, and a clear error
names the extra when it is missing.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import ipaddress
import json
import math
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TextIO

from ._core._errors import ChronicleError
from ._monitoring._monitor import (
    PERCENTILES,
    LatencyReport,
    QueueFigures,
    QueueWatch,
    RateTracker,
    scan_latency,
)
from ._tools._retention import human_size

__all__ = ["add_parsers", "cmd_latency", "cmd_metrics", "cmd_top"]

EXTRA = "pip install 'aiochronicle[monitor]'"


def _need(what: str, exc: ImportError) -> ChronicleError:
    return ChronicleError(f"this command needs {what} ({exc.name} is not installed): {EXTRA}")


class _SignalStop:
    """Set by SIGTERM or SIGINT, whose handlers it replaces until :meth:`close`.

    Its handler takes no lock.  A Python signal handler runs in the main
    thread between two bytecodes, possibly inside :meth:`wait`; one that
    called ``threading.Event.set()`` there could block for good on the lock
    the interrupted ``Event.wait()`` holds, and Ctrl-C would hang the command.
    The handler sets a flag and writes a byte to a pipe that :meth:`wait`
    polls (the self-pipe wake-up), so a signal that lands just before the
    ``poll`` still ends it at once.
    """

    def __init__(self) -> None:
        self._set = False
        self._r, self._w = os.pipe()
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)
        self._poll = select.poll()  # (select() takes no descriptor past 1023)
        self._poll.register(self._r, select.POLLIN)
        self._old = {sig: signal.signal(sig, self._on_signal)
                     for sig in (signal.SIGTERM, signal.SIGINT)}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._set = True
        with contextlib.suppress(OSError):  # full pipe: a byte is there already
            os.write(self._w, b"\0")

    def is_set(self) -> bool:
        """Whether a signal came."""
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep until a signal came or ``timeout`` seconds passed; return :meth:`is_set`."""
        if not self._set:
            self._poll.poll(max(0, math.ceil(timeout * 1000)))
        return self._set

    def close(self) -> None:
        """Put the previous handlers back and close the pipe."""
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


# --------------------------------------------------------------------------
# argument types
# --------------------------------------------------------------------------


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


PLOT_FORMATS = (".png", ".svg", ".pdf")


def _plot_file(text: str) -> str:
    if not text.lower().endswith(PLOT_FORMATS):
        raise argparse.ArgumentTypeError(
            f"bad plot file {text!r}: its name must end in {', '.join(PLOT_FORMATS)}")
    folder = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"bad plot file {text!r}: no directory {folder}")
    return text


# --------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------


class WebConfig:
    """A web config file in the format of Prometheus' exporter-toolkit:
    ``tls_server_config`` (``cert_file``, ``key_file``, relative to the
    file) and ``basic_auth_users`` (user: bcrypt hash)."""

    def __init__(self, path: str) -> None:
        """Read ``path``.

        Raises:
            ChronicleError: the file is missing, not YAML, or has keys or
                values of the wrong kind.
        """
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as exc:
            raise _need("pyyaml", exc) from None
        try:
            with open(path, encoding="utf-8") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise ChronicleError(f"bad web config {path}: {exc}") from None
        doc = {} if doc is None else doc
        if not isinstance(doc, dict):
            raise ChronicleError(f"bad web config {path}: expected a mapping")
        unknown = set(doc) - {"tls_server_config", "basic_auth_users", "http_server_config"}
        if unknown:
            raise ChronicleError(f"bad web config {path}: unknown keys {sorted(unknown)}")
        base = os.path.dirname(os.path.abspath(path))
        tls = doc.get("tls_server_config") or {}
        self.cert: str | None = None
        self.key: str | None = None
        if tls:
            if not isinstance(tls, dict) or not tls.get("cert_file") or not tls.get("key_file"):
                raise ChronicleError(f"bad web config {path}: tls_server_config needs "
                                     "cert_file and key_file")
            self.cert = os.path.join(base, str(tls["cert_file"]))
            self.key = os.path.join(base, str(tls["key_file"]))
        users = doc.get("basic_auth_users") or {}
        if not isinstance(users, dict) or not all(
                isinstance(u, str) and isinstance(h, str) for u, h in users.items()):
            raise ChronicleError(f"bad web config {path}: basic_auth_users maps user "
                                 "names to bcrypt hashes")
        self.users: dict[str, bytes] = {u: h.encode() for u, h in users.items()}
        if self.users:
            try:
                import bcrypt  # noqa: F401  (checked before serving)
            except ImportError as exc:
                raise _need("bcrypt", exc) from None
        self._ok: set[bytes] = set()  # digests of credentials checked good
        self._ok_lock = threading.Lock()

    def allowed(self, header: str | None) -> bool:
        """True if the ``Authorization`` header names a user and its password
        (always, when there are no users)."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        digest = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed))).digest()
        with self._ok_lock:
            if any(hmac.compare_digest(digest, d) for d in self._ok):
                return True
        import bcrypt
        try:
            good = bcrypt.checkpw(password.encode(), hashed)
        except ValueError:
            return False
        if good:
            with self._ok_lock:
                self._ok.add(digest)
        return good


def _serve(registry: Any, host: str, port: int, web: WebConfig) -> tuple[Any, threading.Thread]:
    """An HTTP(S) server of ``registry`` on its own thread, checking ``web``'s users."""
    import socket
    import ssl
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from prometheus_client import make_wsgi_app

    inner = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Any) -> Any:
        if not web.allowed(environ.get("HTTP_AUTHORIZATION")):
            start_response("401 Unauthorized",
                           [("WWW-Authenticate", 'Basic realm="aiochronicle"'),
                            ("Content-Type", "text/plain")])
            return [b"Unauthorized\n"]
        return inner(environ, start_response)

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = family

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = make_server(host, port, app, Server, handler_class=Quiet)
    if web.cert is not None and web.key is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ctx.load_cert_chain(web.cert, web.key)
        except (OSError, ssl.SSLError) as exc:
            httpd.server_close()
            raise ChronicleError(f"cannot load the TLS certificate or key: {exc}") from None
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return httpd, thread


def _local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def cmd_metrics(args: argparse.Namespace) -> int:
    """Serve ``/metrics`` until SIGTERM or SIGINT."""
    try:
        from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

        from . import metrics
    except ImportError as exc:
        raise _need("prometheus-client", exc) from None
    web = WebConfig(args.web_config) if args.web_config else None
    registry = CollectorRegistry()
    collector = metrics.QueueCollector(args.queues, wait=True)
    registry.register(collector)
    ProcessCollector(registry=registry)
    stop = _SignalStop()
    try:
        if web is None:
            server, thread = start_http_server(args.port, args.host, registry)
        else:
            server, thread = _serve(registry, args.host, args.port, web)
    except BaseException:
        stop.close()
        collector.close()
        raise
    try:
        host, port = args.host, server.server_port
        if not _local(host) and (web is None or web.cert is None or not web.users):
            sys.stderr.write(f"warning: serving {host} beyond this host without "
                             f"{'TLS and basic auth' if web is None else 'TLS or basic auth'}"
                             " (--web-config)\n")
            sys.stderr.flush()
        shown = f"[{host}]" if ":" in host else host
        scheme = "https" if web is not None and web.cert is not None else "http"
        sys.stdout.write(f"serving {scheme}://{shown}:{port}/metrics for "
                         f"{len(args.queues)} queue{'s' if len(args.queues) != 1 else ''}\n")
        sys.stdout.flush()
        while not stop.wait(3600):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        collector.close()
        stop.close()
    return 0


# --------------------------------------------------------------------------
# top
# --------------------------------------------------------------------------


def _rate(r: float | None) -> str:
    return "-" if r is None else f"{r:,.1f}"


def _lock_text(f: QueueFigures) -> str:
    if f.write_lock_holder is None:
        return "free"
    if not f.write_lock_alive:
        return f"held by dead process {f.write_lock_holder} (seen {f.write_lock_held:.1f}s)"
    return f"held by {f.write_lock_holder} for {f.write_lock_held:.1f}s"


def top_rows(looks: list[tuple[str, QueueFigures | str]],
             rates: RateTracker) -> tuple[list[list[str]], list[list[str]]]:
    """The rows of top's two tables (queues, named tailers), header first;
    a look that failed is its error message."""
    queues = [["queue", "excerpts", "last index", "append/s", "cycles", "disk allocated",
               "write lock"]]
    tailers = [["queue", "named tailer", "next index", "lag", "lag bytes", "read/s"]]
    for path, f in looks:
        if isinstance(f, str):
            queues.append([path, "-", "-", "-", "-", "-", f"error: {f}"])
            continue
        append, reads = rates.update(f)
        s = f.stats
        queues.append([path, str(s.total_excerpts),
                       "-" if s.last_index is None else f"{s.last_index:#x}", _rate(append),
                       str(len(s.cycles)), human_size(s.disk_bytes), _lock_text(f)])
        for t in s.tailers:
            tailers.append([path, t.name, f"{t.index:#x}" if t.index else "start",
                            str(t.lag_messages), str(t.lag_bytes), _rate(reads.get(t.name))])
    return queues, tailers


def _look(watches: list[QueueWatch]) -> list[tuple[str, QueueFigures | str]]:
    out: list[tuple[str, QueueFigures | str]] = []
    for w in watches:
        try:
            out.append((w.path, w.figures()))
        except (ChronicleError, OSError) as exc:
            out.append((w.path, str(exc)))
    return out


def cmd_top(args: argparse.Namespace) -> int:
    """A live table of queues and named tailers (``--once``: one table)."""
    try:
        from rich.console import Console, Group
        from rich.live import Live
        from rich.table import Table
    except ImportError as exc:
        raise _need("rich", exc) from None
    watches = [QueueWatch(p, wait=True) for p in args.queues]
    rates = RateTracker()
    out: TextIO = sys.stdout
    tty = out.isatty()
    # markup and emoji codes off: paths and error messages are shown as they are
    console = Console(file=out, width=None if tty else 200, highlight=False, markup=False,
                      emoji=False)

    def render() -> Group:
        queues, tailers = top_rows(_look(watches), rates)
        parts: list[Table] = []
        for rows, title, right in ((queues, "queues", {1, 3, 4}),
                                   (tailers, "named tailers", {3, 4, 5})):
            if len(rows) == 1:
                continue
            tab = Table(title=title, title_justify="left")
            for i, h in enumerate(rows[0]):
                tab.add_column(h, justify="right" if i in right else "left",
                               overflow="fold")
            for r in rows[1:]:
                tab.add_row(*r)
            parts.append(tab)
        return Group(*parts)

    stop = _SignalStop()
    try:
        for _, f in _look(watches):  # the rates' starting point
            if isinstance(f, QueueFigures):
                rates.update(f)
        if args.once:
            stop.wait(args.interval)
            console.print(render())
            return 0
        with Live(render(), console=console, auto_refresh=False, screen=False) as live:
            while not stop.wait(args.interval):
                live.update(render(), refresh=True)
        return 0
    finally:
        stop.close()
        for w in watches:
            w.close()


# --------------------------------------------------------------------------
# latency
# --------------------------------------------------------------------------


def _us(ns: float) -> str:
    return f"{ns / 1000:,.1f}"


def _print_latency(r: LatencyReport, out: TextIO) -> None:
    out.write(f"queue:    {r.path}\n")
    out.write(f"excerpts: {r.excerpts}, {r.with_history} with a message history"
              + (f", {r.damaged} with a damaged one" if r.damaged else "") + "\n")
    if not r.hops:
        out.write("no hops: no excerpt carries a history with two timings or more "
                  "(method writers record one on a queue opened with source_id=N)\n")
        return
    out.write("\nlatency per hop (us)\n")
    rows = [["hop", "count", *(f"p{p:g}" for p in PERCENTILES), "max"]]
    for h in r.hops:
        pc = h.percentiles()
        rows.append([h.hop, str(h.count), *(_us(pc[f"p{p:g}"]) for p in PERCENTILES),
                     _us(pc["max"])])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0]),
                 *(c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True))]
        out.write("  ".join(cells) + "\n")


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr while the scan runs, when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield None
        return
    try:
        from rich.progress import Progress
    except ImportError:
        yield None
        return
    with Progress(transient=True, console=None) as bar:
        task = bar.add_task("reading histories", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def plot_latency(r: LatencyReport, path: str) -> None:
    """Draw each hop's latency against its percentile (log scales) to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise _need("matplotlib", exc) from None
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    top = 1.0
    for h in r.hops:
        xs: list[float] = []
        ys: list[float] = []
        n = h.count
        for value, frac in h.histogram.cumulative():
            # x: the "nines" of the percentile, -log10(1 - p), capped at 1/n
            xs.append(-math.log10(max(1.0 - frac, 1.0 / (2 * n))))
            ys.append(max(value, 1.0) / 1000.0)
        top = max(top, xs[-1] if xs else 0.0)
        ax.step(xs, ys, where="post", label=f"{h.hop} (n={n})")
    ticks = [t for t in (0, 1, 2, 3, 4, 5, 6) if t <= top + 0.5]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{100 - 100 / 10 ** t:g}" for t in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (us)")
    name = os.path.basename(os.path.normpath(r.path)).replace("$", r"\$")  # no mathtext
    ax.set_title(f"per-hop latency from message histories: {name} "
                 f"({r.with_history} excerpts)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if r.hops:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "no message history with two timings or more",
                transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def cmd_latency(args: argparse.Namespace) -> int:
    """Per-hop latency percentiles from the message histories of a queue."""
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked before the long scan)
        except ImportError as exc:
            raise _need("matplotlib", exc) from None
    with _progress() as bar:
        report = scan_latency(args.path, progress=bar)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict()) + "\n")
    else:
        _print_latency(report, sys.stdout)
    if args.plot:
        plot_latency(report, args.plot)
        if not args.json:
            sys.stdout.write(f"\nplot: {args.plot}\n")
    return 0


# --------------------------------------------------------------------------
# the parsers
# --------------------------------------------------------------------------


def add_parsers(sub: Any, seconds: Callable[[str], float]) -> None:
    """Add ``metrics``, ``top`` and ``latency`` to the subcommands ``sub``;
    ``seconds`` is the command line's argument type for a duration."""
    fmt = argparse.RawDescriptionHelpFormatter

    def add(name: str, func: Callable[[argparse.Namespace], int], help_: str,
            description: str) -> argparse.ArgumentParser:
        sp: argparse.ArgumentParser = sub.add_parser(name, help=help_, description=description,
                                                     formatter_class=fmt)
        sp.set_defaults(func=func)
        return sp

    m = add("metrics", cmd_metrics, "serve queues' figures to Prometheus (/metrics)",
            "Serve /metrics in the Prometheus text format for one or more queues, read "
            "again at each\nscrape: excerpts, indices (as cycle and sequence), each named "
            "tailer's lag (excerpts,\nbytes, seconds) and reads, cycle files, disk bytes, "
            "the write lock (its holder alive\nor dead) and the exporter's own figures.  "
            "A queue that does not exist yet is reported\ndown until it appears.  Nothing "
            "is locked or written.  Stops on SIGTERM or Ctrl-C.\nNeeds prometheus-client "
            "(the monitor extra).")
    m.add_argument("queues", nargs="+", metavar="QUEUE", help="queue directories")
    m.add_argument("--port", type=_port, required=True,
                   help="TCP port (0: any free one; the first line printed says which)")
    m.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this host only; beyond it, "
                        "use --web-config)")
    m.add_argument("--web-config", metavar="FILE",
                   help="TLS and basic auth, in the web config format of Prometheus' "
                        "exporter-toolkit (tls_server_config: cert_file, key_file; "
                        "basic_auth_users: user: bcrypt hash)")

    t = add("top", cmd_top, "live view of append rate, readers' rates and lag",
            "A live table of queues (excerpts, append rate, cycles, disk, write lock) and "
            "their\nnamed tailers (position, lag, read rate), redrawn until Ctrl-C or "
            "SIGTERM.\nNeeds rich (the monitor extra).")
    t.add_argument("queues", nargs="+", metavar="QUEUE", help="queue directories")
    t.add_argument("-i", "--interval", type=seconds, default=1.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 1); with --once, the time the "
                        "rates are measured over")
    t.add_argument("--once", action="store_true", help="print one table and exit")

    lt = add("latency", cmd_latency, "per-hop latency percentiles from message histories",
             "Read every excerpt of a queue and report, for each hop of the message "
             "histories\nmethod writers recorded (queue hops and the services' handling "
             "time), the\np50, p90, p99, p99.9 and max latency.  Run it on the last queue "
             "of a chain.\n--plot needs matplotlib (the monitor extra).")
    lt.add_argument("path", metavar="QUEUE", help="queue directory")
    lt.add_argument("--plot", type=_plot_file, metavar="FILE",
                    help="also draw the distributions to FILE (.png, .svg or .pdf)")
    lt.add_argument("--json", action="store_true", help="JSON output (nanoseconds)")
