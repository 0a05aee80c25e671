"""bench/wakeup.py runs end to end (``--quick``): both readers handle every
call, each call is one wake-up of the notify reader, and the ratios are
against the sockets of the same run.  Its speed is the benchmark's business,
not this test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "wakeup.py"


def test_wakeup_quick_prints_both_readers() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--quick"], capture_output=True,
                         text=True, timeout=240, check=True).stdout
    rows = {r[0]: r for r in ([c.strip() for c in line.strip("|").split("|")]
                              for line in out.splitlines() if line.startswith("| "))}
    assert set(rows) >= {"aio notify", "sockets"}
    for name in ("aio notify", "sockets"):
        row = rows[name]
        assert float(row[1]) > 0 and float(row[2]) > 0, row
        assert row[4].endswith("x"), row
    assert rows["sockets"][4] == "1.00x"
    # --quick makes 300 calls; the notify reader parked before each one (a
    # park's timer may end one more often on a loaded machine)
    assert int(rows["aio notify"][3].replace(",", "")) >= 300
