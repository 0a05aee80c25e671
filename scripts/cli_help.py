"""Rewrite the ``$ aiochronicle X --help`` blocks of docs/cli.md with the real output.

Run after changing the command line: ``.venv/bin/python scripts/cli_help.py``.
tests/test_docs.py checks the blocks against the same output (at 100 columns).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
BLOCK = re.compile(r"(```console\n\$ aiochronicle ([\w -]+?) --help\n)(.*?)(```)", re.S)


def main() -> int:
    env = dict(os.environ, COLUMNS="100")

    def real(m: re.Match[str]) -> str:
        out = subprocess.run([sys.executable, "-m", "aiochronicle", *m.group(2).split(),
                              "--help"], capture_output=True, text=True, env=env,
                             check=True).stdout
        return m.group(1) + out + m.group(4)

    text = PAGE.read_text()
    new = BLOCK.sub(real, text)
    if new != text:
        PAGE.write_text(new)
        print(f"rewrote the --help blocks of {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
