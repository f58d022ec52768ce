"""Bad input never crashes: random and mutated scenario documents go through
the loader and the run; each ends in a plan the checker accepts, or in a
ScenarioError with a one-line message (exit code 2 from the command, no
traceback). Any other exception fails the test."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import event, given, settings
from hypothesis import strategies as st

from gpualloc.check import check
from gpualloc.plan import load_plan
from gpualloc.policies import POLICIES
from gpualloc.run import run
from gpualloc.scenario import ScenarioError, from_dict, load
from strategies import junk, mutated_docs, scenario_docs
from helpers import composed

ROOT = Path(__file__).resolve().parents[1]

# ---- documents ------------------------------------------------------------------------

any_doc = st.one_of(mutated_docs(), mutated_docs(), junk,
                    scenario_docs(max_jobs=5, max_horizon=10))


def _write(folder: Path, doc, fmt: str) -> Path:
    path = folder / f"scenario.{fmt}"
    if fmt == "json":
        # allow_nan: NaN and Infinity reach the file as JSON's non-standard
        # constants, which the loader must refuse.
        text = json.dumps(doc, allow_nan=True, default=repr)
    else:
        text = yaml.safe_dump(doc, sort_keys=False)
    path.write_text(text)
    return path


def _clean(e: ScenarioError) -> None:
    msg = str(e)
    assert msg and "\n" not in msg and len(msg) < 800, repr(msg)
    assert "Traceback" not in msg


# ---- in-process: loader and run ---------------------------------------------------------

@pytest.fixture(scope="module")
def base_cfg():
    # Every policy of the registry; exact with a short, single-worker search.
    cfg = composed("+scenario=file", f"policies=[{','.join(POLICIES)}]", "solver.iterations=4",
                   "solver.local_search_iters=4", "solver.progress=false",
                   "solver.memory_budget_gb=0.5", "exact.time_limit_s=2", "exact.workers=1",
                   "exact.lp=false")
    return cfg


@settings(max_examples=60)
@given(doc=any_doc, fmt=st.sampled_from(["json", "yaml"]))
def test_fuzzed_documents_give_a_plan_or_a_clean_error(base_cfg, doc, fmt):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = _write(folder, doc, fmt)
        try:
            s = load(path)
        except ScenarioError as e:
            _clean(e)
            event("refused by the loader")
            return
        # A valid document: the whole run, its plans checked and saved.
        cfg = replace(base_cfg, scenario=replace(base_cfg.scenario, path=str(path)))
        out = folder / "out"
        try:
            result = run(cfg, out)
        except ScenarioError as e:  # e.g. the memory guard
            _clean(e)
            event("refused by the run")
            return
        event("planned")
        assert set(result["policies"]) == set(POLICIES)
        for name in result["policies"]:
            policy, owner = load_plan(out / f"plan_{name}.json", s)
            assert check(s, owner).ok
        json.loads((out / "metrics.json").read_text())


@given(doc=mutated_docs())
def test_from_dict_never_crashes(doc):
    try:
        from_dict(doc)
    except ScenarioError as e:
        _clean(e)


# ---- the command ---------------------------------------------------------------------------

def _bad_files(folder: Path) -> dict[str, Path]:
    """One file per kind of bad input the command must answer with exit 2."""
    good = {"name": "x", "horizon": 4, "step_minutes": 60,
            "cluster": {"pools": [{"name": "h", "count": 1, "gpus_per_node": 4,
                                   "gpu_type": "H100", "memory_gb": 80}]},
            "jobs": [{"id": "a", "kind": "training", "priority": 3, "arrival": 0, "gpus": 2,
                      "duration": 2}]}
    files = {
        "invalid_json.json": "{\"name\": \"x\", ",
        "invalid_yaml.yaml": "name: x\njobs: [1, 2\n",
        "yaml_list.yaml": "- 1\n- 2\n",
        "yaml_scalar.yaml": "42\n",
        "empty.yaml": "",
        "nan_priority.json": json.dumps(good).replace('"priority": 3', '"priority": NaN'),
        "inf_priority.yaml": yaml.safe_dump(good).replace("priority: 3", "priority: .inf"),
        "string_gpus.json": json.dumps(good).replace('"gpus": 2', '"gpus": "2"'),
        "huge_horizon.json": json.dumps({**good, "horizon": 10**9}),
        "huge_gpus.json": json.dumps({**good, "jobs": [{**good["jobs"][0], "gpus": 10**30}]}),
        "binary.json": b"\xff\xfe\x00garbage",
    }
    paths = {}
    for name, text in files.items():
        p = folder / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        paths[name] = p
    return paths


CLI_CASES = ["invalid_yaml.yaml", "string_gpus.json", "huge_horizon.json"]


@pytest.mark.slow
def test_cli_bad_files_exit_2_one_line(tmp_path):
    # A few kinds through the real command (every kind goes through the
    # loader in test_bad_files_in_process), and a grid far above a tiny
    # memory budget. Started together: each process spends most of its time
    # importing torch.
    def start(name, *args):
        return subprocess.Popen(
            [sys.executable, "-m", "gpualloc.run", *args,
             f"hydra.run.dir={tmp_path / ('out_' + name)}"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    files = _bad_files(tmp_path)
    procs = {name: start(name, "+scenario=file", f"scenario.path={files[name]}",
                         "policies=[fifo]") for name in CLI_CASES}
    procs["memory_guard"] = start("memory_guard", "+scenario=mixed", "policies=[fifo,allocator]",
                                  "solver.memory_budget_gb=0.137", "solver.grid=dense")
    errors = {}
    for name, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 2, (name, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        assert "Traceback" not in err
        assert not (tmp_path / f"out_{name}" / "metrics.json").exists()
        errors[name] = lines[0]
    assert "memory guard" in errors["memory_guard"] and "64 x" in errors["memory_guard"]
    assert "horizon 1,000,000,000 is above" in errors["huge_horizon.json"]


def test_bad_files_in_process(tmp_path):
    # The same files through the loader: a ScenarioError each, one line.
    for name, path in _bad_files(tmp_path).items():
        with pytest.raises(ScenarioError) as e:
            load(path)
        _clean(e.value)


def test_unplaceable_job_is_valid_input(tmp_path, base_cfg):
    # A job no block can hold is reported, not refused (PROBLEM.md).
    doc = {"name": "u", "horizon": 6, "step_minutes": 60,
           "cluster": {"pools": [{"name": "h", "count": 1, "gpus_per_node": 4,
                                  "gpu_type": "H100", "memory_gb": 80}]},
           "jobs": [{"id": "big", "kind": "training", "priority": 3, "arrival": 0, "gpus": 64,
                     "duration": 2},
                    {"id": "ok", "kind": "training", "priority": 1, "arrival": 0, "gpus": 2,
                     "duration": 2}]}
    path = _write(tmp_path, doc, "json")
    cfg = replace(base_cfg, scenario=replace(base_cfg.scenario, path=str(path)))
    result = run(cfg, tmp_path / "out")
    for row in result["policies"].values():
        assert row["jobs_completed"] == 1 and row["unplaceable"] == 1
