"""bench/pipeline.py runs end to end (``--quick``): every pipeline, every hop
and every process's CPU come out, and every order sent is routed.  Its speed
is the benchmark's business, not this test's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "pipeline.py"
PIPELINES = ("aio notify", "aio balanced", "aio busy", "sockets")
HOPS = ("gateway -> strategy", "strategy handler", "strategy -> router", "end to end")


def test_pipeline_quick_prints_every_row(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(BENCH), "--quick", "--dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    cells = [[c.strip() for c in line.strip("|").split("|")]
             for line in out.splitlines() if line.startswith("| ")]
    latency = {(r[0], r[1]): r for r in cells if len(r) == 8 and r[1] in HOPS}
    for p in PIPELINES:
        for hop in HOPS:
            row = latency[(p, hop)]
            assert all(re.fullmatch(r"[\d.]+", v) for v in row[2:6]), row
            # the ratios are against the sockets pipeline of the same run
            assert row[6].endswith("x") and row[7].endswith("x"), row
        assert latency[("sockets", hop)][6] == "1.00x"
    cpu = {r[0]: r for r in cells if len(r) == 8 and "/" in r[1] and r[0] in PIPELINES}
    assert set(cpu) == set(PIPELINES)
    for p, row in cpu.items():
        routed, sent = (int(x.replace(",", "")) for x in row[1].split(" / "))
        assert routed == sent > 0, (p, row)  # nothing lost on the way
        assert all(float(v) >= 0 for v in row[2:6]), row
    # nothing is left behind in the directory it was given
    assert list(tmp_path.iterdir()) == []
