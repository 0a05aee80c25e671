"""Users' types: ``mypy --strict`` over a user's file (``tests/typing/user_code.py``)
that walks every public attribute path the docs and examples show, against the
package under test (the checkout's, or in scripts/test.sh's second pass the
installed wheel's, which must ship ``py.typed``).  What works at run time
type-checks: ``tailer.queue.appender()``, ``reader.tailer.to_start()`` ..."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import aiochronicle

ROOT = Path(__file__).resolve().parent.parent


def test_user_code_type_checks_strictly(tmp_path: Path) -> None:
    target = ROOT / "tests" / "typing" / "user_code.py"
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
         "--cache-dir", str(tmp_path / "mypy-cache"), str(target)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    # only the user's file counts (errors inside the package are the package's own
    # mypy run's); it is type-checked against the package imported here
    assert (Path(aiochronicle.__file__).parent / "py.typed").is_file()
    lines = [ln for ln in out.stdout.splitlines() if "user_code.py" in ln]
    assert lines == [], out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr


def test_user_code_runs(tmp_path: Path) -> None:
    """The same paths work at run time: the user's file runs against the package
    (its objects are the public classes: ``tailer.queue`` is the queue itself,
    ``reader.tailer`` the tailer, every variant an instance of the public class)."""
    spec = importlib.util.spec_from_file_location("user_code", ROOT / "tests" / "typing"
                                                  / "user_code.py")
    assert spec is not None and spec.loader is not None
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    user.objects(tmp_path / "q")
    with aiochronicle.open_queue(tmp_path / "q") as q:
        assert user.annotated(q.tailer(), q.appender(), q.tailer().method_reader(object(),
                              default_handler=lambda *_: None)) == q.tailer().index
        for t in (q.tailer(), q.tailer("n"), q.tailer(read_after_replica_acknowledged=True),
                  q.tailer("m", read_after_replica_acknowledged=True)):
            assert isinstance(t, aiochronicle.Tailer) and t.queue is q
            reader = t.method_reader(object(), default_handler=lambda *_: None)
            assert isinstance(reader, aiochronicle.MethodReader) and reader.tailer is t
        assert isinstance(q.appender(listener=lambda i, p: None), aiochronicle.Appender)
        assert q.pretoucher().queue is q
    assert not hasattr(aiochronicle.Queue, "cycle_files")  # a removed internal name
