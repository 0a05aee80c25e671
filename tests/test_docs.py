"""The documentation site builds with warnings as errors, and the examples it shows run.

The site is MkDocs (``mkdocs.yml`` at the repository root); the API reference is
rendered from the docstrings by mkdocstrings, and ``docs/examples.md`` includes
every program of ``examples/``, each of which runs here as a real process in a
temporary directory (so nothing is left in the repository).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once for this module with ``mkdocs build --strict``."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: pip install -e '.[dev]'")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(site)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return site


def test_site_builds_strict(site: Path) -> None:
    for page in ("index.html", "quickstart/index.html", "concepts/index.html",
                 "format/index.html", "cli/index.html", "performance/index.html",
                 "api/index.html", "examples/index.html", "howto/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text()
    for name in ("open_queue", "Queue", "Appender", "Tailer", "RollCycles", "ChronicleError"):
        assert f'id="aiochronicle.{name}"' in api, name
    for name in ("spark.Feeder", "testing.chronicle_queue"):
        assert f'id="aiochronicle.{name}"' in api, name
    examples = (site / "examples" / "index.html").read_text()
    # the snippets are included, not left as `--8<--` lines
    assert "--8&lt;--" not in examples and "--8<--" not in examples
    assert "TICKS" in examples and "ReplicationSink" in examples
    # every example program is on the page
    for program in sorted(EXAMPLES.rglob("*.py")):
        assert program.relative_to(ROOT).as_posix() in examples, program


def _own_members(cls: type) -> list[str]:
    """Public members of ``cls`` that aiochronicle defines (not int's, tuple's, Spark's...)."""
    ours = [b for b in cls.__mro__ if b.__module__.split(".")[0] in ("aiochronicle",)]
    return [m for m in dir(cls) if not m.startswith("_") and any(m in vars(b) for b in ours)]


def test_api_reference_covers_every_public_name(site: Path) -> None:
    """Each name of the public modules' ``__all__`` and each public member of their
    classes has an entry, including what a class inherits from private base classes
    (which are not listed as bases: the reference has no entry for them)."""
    import importlib
    import inspect
    import re

    api = (site / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="(aiochronicle\.[\w.]+)"', api))
    missing = []
    for modname in ("aiochronicle", "aiochronicle.spark", "aiochronicle.testing",
                    "aiochronicle.metrics"):
        module = importlib.import_module(modname)
        for name in module.__all__:
            if name.startswith("__"):
                continue
            if f"{modname}.{name}" not in anchors:
                missing.append(f"{modname}.{name}")
            obj = getattr(module, name)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                missing += [f"{modname}.{name}.{m}" for m in _own_members(obj)
                            if f"{modname}.{name}.{m}" not in anchors]
    assert not missing, missing
    assert "_Resource" not in api and "AsyncTailerMixin" not in api


# (script and arguments after the queue/work directory, timeout, what the output
# contains: a string, or strings that appear in this order)
QUICK_EXAMPLES: list[tuple[str, list[str], float, str | tuple[str, ...]]] = [
    ("demo.py", [], 60, ("ticks live in", "each file is a *cycle*", "an *index* is",
                         "reading backwards, last excerpt", "'end of feed'")),
    ("many_writers.py", [], 60, "each writer in order"),
    ("async_tail.py", [], 60, "replay: 2001 excerpts"),
    ("operations.py", [], 60, "named tailer reporting"),
    ("monitoring.py", [], 60, ("aiochronicle_named_tailer_lag_excerpts{queue=\"WORK/md\","
                               "tailer=\"pricer\"} 2000.0",
                               "named tailer pricer is 2000 behind")),
    ("replication.py", [], 60, "replica identical: 2000 excerpts"),
    # run by `aiochronicle run`: the router's summary, a clean stop, then typed calls
    ("pipeline/run.py", ["--ticks", "2000"], 60,
     ("runner   | started router", "router   | router:   routed",
      "runner   | stopped: every service exited cleanly", "pipeline: stopped cleanly",
      "on_tick(Tick(symbol='EURUSD'", "on_order(Order(symbol=")),
]


@pytest.mark.parametrize(
    ("script", "extra", "timeout", "expect"),
    QUICK_EXAMPLES,
    ids=[s for s, *_ in QUICK_EXAMPLES],
)
def test_example_runs(script: str, extra: list[str], timeout: float,
                      expect: str | tuple[str, ...], tmp_path: Path) -> None:
    proc = _run([str(EXAMPLES / script), str(tmp_path / "work"), *extra], tmp_path, timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    at = 0
    for part in (expect,) if isinstance(expect, str) else expect:
        found = proc.stdout.find(part, at)
        assert found >= 0, (part, proc.stdout)
        at = found + len(part)


@pytest.mark.slow
def test_spark_example_runs(tmp_path: Path) -> None:
    proc = _run([str(EXAMPLES / "spark_pipeline.py"), str(tmp_path / "work"),
                 "--ticks", "2000", "--seconds", "1"], tmp_path, 240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "published 2,000 ticks" in proc.stdout, proc.stdout
    assert "micro-batches" in proc.stdout, proc.stdout


def test_every_example_is_covered() -> None:
    """A new example program must be added to the list above (and to docs/examples.md)."""
    mains = {p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*.py")
             if p.parent == EXAMPLES or p.name == "run.py"}
    covered = {s for s, *_ in QUICK_EXAMPLES} | {"spark_pipeline.py"}
    assert mains == covered
    page = (ROOT / "docs" / "examples.md").read_text()
    for program in EXAMPLES.rglob("*.py"):
        assert f'--8<-- "{program.relative_to(ROOT).as_posix()}"' in page, program


def _section(page: str, heading: str) -> str:
    text = (ROOT / "docs" / page).read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def test_java_name_map_points_at_real_names() -> None:
    """Every Python name in the "Coming from Java" table of docs/concepts.md
    exists: ``ac.X.y`` and ``Queue.x`` paths resolve, ``name=`` keywords are
    parameters of ``open_queue``."""
    import inspect
    import re

    import aiochronicle

    table = _section("concepts.md", "## Coming from Java Chronicle Queue")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) >= 25, rows
    keywords = set(inspect.signature(aiochronicle.open_queue).parameters)
    checked = 0
    for row in rows:
        python = row.split(" | ")[1]
        for span in re.findall(r"`([^`]+)`", python):
            for kw in re.findall(r"\b([a-z_]+)=", span):
                assert kw in keywords, (kw, row)
                checked += 1
            # ac.name.attr..., and capitalised public names such as Tailer.read
            paths = re.findall(r"\bac\.(\w+(?:\.\w+)*)", span)
            paths += re.findall(r"(?<![.\w])([A-Z]\w*(?:\.\w+)*)", span)
            for dotted in paths:
                if dotted in ("True", "False", "None"):
                    continue
                obj: object = aiochronicle
                for part in dotted.split("."):
                    assert hasattr(obj, part), (dotted, row)
                    obj = getattr(obj, part)
                checked += 1
    assert checked >= 50, checked


def test_roll_cycle_table_matches_the_library() -> None:
    import aiochronicle

    table = _section("concepts.md", "## Roll cycles")
    rows = [[c.strip().strip("`") for c in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("| `")]
    assert [r[0] for r in rows] == [rc.name for rc in aiochronicle.RollCycles.all()]
    for name, _length, fmt, index, shift, most in rows:
        rc = aiochronicle.RollCycles.by_name(name)
        assert fmt == rc.format, name
        assert index == f"{rc.index_count} \N{MULTIPLICATION SIGN} {rc.index_spacing}", name
        assert int(shift) == rc.cycle_shift, name
        assert int(most.replace(",", "")) == rc.max_messages_per_cycle, name


def _cli_sections() -> dict[str, str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    sections = {}
    for part in text.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        sections[title.strip()] = body
    return sections


def test_cli_reference_shows_the_real_help() -> None:
    """Each ``$ aiochronicle X --help`` block of docs/cli.md is what the installed
    command prints now (at 100 columns), so the reference cannot go stale."""
    import re

    text = (ROOT / "docs" / "cli.md").read_text()
    blocks = re.findall(r"```console\n\$ aiochronicle ([\w -]+?) --help\n(.*?)```", text, re.S)
    assert len(blocks) >= 9, [b[0] for b in blocks]
    env = dict(os.environ, COLUMNS="100")
    for command, shown in blocks:
        real = subprocess.run([sys.executable, "-m", "aiochronicle", *command.split(), "--help"],
                              capture_output=True, text=True, timeout=60, env=env, check=True)
        assert real.stdout == shown, f"docs/cli.md: `aiochronicle {command} --help` is stale"


def test_cli_reference_covers_every_command_and_option() -> None:
    import argparse

    from aiochronicle._cli import build_parser

    def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    def options(parser: argparse.ArgumentParser) -> list[str]:
        return [o for a in parser._actions if a.help != argparse.SUPPRESS
                for o in a.option_strings if o.startswith("--") and o != "--help"]

    sections = _cli_sections()
    missing = []
    for name, sub in commands(build_parser()).items():
        if name.startswith("_"):  # internal (`_service`: what `run` starts), not listed
            continue
        section = next((body for title, body in sections.items() if name in title.split()), None)
        if section is None:
            missing.append(name)
            continue
        for inner in [sub, *commands(sub).values()]:
            missing += [f"{name} {o}" for o in options(inner) if o not in section]
    assert not missing, missing


def test_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The Python blocks of docs/quickstart.md, run in order in one namespace (with
    their /tmp paths moved into a temporary directory), as a reader would paste them."""
    import re

    page = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 7
    code = "\n".join(blocks).replace('"/tmp/', f'"{tmp_path}/')
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    proc = _run([str(script)], tmp_path, 60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EURUSD 1.0841" in proc.stdout


def test_errors_page_lists_every_error_with_its_real_bases() -> None:
    """docs/errors.md has a row per exported error; its "also a" column names
    exactly the standard exceptions the class really derives from."""
    import builtins
    import inspect

    import aiochronicle

    rows = {}
    for line in _section("errors.md", "# Errors").splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells[1]
    errors = {n for n in aiochronicle.__all__
              if inspect.isclass(getattr(aiochronicle, n))
              and issubclass(getattr(aiochronicle, n), aiochronicle.ChronicleError)}
    assert set(rows) == errors
    for name, also in rows.items():
        cls = getattr(aiochronicle, name)
        listed = {a.strip("` ") for a in also.split(",") if a.strip()}
        for std in listed:
            assert issubclass(cls, getattr(builtins, std)), (name, std)
        # the most specific standard bases are all named (their own bases aside)
        direct = {b.__name__ for b in cls.__mro__[1:] if b.__module__ == "builtins"
                  and b not in (object, BaseException, Exception, LookupError, OSError)}
        assert direct <= listed | {"LookupError"}, (name, direct, listed)
