"""The real-trace windows of bench/traces/ (cut by bench/traces/cut.py): they
load, the CSV windows import again into the committed scenarios, and greedy's
plan of each passes the checker. Reads only files in the repository."""
import json
from pathlib import Path

import pytest

import gpualloc as ga
from gpualloc.trace import main as trace_main

TRACES = Path(__file__).resolve().parents[1] / "bench" / "traces"
# name -> (GPUs, jobs, steps), as bench/traces/README.md states them.
SHAPES = {"openb_118d_64": (64, 851, 168), "openb_dlrm_127d_32": (32, 507, 168),
          "openb_dlrm_127d_14d_128": (128, 860, 336)}
CSV_ARGS = ["--id-col", "job_id", "--submit-col", "submit_s", "--duration-col", "duration_s",
            "--gpus-col", "gpus", "--kind-col", "kind", "--priority-col", "priority",
            "--time-unit", "s", "--start", "0", "--gpus-per-node", "8", "--gpu-type", "GPU",
            "--memory-gb", "32"]


@pytest.mark.parametrize("name", SHAPES)
def test_window_loads_with_its_shape(name):
    s = ga.load(TRACES / f"{name}.json")
    assert (s.G, s.J, s.T) == SHAPES[name]
    assert any(j.kind == "realtime_inference" for j in s.jobs)


@pytest.mark.parametrize("name", [n for n in SHAPES if (TRACES / f"{n}.csv").exists()])
def test_csv_window_imports_to_the_committed_scenario(name, tmp_path, capsys):
    G, _, T = SHAPES[name]
    out = tmp_path / f"{name}.json"
    rc = trace_main(["csv", str(TRACES / f"{name}.csv"), *CSV_ARGS, "--length", f"{T}h",
                     "--gpus", str(G), "--name", name, "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert json.loads(out.read_text()) == json.loads((TRACES / f"{name}.json").read_text())


@pytest.mark.parametrize("name", ["openb_118d_64", "openb_dlrm_127d_32"])  # the 128-GPU one: slow
def test_greedy_plan_of_a_window_is_feasible(name):
    s = ga.load(TRACES / f"{name}.json")
    p = ga.plan(s, "greedy")
    assert ga.check(s, p).ok
