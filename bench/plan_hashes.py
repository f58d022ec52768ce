"""Plan hashes: a fingerprint of every policy's plan on a fixed set of runs, so
that a refactoring of the placement core can show that plans did not change
(or name the ones that did).

    python -m bench.plan_hashes --stem plan_hashes_before
    python -m bench.plan_hashes --compare bench/results/plan_hashes_before.json

The set: fifo, backfill, greedy and the allocator on the seven scenarios x
seeds 0-2 (offline); greedy and the allocator online on the seven x seed 0;
the rigid policies with the training jobs preemptible (restart cost 1) on the
seven x seed 0; and every policy, exact included, on twelve small random
scenarios (some with rule 4 guarantees, some with preemptible jobs; exact runs
on those without). The allocator's local search normally stops on a wall
clock; here `solver.time_limit_s=null`, so its plan depends on the inputs
only. exact runs with one CP-SAT worker (the only repeatable setting).

A hash is the SHA-256 of the owner grid (int64, (G, T), C order), first 16 hex
digits; a preemptible job's segments are a function of that grid, so they are
covered. Each row also records the plan's weighted throughput (PROBLEM.md,
discount 0), so that a changed plan can be called better or worse.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from bench.common import ROOT, SEVEN, composed

RESULTS = ROOT / "bench" / "results"
OFFLINE = ["fifo", "backfill", "greedy", "allocator"]
ONLINE = ["greedy", "allocator"]
KINDS = ["training", "batch_inference", "quantization", "realtime_inference"]
SETTINGS = ["solver.time_limit_s=null", "solver.progress=false", "exact.workers=1",
            "exact.time_limit_s=60", "exact.lp=false"]


def plan_hash(owner: torch.Tensor) -> str:
    a = np.ascontiguousarray(owner.detach().cpu().to(torch.int64).numpy())
    return hashlib.sha256(str(a.shape).encode() + a.tobytes()).hexdigest()[:16]


def random_doc(seed: int) -> dict:
    """A small valid scenario document: 1-3 pools, up to 9 jobs of every kind,
    a horizon of 6-14 steps; seeds 4-7 add rule 4 guarantees, 8-11 preemptible
    training jobs."""
    rng = np.random.default_rng(1000 + seed)
    horizon = int(rng.integers(6, 15))
    pools = []
    for p in range(int(rng.integers(1, 4))):
        pools.append({"name": f"p{p}", "count": int(rng.integers(1, 4)),
                      "gpus_per_node": int(rng.choice([1, 2, 4, 8])),
                      "gpu_type": "ABC"[p], "memory_gb": int(rng.choice([40, 80]))})
    jobs = []
    for i in range(int(rng.integers(3, 10))):
        kind = KINDS[int(rng.integers(0, 4))]
        job = {"id": f"j{i}", "kind": kind, "priority": int(rng.integers(1, 11)),
               "arrival": int(rng.integers(0, horizon))}
        if kind == "realtime_inference":
            job["gpus"] = int(rng.choice([1, 1, 2, 4]))
            job["demand"] = [int(x) for x in rng.integers(0, 5, size=horizon)]
            if 4 <= seed < 8:
                job["gpus"] = 1
                job["min_served"] = float(rng.choice([0.25, 0.5]))
        else:
            job["gpus"] = int(rng.choice([1, 1, 2, 2, 4, 8]))
            job["duration"] = int(rng.integers(1, horizon + 3))
            if seed >= 8 and kind == "training":
                job["preemptible"] = True
                job["restart_cost"] = int(rng.integers(0, 3))
        if rng.random() < 0.2:
            job["gpu_types"] = [pools[0]["gpu_type"]]
        jobs.append(job)
    return {"name": f"random{seed}", "horizon": horizon, "step_minutes": 60,
            "cluster": {"pools": pools}, "jobs": jobs}


def runs():
    """(key, scenario, run config, policy names) of every run in the set."""
    from gpualloc.core.guarantee import check_guarantee
    from gpualloc.run import build_scenario, with_min_served, with_preemption
    from gpualloc.scenario import ScenarioError, from_dict

    for name in SEVEN:
        for seed in (0, 1, 2):
            cfg = composed(f"+scenario={name}", f"seed={seed}", *SETTINGS)
            s = build_scenario(cfg.scenario, seed)
            yield f"{name}/s{seed}/offline", s, cfg, OFFLINE
            if seed == 0:
                yield (f"{name}/s0/preempt", with_preemption(s, ["training"], 1), cfg,
                       ["fifo", "backfill", "greedy", "allocator"])
                online = composed(f"+scenario={name}", "seed=0", "mode=online", *SETTINGS)
                yield f"{name}/s0/online", s, online, ONLINE
    cfg = composed("+scenario=mixed", "seed=0", *SETTINGS)
    for seed in range(12):
        s = from_dict(random_doc(seed))
        try:
            check_guarantee(s)
        except ScenarioError:  # rule 4 impossible there: the run would refuse it
            s = with_min_served(s, 0.25)
        names = OFFLINE + ([] if bool(s.preemptible.any()) else ["exact"])
        yield f"random{seed}/offline", s, cfg, names
        yield f"random{seed}/online", s, composed("+scenario=mixed", "seed=0", "mode=online",
                                                  *SETTINGS), ONLINE


def measure(only: str | None = None) -> dict:
    from gpualloc.metrics import weighted_throughput
    from gpualloc.online import run_policy

    device = torch.device("cpu")
    table = {}
    for key, s, cfg, names in runs():
        if only is not None and not key.endswith(f"/{only}"):
            continue
        for name in names:
            start = time.perf_counter()
            plan = run_policy(name, s, cfg, device)
            table[f"{key}/{name}"] = {
                "hash": plan_hash(plan.owner),
                "weighted_throughput": round(weighted_throughput(s, plan.owner), 6),
                "wall_s": round(time.perf_counter() - start, 3)}
            print(f"{key}/{name}: {table[f'{key}/{name}']['hash']}", flush=True)
    return table


def compare(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """Lines of a markdown table of the changed plans, and a summary."""
    same = [k for k in before if k in after and before[k]["hash"] == after[k]["hash"]]
    changed = [k for k in before if k in after and before[k]["hash"] != after[k]["hash"]]
    missing = [k for k in before if k not in after] + [k for k in after if k not in before]
    rows = ["| run / policy | before | after | weighted throughput before | after |",
            "| --- | --- | --- | --- | --- |"]
    for k in changed:
        b, a = before[k], after[k]
        rows.append(f"| {k} | {b['hash']} | {a['hash']} | {b['weighted_throughput']:g} | "
                    f"{a['weighted_throughput']:g} |")
    summary = [f"{len(same)} plans identical, {len(changed)} changed, "
               f"{len(missing)} in one table only" + (f" ({', '.join(missing)})" if missing else "")]
    return rows if changed else [], summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stem", default=None, help="write bench/results/STEM.json and .md")
    ap.add_argument("--compare", default=None, help="a earlier table (.json) to compare with")
    ap.add_argument("--only", default=None, choices=["offline", "preempt", "online"],
                    help="only the runs of this kind (the others count as in one table only)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    table = measure(args.only)
    lines = [f"# Plan hashes ({len(table)} plans, {time.perf_counter() - start:.0f} s)", "",
             "`python -m bench.plan_hashes` (see its docstring for the set).", "",
             "| run / policy | hash | weighted throughput |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['hash']} | {v['weighted_throughput']:g} |" for k, v in table.items()]
    if args.compare:
        before = json.loads(Path(args.compare).read_text())["plans"]
        rows, summary = compare(before, table)
        print("\n".join(summary + rows))
        lines[2:2] = [f"Against {Path(args.compare).name}: " + summary[0], ""] + rows + [""]
    if args.stem:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{args.stem}.json").write_text(json.dumps({"plans": table}, indent=1))
        (RESULTS / f"{args.stem}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
