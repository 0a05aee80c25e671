"""Where the test suite's CPU goes: sums the records a run with
``AIOCHRONICLE_TEST_CPU=<file>`` left (tests/conftest.py writes one line per test:
the CPU seconds of the pytest process and of the processes it started).

Usage: ``python scripts/test_cpu.py FILE [--tests N]``: the files by CPU, then the N
costliest tests (default 30).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(argv: list[str]) -> int:
    path = argv[0]
    top = int(argv[argv.index("--tests") + 1]) if "--tests" in argv else 30
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in rows:
        f = by_file[r["test"].split("::")[0]]
        f[0] += r["self"]
        f[1] += r["children"]
        f[2] += r["wall"]
        f[3] += 1
    total = sum(r["self"] + r["children"] for r in rows)
    print(f"{len(rows)} tests, {total:.0f} CPU s "
          f"(pytest processes {sum(r['self'] for r in rows):.0f}, started processes "
          f"{sum(r['children'] for r in rows):.0f}), wall {sum(r['wall'] for r in rows):.0f} s")
    print(f"{'cpu':>7} {'self':>7} {'child':>7} {'wall':>7} {'n':>5}  file")
    for name, (s, c, w, n) in sorted(by_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
        print(f"{s + c:7.1f} {s:7.1f} {c:7.1f} {w:7.1f} {n:5d}  {name}")
    print(f"\nthe {top} costliest tests")
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:top]:
        print(f"{r['self'] + r['children']:7.1f} {r['self']:7.1f} {r['children']:7.1f} "
              f"{r['wall']:7.1f}  {r['test']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
