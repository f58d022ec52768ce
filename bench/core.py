"""The placement core against the code it replaced, in one run on one machine.

    python -m bench.core before-after --base a672683   # plans and wall times, both commits
    python -m bench.core search-time                   # the allocator's value against its budget
    python -m bench.core speed                         # the seven, each run in a fresh process

before-after: greedy and the allocator on the 30 small seeds of bench.quality
and on the seven x seeds 0-2, once with this checkout and once with `--base`
(checked out into a temporary git worktree), each side in its own process,
scenarios in the same order. Per run: both objective values, their ratio,
whether the plans are the same bit for bit, both wall times. Writes
bench/results/core_before_after.{md,json}.

speed: every policy on each of the seven x seeds 0-2, and the allocator
online on mixed (replanning every 6 steps), each run in a fresh process,
as a user runs them: FIFO first, then the policy; cold (an empty numba
cache: the core compiles first) and warm (the cache filled by the cold run).
Times are the policy's own (`wall_s` in metrics.json); the first policy of
a process also loads the compiled core (FIFO's time shows it), and the
whole command's time for mixed is beside them. Writes
bench/results/speed_seven.{md,json}.

search-time: the allocator on the seven x seeds 0-2 with its search ended by
the clock alone (`solver.time_limit_s` = each budget, no iteration cap, no
patience): the weighted throughput it reaches per budget, against the
default settings' plan and greedy's. A search ended by the clock depends on
the machine's speed: the table holds for this machine. Writes
bench/results/search_time.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common import ROOT, SEVEN, composed, git_commit, machine, run_in, worktree

# Runs in a checkout of either commit: only what both have (the policy
# registry, build_scenario, the metrics, the checker, bench.quality.SMALL).
RECORD = r'''
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from bench.quality import SMALL
from gpualloc.check import check
from gpualloc.config import RunConfig, register_configs
from gpualloc.scenario.generate import generate
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import POLICIES
from gpualloc.run import build_scenario

spec = json.loads(sys.argv[1])
out, plans = [], {}
cpu = torch.device("cpu")

def one(key, s, cfg, policy):
    start = time.perf_counter()
    plan = POLICIES[policy](s, cfg, cpu)
    wall = time.perf_counter() - start
    assert check(s, plan.owner).ok, key
    out.append({"key": key, "value": weighted_throughput(s, plan.owner), "wall_s": wall})
    plans[key] = plan.owner.numpy().astype(np.int32)

register_configs()
for seed in range(spec["small"]):
    s = generate(SMALL, seed)
    cfg = RunConfig()
    cfg.seed = cfg.solver.seed = seed
    cfg.solver.progress = False
    for policy in spec["policies"]:
        one(f"small/{seed}/{policy}", s, cfg, policy)
with initialize_config_module("gpualloc.conf", version_base=None):
    for name in spec["seven"]:
        for seed in spec["seeds"]:
            cfg = OmegaConf.to_object(compose("config", overrides=[
                f"+scenario={name}", f"seed={seed}", "solver.progress=false"]))
            s = build_scenario(cfg.scenario, seed)
            for policy in spec["policies"]:
                one(f"{name}/{seed}/{policy}", s, cfg, policy)
np.savez_compressed(spec["plans"], **plans)
print(json.dumps(out))
'''


def before_after(args) -> dict:
    import numpy as np

    spec = {"small": args.small_seeds, "seven": SEVEN, "seeds": list(range(args.seeds)),
            "policies": ["greedy", "allocator"]}
    with tempfile.TemporaryDirectory() as tmp, worktree(args.base) as base:
        started = time.perf_counter()
        old = run_in(base, RECORD, {**spec, "plans": str(Path(tmp) / "old.npz")})
        new = run_in(ROOT, RECORD, {**spec, "plans": str(Path(tmp) / "new.npz")})
        seconds = time.perf_counter() - started
        old_plans, new_plans = np.load(Path(tmp) / "old.npz"), np.load(Path(tmp) / "new.npz")
        rows = []
        for o, n in zip(old, new):
            assert o["key"] == n["key"]
            rows.append({"key": n["key"], "before": o["value"], "after": n["value"],
                         "ratio": n["value"] / o["value"] if o["value"] else 1.0,
                         "same_plan": bool((old_plans[n["key"]] == new_plans[n["key"]]).all()),
                         "before_s": o["wall_s"], "after_s": n["wall_s"]})
    return {"base": args.base, "rows": rows, "seconds": seconds}


def before_after_markdown(result: dict) -> str:
    rows = result["rows"]
    lines = [f"# The placement core against {result['base']}", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores; one torch thread; both sides in one run "
             f"(`{result['command']}`, {result['seconds']:.0f} s). Every plan passed the checker.",
             "", "## Summary", "",
             "| policy | runs | same plan | below before | worst ratio | mean ratio | "
             "wall before s | wall after s | speed-up |", "|---|---|---|---|---|---|---|---|---|"]
    for group, prefix in (("small (30 seeds)", "small/"), ("the seven x 3", "")):
        for policy in ("greedy", "allocator"):
            rs = [r for r in rows if r["key"].endswith("/" + policy)
                  and (r["key"].startswith("small/") == (prefix == "small/"))]
            if not rs:
                continue
            before = sum(r["before_s"] for r in rs)
            after = sum(r["after_s"] for r in rs)
            lines.append(
                f"| {policy}, {group} | {len(rs)} | {sum(r['same_plan'] for r in rs)} | "
                f"{sum(r['ratio'] < 1 - 1e-12 for r in rs)} | {min(r['ratio'] for r in rs):.4f} | "
                f"{statistics.mean(r['ratio'] for r in rs):.4f} | {before:.1f} | {after:.1f} | "
                f"x{before / after:.1f} |")
    lines += ["", "Wall times are sums over the runs, each side warm after its first run (the "
              "first run of the new side includes loading or compiling the core).", "",
              "## Every run", "", "| run | before | after | ratio | same plan | before s | after s |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['key']} | {r['before']:,.0f} | {r['after']:,.0f} | {r['ratio']:.4f} | "
                     f"{'yes' if r['same_plan'] else 'no'} | {r['before_s']:.2f} | "
                     f"{r['after_s']:.2f} |")
    return "\n".join(lines) + "\n"


# One policy on one scenario in a fresh process: its wall time and value.
TIME_ONE = r'''
import json, sys, time
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from gpualloc.config import register_configs
from gpualloc.metrics import weighted_throughput
from gpualloc.online import run_policy
from gpualloc.run import build_scenario

spec = json.loads(sys.argv[1])
register_configs()
with initialize_config_module("gpualloc.conf", version_base=None):
    cfg = OmegaConf.to_object(compose("config", overrides=spec["overrides"]))
s = build_scenario(cfg.scenario, cfg.seed)
walls = {}
for policy in ("fifo", spec["policy"]):  # FIFO first, as every run does
    start = time.perf_counter()
    plan = run_policy(policy, s, cfg, torch.device("cpu"))
    walls[policy] = time.perf_counter() - start
print(json.dumps({"wall_s": walls[spec["policy"]], "first_s": walls["fifo"],
                  "value": weighted_throughput(s, plan.owner),
                  "stopped_by": plan.info.get("local_search", {}).get("stopped_by")}))
'''


def _fresh(spec: dict, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-c", TIME_ONE, json.dumps(spec)], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{spec} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def _command(cache: Path, tmp: Path) -> float:
    """Seconds of `python -m gpualloc.run +scenario=mixed`, start to exit."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache), "CI": "true"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpualloc.run", "+scenario=mixed",
                    f"hydra.run.dir={tmp / 'run'}"], cwd=ROOT, env=env, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def speed(args) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "numba"
        cold = {}
        for policy in ("greedy", "allocator"):  # each compiles its part of the core
            spec = {"policy": policy, "overrides": ["+scenario=mixed", "seed=0",
                                                    "solver.progress=false"]}
            cold[policy] = _fresh(spec, cache)
        cold["fifo"] = {"wall_s": cold["greedy"]["first_s"]}
        command_warm = _command(cache, Path(tmp))
        command_cold = _command(Path(tmp) / "empty", Path(tmp))
        for name in SEVEN:
            for seed in range(args.seeds):
                for policy in ("greedy", "allocator"):
                    spec = {"policy": policy, "overrides": [f"+scenario={name}", f"seed={seed}",
                                                            "solver.progress=false"]}
                    rows.append({"scenario": name, "seed": seed, "policy": policy,
                                 **_fresh(spec, cache)})
                print(name, seed, flush=True)
        online = []
        for seed in range(args.seeds):
            for policy in ("greedy", "allocator"):
                spec = {"policy": policy, "overrides": [
                    "+scenario=mixed", f"seed={seed}", "mode=online", "online.replan_every=6",
                    "solver.progress=false"]}
                online.append({"seed": seed, "policy": policy, **_fresh(spec, cache)})
    return {"rows": rows, "cold": cold, "online": online, "command_cold_s": command_cold,
            "command_warm_s": command_warm}


def speed_markdown(result: dict) -> str:
    rows = result["rows"]
    lines = ["# The seven, each run in a fresh process", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`). Each run a fresh "
             "process, FIFO first (as in every run), warm numba cache; the policy's wall time "
             "(`wall_s`, what metrics.json reports), mean (max) over seeds. FIFO's, first in "
             "its process, includes loading the compiled core.", "",
             "| scenario | fifo s | greedy s | allocator s | allocator search ended by |",
             "|---|---|---|---|---|"]
    for name in SEVEN:
        cells = []
        w = [r["first_s"] for r in rows if r["scenario"] == name]
        cells.append(f"{statistics.mean(w):.2f} ({max(w):.2f})")
        for policy in ("greedy", "allocator"):
            w = [r["wall_s"] for r in rows if r["scenario"] == name and r["policy"] == policy]
            cells.append(f"{statistics.mean(w):.2f} ({max(w):.2f})")
        ended = sorted({str(r["stopped_by"]) for r in rows
                        if r["scenario"] == name and r["policy"] == "allocator"})
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {', '.join(ended)} |")
    on = result["online"]
    lines += ["", "Online, mixed, `mode=online online.replan_every=6` (last_day forecast), "
              "whole online run: " + "; ".join(
                  f"{p} " + ", ".join(f"{r['wall_s']:.1f} s" for r in on if r["policy"] == p)
                  for p in ("greedy", "allocator")) + " (seeds 0-2).", "",
              "Cold, an empty numba cache (the core compiles on first use, then caches to "
              "disk), mixed seed 0 (fifo first, then greedy; then the allocator's own "
              "process): " + ", ".join(
                  f"{p} {v['wall_s']:.1f} s" for p, v in result["cold"].items())
              + f". The whole command `python -m gpualloc.run +scenario=mixed` (fifo, greedy, "
              f"allocator, checks, files), start to exit: {result['command_cold_s']:.1f} s cold, "
              f"{result['command_warm_s']:.1f} s warm.", ""]
    return "\n".join(lines)


def search_time(args) -> dict:
    import torch

    from gpualloc.check import check
    from gpualloc.metrics import weighted_throughput
    from gpualloc.policies import POLICIES
    from gpualloc.run import build_scenario

    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    rows = []
    for name in SEVEN:
        for seed in range(args.seeds):
            base = [f"+scenario={name}", f"seed={seed}", "solver.progress=false"]
            cfg = composed(*base)
            s = build_scenario(cfg.scenario, seed)
            row = {"scenario": name, "seed": seed, "budgets": {}}
            for label, overrides in (("greedy", None), ("default", [])):
                start = time.perf_counter()
                if overrides is None:
                    plan = POLICIES["greedy"](s, cfg, cpu)
                else:
                    plan = POLICIES["allocator"](s, cfg, cpu)
                    row["default_search"] = plan.info["local_search"]
                assert check(s, plan.owner).ok
                row[label] = weighted_throughput(s, plan.owner)
                row[f"{label}_s"] = time.perf_counter() - start
            for budget in args.budgets:
                timed = composed(*base, *([
                    f"solver.time_limit_s={budget}", "solver.local_search_iters=1000000000",
                    "solver.local_search_patience=0"] if budget > 0 else [
                    "solver.local_search_iters=0"]))
                start = time.perf_counter()
                plan = POLICIES["allocator"](s, timed, cpu)
                wall = time.perf_counter() - start
                assert check(s, plan.owner).ok
                row["budgets"][str(budget)] = {
                    "value": weighted_throughput(s, plan.owner), "wall_s": wall,
                    "moves": plan.info["local_search"]["iterations"]}
            rows.append(row)
            print(name, seed, {b: v["value"] for b, v in row["budgets"].items()}, flush=True)
    return {"budgets": args.budgets, "rows": rows}


def search_time_markdown(result: dict) -> str:
    budgets = [str(b) for b in result["budgets"]]
    lines = ["# The allocator's value against its search budget", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores; one torch thread (`{result['command']}`).", "",
             "Per scenario, the mean over seeds of weighted throughput relative to greedy's "
             "(x1.000 = greedy), with the search ended by the clock alone after each budget "
             "(`solver.time_limit_s`, no iteration cap, no patience; 0: no search), then the "
             "default settings (iteration cap and patience) and their mean whole-run wall time.",
             "", "| scenario | " + " | ".join(f"{b} s" for b in budgets) + " | default | default s |",
             "|---|" + "---|" * (len(budgets) + 2)]
    for name in SEVEN:
        rs = [r for r in result["rows"] if r["scenario"] == name]
        if not rs:
            continue
        cells = [f"x{statistics.mean(r['budgets'][b]['value'] / r['greedy'] for r in rs):.4f}"
                 for b in budgets]
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | x{statistics.mean(r['default'] / r['greedy'] for r in rs):.4f} | "
                     f"{statistics.mean(r['default_s'] for r in rs):.2f} |")
    lines += ["", "Moves made per budget (mean over scenarios and seeds): " + ", ".join(
        f"{b} s: {statistics.mean(r['budgets'][b]['moves'] for r in result['rows']):.0f}"
        for b in budgets), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    ba = sub.add_parser("before-after")
    ba.add_argument("--base", default="a672683", help="the commit to compare with")
    ba.add_argument("--seeds", type=int, default=3)
    ba.add_argument("--small-seeds", type=int, default=30)
    sp = sub.add_parser("speed")
    sp.add_argument("--seeds", type=int, default=3)
    st = sub.add_parser("search-time")
    st.add_argument("--seeds", type=int, default=3)
    st.add_argument("--budgets", type=float, nargs="+", default=[0, 0.25, 0.5, 1, 2, 4])
    for p in (ba, sp, st):
        p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    work = {"before-after": (before_after, before_after_markdown, "core_before_after"),
            "speed": (speed, speed_markdown, "speed_seven"),
            "search-time": (search_time, search_time_markdown, "search_time")}[args.what]
    result = work[0](args)
    result.update(commit=git_commit(short=True), machine=machine(),
                  date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  command="python -m bench.core " + " ".join(
                      sys.argv[1:] if argv is None else argv))
    stem, md = work[2], work[1](result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (args.out / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
