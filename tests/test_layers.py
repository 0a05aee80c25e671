"""The package's imports only go down its layers, and its folders are the layers.

``aiochronicle/`` holds one folder per layer (FOLDERS, bottom up: the only table);
a module's layer is its folder.  A module may import its own folder and the folders
below, never one above; within a folder there is no circle.  The few top-level modules
have their place stated (BOTTOM, TOP).  Every folder's ``__init__`` says in its
docstring what the layer is and what it may import.

Parses every module's import statements (nothing is imported to find them) and fails
on an import of a higher layer, on an import inside a function or class (the way
circles get dodged), and on a circle.  Imports under ``if TYPE_CHECKING:`` count as
well: an annotation naming a higher layer's type is a dependency on it (the module is
written against that type), even though nothing is imported at run time.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

# the package under test: the checkout's, or the installed one (scripts/test.sh)
_SPEC = importlib.util.find_spec("aiochronicle")
assert _SPEC is not None and _SPEC.submodule_search_locations
PACKAGE = Path(next(iter(_SPEC.submodule_search_locations)))

#: the layers, bottom up: each a folder of aiochronicle/
FOLDERS: list[str] = [
    '_core',
    '_format',
    '_waiting',
    '_storage',
    '_messages',
    '_objects',
    '_tools',
    '_replicas',
    '_services',
    '_monitoring',
    'spark',
]
#: top-level modules below every folder (they import nothing of the package)
BOTTOM = ['_version']
#: top-level modules above every folder (the public modules and the entry points)
TOP = ['__init__', '__main__', '_cli', '_monitor_cli', '_services_cli', 'testing', 'metrics']


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
    """0 for BOTTOM, 1 + the folder's place for a folder's module, above all for TOP."""
    head = name.split(".")[0]
    if "." in name or head in FOLDERS:
        assert head in FOLDERS, f"aiochronicle/{head}/ is not a layer: add it to FOLDERS"
        return 1 + FOLDERS.index(head)
    if name in BOTTOM:
        return 0
    if name in TOP:
        return 1 + len(FOLDERS)
    raise AssertionError(f"aiochronicle.{name} sits at the top level with no stated place: "
                         "move it into the folder of its layer (or add it to BOTTOM or TOP)")


def _layer_name(level: int) -> str:
    return "bottom" if level == 0 else "top" if level > len(FOLDERS) else FOLDERS[level - 1]


def _resolve(module: str, node: ast.ImportFrom | ast.Import, alias: str) -> str | None:
    """The package module an import names (``_objects._queue``, ``spark``), or None."""
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
        # is the package itself, any other module's is its parent
        is_pkg = (module in MODULES and MODULES[module].name == "__init__.py"
                  and module != "__init__")
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
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
                    if target is None:
                        continue
                    if isinstance(node, ast.ImportFrom):
                        # ``from ._objects import _tailer``: the modules named, else the
                        # package itself
                        for a in node.names:
                            sub = (f"{target}.{a.name}" if target != "__init__" else a.name)
                            (nested if inside else top).append(
                                (node.lineno, sub if sub in MODULES else target))
                    else:
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


def test_the_folders_are_the_layers() -> None:
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert folders == set(FOLDERS), "a folder of aiochronicle/ is missing from FOLDERS, or gone"
    loose = sorted(n for n in MODULES if "." not in n and n not in FOLDERS
                   and n not in BOTTOM and n not in TOP)
    assert loose == [], "top-level modules with no stated place (move them into a folder)"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down(module: str) -> None:
    top = _deps(module)
    nested = _imports(module, MODULES[module])[1]
    mine = _layer_of(module)
    upward = [(line, target, _layer_name(_layer_of(target))) for line, target in top
              if _layer_of(target) > mine]
    assert upward == [], f"aiochronicle.{module} ({_layer_name(mine)}) imports a higher layer"
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


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_folder_says_what_it_may_import(folder: str) -> None:
    """The ``__init__`` docstring has a ``May import:`` sentence naming exactly the
    folders below (``_version`` may be named too), and imports nothing itself."""
    path = PACKAGE / folder / "__init__.py"
    text = path.read_text()
    tree = ast.parse(text, str(path))
    doc = ast.get_docstring(tree) or ""
    if not folder.startswith("_"):
        # a public package's docstring is its users' page: the rule is a comment there
        doc = " ".join(line.strip()[1:].strip() for line in text.splitlines()
                       if line.startswith("#"))
    assert "May import:" in doc, f"aiochronicle/{folder}/__init__.py: no 'May import:' said"
    sentence = doc.split("May import:", 1)[1].split(".", 1)[0]
    named = set(re.findall(r"``(?:aiochronicle\.)?(_\w+|spark)``", sentence)) - {"_version"}
    assert named == set(FOLDERS[: FOLDERS.index(folder)]), (folder, sorted(named))
    if folder != "spark":
        assert not [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)], \
            f"aiochronicle/{folder}/__init__.py imports: a layer's __init__ stays empty"


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser finds imports where they hide (a function, a try block, an
    annotation-only block), relative ones from inside a folder included."""
    src = tmp_path / "mod.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "try:\n    from .._objects._queue import Queue\nexcept ImportError:\n    pass\n"
                   "def f():\n    from .._messages._methods import MethodReader\n"
                   "if TYPE_CHECKING:\n    from .._objects import _tailer\n"
                   "from . import _mapped\n")
    top, nested = _imports("_format._wire", src)
    assert top == [(3, "_objects._queue"), (9, "_objects._tailer"), (10, "_format._mapped")]
    assert nested == [(7, "_messages._methods")]
    assert _layer_of("_objects._queue") > _layer_of("_format._wire")
