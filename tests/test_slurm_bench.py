"""bench/slurm_e2e.py --quick, one of its ways (Slurm FIFO: its reservation
and the benchmark's autoscaler; serve's path is tested in
test_slurm_commands), on a fresh lab of its own: the executed plan passes
the checker and the results name the commit and the machine. One way keeps
CI short. Marked `slurm`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_lab import need_lab

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def test_slurm_e2e_quick(tmp_path):
    need_lab()  # the packages are there; the benchmark brings up labs of its own
    p = subprocess.run([sys.executable, "-m", "bench.slurm_e2e", "--quick", "--ways",
                        "fifo", "--out", str(tmp_path),
                        "--lab", str(tmp_path / "labs")],
                       cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    r = json.loads((tmp_path / "slurm_e2e_quick.json").read_text())
    assert set(r["ways"]) == {"fifo"} and r["commit"] and r["machine"]["cpu"]
    assert set(r["predicted"]) >= {"fifo", "backfill", "serve-greedy", "serve-allocator"}
    for way, row in r["ways"].items():
        assert row["feasible"], (way, row["violations"])
        assert row["rigid_started"] == row["rigid_submitted"] > 0
        assert row["executed"]["weighted_throughput"] > 0
    assert "| fifo | yes |" in (tmp_path / "slurm_e2e_quick.md").read_text()
