"""Every Python snippet of the README and of docs/ runs as printed.

The blocks of one page run in order in one script (as a reader pastes them),
as a real process whose working directory is a fresh temporary directory, so
the relative paths the snippets write under land there.  The Spark page's
snippets need a Spark session (``spark``) and a Spark cluster's paths: they are
compiled here, and run for real by tests/test_spark.py's equivalents.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDS_SPARK = {"docs/spark.md"}
# pages that only include the example programs (run by tests/test_docs.py)
INCLUDES_ONLY = {"docs/examples.md"}


def _blocks(page: str) -> list[str]:
    """The page's ``python`` blocks, also those indented inside a list item."""
    found = re.findall(r"^( *)```python\n(.*?)^\1```", (ROOT / page).read_text(), re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


PAGES = [p for p in ["README.md", *sorted(f"docs/{f.name}" for f in (ROOT / "docs").glob("*.md"))]
         if _blocks(p) and p not in INCLUDES_ONLY]


def test_the_pages_with_snippets_are_all_here() -> None:
    assert "README.md" in PAGES and "docs/quickstart.md" in PAGES
    assert len(PAGES) >= 8, PAGES


@pytest.mark.parametrize("page", PAGES)
def test_snippets_run_as_printed(page: str, tmp_path: Path) -> None:
    code = "\n".join(_blocks(page))
    if page in NEEDS_SPARK:
        ast.parse(code, page)
        return
    assert "/data/" not in code, f"{page}: snippets write under a relative or temporary dir"
    script = tmp_path / "snippets.py"
    # /tmp paths of the quickstart move into this test's own directory
    script.write_text(code.replace('"/tmp/', f'"{tmp_path}/'))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, f"{page}:\n{proc.stdout}\n{proc.stderr}"
