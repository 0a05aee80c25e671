"""The package's imports only go down its layers (``../shared/DESIGN.md``).

Parses every module's import statements (nothing is imported to find them) and
fails on an import of a higher layer, on an import inside a function or class
(the way circles get dodged), and on a circle.  Imports under ``if
TYPE_CHECKING:`` count as well: an annotation naming a higher layer's type is
a dependency on it (the module is written against that type), even though
nothing is imported at run time.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

# the package under test: the checkout's, or the installed one (scripts/test.sh)
_SPEC = importlib.util.find_spec("aiochronicle")
assert _SPEC is not None and _SPEC.submodule_search_locations
PACKAGE = Path(next(iter(_SPEC.submodule_search_locations)))

#: bottom up; a module may import its own layer and those below.  A module
#: listed here need not exist (one being added on another branch has its place).
LAYERS: list[tuple[str, set[str]]] = [
    ("native boundary", {"_version", "_errors", "_native"}),
    ("format", {"_clock", "_headerless", "_mapped", "_wire", "_rollcycles", "_rolltime", "_store",
                "_tablestore", "_history", "_render"}),
    ("waiting", {"_notify", "_waiter", "_pauser"}),
    ("core parts", {"_settings", "_resource", "_excerpt", "_writelock", "_cycles", "_diskspace"}),
    # below the user objects: typed against small Protocols of what they need
    # of an appender or tailer (``_methodwriter.MethodAppender``,
    # ``_methodreader.MethodSource``) and given the metadata table store; the
    # appender and tailer import them
    ("codecs and methods", {"_codecs", "_methods", "_methodwriter", "_methodsource",
                            "_methoddispatch", "_methodrun", "_methodreader", "_search"}),
    ("user objects", {"_queueview", "_document", "_aio", "_appender", "_tailer", "_pretoucher",
                      "_queue", "_reading"}),
    ("tools", {"_dump", "_salvage", "_rebuild", "_check", "_repair", "_stats", "_locks",
               "_listeners", "_retention", "_replication", "testing", "_monitor", "metrics",
               "_monitor_cli", "_pipeline", "_runner", "spark._jar", "spark._columns",
               "spark._source", "spark._feeder", "spark._sink", "spark"}),
    # exactly-once services (issue 32): method readers and writers over queues
    ("services", {"_service", "_serviceproc", "_replay", "_services_cli"}),
    ("entry points", {"_cli", "__init__", "__main__"}),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__") and name != "__init__":
            name = name[: -len(".__init__")]
        found[name] = path
    return found


def _layer_of(name: str) -> int:
    for i, (_, members) in enumerate(LAYERS):
        if name in members:
            return i
    raise AssertionError(f"aiochronicle.{name} is in no layer of tests/test_layers.py")


def _resolve(module: str, node: ast.ImportFrom | ast.Import, alias: str) -> str | None:
    """The package module an import names (``_queue``, ``spark._source``), or None."""
    if isinstance(node, ast.Import):
        target = alias
        if not target.startswith("aiochronicle."):
            return None
        return target[len("aiochronicle."):]
    if node.level == 0:
        if node.module is None or not (node.module == "aiochronicle"
                                       or node.module.startswith("aiochronicle.")):
            return None
        base = node.module[len("aiochronicle"):].lstrip(".")
    else:
        # the package a relative import starts from: a package's own __init__
        # is the package itself ("spark"), any other module's is its parent
        pkg = ["spark"] if module == "spark" else module.split(".")[:-1]
        up = node.level - 1
        pkg = pkg[: len(pkg) - up] if up else pkg
        base = ".".join([*pkg, node.module] if node.module else pkg)
    return base or "__init__"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(imports at module level, those under ``if TYPE_CHECKING:`` included;
    imports inside a function or class)."""
    tree = ast.parse(path.read_text(), str(path))
    top: list[tuple[int, str]] = []
    nested: list[tuple[int, str]] = []

    def visit(body: list[ast.stmt], inside: bool) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""])
                for alias in names:
                    target = _resolve(module, node, alias)
                    if target is not None:
                        (nested if inside else top).append((node.lineno, target))
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                # annotations only, but a dependency all the same (at module
                # level, or in a class body, where it declares types)
                visit(node.body, False)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(node.body, True)
            elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [], inside)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body, inside)

    visit(tree.body, False)
    return top, nested


MODULES = _modules()

#: modules allowed to import package modules lazily, and why
LAZY = {
    # pyspark is an optional dependency: its data source classes load when used
    "spark": "pyspark is imported only when a Spark part is used",
    # prometheus-client is an optional dependency: aiochronicle.metrics needs
    # it, so the metrics command loads that module when it runs
    "_monitor_cli": "aiochronicle.metrics is imported only when `metrics` runs",
    "_services_cli": "aiochronicle.metrics is imported only when `run` serves /metrics",
    # pytest loads the plugin into sessions that may use none of its fixtures
    "testing": "the native core loads when a fixture is first used, not with the plugin",
}


def _deps(module: str) -> list[tuple[int, str]]:
    """The package modules ``module`` imports at module level (annotation imports too)."""
    return [(line, t) for line, t in _imports(module, MODULES[module])[0]
            if t in MODULES and t != module]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down(module: str) -> None:
    top = _deps(module)
    nested = _imports(module, MODULES[module])[1]
    mine = _layer_of(module)
    upward = [(line, target, LAYERS[_layer_of(target)][0]) for line, target in top
              if _layer_of(target) > mine]
    assert upward == [], f"aiochronicle.{module} ({LAYERS[mine][0]}) imports a higher layer"
    if module not in LAZY:
        assert nested == [], f"aiochronicle.{module} imports inside a function or class"


def test_no_import_circles() -> None:
    graph = {m: {t for _, t in _deps(m)} for m in MODULES}
    done: set[str] = set()
    stack: list[str] = []

    def walk(m: str) -> None:
        if m in stack:
            raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(m):], m]))
        if m in done:
            return
        stack.append(m)
        for t in sorted(graph[m]):
            walk(t)
        stack.pop()
        done.add(m)

    for m in sorted(graph):
        walk(m)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser finds imports where they hide (a function, a try block, an
    annotation-only block)."""
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "try:\n    from ._queue import Queue\nexcept ImportError:\n    pass\n"
                   "def f():\n    from ._methods import MethodReader\n"
                   "if TYPE_CHECKING:\n    from ._tailer import Tailer\n")
    top, nested = _imports("_wire", src)
    assert top == [(3, "_queue"), (9, "_tailer")]
    assert nested == [(7, "_methods")]
