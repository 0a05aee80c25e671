"""bench/pipeline.py runs end to end (``--quick``): every pipeline, every hop
and every process's CPU come out, and every order sent is routed.  Its speed
is the benchmark's business, not this test's."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "pipeline.py"
PIPELINES = ("aio notify", "aio balanced", "aio busy", "sockets")
HOPS = ("gateway -> strategy", "strategy handler", "strategy -> router", "end to end")


def test_pipeline_quick_prints_every_row() -> None:
    # a short directory: the sockets pipeline's Unix socket paths must fit
    # in 108 bytes (pytest-xdist's tmp_path is too deep for them)
    with tempfile.TemporaryDirectory(prefix="acpl-") as short:
        r = subprocess.run([sys.executable, str(BENCH), "--quick", "--dir", short],
                           capture_output=True, text=True, timeout=240)
        # nothing is left behind in the directory it was given
        left = list(Path(short).iterdir())
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
    assert left == []
