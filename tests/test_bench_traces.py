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
SHAPES = {"openb_118d_64": (64, 851, 168), "openb_125d_64": (64, 489, 168),
          "openb_141d_64": (64, 396, 168), "openb_dlrm_118d_32": (32, 834, 168),
          "openb_dlrm_127d_32": (32, 507, 168),
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


def _row(case, seed, policy, mode, every, value, wall, guarantee=False, short=0):
    return {"kind": "trace" if case.startswith("openb") else "seven", "case": case,
            "seed": seed, "role": "tuning", "G": 64, "J": 10, "T": 168, "offered_load": 1.0,
            "policy": policy, "mode": mode, "replan_every": every, "guarantee": guarantee,
            "weighted_throughput": value, "gain_pct": value / 100 - 1, "wall_s": wall,
            "guarantee_shortfall": short, "preemptions": 0}


def test_benchmark_tables_from_made_up_runs(tmp_path):
    from bench.online_traces import markdown, merge

    rows = [_row("openb_x", 0, "greedy", "offline", None, 100, 1.0),
            _row("openb_x", 0, "greedy", "online", 6, 98, 2.5),
            _row("openb_x", 0, "allocator", "offline", None, 105, 4.0),
            _row("openb_x", 0, "allocator", "online", 6, 97, 20.0),
            _row("openb_x", 0, "allocator", "online", 6, 90, 21.0, guarantee=True, short=3)]
    # A generated speed case, counted apart from the target's runs.
    rows += [dict(_row("mixed_128x3000x168", 0, policy, "online", 6, value, 1.0),
                  kind="generated") for policy, value in (("greedy", 50), ("allocator", 49))]
    part = {"machine": {"cpu": "x", "cores": 2, "gpu": None, "torch": "t", "commit": "c"},
            "command": "python -m bench.online_traces", "policies": ["greedy", "allocator"],
            "replan_every": [6], "forecast": "last_day", "rows": rows}
    (tmp_path / "a.json").write_text(json.dumps(part))
    text = markdown(merge([tmp_path / "a.json"]))
    assert "| openb_x | tuning | 64 x 168, 10, 1.00 | greedy | 100 | 98 |" in text
    assert "x2.5 |" in text and "x5.0 |" in text  # online / offline wall, each policy
    assert "| openb_x | tuning | 0.9898 | 1.0500 | 0.9238 |" in text  # alloc/greedy online, offline
    assert "below greedy online on 1 of 1 runs" in text
    assert "On the generated speed cases (not in the target) it is below on 1 of 1." in text
    assert "| openb_x | allocator | online /6 | 3 | -7.22% |" in text
    # The windows and the speed cases are not the seven's: no 2-second line.
    assert "Online runs of the seven over" not in text


def test_runs_of_the_seven_over_two_seconds_are_counted(tmp_path):
    from bench.online_traces import markdown, merge

    rows = [_row("mixed", 0, "greedy", "offline", None, 100, 0.1),
            _row("mixed", 0, "greedy", "online", 6, 100, 0.6),
            _row("mixed", 0, "allocator", "offline", None, 100, 1.0),
            _row("mixed", 0, "allocator", "online", 6, 100, 1.4),
            _row("mixed", 1, "allocator", "offline", None, 100, 1.0),
            _row("mixed", 1, "allocator", "online", 6, 100, 1.9),
            _row("mixed", 1, "allocator", "offline", None, 99, 3.0, guarantee=True),
            _row("mixed", 1, "allocator", "online", 6, 98, 2.3, guarantee=True),
            _row("mixed", 1, "greedy", "online", 6, 97, 0.9, guarantee=True)]
    part = {"machine": {"cpu": "x", "cores": 2, "gpu": None, "torch": "t", "commit": "c"},
            "command": "python -m bench.online_traces", "policies": ["greedy", "allocator"],
            "replan_every": [6], "forecast": "last_day", "rows": rows}
    (tmp_path / "a.json").write_text(json.dumps(part))
    text = markdown(merge([tmp_path / "a.json"]))
    assert ("Online runs of the seven over 2 s (free): greedy 0 of 1, allocator 0 of 2; the "
            "longest 1.90 s (allocator, `mixed` seed 1, every 6 step(s)).") in text
    # The offline run over 2 s is not an online run.
    assert ("Online runs of the seven over 2 s (with the guarantee): greedy 0 of 1, allocator "
            "1 of 1; the longest 2.30 s (allocator, `mixed` seed 1, every 6 step(s)).") in text


def test_time_target_is_counted_run_by_run(tmp_path):
    # Seed 0's offline plan is instant and its online run is not: the ratio of
    # the means (x1.5) meets 3x, the runs do not all.
    from bench.online_traces import markdown, merge

    rows = [_row("mixed", 0, "allocator", "offline", None, 100, 0.01),
            _row("mixed", 0, "allocator", "online", 6, 100, 0.5),
            _row("mixed", 1, "allocator", "offline", None, 100, 1.0),
            _row("mixed", 1, "allocator", "online", 6, 100, 1.0)]
    part = {"machine": {"cpu": "x", "cores": 2, "gpu": None, "torch": "t", "commit": "c"},
            "command": "python -m bench.online_traces", "policies": ["allocator"],
            "replan_every": [6], "forecast": "last_day", "rows": rows}
    (tmp_path / "a.json").write_text(json.dumps(part))
    text = markdown(merge([tmp_path / "a.json"]))
    assert "| x1.5 (runs x1.0-x50.0) |" in text
    # No run of the seven over 2 s: counted all the same (the target).
    assert ("Online runs of the seven over 2 s (free): allocator 0 of 2; the longest 1.00 s "
            "(allocator, `mixed` seed 1, every 6 step(s)).") in text
    assert "every 6 step(s) (each online run against the offline run of its scenario and " \
           "seed): allocator 1 of 2." in text
