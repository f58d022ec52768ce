"""Commands that plan nothing start without torch (issue 24, item 5): the
checker on a real plan file, feasible or not, and the trace and report
entry points. Each runs in a fresh interpreter, which then asserts that
torch was never imported."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpualloc.plan import save_plan
from gpualloc.policies.fifo import fifo
from gpualloc.scenario import load

TINY = Path(__file__).resolve().parents[1] / "gpualloc" / "examples" / "tiny.yaml"


def without_torch(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; it must leave torch unimported."""
    r = subprocess.run([sys.executable, "-c",
                        code + "\nassert 'torch' not in sys.modules, 'torch was imported'"],
                       cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def files(tmp_path):
    s = load(TINY)
    s.save(tmp_path / "s.json")
    owner = fifo(s).owner
    save_plan(tmp_path / "ok.json", s, "fifo", owner)
    bad = owner.clone()
    late = max(range(s.J), key=lambda i: s.jobs[i].arrival)
    assert s.jobs[late].arrival > 0
    bad[:, 0] = late  # every GPU at t=0 to the job that arrives last
    save_plan(tmp_path / "bad.json", s, "fifo", bad)
    return tmp_path


@pytest.mark.parametrize("plan, code", [("ok.json", 0), ("bad.json", 1)])
def test_check_reads_and_judges_a_plan_without_torch(files, plan, code):
    r = without_torch("import sys\nfrom gpualloc.check import main\n"
                      f"rc = main(['s.json', {plan!r}])\nassert rc == {code}, rc", files)
    assert r.stdout.startswith("feasible" if code == 0 else "infeasible:\n  before_arrival: ")


def test_trace_converts_a_csv_without_torch(tmp_path):
    (tmp_path / "jobs.csv").write_text("job_id,submit_time,duration,num_gpus\na,0,60,2\nb,30,120,1\n")
    without_torch("import sys\nfrom gpualloc.trace import main\n"
                  "assert main(['csv', 'jobs.csv', '--gpus', '8', '-o', 's.json']) == 0", tmp_path)
    assert load(tmp_path / "s.json").J == 2


@pytest.mark.parametrize("module", ["gpualloc.report", "gpualloc.check", "gpualloc.cli"])
def test_help_without_torch(tmp_path, module):
    r = without_torch(f"import sys\nfrom {module} import main\n"
                      "try:\n    rc = main(['--help'])\nexcept SystemExit as e:\n    rc = e.code\n"
                      "assert rc in (0, None), rc", tmp_path)
    assert "usage" in r.stdout
