"""The service commands of the command line: ``aiochronicle run
PIPELINE.toml`` (the runner, :mod:`._runner`), ``aiochronicle replay``
(:mod:`._replay`) and the hidden ``_service`` (one service in the process the
runner starts, :mod:`._serviceproc`).  ``_cli`` registers them with
:func:`add_parsers`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ._core._errors import ChronicleError
from ._objects._queue import open_queue
from ._services._pipeline import PipelineSpec, load_pipeline
from ._services._replay import replay
from ._services._runner import Runner
from ._services._serviceproc import serve

__all__ = ["add_parsers", "cmd_replay", "cmd_run"]


def create_queues(spec: PipelineSpec) -> None:
    """Create every queue of the pipeline before the services race to: each
    output with its source id, and a new input queue no service writes with
    the source id its reader gives (its writer, outside the pipeline, may
    give another)."""
    ids = {i.path: i.source_id for s in spec.services for i in s.inputs
           if not os.path.isdir(i.path)}
    ids.update({o.path: o.source_id for s in spec.services for o in s.outputs})
    for path in spec.queues:
        with open_queue(path, source_id=ids.get(path, 0)):
            pass


@contextlib.contextmanager
def _metrics(spec: PipelineSpec, runner: Runner) -> Iterator[str | None]:
    """Serve ``/metrics`` at the pipeline's ``metrics`` address, if it has one."""
    if spec.metrics is None:
        yield None
        return
    try:
        from prometheus_client import CollectorRegistry, start_http_server

        from . import metrics
    except ImportError as exc:
        raise ChronicleError(f"[pipeline] metrics needs prometheus-client ({exc.name} is not "
                             "installed): pip install 'aiochronicle[monitor]'") from None
    registry = CollectorRegistry()
    queues = metrics.QueueCollector(spec.queues)
    registry.register(queues)
    registry.register(metrics.PipelineCollector(runner.figures))
    host, port = spec.metrics
    server, thread = start_http_server(port, host, registry)
    try:
        shown = f"[{host}]" if ":" in host else host
        yield f"http://{shown}:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        queues.close()


def cmd_run(args: argparse.Namespace) -> int:
    """Run every service of a pipeline until SIGTERM or SIGINT."""
    spec = load_pipeline(args.pipeline, args.directory)
    create_queues(spec)
    runner = Runner(spec)
    with _metrics(spec, runner) as url:
        if url is not None:
            runner.log("runner", f"serving {url}")
        return asyncio.run(runner.run())


def cmd_service(args: argparse.Namespace) -> int:
    """One service in its own process (started by ``run``)."""
    return serve(load_pipeline(args.pipeline, args.directory), args.service,
                 standby=args.standby)


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-run one service over recorded input and compare its output."""
    spec = load_pipeline(args.pipeline, args.directory)
    result = replay(spec, args.service, args.from_index, args.to_index, args.into)
    sys.stdout.write(result.report())
    sys.stdout.flush()
    return 0 if result.equal else 1


DIR_HELP = ("where relative queue paths start (default: [pipeline] directory, relative to "
            "the file)")


def add_parsers(sub: Any, index_arg: Callable[[str], int]) -> None:
    """Add ``run``, ``replay`` and the hidden ``_service`` to the subcommands
    ``sub``; ``index_arg`` is the command line's argument type for an index."""
    fmt = argparse.RawDescriptionHelpFormatter
    r = sub.add_parser(
        "run", help="run the services of a PIPELINE.toml, restarting any that dies",
        formatter_class=fmt, description=(
            "Start each service of PIPELINE.toml in a process of its own, restart one that "
            "dies (with\nthe backoff of its restart policy), print one log stream with the "
            "services' names and,\nwith [pipeline] metrics, serve /metrics for the whole "
            "pipeline.  SIGTERM or Ctrl-C stops\neach service cleanly (it finishes the input "
            "it is handling and snapshots).  The file is\nchecked before anything starts: a "
            "mistake is named with its file and line.\n\n"
            "exit status:\n"
            "  0  every service stopped cleanly on SIGTERM/SIGINT\n"
            "  1  a bad PIPELINE.toml, a service out of restarts, or one that did not stop "
            "cleanly"))
    r.add_argument("pipeline", metavar="PIPELINE.toml", help="the pipeline file")
    r.add_argument("--directory", metavar="DIR", help=DIR_HELP)
    r.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "replay", help="re-run one service over recorded input and compare its output",
        formatter_class=fmt, description=(
            "Re-run SERVICE of PIPELINE.toml over its recorded input excerpts from --from to "
            "--to\n(indexes of its input queues, inclusive), with a fresh handler (the inputs "
            "before --from\nrebuild its state) writing to scratch queues in DIR, and compare "
            "its output with the\noutput the service recorded for the same inputs, call by "
            "call and field by field (the\ntimings of message histories aside).  The "
            "recorded queues are only read.\n\n"
            "exit status:\n"
            "  0  equal\n"
            "  1  different: the first difference is printed (or a bad PIPELINE.toml)"))
    p.add_argument("pipeline", metavar="PIPELINE.toml", help="the pipeline file")
    p.add_argument("service", metavar="SERVICE", help="the service to replay")
    p.add_argument("--directory", metavar="DIR", help=DIR_HELP)
    p.add_argument("--from", dest="from_index", type=index_arg, metavar="INDEX",
                   help="first input index (hex 0x... or decimal; default: the first)")
    p.add_argument("--to", dest="to_index", type=index_arg, metavar="INDEX",
                   help="last input index, inclusive (default: the last)")
    p.add_argument("--into", required=True, metavar="DIR",
                   help="directory for the scratch output queues (must be empty or new)")
    p.set_defaults(func=cmd_replay)

    s = sub.add_parser("_service")
    s.add_argument("pipeline")
    s.add_argument("service")
    s.add_argument("--directory")
    s.add_argument("--standby", action="store_true")
    s.set_defaults(func=cmd_service)
