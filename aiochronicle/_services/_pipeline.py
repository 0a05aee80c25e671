"""``PIPELINE.toml``: the services a runner starts, read and checked before
anything starts (:func:`load_pipeline`).

The file names each service (``[[service]]``: the handler's ``module:Class``,
its input and output queues with their source ids and interfaces, its pauser,
snapshot policy and restart policy) and the pipeline's own settings
(``[pipeline]``: event loop, ``/metrics`` address, where queue paths and handler
modules are found).  Every mistake found is a :class:`PipelineError` naming the
file and the line of the key or table at fault (``tomllib`` keeps no line
numbers: :class:`_Lines` finds them in the text).

Queue paths, ``pipeline.directory`` and ``pipeline.python_path`` are relative
to the directory of the file.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .._core._errors import PipelineError
from .._waiting._pauser import Pauser

__all__ = ["InputSpec", "OutputSpec", "PipelineSpec", "RestartPolicy", "ServiceSpec",
           "SnapshotSpec", "load_pipeline", "resolve"]

#: pauser factories that take no argument, by the name ``pauser =`` gives
PAUSERS = ("notify", "balanced", "yielding", "busy", "timed_busy", "sleepy")
LOOPS = ("asyncio", "uvloop")
ON_ERROR = ("stop", "skip")

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class RestartPolicy:
    """How the runner restarts a service that died.

    Attributes:
        backoff: seconds to wait before the first restart.
        backoff_max: the wait doubles on each restart in a row, up to this.
        max_restarts: restarts in a row (without ``reset_after`` seconds of
            running between them) before the runner gives up and stops the
            pipeline; 0: never restart.
        reset_after: seconds a service must run for its next death to count
            as the first again.
        standby: keep a standby process of the service (started, imported,
            waiting) for the next restart, so a restart does not wait for a
            Python process to start.
    """

    backoff: float = 0.0
    backoff_max: float = 5.0
    max_restarts: int = 10
    reset_after: float = 10.0
    standby: bool = True

    def delay(self, attempt: int) -> float:
        """The wait before restart number ``attempt`` (1-based) of a row."""
        if attempt <= 1 or self.backoff == 0.0:
            return self.backoff
        return float(min(self.backoff_max, self.backoff * 2 ** (attempt - 1)))


@dataclass(frozen=True)
class InputSpec:
    """An input queue of a service (``[[service.input]]``)."""

    path: str
    source_id: int
    interfaces: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class OutputSpec:
    """An output queue of a service (``[[service.output]]``)."""

    name: str
    path: str
    source_id: int
    interface: str
    line: int


@dataclass(frozen=True)
class SnapshotSpec:
    """Where and how often a service snapshots its state (``[service.snapshots]``)."""

    path: str
    every_inputs: int | None
    every_seconds: float | None


@dataclass(frozen=True)
class ServiceSpec:
    """One ``[[service]]`` of a ``PIPELINE.toml``."""

    name: str
    handler: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[OutputSpec, ...]
    pauser: str = "notify"
    on_error: Literal["stop", "skip"] = "stop"
    snapshots: SnapshotSpec | None = None
    restart: RestartPolicy = RestartPolicy()
    line: int = 0


@dataclass(frozen=True)
class PipelineSpec:
    """A checked ``PIPELINE.toml``."""

    file: str
    directory: str
    loop: str
    metrics: tuple[str, int] | None
    python_path: tuple[str, ...]
    services: tuple[ServiceSpec, ...]
    queues: tuple[str, ...] = field(default=())

    def service(self, name: str) -> ServiceSpec:
        """The service of this name; :class:`PipelineError` when there is none."""
        for s in self.services:
            if s.name == name:
                return s
        names = ", ".join(s.name for s in self.services)
        raise PipelineError(f"{self.file}: no service {name!r} (services: {names})")


# --------------------------------------------------------------------------
# lines of keys and tables
# --------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')"
                  r"(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")


def _key_parts(text: str) -> list[str]:
    parts = re.findall(r"[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'", text)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


class _Lines:
    """The line (1-based) of each table and key of a TOML text, by its path in
    the parsed document (array-of-tables entries by their position), found by
    scanning the text: headers, ``key =`` lines outside multi-line values."""

    def __init__(self, text: str) -> None:
        self.lines: dict[Path, int] = {}
        arrays: dict[Path, int] = {}
        table: Path = ()
        depth = 0  # open brackets/braces of a multi-line value
        in_string: str | None = None
        for no, raw in enumerate(text.splitlines(), 1):
            if in_string is not None:
                if in_string in raw:
                    in_string = None
                continue
            if depth == 0:
                m = _HEADER.match(raw)
                if m:
                    parts = _key_parts(m.group(2))
                    if m.group(1) == "[[":  # a new entry of the array of tables
                        table = (*self._resolve(parts[:-1], arrays), *parts[-1:])
                        arrays[table] = arrays.get(table, -1) + 1
                        table = (*table, arrays[table])
                    else:
                        table = self._resolve(parts, arrays)
                    self.lines.setdefault(table, no)
                    continue
                m = _KEY.match(raw)
                if m:
                    self.lines.setdefault((*table, *_key_parts(m.group(1))), no)
                    rest = raw[m.end():]
                else:
                    rest = raw
            else:
                rest = raw
            for quote in ('"""', "'''"):
                if rest.count(quote) % 2 == 1:
                    in_string = quote
            rest = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'", "", rest).split("#", 1)[0]
            depth = max(0, depth + rest.count("[") + rest.count("{")
                        - rest.count("]") - rest.count("}"))

    @staticmethod
    def _resolve(parts: list[str], arrays: Mapping[Path, int]) -> Path:
        path: Path = ()
        for p in parts:
            path = (*path, p)
            if path in arrays:  # an array of tables: its last entry
                path = (*path, arrays[path])
        return path

    def line(self, path: Path) -> int:
        """The line of ``path``, else of the nearest enclosing table found; 1."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return 1


# --------------------------------------------------------------------------
# checking
# --------------------------------------------------------------------------

_TOP = {"pipeline": "table", "restart": "table", "service": "array of tables"}
_PIPELINE = ("loop", "metrics", "directory", "python_path")
_RESTART = ("backoff", "backoff_max", "max_restarts", "reset_after", "standby")
_SERVICE = ("name", "handler", "input", "output", "pauser", "on_error", "snapshots", "restart")
_INPUT = ("path", "source_id", "interfaces")
_OUTPUT = ("name", "path", "source_id", "interface")
_SNAPSHOTS = ("path", "every_inputs", "every_seconds")


def resolve(spec: str) -> Any:
    """Import ``module:name`` (dotted names after the colon are attributes).

    Raises:
        ValueError: ``spec`` is not ``module:name``, the module cannot be
            imported (or raised while importing) or has no such name; the
            message says which.
    """
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError("must be module:name")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise ValueError(f"no module {module!r} ({exc})") from None
    except Exception as exc:  # the module raised while being imported
        raise ValueError(f"importing {module!r} raised {type(exc).__name__}: {exc}") from None
    for part in name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"module {module!r} has no {name!r}")
        obj = getattr(obj, part)
    return obj


class _Checker:
    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.where = _Lines(text)

    def fail(self, path: Path, message: str) -> PipelineError:
        line = self.where.line(path)
        return PipelineError(f"{self.file}:{line}: {message}", file=self.file, line=line)

    def table(self, value: object, path: Path, known: Sequence[str], what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"{what} must be a table")
        for key in value:
            if key not in known:
                raise self.fail((*path, key), f"unknown key {key!r} in {what} "
                                f"(known: {', '.join(known)})")
        return value

    def array(self, value: object, path: Path, what: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            header = ".".join(str(k) for k in path if isinstance(k, str))
            raise self.fail(path, f"{what} must be an array of tables ([[{header}]])")
        return value

    def get(self, d: Mapping[str, Any], path: Path, key: str, kind: type | tuple[type, ...],
            what: str, *, required: bool = False, default: Any = None) -> Any:
        if key not in d:
            if required:
                raise self.fail(path, f"{what} has no {key!r}")
            return default
        v = d[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
            names = " or ".join({int: "an integer", float: "a number", str: "a string",
                                 list: "an array", bool: "true or false"}.get(k, k.__name__)
                                for k in kinds)
            raise self.fail((*path, key), f"{key!r} of {what} must be {names}, got {v!r}")
        return v

    def source_id(self, d: Mapping[str, Any], path: Path, what: str, hint: str) -> int:
        if "source_id" not in d:
            raise self.fail(path, f"{what} has no source_id: {hint}")
        sid: int = self.get(d, path, "source_id", int, what)
        if not 0 < sid < 2**31:
            raise self.fail((*path, "source_id"), f"source_id of {what} must be from 1 to "
                            f"2147483647, got {sid}")
        return sid

    def importable(self, spec: str, path: Path, what: str, *, callable_: bool) -> None:
        try:
            obj = resolve(spec)
        except ValueError as exc:
            sep = " " if str(exc).startswith("must") else ": "
            raise self.fail(path, f"{what} {spec!r}{sep}{exc}") from None
        if callable_ and not callable(obj):
            raise self.fail(path, f"{what} {spec!r} is not callable")

    def number(self, d: Mapping[str, Any], path: Path, key: str, what: str,
               default: float | None) -> float | None:
        v = self.get(d, path, key, (int, float), what, default=default)
        if v is not None and (v < 0 or v != v):
            raise self.fail((*path, key), f"{key!r} of {what} must be 0 or more, got {v!r}")
        return None if v is None else float(v)

    def restart(self, value: object, path: Path, base: RestartPolicy, what: str) -> RestartPolicy:
        d = self.table(value, path, _RESTART, what)
        max_restarts = self.get(d, path, "max_restarts", int, what, default=base.max_restarts)
        if max_restarts < 0:
            raise self.fail((*path, "max_restarts"), f"'max_restarts' of {what} must be 0 or "
                            "more")
        backoff = self.number(d, path, "backoff", what, base.backoff)
        backoff_max = self.number(d, path, "backoff_max", what, base.backoff_max)
        reset_after = self.number(d, path, "reset_after", what, base.reset_after)
        assert backoff is not None and backoff_max is not None and reset_after is not None
        standby = self.get(d, path, "standby", bool, what, default=base.standby)
        return RestartPolicy(backoff=backoff, backoff_max=max(backoff_max, backoff),
                             max_restarts=max_restarts, reset_after=reset_after,
                             standby=standby)


def _queue_path(base: str, path: str) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _metrics_address(c: _Checker, value: object, path: Path) -> tuple[str, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        host, port = "127.0.0.1", value
    elif isinstance(value, str):
        host, sep, port_text = value.rpartition(":")
        if not sep or not port_text.isdigit():
            raise c.fail(path, f"'metrics' must be PORT or \"HOST:PORT\", got {value!r}")
        host, port = host.strip("[]") or "127.0.0.1", int(port_text)
    else:
        raise c.fail(path, f"'metrics' must be PORT or \"HOST:PORT\", got {value!r}")
    if not 0 <= port <= 65535:
        raise c.fail(path, f"'metrics' port must be from 0 to 65535, got {port}")
    return host, port


def _parse(file: str, text: str, directory_override: str | None) -> PipelineSpec:
    c = _Checker(file, text)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        line = int(m.group(1)) if m else 1
        raise PipelineError(f"{file}:{line}: not valid TOML: {exc}", file=file,
                            line=line) from None
    for key in doc:
        if key not in _TOP:
            raise c.fail((key,), f"unknown key {key!r} (known: {', '.join(_TOP)})")
    folder = os.path.dirname(os.path.abspath(file))

    pipe = c.table(doc.get("pipeline", {}), ("pipeline",), _PIPELINE, "[pipeline]")
    loop = c.get(pipe, ("pipeline",), "loop", str, "[pipeline]", default="asyncio")
    if loop not in LOOPS:
        raise c.fail(("pipeline", "loop"), f"'loop' must be one of {', '.join(LOOPS)}, "
                     f"got {loop!r}")
    if loop == "uvloop":
        try:
            importlib.import_module("uvloop")
        except ImportError:
            raise c.fail(("pipeline", "loop"), "loop = \"uvloop\" but uvloop is not "
                         "installed") from None
    metrics = (None if "metrics" not in pipe
               else _metrics_address(c, pipe["metrics"], ("pipeline", "metrics")))
    directory = _queue_path(folder, c.get(pipe, ("pipeline",), "directory", str, "[pipeline]",
                                          default="."))
    if directory_override is not None:
        directory = os.path.abspath(directory_override)
    py_path = c.get(pipe, ("pipeline",), "python_path", list, "[pipeline]", default=["."])
    if not all(isinstance(p, str) for p in py_path):
        raise c.fail(("pipeline", "python_path"), "'python_path' must be an array of strings")
    python_path = tuple(_queue_path(folder, p) for p in py_path)
    for folder_ in reversed(python_path):
        if folder_ not in sys.path:
            sys.path.insert(0, folder_)

    default_restart = RestartPolicy()
    if "restart" in doc:
        default_restart = c.restart(doc["restart"], ("restart",), default_restart, "[restart]")

    if "service" not in doc:
        raise c.fail((), "no [[service]]: a pipeline needs at least one")
    services: list[ServiceSpec] = []
    names: dict[str, int] = {}
    writers: dict[str, tuple[int, str, Path]] = {}  # output queue -> source id, service
    used_ids: dict[int, str] = {}
    for i, raw in enumerate(c.array(doc["service"], ("service",), "service")):
        p: Path = ("service", i)
        s = c.table(raw, p, _SERVICE, f"[[service]] number {i + 1}")
        name = c.get(s, p, "name", str, f"[[service]] number {i + 1}", required=True)
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise c.fail((*p, "name"), f"service name {name!r} may hold only letters, digits, "
                         "'_', '-' and '.'")
        if name in names:
            raise c.fail((*p, "name"), f"two services named {name!r} (the other at line "
                         f"{names[name]})")
        names[name] = c.where.line((*p, "name"))
        what = f"service {name!r}"
        handler = c.get(s, p, "handler", str, what, required=True)
        c.importable(handler, (*p, "handler"), f"handler of {what}", callable_=True)
        pauser = c.get(s, p, "pauser", str, what, default="notify")
        if pauser not in PAUSERS or not callable(getattr(Pauser, pauser, None)):
            raise c.fail((*p, "pauser"), f"'pauser' of {what} must be one of "
                         f"{', '.join(PAUSERS)}, got {pauser!r}")
        on_error = c.get(s, p, "on_error", str, what, default="stop")
        if on_error not in ON_ERROR:
            raise c.fail((*p, "on_error"), f"'on_error' of {what} must be one of "
                         f"{', '.join(ON_ERROR)}, got {on_error!r}")
        inputs = []
        if "input" not in s:
            raise c.fail(p, f"{what} has no [[service.input]]")
        for j, rin in enumerate(c.array(s["input"], (*p, "input"), f"input of {what}")):
            ip: Path = (*p, "input", j)
            iwhat = f"input {j + 1} of {what}"
            d = c.table(rin, ip, _INPUT, iwhat)
            path = c.get(d, ip, "path", str, iwhat, required=True)
            sid = c.source_id(d, ip, iwhat, "the service resumes from the last output whose "
                              "history holds this source id, so it must be set (the "
                              "source_id of the queue's writer)")
            ifaces = c.get(d, ip, "interfaces", list, iwhat, required=True)
            if not ifaces or not all(isinstance(x, str) for x in ifaces):
                raise c.fail((*ip, "interfaces"), f"'interfaces' of {iwhat} must be a "
                             "non-empty array of \"module:Interface\" strings")
            for x in ifaces:
                c.importable(x, (*ip, "interfaces"), f"interface of {iwhat}", callable_=False)
            inputs.append(InputSpec(_queue_path(directory, path), sid, tuple(ifaces),
                                    c.where.line(ip)))
        outputs = []
        onames: set[str] = set()
        for j, rout in enumerate(c.array(s.get("output", []), (*p, "output"),
                                         f"output of {what}")):
            op: Path = (*p, "output", j)
            owhat = f"output {j + 1} of {what}"
            d = c.table(rout, op, _OUTPUT, owhat)
            oname = c.get(d, op, "name", str, owhat, required=True)
            if not oname.isidentifier():
                raise c.fail((*op, "name"), f"'name' of {owhat} must be a Python identifier "
                             f"(the handler's keyword argument), got {oname!r}")
            if oname in onames:
                raise c.fail((*op, "name"), f"two outputs named {oname!r} in {what}")
            onames.add(oname)
            path = _queue_path(directory, c.get(d, op, "path", str, owhat, required=True))
            sid = c.source_id(d, op, owhat, "the history of every output excerpt records it")
            iface = c.get(d, op, "interface", str, owhat, required=True)
            c.importable(iface, (*op, "interface"), f"interface of {owhat}", callable_=False)
            if path in writers:
                raise c.fail((*op, "path"), f"{owhat}: queue {path} is already the output of "
                             f"service {writers[path][1]!r}")
            if sid in used_ids:
                raise c.fail((*op, "source_id"), f"{owhat}: source_id {sid} is already the "
                             f"source id of {used_ids[sid]}")
            used_ids[sid] = f"an output of service {name!r}"
            writers[path] = (sid, name, (*op, "source_id"))
            outputs.append(OutputSpec(oname, path, sid, iface, c.where.line(op)))
        snapshots = None
        if "snapshots" in s:
            sp: Path = (*p, "snapshots")
            swhat = f"[service.snapshots] of {what}"
            d = c.table(s["snapshots"], sp, _SNAPSHOTS, swhat)
            every_inputs = c.get(d, sp, "every_inputs", int, swhat)
            if every_inputs is not None and every_inputs < 1:
                raise c.fail((*sp, "every_inputs"), f"'every_inputs' of {swhat} must be 1 or "
                             "more")
            every_seconds = c.number(d, sp, "every_seconds", swhat, None)
            if every_inputs is None and every_seconds is None:
                raise c.fail(sp, f"{swhat} needs every_inputs or every_seconds")
            spath = _queue_path(directory, c.get(d, sp, "path", str, swhat, required=True))
            snapshots = SnapshotSpec(spath, every_inputs, every_seconds)
        restart = default_restart
        if "restart" in s:
            restart = c.restart(s["restart"], (*p, "restart"), default_restart,
                                f"[service.restart] of {what}")
        services.append(ServiceSpec(name, handler, tuple(inputs), tuple(outputs), pauser,
                                    on_error, snapshots, restart, c.where.line(p)))
    # an input written by a service of this pipeline carries that writer's source id
    for i, svc in enumerate(services):
        for j, inp in enumerate(svc.inputs):
            if inp.path in writers and writers[inp.path][0] != inp.source_id:
                sid, writer, _ = writers[inp.path]
                raise c.fail(("service", i, "input", j, "source_id"),
                             f"input {j + 1} of service {svc.name!r}: source_id "
                             f"{inp.source_id}, but its queue is written by service "
                             f"{writer!r} with source_id {sid}")
            if inp.path in [o.path for o in svc.outputs]:
                raise c.fail(("service", i, "input", j, "path"),
                             f"service {svc.name!r} reads and writes one queue {inp.path}")
    queues = list(dict.fromkeys([*(i.path for s in services for i in s.inputs),
                                 *(o.path for s in services for o in s.outputs)]))
    return PipelineSpec(file, directory, loop, metrics, python_path, tuple(services), tuple(queues))


def load_pipeline(file: str, directory: str | None = None) -> PipelineSpec:
    """Read and check a ``PIPELINE.toml`` (imports the handler and interface
    modules to check they exist); :class:`PipelineError` names the file and
    line of the first mistake.  ``directory``: where relative queue paths
    start, instead of the file's ``[pipeline] directory``."""
    try:
        with open(file, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PipelineError(f"{file}: cannot read: {exc.strerror or exc}", file=file,
                            line=0) from None
    except UnicodeDecodeError as exc:
        raise PipelineError(f"{file}: not UTF-8 text ({exc.reason})", file=file,
                            line=0) from None
    return _parse(file, text, directory)


def iter_specs(spec: PipelineSpec) -> Iterator[tuple[ServiceSpec, InputSpec]]:
    """Each (service, input) pair of a pipeline."""
    for s in spec.services:
        for i in s.inputs:
            yield s, i
