"""Users' types: ``mypy --strict`` over a user's file (``tests/typing/user_code.py``)
that walks every public attribute path the docs and examples show, against the
package under test (the checkout's, or in scripts/test.sh's second pass the
installed wheel's, which must ship ``py.typed``).  What works at run time
type-checks: ``tailer.queue.appender()``, ``reader.tailer.to_start()`` ..."""

from __future__ import annotations

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
