import csv
import json
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gpualloc import report
from gpualloc.report import Run, aggregate, find_runs, headlines, setting, write_report
from gpualloc.run import run
from helpers import composed

# A real CLI multirun with a second policy beside FIFO, so that gains are not
# all zero: FIFO without its real-time reservation (fifo.reserve=0), put in
# the registry before Hydra's main runs.
ALT_POLICY = """
import gpualloc.policies as P
from gpualloc.config import FifoConfig
from gpualloc.policies.fifo import fifo
P.POLICIES["fifo_r0"] = P.Policy(lambda s, cfg, device: fifo(s, FifoConfig(reserve=0), device),
                               online_by_nature=True, keeps_guarantee=False)
from gpualloc.run import main
main()
"""


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_picture(path: Path, size: tuple[int, int]) -> None:
    assert path.is_file() and path.stat().st_size > 10_000, path
    assert png_size(path) == size, path
    from matplotlib.image import imread
    pixels = imread(path)
    assert pixels[..., :3].std() > 0.05, f"{path} is blank"


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two generated scenarios cut to 24 steps, two seeds, two policies.
    (`++`: a plain scenario.horizon=24 fails, as Hydra composes the sweep's
    base config before any scenario is chosen.)"""
    out = tmp_path_factory.mktemp("multirun")
    r = subprocess.run([sys.executable, "-c", ALT_POLICY, "-m", "+scenario=mixed,batch_flood",
                        "++scenario.horizon=24", "seed=0,1", "policies=[fifo,fifo_r0]",
                        f"hydra.sweep.dir={out}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "gpualloc.report", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out, r.stdout


@pytest.mark.slow
def test_report_of_a_real_multirun(sweep):
    out, stdout = sweep
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*/metrics.json"))]
    assert len(runs) == 4 and all("error" not in m for m in runs)
    rows = read_csv(out / "report.csv")
    assert [(r["scenario"], r["policy"]) for r in rows] == [
        ("batch_flood", "fifo"), ("batch_flood", "fifo_r0"), ("mixed", "fifo"), ("mixed", "fifo_r0")]
    for row in rows:
        mine = [m["policies"][row["policy"]] for m in runs if m["scenario"] == row["scenario"]]
        assert row["n"] == "2" and row["seeds"] == "0 1" and row["setting"] == "++scenario.horizon=24"
        for col, get in [("util_pct", lambda m: 100 * m["utilization"]),
                         ("weighted_throughput", lambda m: m["weighted_throughput"]),
                         ("realtime_slo", lambda m: m["realtime_slo"]),
                         ("jobs_completed", lambda m: m["jobs_completed"]),
                         ("util_gain_pts", lambda m: m["gains"]["utilization_points"]),
                         ("wthr_gain_pct", lambda m: m["gains"]["weighted_throughput_pct"]),
                         ("wall_s", lambda m: m["wall_s"])]:
            values = [get(m) for m in mine]
            assert float(row[f"{col}_mean"]) == pytest.approx(statistics.mean(values)), col
            assert float(row[f"{col}_std"]) == pytest.approx(statistics.stdev(values), abs=1e-9), col
        waits = [m["mean_wait"] for m in mine if m["mean_wait"] is not None]
        if waits:
            assert float(row["mean_wait_mean"]) == pytest.approx(statistics.mean(waits))
    # The headline: over the two scenarios, of each scenario's mean over seeds.
    alt = {r["scenario"]: r for r in rows if r["policy"] == "fifo_r0"}
    util = [float(r["util_gain_pts_mean"]) for r in alt.values()]
    wthr = [float(r["wthr_gain_pct_mean"]) for r in alt.values()]
    best = max(alt, key=lambda sc: float(alt[sc]["util_gain_pts_mean"]))
    line = (f"fifo_r0 [++scenario.horizon=24] vs FIFO over 2 scenarios (2 seeds each): "
            f"utilization {statistics.mean(util):+.1f} points mean, {max(util):+.1f} best ({best}); "
            f"weighted throughput {statistics.mean(wthr):+.1f}% mean")
    assert line in stdout
    md = (out / "report.md").read_text()
    assert line in md and "4 runs: 4 finished, 0 failed" in md
    fifo_mixed = next(r for r in rows if r["scenario"] == "mixed" and r["policy"] == "fifo")
    cell = f"{float(fifo_mixed['util_pct_mean']):.1f} ± {float(fifo_mixed['util_pct_std']):.1f}"
    assert f"| mixed | ++scenario.horizon=24 | fifo | 2 | {cell} |" in md


@pytest.mark.slow
def test_report_pictures(sweep):
    out, _ = sweep
    md = (out / "report.md").read_text()
    # 64 GPUs (mixed) and 32 (batch_flood): panels at their 3-inch floor, two policies.
    for scenario in ("mixed", "batch_flood"):
        assert_picture(out / f"gantt_{scenario}.png", (1400, 700))
        assert_picture(out / f"utilization_{scenario}.png", (1400, 700))
        assert f"(gantt_{scenario}.png)" in md
    assert_picture(out / "gains.png", (800, 700))


@pytest.mark.slow
def test_failed_run_in_the_aggregate(tmp_path):
    from importlib import resources
    tiny = resources.files("gpualloc.examples") / "tiny.yaml"
    missing = tmp_path / "missing.yaml"
    r = subprocess.run([sys.executable, "-m", "gpualloc.run", "-m", "+scenario=file",
                        f"scenario.path={tiny},{missing}", "policies=[fifo]",
                        f"hydra.sweep.dir={tmp_path / 'm'}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert report.main([str(tmp_path / "m"), "--no-plots"]) == 0
    md = (tmp_path / "m" / "report.md").read_text()
    assert "2 runs: 1 finished, 1 failed" in md
    assert (f"`1` `+scenario=file scenario.path={missing} policies=[fifo]`: "
            f"{missing}: cannot read") in md
    rows = read_csv(tmp_path / "m" / "report.csv")
    assert [(r["scenario"], r["policy"], r["n"]) for r in rows] == [("tiny", "fifo", "1")]


def test_single_run_folder_and_plot_true(tmp_path):
    cfg = composed("+scenario=mixed", "scenario.horizon=24", "policies=[fifo]", "plot=true")
    result = run(cfg, tmp_path)
    assert_picture(tmp_path / "gantt.png", (1400, 400))
    assert_picture(tmp_path / "utilization.png", (1400, 700))
    out = write_report(tmp_path, pictures=False)
    rows = read_csv(tmp_path / "report.csv")
    assert len(out["runs"]) == 1 and len(rows) == 1
    assert float(rows[0]["util_pct_mean"]) == pytest.approx(
        100 * result["policies"]["fifo"]["utilization"])
    assert rows[0]["n"] == "1" and rows[0]["util_pct_std"] == ""  # no spread from one seed
    assert "only FIFO ran" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_bad_input_exit_2(tmp_path, make):
    folder = tmp_path / "runs"
    if make == "empty":
        folder.mkdir()
    r = subprocess.run([sys.executable, "-m", "gpualloc.report", str(folder)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert ("no such folder" if make == "missing" else "no runs") in r.stderr
    assert "Traceback" not in r.stderr and not (folder / "report.md").exists()


# ---- aggregation on hand-made runs ----------------------------------------------------------

def fake(seed, util, wthr_pct, wait=None, scenario="s", overrides=()):
    m = {"utilization": util, "weighted_throughput": 100.0, "realtime_slo": 1.0,
         "jobs_completed": 3, "mean_wait": wait, "p95_wait": wait, "wall_s": 0.5,
         "gains": {"utilization_points": 100 * (util - 0.5), "weighted_throughput_pct": wthr_pct}}
    fifo = dict(m, utilization=0.5, gains={"utilization_points": 0.0,
                                           "weighted_throughput_pct": 0.0})
    return Run(Path(f"/x/{seed}"), [f"seed={seed}", f"+scenario={scenario}", *overrides],
               {"scenario": scenario, "seed": seed, "policies": {"fifo": fifo, "alt": m}})


def test_settings_are_never_averaged_together():
    runs = [fake(0, 0.6, 10.0, overrides=["fifo.reserve=2"]),
            fake(1, 0.8, 30.0, overrides=["fifo.reserve=2"]),
            fake(0, 0.9, None, overrides=["fifo.reserve=4"]),
            fake(0, 0.9, None, overrides=["fifo.reserve=4"])]  # the same seed twice counts once
    rows = {(r["setting"], r["policy"]): r for r in aggregate(runs)}
    two = rows[("fifo.reserve=2", "alt")]
    assert two["n"] == 2 and two["util_pct_mean"] == pytest.approx(70.0)
    assert two["util_pct_std"] == pytest.approx(statistics.stdev([60.0, 80.0]))
    assert two["wthr_gain_pct_mean"] == pytest.approx(20.0) and two["mean_wait_mean"] is None
    four = rows[("fifo.reserve=4", "alt")]
    assert four["n"] == 1 and four["util_pct_std"] is None and four["wthr_gain_pct_mean"] is None
    assert setting(["seed=1", "+scenario=x", "policies=[fifo]", "plot=true", "a.b=2"]) == "a.b=2"


def test_preemption_options_are_settings():
    # Like min_served=F: runs that differ in them are never averaged together.
    runs = [fake(0, 0.6, 10.0, overrides=["preemptible=[training]", "restart_cost=1"]),
            fake(0, 0.7, 20.0, overrides=["preemptible=[training]", "restart_cost=2"]),
            fake(0, 0.8, 30.0, overrides=["preemptible=[]", "min_served=1.0"])]
    rows = {r["setting"]: r for r in aggregate(runs) if r["policy"] == "alt"}
    assert {s: r["util_pct_mean"] for s, r in rows.items()} == pytest.approx({
        "preemptible=[training] restart_cost=1": 60.0,
        "preemptible=[training] restart_cost=2": 70.0,
        "preemptible=[] min_served=1.0": 80.0})


def test_headline_over_scenarios():
    runs = [fake(0, 0.6, 10.0, scenario="a"), fake(1, 0.7, 20.0, scenario="a"),
            fake(0, 0.4, -5.0, scenario="b")]
    [line] = headlines(aggregate(runs))
    # a: +15.0 points, +15%; b: -10.0 points, -5%.
    assert line == ("alt vs FIFO over 2 scenarios (1-2 seeds each): utilization +2.5 points "
                    "mean, +15.0 best (a); weighted throughput +5.0% mean")


def test_unfinished_and_broken_runs_are_failed(tmp_path):
    (tmp_path / "0" / ".hydra").mkdir(parents=True)
    (tmp_path / "0" / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "metrics.json").write_text("{not json")
    (tmp_path / ".submitit" / "9").mkdir(parents=True)
    (tmp_path / ".submitit" / "9" / "metrics.json").write_text("{}")  # hidden: not a run
    runs = find_runs(tmp_path)
    assert [r.folder.name for r in runs] == ["0", "1"]
    assert runs[0].error.startswith("no metrics.json") and runs[0].overrides == ["seed=0"]
    assert runs[1].error.startswith("metrics.json line 1: not valid JSON")
    out = write_report(tmp_path)
    assert out["rows"] == [] and "2 runs: 0 finished, 2 failed" in (
        tmp_path / "report.md").read_text()
