"""Settings are checked where they are defined (gpualloc.config): a value
outside what a setting allows fails when the config is built, before any
work, with one line naming the override and what is allowed, and exit code 2
from the command. Most cases compose the real config in-process (Hydra's
compose API and OmegaConf.to_object, as the command does); a few go through
the command itself."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from gpualloc.config import (GeneratedScenarioConfig, RigidWorkloadConfig, RunConfig, SettingError,
                             SolverConfig, register_configs)
from gpualloc.scenario.generate import generate
from gpualloc.run import run

ROOT = Path(__file__).resolve().parents[1]
FILE = ["+scenario=file", "policies=[fifo]"]
MIXED = ["+scenario=mixed", "policies=[fifo]"]

# (override, what the message says after "OVERRIDE: "), on the small file scenario.
BAD = [
    # fixed sets of values
    ("solver.rounding=bset", "must be one of relaxed, priority, best"),
    ("solver.grid=dnse", "must be one of auto, dense, packed"),
    ("solver.dtype=float64", "must be one of float32, bfloat16, float16"),
    ("mode=sideways", "must be one of offline, online"),
    ("online.forecast=crystal_ball", "must be one of oracle, last_day, ewma"),
    ("device=tpu", "must be one of auto, cpu, cuda"),
    # the allocator
    ("solver.iterations=-1", "must be an integer >= 0"),
    ("solver.step=0", "must be > 0"),
    ("solver.step=nan", "must be a finite number > 0"),
    ("solver.step=inf", "must be a finite number > 0"),
    ("solver.penalty_start=0", "must be > 0"),
    ("solver.penalty_end=-1", "must be > 0"),
    ("solver.smooth=-0.5", "must be >= 0"),
    ("solver.damping=0", "must be in (0, 1]"),
    ("solver.damping=1.5", "must be in (0, 1]"),
    ("solver.time_discount=1", "must be in [0, 1)"),
    ("solver.time_discount=-0.1", "must be in [0, 1)"),
    ("solver.rounding_thresholds=[]", "must be a non-empty list of numbers in [0, 1]"),
    ("solver.rounding_thresholds=[0.5,1.5]", "must be a non-empty list of numbers in [0, 1]"),
    ("solver.local_search_iters=-1", "must be an integer >= 0"),
    ("solver.local_search_patience=-1", "must be an integer >= 0"),
    ("solver.local_search_accept_worse=-0.1", "must be in [0, 1)"),
    ("solver.local_search_accept_worse=1", "must be in [0, 1)"),
    ("solver.local_search_anneal_iters=-1", "must be an integer >= 0"),
    ("solver.deep_search_cells=-1", "must be an integer >= 0"),
    ("solver.deep_search_patience=-2", "must be an integer >= 0"),
    ("solver.deep_search_anneal_iters=-8000", "must be an integer >= 0"),
    ("solver.deep_search_moves_per_job=-1", "must be an integer >= 0"),
    ("solver.time_limit_s=0", "must be > 0 or null"),
    ("solver.time_limit_s=-5", "must be > 0 or null"),
    ("solver.ruin_window=[0,4]", "must be two integers [a, b] with 1 <= a <= b"),
    ("solver.ruin_window=[8,4]", "must be two integers [a, b] with 1 <= a <= b"),
    ("solver.ruin_window=[4]", "must be two integers [a, b] with 1 <= a <= b"),
    ("solver.dense_max_cells=-1", "must be an integer >= 0"),
    ("solver.window_slack=-1", "must be an integer >= 0"),
    ("solver.cpu_threads=-1", "must be an integer >= 0"),
    ("solver.memory_budget_gb=0", "must be > 0 or null"),
    ("solver.memory_budget_gb=-2", "must be > 0 or null"),
    # greedy, exact, fifo
    ("greedy.repack_jobs=-1", "must be an integer >= 0"),
    ("greedy.repack_blocks=0", "must be an integer >= 1"),
    ("exact.time_limit_s=0", "must be > 0"),
    ("exact.workers=-1", "must be an integer >= 0"),
    ("exact.max_variables=0", "must be an integer >= 1"),
    ("exact.lp_max_nonzeros=-1", "must be an integer >= 0"),
    ("exact.lp_time_limit_s=-1", "must be > 0"),
    ("fifo.reserve=-1", "must be an integer >= 0 or null"),
    # online mode
    ("online.replan_every=0", "must be an integer >= 1"),
    ("online.ewma_alpha=0", "must be in (0, 1]"),
    ("online.ewma_alpha=1.5", "must be in (0, 1]"),
    ("online.period_steps=0", "must be an integer >= 1 or null"),
    ("online.headroom=0", "must be > 0"),
    ("online.headroom=inf", "must be a finite number > 0"),
    # the run
    ("seed=-1", "must be an integer in [0, 2147483647]"),
    ("seed=2147483648", "must be an integer in [0, 2147483647]"),
    ("preemptible=[serving]", "must be a list of rigid kinds (training, batch_inference, "
                              "quantization), [] or null"),
    ("preemptible=[training,realtime_inference]", "must be a list of rigid kinds"),
    ("restart_cost=-1", "must be an integer >= 0 or null"),
    ("warm_helpers=-1", "must be an integer >= 0 or null"),
]

# The generator's settings, on the mixed scenario (nothing is generated).
T, B, Q, R = (f"scenario.{k}" for k in ("training", "batch_inference", "quantization",
                                         "realtime_inference"))
BAD_SCENARIO = [
    ("scenario.horizon=0", "must be an integer >= 1"),
    ("scenario.step_minutes=0", "must be an integer >= 1"),
    ("scenario.pools=[]", "must be a non-empty list of pools"),
    ("scenario.pools.0.count=0", "must be an integer >= 1"),
    ("scenario.pools.0.gpus_per_node=0", "must be an integer >= 1"),
    ("scenario.pools.0.memory_gb=0", "must be > 0"),
    ("scenario.pools.0.gpu_type=''", "must be a non-empty string"),
    (f"{T}.count=-1", "must be an integer >= 0"),
    (f"{T}.rate_per_hour=-1", "must be >= 0"),
    (f"{T}.gpus=[]", "must be a non-empty list of integers >= 1"),
    (f"{T}.gpus=[0,1,2,4,8]", "must be a non-empty list of integers >= 1"),
    (f"{T}.gpus_weights=[1]", "must be empty (uniform) or 5 weights >= 0, one per entry of gpus"),
    (f"{T}.gpus_weights=[0,0,0,0,0]", "not all 0"),
    (f"{T}.gpus_weights=[1,1,1,1,-1]", "5 weights >= 0"),
    (f"{T}.duration_median_hours=0", "must be > 0"),
    (f"{T}.duration_sigma=-1", "must be >= 0"),
    (f"{T}.duration_max_hours=0", "must be > 0"),
    (f"{T}.priority=[0,3]", "must be two integers [a, b] with 1 <= a <= b"),
    (f"{T}.priority=[8,3]", "must be two integers [a, b] with 1 <= a <= b"),
    (f"{B}.arrival_window=[0.5,1.5]", "must be two numbers [a, b] with 0 <= a <= b <= 1"),
    (f"{B}.arrival_window=[0.9,0.1]", "must be two numbers [a, b] with 0 <= a <= b <= 1"),
    (f"{B}.min_memory_gb=[]", "must be a non-empty list of numbers >= 0"),
    (f"{B}.min_memory_gb=[-1]", "must be a non-empty list of numbers >= 0"),
    (f"{B}.min_memory_weights=[1,2]", "must be empty (uniform) or 1 weights >= 0"),
    (f"{Q}.bursts=-1", "must be an integer >= 0"),
    (f"{Q}.burst_hours=-1", "must be >= 0"),
    (f"{Q}.gpu_types=[[B200]]", "names B200, which no pool has (pools have H100)"),
    (f"{Q}.gpu_types_weights=[1]", "must be empty (uniform) or 0 weights >= 0"),
    (f"{Q}.restart_cost=-1", "must be an integer >= 0"),
    (f"{T}.restart_cost=2", "needs scenario.training.preemptible=true"),
    (f"{R}.services=-1", "must be an integer >= 0"),
    (f"{R}.gpus=[0]", "must be a non-empty list of integers >= 1"),
    (f"{R}.peak_replicas=[8,4]", "must be two integers [a, b] with 0 <= a <= b"),
    (f"{R}.peak_to_trough=[0.5,2]", "must be two numbers [a, b] with 1 <= a <= b"),
    (f"{R}.peak_hour=[13,25]", "must be two numbers [a, b] with 0 <= a <= b <= 24"),
    (f"{R}.noise=-0.1", "must be >= 0"),
    (f"{R}.spikes_per_day=-1", "must be >= 0"),
    (f"{R}.spike_factor=[2,1]", "must be two numbers [a, b] with 0 <= a <= b"),
    (f"{R}.spike_hours=[-1,2]", "must be two numbers [a, b] with 0 <= a <= b"),
    (f"{R}.priority=[0,10]", "must be two integers [a, b] with 1 <= a <= b"),
    (f"{R}.arrival_window=[0,2]", "must be two numbers [a, b] with 0 <= a <= b <= 1"),
]

# A valid edge of every range, and every allowed value: these must pass. In
# groups of distinct settings, each group composed at once (a failure names
# the setting).
EDGES = {
    "low": ["solver.rounding=relaxed", "solver.grid=auto", "solver.dtype=float32",
            "mode=offline", "online.forecast=oracle", "device=auto",
            "solver.iterations=0", "solver.step=1e-9", "solver.penalty_start=1e-9",
            "solver.penalty_end=1e-9", "solver.smooth=0", "solver.damping=1e-9",
            "solver.time_discount=0", "solver.rounding_thresholds=[0,1]",
            "solver.local_search_iters=0", "solver.local_search_patience=0",
            "solver.time_limit_s=1e-9", "solver.ruin_window=[1,1]", "solver.dense_max_cells=0",
            "solver.window_slack=0", "solver.cpu_threads=0", "solver.memory_budget_gb=1e-9",
            "greedy.repack_jobs=0", "greedy.repack_blocks=1", "exact.time_limit_s=1e-9",
            "exact.workers=0", "exact.max_variables=1", "exact.lp_max_nonzeros=0",
            "exact.lp_time_limit_s=1e-9", "fifo.reserve=0", "online.replan_every=1",
            "online.ewma_alpha=1e-9", "online.period_steps=1", "online.headroom=1e-9", "seed=0",
            "preemptible=[]", "restart_cost=0"],
    "high": ["solver.rounding=priority", "solver.grid=dense", "solver.dtype=bfloat16",
             "mode=online", "online.forecast=last_day", "device=cpu",
             "solver.damping=1", "solver.time_discount=0.999", "solver.time_limit_s=inf",
             "exact.time_limit_s=inf", "exact.lp_time_limit_s=inf", "online.ewma_alpha=1",
             "seed=2147483647", "preemptible=[training,batch_inference,quantization]",
             "restart_cost=1000"],
    "null": ["solver.rounding=best", "solver.grid=packed", "solver.dtype=float16",
             "online.forecast=ewma", "solver.time_limit_s=null", "solver.memory_budget_gb=null",
             "fifo.reserve=null", "online.period_steps=null", "preemptible=null",
             "restart_cost=null"],
    "scenario low": [
        "+scenario=mixed", "scenario.horizon=1", "scenario.step_minutes=1",
        "scenario.pools.0.count=1", "scenario.pools.0.gpus_per_node=1",
        "scenario.pools.0.memory_gb=1e-9", f"{T}.count=0", f"{T}.rate_per_hour=0",
        f"{T}.gpus_weights=[0,0,0,0,1]", f"{T}.duration_sigma=0", f"{T}.priority=[1,1]",
        f"{B}.arrival_window=[0,0]", f"{B}.min_memory_gb=[0]", f"{Q}.gpus=[1]",
        f"{Q}.bursts=0", f"{Q}.burst_hours=0", f"{Q}.gpu_types=[[H100],[]]",
        f"{Q}.gpu_types_weights=[0,1]", f"{R}.services=0", f"{R}.peak_replicas=[0,0]",
        f"{R}.peak_to_trough=[1,1]", f"{R}.peak_hour=[0,0]", f"{R}.noise=0",
        f"{R}.spikes_per_day=0", f"{R}.spike_factor=[0,0]", f"{R}.spike_hours=[0,0]",
        f"{R}.priority=[1,1]", f"{R}.arrival_window=[0,0]", f"{T}.preemptible=false",
        f"{T}.restart_cost=0", f"{B}.preemptible=true", f"{B}.restart_cost=0"],
    "scenario high": [
        "+scenario=mixed", f"{T}.gpus_weights=[]", f"{B}.arrival_window=[1,1]",
        f"{R}.peak_hour=[24,24]", f"{R}.arrival_window=[1,1]", f"{Q}.preemptible=true",
        f"{Q}.restart_cost=1000"],
}


@pytest.fixture(scope="module")
def build():
    """overrides -> RunConfig, the way the command builds it."""
    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        yield lambda *overrides: OmegaConf.to_object(compose("config", overrides=list(overrides)))


def _key(override: str) -> str:
    """The setting's path as messages write it (scenario.pools.0.count: scenario.pools[0].count)."""
    return override.split("=", 1)[0].replace(".0.", "[0].")


@pytest.mark.parametrize("override, rule", [(o, r) for o, r in BAD] + [
    pytest.param(o, r, id=f"scenario:{o}") for o, r in BAD_SCENARIO])
def test_bad_setting_names_the_override(build, override, rule):
    base = MIXED if override.startswith("scenario.") else FILE
    with pytest.raises(SettingError) as e:
        build(*base, override)
    msg = str(e.value)
    assert "\n" not in msg and len(msg) < 200, msg
    assert msg.startswith(_key(override) + "="), msg
    assert rule in msg, msg


@pytest.mark.parametrize("group", EDGES)
def test_valid_edges_pass(build, group):
    overrides = EDGES[group]
    base = [] if overrides[0].startswith("+scenario=") else ["+scenario=file"]
    assert isinstance(build(*base, "policies=[fifo]", *overrides), RunConfig)


def test_quality_preset_overrides_the_search_only(build):
    default, quality = build(*FILE).solver, build(*FILE, "solver=quality").solver
    assert (quality.local_search_patience, quality.local_search_anneal_iters,
            quality.local_search_accept_worse, quality.time_limit_s) == (1000, 8000, 0.003, None)
    assert default.local_search_anneal_iters == 0 and default.time_limit_s is None
    changed = {k for k, v in vars(quality).items() if vars(default)[k] != v}
    # and, on big plans, no cap on the moves by plan size (default: one)
    assert default.local_search_work > 0 and quality.local_search_work == 0
    assert changed == {"local_search_patience", "local_search_anneal_iters", "local_search_work"}


def test_edges_run(build, tmp_path):
    # Edge values together, through the policies they steer: a plan, no crash.
    cfg = build("+scenario=file", "policies=[fifo,greedy,allocator]", "solver.progress=false",
                "solver.iterations=1", "solver.smooth=0", "solver.damping=1",
                "solver.time_discount=0", "solver.rounding_thresholds=[0,1]",
                "solver.local_search_iters=5", "solver.local_search_patience=0",
                "solver.ruin_window=[1,1]", "solver.dense_max_cells=0", "solver.window_slack=0",
                "solver.cpu_threads=0", "greedy.repack_jobs=8", "greedy.repack_blocks=1",
                "fifo.reserve=0")
    assert set(run(cfg, tmp_path)["policies"]) == {"fifo", "greedy", "allocator"}
    # The generator at its edges: one timestep, one GPU, a single pool type.
    g = build(*MIXED, "scenario.horizon=1", "scenario.pools=[{name: a, count: 1, "
              "gpus_per_node: 1, gpu_type: H100, memory_gb: 80}]",
              f"{T}.duration_sigma=0", f"{T}.priority=[1,1]", f"{B}.arrival_window=[1,1]",
              f"{Q}.bursts=0", f"{Q}.burst_hours=0", f"{R}.peak_replicas=[0,0]",
              f"{R}.peak_to_trough=[1,1]", f"{R}.spike_factor=[0,0]").scenario
    s = generate(g, 0)
    assert s.T == 1 and s.G == 1


def test_direct_construction_is_checked_too():
    # Not only through Hydra: the dataclasses check themselves when built,
    # once; the run and the generator do not check them again.
    with pytest.raises(SettingError, match=r"^solver\.rounding=bset: must be one of"):
        SolverConfig(rounding="bset")
    with pytest.raises(SettingError, match=r"^solver\.grid=sparse"):
        SolverConfig(grid="sparse")
    with pytest.raises(SettingError, match=r"^solver\.time_limit_s=0: must be > 0 or null"):
        RunConfig(solver=SolverConfig(time_limit_s=0))
    with pytest.raises(SettingError, match=r"^scenario\.training\.gpus_weights=\[1\]"):
        GeneratedScenarioConfig(name="x", training=RigidWorkloadConfig(gpus=[1, 2],
                                                                       gpus_weights=[1]))
    with pytest.raises(SettingError, match=r"^scenario\.quantization\.restart_cost=3: needs "
                                           r"scenario\.quantization\.preemptible=true"):
        GeneratedScenarioConfig(name="x", quantization=RigidWorkloadConfig(restart_cost=3))
    with pytest.raises(SettingError, match=r"^preemptible=\[serving\]: must be a list of rigid"):
        RunConfig(preemptible=["serving"])
    with pytest.raises(SettingError, match=r"^preemptible=training: must be a list of rigid"):
        RunConfig(preemptible="training")
    with pytest.raises(SettingError, match=r"^restart_cost=-2: must be an integer >= 0 or null"):
        RunConfig(restart_cost=-2)


def test_generator_preemptible_kinds_change_no_draw():
    # preemptible and restart_cost go into every job of their kind and into no
    # other; they draw nothing, so the jobs are otherwise the very same (and
    # the defaults write neither field: generated files stay byte-identical).
    plain = GeneratedScenarioConfig(name="x")
    plain.training.count, plain.quantization.count = 6, 4
    plain.realtime_inference.services = 1
    pre = GeneratedScenarioConfig(name="x")
    pre.training.count, pre.quantization.count = 6, 4
    pre.realtime_inference.services = 1
    pre.training.preemptible, pre.training.restart_cost = True, 2
    pre.quantization.preemptible = True
    a, b = generate(plain, 3), generate(pre, 3)
    assert not any("preemptible" in j or "restart_cost" in j for j in a.to_dict()["jobs"])
    assert {(j.kind, j.preemptible, j.restart_cost) for j in b.jobs} == {
        ("training", True, 2), ("quantization", True, 0), ("realtime_inference", False, 0)}
    assert b.preemptible.tolist() == [j.kind != "realtime_inference" for j in b.jobs]
    stripped = b.to_dict()
    for j in stripped["jobs"]:
        j.pop("preemptible", None)
        j.pop("restart_cost", None)
    assert stripped == a.to_dict()


# ---- the command --------------------------------------------------------------------------

CLI = [  # (overrides, the one line on stderr)
    (["solver.rounding=bset"], "solver.rounding=bset: must be one of relaxed, priority, best"),
    (["solver.grid=dnse"], "solver.grid=dnse: must be one of auto, dense, packed"),
    (["+scenario=mixed", "scenario.realtime_inference.priority=[10,7]"],
     "scenario.realtime_inference.priority=[10, 7]: must be two integers [a, b] with "
     "1 <= a <= b"),
    (["preemptible=[serving]"], "preemptible=[serving]: must be a list of rigid kinds "
     "(training, batch_inference, quantization), [] or null"),
    # Hydra's own errors, before any setting is checked: one line, exit 2 too.
    (["online.fill_between=maybe"], "Error merging override online.fill_between=maybe: "
     "Value 'maybe' is not a valid bool (type str)"),
    (["solver.iterations=abc"], "Error merging override solver.iterations=abc: Value 'abc' "
     "of type 'str' could not be converted to Integer"),
    (["no_such_key=1"], "Could not override 'no_such_key': Key 'no_such_key' not in "
     "'RunConfig'"),
]


def test_cli_bad_settings_exit_2_one_line(tmp_path):
    # Started together: each process spends its time importing torch, then
    # stops before any work.
    procs = []
    for i, (overrides, _) in enumerate(CLI):
        scenario = [] if any(o.startswith("+scenario=") for o in overrides) else ["+scenario=file"]
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "gpualloc.run", *scenario, "policies=[fifo]", *overrides,
             f"hydra.run.dir={tmp_path / str(i)}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for i, ((overrides, line), p) in enumerate(zip(CLI, procs)):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 2, (overrides, err)
        assert err.strip().splitlines() == [f"error: {line}"], err
        assert "Traceback" not in err and out == ""
        folder = tmp_path / str(i)  # Hydra's own errors come before it exists
        written = {f.name for f in folder.iterdir() if f.is_file()} if folder.exists() else set()
        assert not written & {"metrics.json", "scenario.json", "plan_fifo.json"}, written


def test_cli_multirun_records_a_bad_setting(tmp_path):
    # In a sweep the bad run is recorded in its metrics.json and the others go on.
    r = subprocess.run([sys.executable, "-m", "gpualloc.run", "-m", "+scenario=file",
                        "policies=[fifo]", "solver.rounding=bset,best",
                        f"hydra.sweep.dir={tmp_path}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    runs = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/metrics.json"))]
    assert len(runs) == 2
    assert runs[0]["error"] == "solver.rounding=bset: must be one of relaxed, priority, best"
    assert "solver.rounding=bset" in runs[0]["overrides"]
    assert "fifo" in runs[1]["policies"]
