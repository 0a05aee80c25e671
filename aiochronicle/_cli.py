"""The ``aiochronicle`` command line (also ``python -m aiochronicle``).

Commands: dump, tail, write, stats, check, repair, unlock, retention, ping-pong,
replicate.
Every error is one line on stderr and a non-zero exit status (2 for a bad
command line); long operations draw a progress bar on stderr when it is a
terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NoReturn, TextIO

from ._core._errors import ChronicleError, InputError, NoSuchIndexError, NotAQueueError, UsageError
from ._format._render import DecodedPayload, decoder_names, get_decoder
from ._format._rollcycles import RollCycles
from ._format._wire import WireWriter
from ._messages._codecs import CODEC_KEY, codec_of, payload_decoder
from ._messages._search import find_field, history_time
from ._monitor_cli import add_parsers as _add_monitor_parsers
from ._objects._queue import Queue, Tailer, is_queue_dir, open_existing_queue, open_queue
from ._replicas._replication import ReplicationSink, ReplicationSource
from ._services_cli import add_parsers as _add_service_parsers
from ._storage._excerpt import TailerDirection
from ._tools._check import CheckFinding, check_queue
from ._tools._dump import dump_path
from ._tools._locks import lock_states, unlock_queue
from ._tools._repair import files_to_repair, repair_queue
from ._tools._retention import Retention, human_size
from ._tools._stats import QueueStats, queue_stats
from ._version import __version__
from ._waiting._pauser import Pauser

__all__ = ["build_parser", "main"]

PROG = "aiochronicle"




# --------------------------------------------------------------------------
# progress bar
# --------------------------------------------------------------------------


class ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            try:
                enabled = self.stream.isatty()
            except (AttributeError, ValueError):
                enabled = False
        self.enabled = enabled
        self.label = label
        self._last = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        frac = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
        width = max(10, min(40, shutil.get_terminal_size((80, 20)).columns - 30))
        fill = int(frac * width)
        bar = "#" * fill + "-" * (width - fill)
        self.stream.write(f"\r{self.label} [{bar}] {frac * 100:5.1f}%")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._drawn = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# argument types
# --------------------------------------------------------------------------


def parse_index(text: str) -> int:
    """A queue index written as hex (``0x4a0500000000``) or decimal.

    Raises:
        ValueError: the text is neither, or the index is negative.
    """
    s = text.strip().lower().replace("_", "")
    try:
        value = int(s, 16) if s.startswith(("0x", "-0x")) else int(s, 10)
    except ValueError:
        raise ValueError(
            f"bad index {text!r}: expected hex (0x4a0500000000) or decimal") from None
    if value < 0 or value >= 1 << 63:
        raise ValueError(f"bad index {text!r}: must be between 0 and 2**63-1")
    return value


def _index_arg(text: str) -> int:
    try:
        return parse_index(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return n


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return v


def _duration(text: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)?[smhdw]?", text.strip().lower()):
        raise argparse.ArgumentTypeError(
            f"bad age {text!r}: a number of seconds, or with a unit s/m/h/d/w (e.g. 7d)")
    return text


def _size(text: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)?([kmgt]i?b?|b)?", text.strip().lower()):
        raise argparse.ArgumentTypeError(
            f"bad size {text!r}: bytes, or with a unit K/M/G/T (e.g. 10G)")
    return text


def _regex(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"bad regex {text!r}: {exc}") from None


def _roll_cycle(text: str) -> str:
    try:
        RollCycles.by_name(text.upper())
    except ValueError:
        names = ", ".join(rc.name for rc in RollCycles.all())
        raise argparse.ArgumentTypeError(f"unknown roll cycle {text!r} (one of {names})") \
            from None
    return text.upper()


# --------------------------------------------------------------------------
# output helpers
# --------------------------------------------------------------------------


def _hex(i: int | None) -> str:
    return "-" if i is None else f"{i:#x}"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


# --------------------------------------------------------------------------
# dump
# --------------------------------------------------------------------------


def cmd_dump(args: argparse.Namespace) -> int:
    decoder = get_decoder(args.decode)
    out: TextIO
    with contextlib.ExitStack() as stack:
        if args.output:
            out = stack.enter_context(open(args.output, "w", encoding="utf-8"))
        else:
            out = sys.stdout
        bar = stack.enter_context(ProgressBar("dump"))
        dump_path(out, args.path, decoder=decoder, from_index=args.from_index,
                  to_index=args.to_index, skip_table_store=args.skip_table_store,
                  progress=bar)
        out.flush()
    return 0


# --------------------------------------------------------------------------
# tail
# --------------------------------------------------------------------------


def _interface_methods(spec: str) -> set[str] | None:
    """Method names of ``module:Class`` (None for ``any``)."""
    if spec.lower() in ("any", "null", "*"):
        return None
    mod_name, _, cls_name = spec.partition(":")
    if not cls_name:
        mod_name, _, cls_name = spec.rpartition(".")
    if not mod_name or not cls_name:
        raise UsageError(f"bad interface {spec!r}: expected module:Class (or 'any')")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in cls_name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot import interface {spec!r}: {exc}") from None
    names = {n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))}
    if not names:
        raise UsageError(f"interface {spec!r} has no public methods")
    return names


def start_of_last(q: Queue, n: int) -> int | None:
    """The index of the first of the last ``n`` excerpts of ``q`` (None if empty)."""
    rc = q.roll_cycle
    start = None
    left = n
    for c in reversed(q.cycles()):
        count = q.excerpts_in_cycle(c)
        if not count:
            continue
        if count >= left:
            return rc.to_index(c, count - left)
        left -= count
        start = rc.to_index(c, 0)
    return start


def _search_start(t: Tailer, args: argparse.Namespace,
                  decoder: Callable[[bytes], DecodedPayload]) -> None:
    """``-b KEY`` / ``--from-time TIME``: a binary search for the first excerpt."""
    if args.binary_search is not None:
        text: str = args.binary_search
        num = _number(text)
        field = args.key_field

        def key(payload: bytes) -> Any:
            dec = decoder(payload)
            v = find_field(dec.value, field) if field else (
                dec.value if isinstance(dec.value, int | float | str) else dec.line)
            if v is None or isinstance(v, bool):
                return None
            if num is not None:
                return v if isinstance(v, int | float) else _number(str(v))
            return str(v)

        t.binary_search(num if num is not None else text, key_fn=key)
        return
    ns = _time_arg(args.from_time)
    field = args.time_field
    if field:
        def key(payload: bytes) -> Any:
            v = find_field(decoder(payload).value, field)
            return _as_ns(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        t.binary_search(ns, key_fn=key)
    else:
        # message histories hold time.monotonic_ns() of the writing host: the
        # wall clock is mapped onto it by this host's offset (this boot's)
        offset = time.time_ns() - time.monotonic_ns()
        t.binary_search(ns - offset, key_fn=history_time)


def _number(text: str) -> int | float | None:
    try:
        return int(text, 0)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _as_ns(v: float) -> int:
    """A time field in epoch seconds, ms, µs or ns (told apart by size) as ns."""
    a = abs(v)
    scale = 1 if a >= 1e17 else 1_000 if a >= 1e14 else 1_000_000 if a >= 1e11 else 10**9
    return int(v * scale)


def _time_arg(text: str) -> int:
    """``--from-time``: ISO 8601 (local time when it names no zone) or a number
    of epoch seconds/ms/µs/ns, as nanoseconds since the epoch."""
    num = _number(text)
    if num is not None:
        return _as_ns(num)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--from-time: {text!r} is neither ISO 8601 "
                         "(2026-11-28T09:30:00) nor a number of epoch ms") from None
    return int(when.timestamp() * 1_000_000) * 1000


def _position_tailer(q: Queue, t: Tailer, args: argparse.Namespace) -> None:
    backward = t.direction == TailerDirection.BACKWARD
    if args.start is not None:
        idx = args.start
        if not t.move_to_index(idx):
            last = q.last_index
            first = q.first_index
            at_end = (last is not None and idx == last + 1) or (last is None and args.follow)
            if at_end and not backward and args.follow:
                return
            held = "the queue is empty" if last is None else \
                f"the queue holds {first:#x}..{last:#x}"
            raise NoSuchIndexError(f"no excerpt at index {idx:#x}: {held}")
        return
    if args.last is not None and not backward:
        start = start_of_last(q, args.last)
        if start is None:
            t.to_end()
        else:
            t.move_to_index(start)


def _render(ex_index: int, dec: DecodedPayload, args: argparse.Namespace, rc_shift: int) -> str:
    if args.json:
        rec: dict[str, object] = {"index": ex_index, "index_hex": f"{ex_index:#x}",
                                  "cycle": ex_index >> rc_shift,
                                  "sequence": ex_index & ((1 << rc_shift) - 1),
                                  "kind": dec.kind, "payload": dec.value}
        if args.suppress_index:
            for k in ("index", "index_hex", "cycle", "sequence"):
                rec.pop(k)
        return json.dumps(rec, ensure_ascii=False, default=str) + "\n"
    body = dec.line if args.single_line else dec.text
    if args.suppress_index:
        return body + "\n"
    if "\n" in body:
        return f"{ex_index:#x}:\n{body}\n"
    return f"{ex_index:#x}: {body}\n"


def _idle_waits() -> Iterator[float]:
    delay = 0.0005
    while True:
        yield delay
        delay = min(delay * 1.5, 0.02)


def _wait_for_queue(path: str) -> None:
    """``tail -f`` on a queue that is not there yet (its writer has not started):
    say so once on stderr, then wait for it to appear."""
    if is_queue_dir(path):
        return
    sys.stderr.write(f"{PROG} tail: waiting for a queue to appear at {path} "
                     "(Ctrl-C to stop)\n")
    sys.stderr.flush()
    delay = 0.01
    while not is_queue_dir(path):
        if os.path.isfile(path):
            raise NotAQueueError(f"{path} is a file: tail reads a queue directory")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.25)


def cmd_tail(args: argparse.Namespace) -> int:
    if args.backward and args.follow:
        raise UsageError("--follow and --backward cannot be combined")
    searched = [o for o, v in (("-b", args.binary_search), ("--from-time", args.from_time),
                               ("-n", args.start), ("-m", args.last), ("-k", args.backward))
                if v is not None and v is not False]
    if len(searched) > 1 and searched[0] in ("-b", "--from-time"):
        raise UsageError(f"{searched[0]} cannot be combined with {searched[1]}")
    decoder = get_decoder(args.decode)
    methods = _interface_methods(args.interface) if args.interface else None
    path = args.path
    if os.path.isfile(path):
        raise NotAQueueError(f"{path} is a file: tail reads a queue directory "
                             "(use `aiochronicle dump` for a single file)")
    if args.follow:
        _wait_for_queue(path)
    q = open_existing_queue(path, writable=args.named is not None)
    if args.decode == "auto":
        # follow the codec the queue records
        decoder = payload_decoder(codec_of(q.table_store_get(CODEC_KEY)))
    out = sys.stdout
    try:
        direction = TailerDirection.BACKWARD if args.backward else TailerDirection.FORWARD
        t = q.tailer(args.named, direction=direction)
        if args.binary_search is not None or args.from_time is not None:
            _search_start(t, args, decoder)
        else:
            _position_tailer(q, t, args)
        shift = q.roll_cycle.cycle_shift
        shown = 0
        limit = args.max_results
        if args.backward and args.last is not None:
            limit = args.last if limit is None else min(limit, args.last)
        waits: Iterator[float] | None = None
        while True:
            ex = t.read_nowait()
            if ex is None:
                out.flush()
                if not args.follow:
                    break
                if waits is None:
                    waits = _idle_waits()
                time.sleep(next(waits))
                continue
            waits = None
            dec = decoder(ex.payload)
            if args.interface:
                if dec.kind != "wire" or not isinstance(dec.value, dict):
                    continue
                if methods is not None and not methods.intersection(dec.value):
                    continue
            if args.include or args.exclude:
                hay = dec.line
                if args.include and not all(p.search(hay) for p in args.include):
                    continue
                if any(p.search(hay) for p in args.exclude):
                    continue
            out.write(_render(ex.index, dec, args, shift))
            shown += 1
            if limit is not None and shown >= limit:
                break
        out.flush()
    finally:
        # closing saves a named tailer's position: what was printed is handled,
        # so a restart goes on after it
        q.close()
    return 0


# --------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------


def _wire_value(w: WireWriter, v: object, where: str) -> None:
    if v is None:
        w.null()
    elif isinstance(v, bool):
        w.bool(v)
    elif isinstance(v, int):
        if not -(1 << 63) <= v < 1 << 63:
            raise InputError(f"{where}: {v} does not fit in 64 bits")
        w.int_compact(v)
    elif isinstance(v, float):
        w.float64(v)
    elif isinstance(v, str):
        w.text(v)
    elif isinstance(v, dict):
        token = w.begin_length32()
        for k, x in v.items():
            w.field(str(k))
            _wire_value(w, x, where)
        w.end_length32(token)
    elif isinstance(v, list | tuple):
        token = w.begin_length32()
        for x in v:
            _wire_value(w, x, where)
        w.end_length32(token)
    else:
        w.text(str(v))


def encode_calls(obj: object, method: str | None = None, where: str = "input") -> bytes:
    """BinaryWire bytes of method calls, as a Java method writer writes them.

    ``obj`` is ``{"method": args}`` (several keys: several calls in one excerpt),
    or just the args when ``method`` is given.  A list of args is the argument
    list (``[]``: no arguments, ``[x]`` one, ``[x, y]`` two); anything else is
    the single argument.
    """
    if method is not None:
        calls: Iterable[tuple[object, object]] = [(method, obj)]
    elif isinstance(obj, dict) and obj:
        calls = obj.items()
    else:
        raise InputError(f"{where}: expected a method call like {{\"method\": args}}")
    w = WireWriter()
    for name, call_args in calls:
        w.event_name(str(name))
        if isinstance(call_args, list):
            if not call_args:
                w.text("")
            elif len(call_args) == 1:
                _wire_value(w, call_args[0], where)
            else:
                token = w.begin_length32()
                for a in call_args:
                    _wire_value(w, a, where)
                w.end_length32(token)
        else:
            _wire_value(w, call_args, where)
    return w.getvalue()


def _sources(files: list[str]) -> Iterator[tuple[str, TextIO]]:
    if not files:
        yield "stdin", sys.stdin
        return
    for f in files:
        if f == "-":
            yield "stdin", sys.stdin
            continue
        try:
            fh = open(f, encoding="utf-8")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise InputError(f"cannot read {f}: {exc.strerror}") from None
        with fh:
            yield f, fh


def _yaml_documents(name: str, fh: TextIO) -> Iterator[tuple[str, str]]:
    buf: list[str] = []
    start = 1
    for n, line in enumerate(fh, 1):
        if line.startswith("---") or line.rstrip() == "...":
            if any(x.strip() and not x.lstrip().startswith("#") for x in buf):
                yield f"{name} line {start}", "".join(buf)
            buf = []
            start = n + 1
            rest = line[3:].strip() if line.startswith("---") else ""
            if rest:
                buf.append(rest + "\n")
            continue
        buf.append(line)
    if any(x.strip() and not x.lstrip().startswith("#") for x in buf):
        yield f"{name} line {start}", "".join(buf)


def _require_yaml() -> None:
    """YAML input needs PyYAML, which only the ``yaml`` extra installs."""
    try:
        importlib.import_module("yaml")  # msgspec.yaml decodes with it
    except ImportError:
        raise InputError('--format yaml needs PyYAML, which aiochronicle installs only with '
                         'its yaml extra: pip install "aiochronicle[yaml]"') from None


def _messages(args: argparse.Namespace) -> Iterator[bytes]:
    fmt = args.format
    for name, fh in _sources(args.files):
        if fmt == "yaml":
            import msgspec.yaml

            for where, doc in _yaml_documents(name, fh):
                try:
                    obj = msgspec.yaml.decode(doc.encode())
                except msgspec.DecodeError as exc:
                    raise InputError(f"{where}: invalid YAML: {exc}") from None
                for item in obj if isinstance(obj, list) and args.method is None else [obj]:
                    yield encode_calls(item, args.method, where)
            continue
        for n, raw in enumerate(fh, 1):
            line = raw.rstrip("\n").rstrip("\r") if raw.endswith("\n") else raw
            where = f"{name} line {n}"
            if fmt == "text":
                yield WireWriter().text(line).getvalue()
            elif fmt == "raw":
                yield line.encode()
            elif fmt == "hex":
                if not line.strip():
                    continue
                try:
                    yield bytes.fromhex(line)
                except ValueError:
                    raise InputError(f"{where}: not hex") from None
            else:  # json
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise InputError(f"{where}: invalid JSON: {exc}") from None
                for item in obj if isinstance(obj, list) and args.method is None else [obj]:
                    yield encode_calls(item, args.method, where)


def cmd_write(args: argparse.Namespace) -> int:
    path = args.path
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotAQueueError(f"{path} is not a directory")
    if args.format == "yaml":
        _require_yaml()
    rc = RollCycles.by_name(args.roll_cycle) if args.roll_cycle else None
    q = open_queue(path, roll_cycle=rc)
    first = last = None
    n = 0
    try:
        app = q.appender()
        for payload in _messages(args):
            if not payload:
                continue
            idx = app.append(payload)
            if first is None:
                first = idx
            last = idx
            n += 1
            if args.print_index:
                sys.stdout.write(f"{idx:#x}\n")
        sys.stdout.flush()
    finally:
        q.close()
    if not args.quiet:
        span = f" ({_hex(first)}..{_hex(last)})" if n else ""
        sys.stderr.write(f"wrote {n} excerpt{'s' if n != 1 else ''} to {path}{span}\n")
    return 0


# --------------------------------------------------------------------------
# stats
# --------------------------------------------------------------------------


def _print_stats(s: QueueStats, out: TextIO) -> None:
    nc = len(s.cycles)
    out.write(f"queue:       {s.path}\n")
    out.write(f"roll cycle:  {s.roll_cycle} (epoch {s.epoch})\n")
    out.write(f"excerpts:    {s.total_excerpts} in {nc} cycle{'s' if nc != 1 else ''}, "
              f"first {_hex(s.first_index)}, last {_hex(s.last_index)}\n")
    out.write(f"bytes:       {s.total_bytes} written, {human_size(s.disk_bytes)} allocated on "
              f"disk, files' apparent size {human_size(s.file_bytes)}\n")
    for lk in s.locks:
        state = "free" if not lk.locked else \
            f"held by process {lk.holder} ({'alive' if lk.alive else 'dead'})"
        out.write(f"{lk.key + ':':<12} {state}\n" if len(lk.key) < 12 else
                  f"{lk.key}: {state}\n")
    if s.cycles:
        out.write("\n")
        rows = [["cycle", "file", "excerpts", "bytes", "first index", "last index", "eof"]]
        rows += [[str(c.cycle), os.path.basename(c.path), str(c.excerpts), str(c.bytes_used),
                  _hex(c.first_index), _hex(c.last_index), "yes" if c.eof else "no"]
                 for c in s.cycles]
        _table(rows, out)
    if s.tailers:
        out.write("\n")
        rows = [["named tailer", "next index", "lag (messages)", "lag (bytes)"]]
        rows += [[t.name, _hex(t.index) if t.index else "start", str(t.lag_messages),
                  str(t.lag_bytes)] for t in s.tailers]
        _table(rows, out)


def cmd_stats(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.watch is None:
        s = queue_stats(args.path)
        if args.json:
            out.write(json.dumps(s.to_dict()) + "\n")
        else:
            _print_stats(s, out)
        return 0
    tty = out.isatty()
    prev: tuple[float, int] | None = None
    n = 0
    while True:
        s = queue_stats(args.path)
        now = time.monotonic()
        if args.json:
            d = s.to_dict()
            d["time"] = time.time()
            out.write(json.dumps(d) + "\n")
        else:
            if tty:
                out.write("\x1b[H\x1b[2J")
            elif n:
                out.write("\n")
            out.write(time.strftime("%Y-%m-%d %H:%M:%S") + f"  (every {args.watch:g}s)\n")
            if prev is not None:
                dt = max(now - prev[0], 1e-9)
                added = s.total_excerpts - prev[1]
                out.write(f"rate:        {added} excerpts in {dt:.1f}s ({added / dt:,.0f}/s)\n")
            _print_stats(s, out)
        out.flush()
        prev = (now, s.total_excerpts)
        n += 1
        if args.count is not None and n >= args.count:
            return 0
        time.sleep(args.watch)


# --------------------------------------------------------------------------
# check / repair
# --------------------------------------------------------------------------


def _summarise(findings: list[CheckFinding]) -> tuple[int, int]:
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = sum(1 for f in findings if f.severity == "warning")
    return errors, warnings


#: ``check``/``repair`` exit statuses: the queue is consistent; only warnings
#: (every excerpt reads; something is worth tidying); errors (excerpts may be
#: unreachable).  1 stays "the command failed" and 2 "bad usage", as for every
#: command.
CHECK_CLEAN, CHECK_WARNINGS, CHECK_ERRORS = 0, 3, 4


def _check_status(findings: list[CheckFinding]) -> int:
    errors, warnings = _summarise(findings)
    return CHECK_ERRORS if errors else CHECK_WARNINGS if warnings else CHECK_CLEAN


def _print_findings(findings: list[CheckFinding], out: TextIO, *, show_fix: bool) -> None:
    for f in findings:
        line = str(f)
        if f.repaired:
            line += f"  [repaired: {f.fix}]"
        elif show_fix and f.fix:
            line += f"  [repair: {f.fix}]"
        out.write(line + "\n")


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        return "q"
    return line.strip().lower()


def cmd_check(args: argparse.Namespace) -> int:
    out = sys.stdout
    with ProgressBar("check") as bar:
        findings = check_queue(args.path, progress=bar)
    if args.json and not args.repair:
        out.write(json.dumps([{"severity": f.severity, "kind": f.kind, "path": f.path,
                               "offset": f.offset, "message": f.message, "fix": f.fix}
                              for f in findings]) + "\n")
        return _check_status(findings)
    _print_findings(findings, out, show_fix=True)
    errors, warnings = _summarise(findings)
    todo = [f for f in findings if f.repairable]
    if not args.repair:
        if not errors and not warnings:
            out.write(f"{args.path}: no problems found\n")
            return 0
        out.write(f"{errors} error{'s' if errors != 1 else ''}, {warnings} "
                  f"warning{'s' if warnings != 1 else ''}; {len(todo)} repairable")
        out.write(f" (run: {PROG} repair {args.path})\n" if todo else "\n")
        return _check_status(findings)
    if not todo:
        out.write("nothing to repair\n")
        return _check_status(findings)
    files = files_to_repair(todo)
    backup = args.backup or f"{os.path.abspath(args.path).rstrip(os.sep)}.backup-" \
                           f"{time.strftime('%Y%m%d-%H%M%S')}"
    if args.no_backup:
        backup_dir: str | None = None
    elif args.yes:
        backup_dir = backup
    else:
        if not sys.stdin.isatty():
            raise UsageError("refusing to repair without confirmation: run it on a terminal "
                             "or pass --yes")
        names = ", ".join(os.path.basename(p) for p in files)
        answer = _ask(f"Repair changes {len(files)} file(s): {names}.\n"
                      f"Back them up to {backup} first? [Y/n/q] ")
        if answer in ("q", "quit"):
            out.write("nothing changed\n")
            return _check_status(findings)
        if answer in ("", "y", "yes"):
            backup_dir = backup
        else:
            if _ask("Repair without a backup? [y/N] ") not in ("y", "yes"):
                out.write("nothing changed\n")
                return _check_status(findings)
            backup_dir = None
    with ProgressBar("repair") as bar:
        done = repair_queue(args.path, backup_dir=backup_dir, progress=bar)
    if backup_dir is not None:
        out.write(f"backed up {len(files)} file(s) to {backup_dir}\n")
    fixed = [f for f in done if f.repaired]
    for f in fixed:
        out.write(f"repaired: {f.kind}: {os.path.basename(f.path)}: {f.fix}\n")
    remaining = check_queue(args.path)
    errors, warnings = _summarise(remaining)
    if errors or warnings:
        out.write("still wrong after the repair:\n")
        _print_findings(remaining, out, show_fix=False)
        return _check_status(remaining)
    out.write(f"repaired {len(fixed)} problem{'s' if len(fixed) != 1 else ''}; "
              f"{args.path} is consistent now\n")
    return 0


def cmd_repair(args: argparse.Namespace) -> int:
    args.repair = True
    args.json = False
    return cmd_check(args)


# --------------------------------------------------------------------------
# unlock
# --------------------------------------------------------------------------


def cmd_unlock(args: argparse.Namespace) -> int:
    out = sys.stdout
    if args.dry_run:
        for s in lock_states(args.path):
            state = "free" if not s.locked else \
                f"held by process {s.holder} ({'alive' if s.alive else 'dead'})"
            out.write(f"{s.key}: {state}\n")
        return 0
    results = unlock_queue(args.path, force=args.force)
    for s, released in results:
        if not s.locked:
            out.write(f"{s.key}: free\n")
        elif released:
            how = "alive, released by force" if s.alive else "dead"
            out.write(f"{s.key}: held by process {s.holder} ({how}) -> released\n")
        else:
            out.write(f"{s.key}: changed while unlocking; left alone\n")
    return 0


# --------------------------------------------------------------------------
# retention
# --------------------------------------------------------------------------


def cmd_retention(args: argparse.Namespace) -> int:
    if args.max_age is None and args.max_size is None:
        raise UsageError("give --max-age and/or --max-size")
    out = sys.stdout
    policy = Retention(args.path, max_age=args.max_age, max_size=args.max_size,
                       move_to=args.move_to)
    # check the path first so a typo is a clear error
    open_existing_queue(args.path).close()
    with ProgressBar("retention") as bar:
        decisions = policy.apply(dry_run=args.dry_run, progress=bar)
    gone = [d for d in decisions if d.action != "keep"]
    for d in decisions:
        name = os.path.basename(d.path)
        if d.action == "keep":
            out.write(f"keep    {name} ({human_size(d.disk_bytes)}): {d.reason}\n")
            continue
        verb = d.action if args.dry_run else ("moved" if d.action == "move" else "deleted")
        dest = f" -> {d.destination}" if d.destination else ""
        prefix = "would " if args.dry_run else ""
        out.write(f"{prefix}{verb:<7} {name} ({human_size(d.disk_bytes)}){dest}: {d.reason}\n")
    freed = sum(d.disk_bytes for d in gone)
    what = "would free" if args.dry_run else "freed"
    out.write(f"{len(gone)} of {len(decisions)} cycle files; {what} {human_size(freed)}\n")
    return 0


# --------------------------------------------------------------------------
# ping-pong
# --------------------------------------------------------------------------

_STOP = b"stop"
_READY = b"ready"


def _echo(path: str, timeout: float) -> int:
    """The child of ping-pong: copy every excerpt of ping/ to pong/."""
    with open_queue(os.path.join(path, "ping")) as ping, \
            open_queue(os.path.join(path, "pong")) as pong:
        t = ping.tailer()
        app = pong.appender()
        app.append(_READY)
        read = t.read_nowait
        append = app.append
        last = time.monotonic()
        spins = 0
        while True:
            ex = read()
            if ex is None:
                spins += 1
                if spins & 0xFFF == 0:
                    now = time.monotonic()
                    if now - last > timeout:
                        return 1
                    time.sleep(0)
                continue
            spins = 0
            last = time.monotonic()
            if ex.payload == _STOP:
                return 0
            append(ex.payload)


def _percentile(sorted_ns: list[int], p: float) -> float:
    k = min(len(sorted_ns) - 1, max(0, round(p / 100 * (len(sorted_ns) - 1))))
    return sorted_ns[k] / 1000.0


def cmd_ping_pong(args: argparse.Namespace) -> int:
    if args.role == "echo":
        return _echo(args.path, args.timeout)
    if args.size < 8:
        raise UsageError("--size must be at least 8 bytes")
    out = sys.stdout
    tmp = None
    path = args.path
    if path is None:
        tmp = tempfile.mkdtemp(prefix="aiochronicle-pingpong-")
        path = tmp
    elif os.path.exists(os.path.join(path, "ping")) or os.path.exists(os.path.join(path, "pong")):
        raise UsageError(f"{path} already holds ping/ or pong/ queues: use an empty directory")
    child = None
    try:
        os.makedirs(path, exist_ok=True)
        with open_queue(os.path.join(path, "ping")) as ping, \
                open_queue(os.path.join(path, "pong")) as pong:
            child = subprocess.Popen(
                [sys.executable, "-m", "aiochronicle", "ping-pong", "--role", "echo",
                 "--path", path, "--timeout", str(args.timeout)],
                stdin=subprocess.DEVNULL)
            t = pong.tailer()
            app = ping.appender()
            deadline = time.monotonic() + args.timeout
            while True:
                ex = t.read_nowait()
                if ex is not None and ex.payload == _READY:
                    break
                if child.poll() is not None:
                    raise ChronicleError(f"the echo process exited with status {child.returncode}")
                if time.monotonic() > deadline:
                    raise ChronicleError("the echo process did not start in time")
                time.sleep(0.001)
            pad = bytes(args.size - 8)
            total = args.warmup + args.count
            samples: list[int] = []
            read = t.read_nowait
            append = app.append
            clock = time.perf_counter_ns
            started = time.perf_counter()
            with ProgressBar("ping-pong") as bar:
                for i in range(total):
                    msg = struct.pack("<q", i) + pad
                    t0 = clock()
                    append(msg)
                    spins = 0
                    while True:
                        ex = read()
                        if ex is not None:
                            break
                        spins += 1
                        if spins & 0xFFFF == 0:
                            if child.poll() is not None:
                                raise ChronicleError("the echo process died")
                            if time.perf_counter() - started > args.timeout + total * 0.01:
                                raise ChronicleError("no echo in time")
                    t1 = clock()
                    if ex.payload != msg:
                        raise ChronicleError(f"round trip {i} returned different bytes")
                    if i >= args.warmup:
                        samples.append(t1 - t0)
                    if i % 1000 == 0:
                        bar(i, total)
            elapsed = time.perf_counter() - started
            app.append(_STOP)
        child.wait(timeout=10)
        samples.sort()
        stats = {p: _percentile(samples, p) for p in (50, 90, 99, 99.9)}
        result = {
            "round_trips": len(samples), "size": args.size, "warmup": args.warmup,
            "min_us": samples[0] / 1000.0, "p50_us": stats[50], "p90_us": stats[90],
            "p99_us": stats[99], "p99_9_us": stats[99.9], "max_us": samples[-1] / 1000.0,
            "round_trips_per_s": total / elapsed if elapsed else 0.0,
        }
        if args.json:
            out.write(json.dumps(result) + "\n")
        else:
            out.write(f"ping-pong: {len(samples)} round trips of {args.size} B between two "
                      f"processes (after {args.warmup} warm-up)\n")
            out.write("round trip (us): " + "  ".join(
                f"{k} {result[v]:.1f}" for k, v in (
                    ("min", "min_us"), ("p50", "p50_us"), ("p90", "p90_us"), ("p99", "p99_us"),
                    ("p99.9", "p99_9_us"), ("max", "max_us"))) + "\n")
            out.write(f"one way ~ {result['p50_us'] / 2:.1f} us (p50 / 2); "
                      f"{result['round_trips_per_s']:,.0f} round trips/s\n")
        return 0
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------
# the parser
# --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    p = _Parser(prog=PROG, description="Inspect, operate and test Chronicle Queue v5 queues "
                "(byte-compatible with Java).",
                epilog=f"Run `{PROG} COMMAND --help` for a command's options.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    fmt = argparse.RawDescriptionHelpFormatter

    def add(name: str, func: Callable[[argparse.Namespace], int], help_: str,
            description: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=description, formatter_class=fmt)
        sp.set_defaults(func=func)
        return sp

    decoders = decoder_names()

    d = add("dump", cmd_dump, "show every document of a queue or one .cq4/.cq4t file",
            "Show the metadata and every excerpt of a queue directory (or of a single "
            ".cq4/.cq4t file)\nas YAML-like text, as Java's DumpMain does: headers, "
            "positions, index pages and\ndecoded payloads.")
    d.add_argument("path", help="queue directory, or a .cq4/.cq4t file")
    d.add_argument("--from", dest="from_index", type=_index_arg, metavar="INDEX",
                   help="first index to show (hex 0x... or decimal); shows data only")
    d.add_argument("--to", dest="to_index", type=_index_arg, metavar="INDEX",
                   help="last index to show (inclusive)")
    d.add_argument("--decode", choices=decoders, default="auto",
                   help="how to show payloads (default: auto)")
    d.add_argument("--skip-table-store", action="store_true",
                   help="leave out metadata.cq4t")
    d.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")

    t = add("tail", cmd_tail, "print excerpts, optionally following new ones",
            "Print the excerpts of a queue (Java's ChronicleReaderMain), one record per "
            "excerpt:\n`0x<index>: <payload>`.  Regex filters see the one-line form of "
            "the payload;\na record is shown when it matches every -i and no -e.")
    t.add_argument("path", nargs="?", help="queue directory")
    t.add_argument("-d", "--directory", dest="path_opt", metavar="DIR",
                   help="the queue directory (as Java's -d), instead of PATH")
    t.add_argument("-f", "--follow", action="store_true",
                   help="keep waiting for new excerpts (Ctrl-C to stop)")
    t.add_argument("-n", "--start", type=_index_arg, metavar="INDEX",
                   help="start at this index (hex 0x... or decimal)")
    t.add_argument("-m", "--last", type=_positive_int, metavar="N",
                   help="start N excerpts before the end")
    t.add_argument("-x", "--max-results", type=_positive_int, metavar="N",
                   help="stop after N records")
    t.add_argument("-i", "--include", type=_regex, action="append", default=[],
                   metavar="REGEX", help="show only records matching REGEX (repeatable)")
    t.add_argument("-e", "--exclude", type=_regex, action="append", default=[],
                   metavar="REGEX", help="hide records matching REGEX (repeatable)")
    t.add_argument("-l", "--single-line", action="store_true", help="one line per record")
    t.add_argument("-s", "--suppress-index", action="store_true",
                   help="do not print the index")
    t.add_argument("--json", action="store_true", help="one JSON object per record")
    t.add_argument("-r", "--interface", metavar="MODULE:CLASS",
                   help="show only method calls of this interface ('any': every method call)")
    t.add_argument("-k", "--backward", action="store_true", help="read from the end backwards")
    t.add_argument("-b", "--binary-search", metavar="KEY",
                   help="start at the first excerpt whose key is at or after KEY, found by "
                   "binary search (the queue must be sorted by the key): the value of "
                   "--key-field, or the payload itself; numbers compare as numbers")
    t.add_argument("--key-field", metavar="NAME",
                   help="with -b: the key is this field of the decoded payload (any depth)")
    t.add_argument("--from-time", metavar="TIME",
                   help="start at the first excerpt written at or after TIME (ISO 8601, "
                   "local unless it names a zone, or epoch s/ms/us/ns), found by binary "
                   "search: by --time-field, else by the first timing of the message "
                   "history (histories written on this host since it booted)")
    t.add_argument("--time-field", metavar="NAME",
                   help="with --from-time: the field holding each excerpt's time in epoch "
                   "s/ms/us/ns")
    t.add_argument("--named", metavar="NAME",
                   help="read as named tailer NAME: resume where it stopped and save progress")
    t.add_argument("--decode", choices=decoders, default="auto",
                   help="how to show payloads (default: auto)")

    w = add("write", cmd_write, "append lines or method calls from stdin or files",
            "Append one excerpt per input line (or per JSON line / YAML document) to a "
            "queue,\ncreating it if needed.\n\n"
            "formats:\n"
            "  text  each line as BinaryWire text, as Java's writeText (default)\n"
            "  raw   each line as raw UTF-8 bytes\n"
            "  hex   each line is hex for the raw bytes\n"
            "  json  each line a method call {\"method\": args}: args [] = none, [a, b] = "
            "two,\n        anything else = one; written as a BinaryWire event, as Java's "
            "method writers\n"
            "  yaml  YAML documents (separated by ---), each a method call as for json")
    w.add_argument("path", help="queue directory")
    w.add_argument("files", nargs="*", metavar="FILE", help="input files (default: stdin)")
    fg = w.add_mutually_exclusive_group()
    fg.add_argument("--format", choices=["text", "raw", "hex", "json", "yaml"],
                    default="text", help="input format (default: text)")
    fg.add_argument("--json", dest="format", action="store_const", const="json",
                    help="same as --format json")
    fg.add_argument("--yaml", dest="format", action="store_const", const="yaml",
                    help="same as --format yaml")
    w.add_argument("-m", "--method", metavar="NAME",
                   help="with json/yaml: each input is the arguments of method NAME")
    w.add_argument("--roll-cycle", type=_roll_cycle, metavar="NAME",
                   help="roll cycle for a new queue (default FAST_DAILY)")
    w.add_argument("--print-index", action="store_true", help="print each new index")
    w.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")

    s = add("stats", cmd_stats, "cycles, counts, bytes, locks and named tailers' lag",
            "Show each cycle's excerpt count, bytes and first/last index, the locks, and "
            "each\nnamed tailer's lag in messages and bytes.")
    s.add_argument("path", help="queue directory")
    s.add_argument("--json", action="store_true", help="JSON output")
    s.add_argument("-w", "--watch", type=_seconds, nargs="?", const=2.0, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    s.add_argument("--count", type=_positive_int, metavar="N",
                   help="with --watch: stop after N refreshes")

    def check_opts(sp: argparse.ArgumentParser, with_repair: bool) -> None:
        sp.add_argument("path", help="queue directory")
        if with_repair:
            sp.add_argument("--repair", action="store_true",
                            help="repair what can be repaired (asks for a backup first)")
            sp.add_argument("--json", action="store_true", help="JSON output (check only)")
        sp.add_argument("-y", "--yes", action="store_true",
                        help="repair without asking (backs up first unless --no-backup)")
        sp.add_argument("--backup", metavar="DIR",
                        help="where to back up files before repairing "
                             "(default: <queue>.backup-<time>)")
        sp.add_argument("--no-backup", action="store_true", help="repair without a backup")

    c = add("check", cmd_check, "find inconsistencies (and repair them with --repair)",
            "Find incomplete headers, missing EOF markers, index holes and bad entries, a "
            "stale\nwritePosition, an out-of-date directory listing and locks held by dead "
            "processes.\n\n"
            "exit status:\n"
            "  0  no problems found\n"
            "  1  the check could not run (no such queue, unreadable metadata...)\n"
            "  2  bad command line, or a repair refused without confirmation\n"
            "  3  warnings only: nothing is damaged, something needs attention (a missing\n"
            "     EOF marker, a stale lock, a file libchronicle wrote...)\n"
            "  4  errors: damaged headers, index or excerpts")
    check_opts(c, True)
    r = add("repair", cmd_repair, "same as check --repair",
            "Check the queue, then repair what can be repaired while holding its write lock "
            "(after\na backup prompt, or with --yes).  Exit status 0 when the queue is "
            "consistent afterwards,\notherwise as for check (3: warnings remain, 4: errors "
            "remain).")
    check_opts(r, False)

    u = add("unlock", cmd_unlock, "release a write/append lock whose holder is dead",
            "Release chronicle.write.lock and chronicle.append.lock when the process holding "
            "them\nis dead; refuses when it is alive unless --force.")
    u.add_argument("path", help="queue directory")
    u.add_argument("--force", action="store_true",
                   help="release even a lock whose holder is alive (dangerous)")
    u.add_argument("--dry-run", action="store_true", help="only show the locks")

    rt = add("retention", cmd_retention, "delete or move old cycle files",
             "Delete (or move) cycle files older than an age or beyond a total size on disk.\n"
             "Never the current cycle, never one a named tailer still needs, never one open "
             "in\nanother process, and only from the oldest end.")
    rt.add_argument("path", help="queue directory")
    rt.add_argument("--max-age", type=_duration, metavar="AGE",
                    help="remove cycles that ended more than AGE ago (e.g. 3600, 12h, 7d)")
    rt.add_argument("--max-size", type=_size, metavar="SIZE",
                    help="keep at most SIZE on disk (e.g. 500M, 10G)")
    rt.add_argument("--dry-run", action="store_true", help="only show what would go")
    rt.add_argument("--move-to", metavar="DIR", help="move files to DIR instead of deleting")

    pp = add("ping-pong", cmd_ping_pong, "two-process round-trip latency test",
             "Measure round trips between this process and a child: each message goes out "
             "through\none queue and comes back through another.")
    pp.add_argument("-n", "--count", type=_positive_int, default=10_000,
                    help="round trips to measure (default 10000)")
    pp.add_argument("--warmup", type=int, default=1000, help="round trips not measured "
                    "(default 1000)")
    pp.add_argument("--size", type=int, default=40, help="message size in bytes (default 40)")
    pp.add_argument("--path", metavar="DIR",
                    help="directory for the two queues (default: a temporary one)")
    pp.add_argument("--timeout", type=_seconds, default=10.0,
                    help="give up after this many seconds without an answer (default 10)")
    pp.add_argument("--json", action="store_true", help="JSON output")
    pp.add_argument("--role", choices=["ping", "echo"], default="ping", help=argparse.SUPPRESS)
    _add_replicate_parser(sub)
    _add_monitor_parsers(sub, _seconds)
    _add_service_parsers(sub, _index_arg)
    return p


# --------------------------------------------------------------------------
# replicate serve|sink (replication between hosts, see _replication)
# --------------------------------------------------------------------------

SECRET_ENV = "AIOCHRONICLE_REPLICATION_SECRET"


def _endpoint(text: str) -> tuple[str, int]:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT``."""
    host, sep, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected [HOST:]PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port {number} out of range")
    return (host.strip("[]") if sep and host else "127.0.0.1"), number


def _add_replicate_parser(sub: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    rp = sub.add_parser(
        "replicate", help="serve a queue to replicas, or mirror one (replication)",
        formatter_class=fmt,
        description="Replicate a queue between hosts over TCP: `serve` a queue; run a `sink` "
        "that\nmirrors it into a local queue at the same indices, acknowledging what it "
        "wrote.\nPeers authenticate with a shared secret and/or TLS; the secret is read "
        f"from\n--secret-file or ${SECRET_ENV}, never from the command line.")
    rsub = rp.add_subparsers(dest="replicate_command", metavar="ROLE", parser_class=_Parser)
    rsub.required = True

    def security(sp: argparse.ArgumentParser, server: bool) -> None:
        sp.add_argument("--secret-file", metavar="FILE",
                        help=f"file holding the shared secret (default: ${SECRET_ENV})")
        sp.add_argument("--tls-cert", metavar="PEM", help="this side's certificate "
                        + ("(enables TLS)" if server else "(for sources requiring one)"))
        sp.add_argument("--tls-key", metavar="PEM", help="its private key (default: in --tls-cert)")
        sp.add_argument("--tls-ca", metavar="PEM",
                        help="CA that signs the sinks' certificates (requires them)" if server
                        else "CA that signs the source's certificate (enables TLS)")
        sp.add_argument("--heartbeat", type=_seconds, default=1.0, metavar="SECONDS",
                        help="seconds between heartbeats (default 1)")
        sp.add_argument("--timeout", type=_seconds, default=5.0, metavar="SECONDS",
                        help="drop a connection silent this long (default 5)")
        sp.add_argument("-v", "--verbose", action="count", default=0,
                        help="log connections (-vv: debug)")

    def pauser(sp: argparse.ArgumentParser, hop: bool) -> None:
        sp.add_argument("--pauser", choices=["busy", "balanced", "sleepy", "notify"],
                        default="balanced",
                        help=("with --serve: " if hop else "") + "how the source waits for new "
                        "excerpts (default balanced; busy: lowest latency, a core per sink)")

    sv = rsub.add_parser(
        "serve", formatter_class=fmt, help="serve a queue to sinks",
        description="Serve the queue at PATH to replication sinks until SIGINT/SIGTERM.\n"
        "Prints `serving PATH on HOST:PORT` once listening.")
    sv.add_argument("path", help="queue directory (created if missing)")
    sv.add_argument("--listen", type=_endpoint, default=("127.0.0.1", 7399),
                    metavar="[HOST:]PORT",
                    help="where to listen (default 127.0.0.1:7399; port 0: any free one)")
    sv.add_argument("--roll-cycle", type=_roll_cycle, metavar="NAME",
                    help="roll cycle for a new queue (default FAST_DAILY)")
    security(sv, True)
    pauser(sv, False)
    sv.set_defaults(func=cmd_replicate)

    sk = rsub.add_parser(
        "sink", formatter_class=fmt, help="mirror a served queue into a local one",
        description="Mirror the queue served at --source into the queue at PATH (same "
        "indices),\nreconnecting as needed, until SIGINT/SIGTERM or a fatal error "
        "(diverged\nqueues, a gap, failed authentication: exit status 1).  With --serve, "
        "also serve\nPATH to the next hop.")
    sk.add_argument("path", help="local queue directory (created with the source's roll cycle)")
    sk.add_argument("--source", type=_endpoint, required=True, metavar="HOST:PORT",
                    help="where the source listens")
    sk.add_argument("--name", help="how the source logs this sink (default HOSTNAME:PID)")
    sk.add_argument("--server-hostname", metavar="NAME",
                    help="with TLS: the name the source's certificate must carry "
                    "(default the source's host)")
    sk.add_argument("--sync", action="store_true",
                    help="msync what was written before acknowledging it")
    sk.add_argument("--serve", type=_endpoint, metavar="[HOST:]PORT",
                    help="also serve PATH to sinks of the next hop")
    security(sk, False)
    pauser(sk, True)
    sk.set_defaults(func=cmd_replicate)


def _replication_security(args: argparse.Namespace, server: bool) -> tuple[bytes | None, Any]:
    secret: bytes | None = None
    if args.secret_file:
        with open(args.secret_file, "rb") as fh:
            secret = fh.read().rstrip(b"\r\n")
        if not secret:
            raise UsageError(f"the secret file {args.secret_file} is empty")
    elif os.environ.get(SECRET_ENV):
        secret = os.environ[SECRET_ENV].encode()
    context: Any = None
    if server and args.tls_cert:
        context = ReplicationSource.ssl_context(args.tls_cert, args.tls_key, args.tls_ca)
    elif server and (args.tls_ca or args.tls_key):
        raise UsageError("--tls-ca and --tls-key need --tls-cert")
    elif not server and (args.tls_ca or args.tls_cert):
        context = ReplicationSink.ssl_context(args.tls_ca, args.tls_cert, args.tls_key)
    if secret is None and context is None:
        raise UsageError(f"give a shared secret (--secret-file or ${SECRET_ENV}) or TLS "
                         "(--tls-...)")
    return secret, context


def cmd_replicate(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    logging.basicConfig(level=logging.WARNING if not args.verbose else
                        logging.INFO if args.verbose == 1 else logging.DEBUG,
                        format=f"{PROG} replicate %(levelname)s: %(message)s",
                        stream=sys.stderr)
    if args.heartbeat >= args.timeout:
        raise UsageError("--heartbeat must be shorter than --timeout")
    secret, context = _replication_security(args, args.replicate_command == "serve")
    pausers = {"busy": Pauser.busy, "balanced": Pauser.balanced, "sleepy": Pauser.sleepy,
               "notify": Pauser.notify}
    common: dict[str, Any] = {"secret": secret, "ssl": context,
                              "heartbeat_interval": args.heartbeat,
                              "heartbeat_timeout": args.timeout}

    async def serve(queue: Any, endpoint: tuple[str, int], stop: asyncio.Event) -> None:
        source = ReplicationSource(queue, host=endpoint[0], port=endpoint[1],
                                   pauser=pausers[args.pauser], **common,
                                   queue_options={"roll_cycle": RollCycles.by_name(
                                       args.roll_cycle)} if getattr(args, "roll_cycle", None)
                                   else None)
        async with source:
            print(f"serving {source.queue.path} on {endpoint[0]}:{source.port}", flush=True)
            await stop.wait()

    async def amain() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        if args.replicate_command == "serve":
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await serve(args.path, args.listen, stop)
            return
        sink = ReplicationSink(args.path, args.source[0], args.source[1], name=args.name,
                               server_hostname=args.server_hostname, sync=args.sync, **common)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        run = loop.create_task(sink.run())
        hop: asyncio.Task[None] | None = None
        if args.serve is not None:
            opened = loop.create_task(sink.wait_open())
            await asyncio.wait((opened, run), return_when=asyncio.FIRST_COMPLETED)
            if opened.done() and opened.exception() is None:
                hop = loop.create_task(serve(sink.queue, args.serve, stop))
            else:
                opened.cancel()
        stopping = loop.create_task(stop.wait())
        await asyncio.wait((run, stopping), return_when=asyncio.FIRST_COMPLETED)
        stop.set()
        if hop is not None:
            await hop  # the next hop's source goes first: it reads the sink's queue
        sink.stop()
        await run

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(amain())
    else:
        uvloop.run(amain())
    return 0


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def _os_message(exc: OSError) -> str:
    if exc.filename is not None and exc.strerror:
        return f"{exc.strerror}: {exc.filename}"
    return str(exc) or exc.__class__.__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``aiochronicle`` command line; returns the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if args.command == "write" and not any(x.startswith("-") for x in extra):
            args.files += extra  # files given after options
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "path_opt", None):
        args.path = args.path_opt
    if args.command == "tail" and args.path is None:
        sys.stderr.write(f"{PROG} {args.command}: error: the queue directory is required\n")
        return 2
    prog = f"{PROG} {args.command}"

    def fail(message: str, code: int = 1) -> int:
        sys.stderr.write(f"{prog}: error: {message}\n")
        sys.stderr.flush()
        return code

    def show_warning(message: Warning | str, category: type[Warning], filename: str,
                     lineno: int, file: TextIO | None = None, line: str | None = None) -> None:
        sys.stderr.write(f"{prog}: warning: {message}\n")

    warnings.showwarning = show_warning
    try:
        result: int = args.func(args)
        return result
    except UsageError as exc:
        return fail(str(exc), 2)
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (InputError, ChronicleError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(_os_message(exc))
