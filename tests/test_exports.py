"""The curated public API: ``aiochronicle`` exports exactly these names, all documented,
all shown as ``aiochronicle.X``, and every error derives from ``ChronicleError``."""

from __future__ import annotations

import ast
import enum
import errno
import importlib
import inspect
import pickle
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aiochronicle

# The spec: adding or removing a public name is a deliberate change of this list.
EXPECTED = [
    "AppendLockedError",
    "Appender",
    "Batch",
    "CheckFinding",
    "ChronicleError",
    "Codec",
    "CodecError",
    "CodecMismatchError",
    "Codecs",
    "CorruptQueueError",
    "CycleStats",
    "DiskFullError",
    "DiskSpace",
    "DivergenceError",
    "DocumentClosedError",
    "DocumentContext",
    "Excerpt",
    "HeaderlessCycleError",
    "IllegalIndexError",
    "IncompatibleQueueError",
    "IndexFullError",
    "LockState",
    "MessageHistory",
    "MessageTooLargeError",
    "MethodCall",
    "MethodReader",
    "MethodReaderStatistics",
    "NativeBuildError",
    "NoFallocateWarning",
    "NoSuchIndexError",
    "NoSuchQueueError",
    "NondeterministicHandlerError",
    "NotAQueueError",
    "Pauser",
    "PauserMode",
    "PauserStatistics",
    "PipelineError",
    "Pretoucher",
    "Queue",
    "QueueAccessError",
    "QueueBusyError",
    "QueueClosedError",
    "QueueOSError",
    "QueueOptions",
    "QueueStats",
    "ReadOnlyQueueError",
    "ReadingDocument",
    "ReentrantReadError",
    "ReplicationAuthError",
    "ReplicationError",
    "ReplicationGapError",
    "ReplicationProtocolError",
    "ReplicationSink",
    "ReplicationSource",
    "ReplicationTimeoutError",
    "Retention",
    "RetentionDecision",
    "RollCycle",
    "RollCycleMismatchWarning",
    "RollCycles",
    "SearchStats",
    "Service",
    "ServiceError",
    "ServiceHandlerError",
    "ServiceInput",
    "ServiceOutput",
    "ServiceStatistics",
    "SetTimeProvider",
    "SinkInfo",
    "SnapshotPolicy",
    "StoreFileListener",
    "SyncMode",
    "SystemTimeProvider",
    "Tailer",
    "TailerDirection",
    "TailerState",
    "TailerStats",
    "TimeProvider",
    "UnalignedCycleError",
    "UnknownRollCycleError",
    "UnlockMode",
    "WireError",
    "WriteLockLostError",
    "WriteLockTimeoutError",
    "__version__",
    "add_store_file_listener",
    "binary_search",
    "check_queue",
    "current_history",
    "field_key",
    "history_time",
    "lock_states",
    "method_id",
    "method_key",
    "open_queue",
    "queue_stats",
    "repair_queue",
    "set_queue_codec",
    "unlock_queue",
]

EXCEPTIONS = [n for n in EXPECTED if n.endswith("Error")]

# Public (un-prefixed) modules of the package; everything else is private.
PUBLIC_MODULES = {"aiochronicle.spark", "aiochronicle.testing", "aiochronicle.metrics"}


def _public_objects() -> list[tuple[str, object]]:
    return [(n, getattr(aiochronicle, n)) for n in EXPECTED if n != "__version__"]


def test_all_is_exactly_the_expected_list() -> None:
    assert aiochronicle.__all__ == EXPECTED
    assert sorted(aiochronicle.__all__) == aiochronicle.__all__


def test_no_other_public_attribute_leaks() -> None:
    # (identifiers only: pytest's assertion rewriting adds "@py_builtins" to plugin packages)
    public = {n for n in dir(aiochronicle) if n.isidentifier() and not n.startswith("_")}
    submodules = {m.name for m in pkgutil.iter_modules(aiochronicle.__path__)}
    assert public - submodules == set(EXPECTED) - {"__version__"}


def test_every_name_is_importable_and_documented() -> None:
    for name, obj in _public_objects():
        doc = inspect.getdoc(obj)
        assert doc and doc.strip(), f"aiochronicle.{name} has no docstring"
    assert isinstance(aiochronicle.__version__, str)


def _undocumented_members(module_name: str) -> list[str]:
    """Public methods and properties of the module's public classes, defined by
    aiochronicle (inherited from a private base included), without a docstring."""
    module = importlib.import_module(module_name)
    missing = []
    for name in module.__all__:
        cls = getattr(module, name)
        if not inspect.isclass(cls) or issubclass(cls, BaseException):
            continue
        ours = [b for b in cls.__mro__ if b.__module__.split(".")[0] == "aiochronicle"]
        for attr in dir(cls):
            owner = next((b for b in ours if attr in vars(b)), None)
            if attr.startswith("_") or owner is None:
                continue
            value = vars(owner)[attr]
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            documented = bool((value.__doc__ or "").strip())
            if (isinstance(value, property) or inspect.isfunction(value)) and not documented:
                missing.append(f"{module_name}.{name}.{attr}")
    return missing


@pytest.mark.parametrize("module_name", ["aiochronicle", "aiochronicle.testing",
                                         "aiochronicle.spark"])
def test_every_public_method_and_property_has_a_docstring(module_name: str) -> None:
    assert _undocumented_members(module_name) == []


@pytest.mark.parametrize("name", [n for n in EXPECTED if n != "__version__"])
def test_classes_and_functions_live_in_aiochronicle(name: str) -> None:
    obj = getattr(aiochronicle, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        assert obj.__module__ == "aiochronicle"
        if inspect.isclass(obj) and not issubclass(obj, enum.Enum):
            assert repr(obj) == f"<class 'aiochronicle.{obj.__qualname__}'>"


def test_submodules_are_private_except_the_documented_ones() -> None:
    names = {f"aiochronicle.{m.name}" for m in pkgutil.iter_modules(aiochronicle.__path__)}
    public = {n for n in names if not n.rsplit(".", 1)[1].startswith("_")}
    assert public == PUBLIC_MODULES


@pytest.mark.parametrize("name", EXCEPTIONS)
def test_exception_hierarchy(name: str) -> None:
    exc = getattr(aiochronicle, name)
    assert issubclass(exc, aiochronicle.ChronicleError)
    assert issubclass(exc, Exception)


def test_replication_errors_share_a_base() -> None:
    for name in EXCEPTIONS:
        if name.startswith("Replication") or name in ("DivergenceError", "IncompatibleQueueError"):
            assert issubclass(getattr(aiochronicle, name), aiochronicle.ReplicationError)


def test_std_bases_kept_for_except_clauses() -> None:
    assert issubclass(aiochronicle.WriteLockTimeoutError, TimeoutError)
    assert issubclass(aiochronicle.ReplicationTimeoutError, TimeoutError)
    assert issubclass(aiochronicle.MessageTooLargeError, ValueError)
    assert issubclass(aiochronicle.DiskFullError, OSError)
    assert issubclass(aiochronicle.NoSuchIndexError, LookupError)
    assert issubclass(aiochronicle.UnknownRollCycleError, KeyError)
    assert issubclass(aiochronicle.CodecError, ValueError)
    assert issubclass(aiochronicle.WireError, ValueError)


def test_every_package_error_is_exported() -> None:
    """Any public ChronicleError subclass defined in the package is in the namespace."""
    seen: set[type] = set()
    stack: list[type] = [aiochronicle.ChronicleError]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    for cls in seen:
        if not cls.__module__.startswith("aiochronicle") or cls.__name__.startswith("_"):
            continue
        assert getattr(aiochronicle, cls.__name__, None) is cls, cls


def test_errors_still_importable_from_old_homes() -> None:
    rc = importlib.import_module("aiochronicle._format._rollcycles")
    assert rc.UnknownRollCycleError is aiochronicle.UnknownRollCycleError
    wire = importlib.import_module("aiochronicle._format._wire")
    assert wire.WireError is aiochronicle.WireError


def test_unknown_roll_cycle_is_a_chronicle_error() -> None:
    with pytest.raises(aiochronicle.ChronicleError, match="NO_SUCH"):
        aiochronicle.RollCycles.by_name("NO_SUCH")


def test_errors_pickle_through_the_public_name() -> None:
    err = aiochronicle.NotAQueueError("not here")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is aiochronicle.NotAQueueError
    assert str(back) == "not here"


def test_a_failed_system_call_of_the_native_core_is_a_named_error() -> None:
    """``CQ_ERRNO`` (a system call of the core failed) is a ChronicleError that
    is still the OSError it was: here msync of an address nothing is mapped at."""
    native = importlib.import_module("aiochronicle._core._native")
    page = 1 << 12
    rc = native.lib.cq_sync(native.ffi.cast("uint8_t *", page), 0, page, 0)
    assert rc == native.ERRNO
    with pytest.raises(aiochronicle.QueueOSError) as caught:
        native.check(rc, path="/q/x.cq4", what="syncing")
    assert isinstance(caught.value, aiochronicle.ChronicleError)
    assert isinstance(caught.value, OSError)
    assert caught.value.errno == errno.ENOMEM and caught.value.filename == "/q/x.cq4"
    assert "syncing: " in str(caught.value)


def _classes_defined() -> list[tuple[str, str]]:
    """(module, class name) of every class defined at the top of a package module."""
    root = Path(aiochronicle.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        module = ".".join(("aiochronicle", *parts))
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found.append((module, node.name))
    return found


def test_every_exception_class_lives_in_errors() -> None:
    """The package's exceptions and warnings are defined in one module,
    ``aiochronicle._core._errors`` (and shown as ``aiochronicle.X``); what stays
    elsewhere is a module's private signal (an underscore name) that no other
    module names."""
    root = Path(aiochronicle.__file__).parent
    sources = {p: p.read_text() for p in root.rglob("*.py")}
    elsewhere = []
    for module, name in _classes_defined():
        cls = getattr(importlib.import_module(module), name)
        if module == "aiochronicle._core._errors" or not issubclass(cls, BaseException):
            continue
        own = Path(inspect.getfile(importlib.import_module(module)))
        named_elsewhere = [p.name for p, text in sources.items()
                           if p != own and re.search(rf"\b{name}\b", text)]
        if not name.startswith("_") or named_elsewhere:
            elsewhere.append(f"{module}.{name} {named_elsewhere}")
    assert elsewhere == []
    # and the check sees the exceptions it is about
    assert ("aiochronicle._core._errors", "CodecError") in _classes_defined()
def test_the_package_loads_its_names_when_first_used() -> None:
    """``import aiochronicle`` loads no native code (the pytest plugin relies on it);
    the first public name used loads them all, under their ``aiochronicle.X`` names,
    and ``dir()`` lists them before and after."""
    code = """if True:
        import sys
        import aiochronicle
        def ours():
            return sorted(m for m in sys.modules if m.split(".")[0] == "aiochronicle")
        assert ours() == ["aiochronicle", "aiochronicle._version"], ours()
        assert set(aiochronicle.__all__) <= set(dir(aiochronicle))
        try:
            aiochronicle.NoSuchName
        except AttributeError as e:
            assert "NoSuchName" in str(e)
        else:
            raise AssertionError("a misspelt name resolved")
        from aiochronicle import DiskFullError
        assert "aiochronicle._core._native" in ours()
        assert DiskFullError.__module__ == "aiochronicle"
        assert aiochronicle.Queue.__module__ == "aiochronicle"
        assert set(aiochronicle.__all__) <= set(dir(aiochronicle))
        print("ok")
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_type_checkers_see_the_names_imported_at_first_use() -> None:
    root = Path(__file__).resolve().parents[1]
    target = root / "tests" / "typing" / "check_lazy_names.py"
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                          str(target)], capture_output=True, text=True, cwd=root, timeout=300)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("tests/typing/")]
    # (the defining modules' dotted paths, whichever they are)
    assert re.search(r'Revealed type is "aiochronicle\.[\w.]*\.Queue"', out.stdout), out.stdout
    assert re.search(r'Revealed type is "aiochronicle\.[\w.]*\.RollCycle"', out.stdout), out.stdout
    errors = [ln for ln in lines if ": error:" in ln]
    marked = [i + 1 for i, ln in enumerate(target.read_text().splitlines()) if "# E:" in ln]
    assert sorted(int(e.split(":")[1]) for e in errors) == marked, out.stdout
    assert all('has no attribute "NoSuchQueue"' in e for e in errors), out.stdout
