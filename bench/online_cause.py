"""Why the allocator lost to greedy online on training_heavy: a measurement.

    python -m bench.online_cause            # training_heavy seeds 0-2 -> bench/results/online_cause.md

For each setting of the allocator's replans (the exact objective with no
memory of the last plan, as before this change; the discounted objective;
both the discount and the last plan as a start) and for greedy, online
(replan every 6 steps, last_day forecast): weighted throughput by priority
class of the work done, the mean wait of the top-priority rigid jobs (7 and
8), and how often a replan planned such a job to start beyond its window
(so committed nothing for it: the job was postponed again).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import torch

from bench.common import ROOT, composed, provenance, write_results
from gpualloc.metrics import held, useful, weighted_throughput
from gpualloc.online import online
from gpualloc.policies import POLICIES
from gpualloc.run import build_scenario

SETTINGS = {
    "greedy": ("greedy", []),
    "allocator, exact objective, no memory": ("allocator", ["online.discount=0",
                                                            "online.search_moves=1500"]),
    "allocator, discounted": ("allocator", ["online.search_moves=1500"]),
    "allocator, discounted, from the last plan (default)": ("allocator", []),
}


def measure(scenario: str, seed: int, policy: str, overrides: list[str], no_memory: bool):
    cfg = composed(f"+scenario={scenario}", f"seed={seed}", "mode=online",
                   "online.replan_every=6", "solver.progress=false", *overrides)
    s = build_scenario(cfg.scenario, seed)
    postponed = defaultdict(int)  # top-priority job id -> replans that planned it beyond the window

    def planner(v, c, d):
        if no_memory:
            v.hint = None
        plan = POLICIES[policy](v, c, d)
        for vj, job in enumerate(v.jobs):
            if job.rigid and job.priority >= 7 and not bool((v.fixed == vj).any()):
                held_at = (plan.owner == vj).any(0).nonzero()
                if len(held_at) == 0 or int(held_at[0]) >= cfg.online.replan_every:
                    postponed[job.id] += 1
        return plan

    owner = online(s, planner, cfg, "cpu", name=policy).owner
    n = held(s, owner)
    u = useful(s, n).double()  # the seven: no preemptible jobs
    start = torch.where(n > 0, torch.arange(s.T), s.T).amin(1)
    by_priority = defaultdict(float)
    for j, job in enumerate(s.jobs):
        by_priority[f"{'rt' if not job.rigid else 'rigid'} p{job.priority:g}"] += float(
            u[j].sum()) * job.priority
    top = [j for j, job in enumerate(s.jobs) if job.rigid and job.priority >= 7]
    waits = [int(start[j] - s.jobs[j].arrival) for j in top if start[j] < s.T]
    return {"value": weighted_throughput(s, owner), "by_priority": dict(by_priority),
            "top_wait": statistics.mean(waits) if waits else None,
            "postponed": sum(postponed.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="training_heavy")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = []
    for seed in range(args.seeds):
        for label, (policy, overrides) in SETTINGS.items():
            r = measure(args.scenario, seed, policy, overrides,
                        no_memory=label.endswith("no memory") or label == "allocator, discounted")
            rows.append({"seed": seed, "setting": label, **r})
            print(seed, label, r["value"], flush=True)
    result = {"scenario": args.scenario, "rows": rows, **provenance("bench.online_cause", argv)}
    classes = sorted({k for r in rows for k in r["by_priority"]},
                     key=lambda k: (k.startswith("rt"), float(k.split("p")[-1])))
    lines = [f"# Online on {args.scenario}: where the allocator's value goes", "",
             f"Commit {result['commit']}, {result['date']}; {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`). Online, replanning "
             "every 6 steps, last_day forecast. Weighted throughput by priority class of the "
             "work done (thousands), mean wait of the top-priority rigid jobs (priority 7 "
             "and 8), and the replans that planned one of them beyond their window "
             "(postponed again), per seed.", "",
             "| seed | setting | total | " + " | ".join(classes) + " | top wait | postponed |",
             "|---|---|---|" + "---|" * (len(classes) + 2)]
    for r in rows:
        cells = [f"{r['by_priority'].get(c, 0) / 1000:.1f}" for c in classes]
        lines.append(f"| {r['seed']} | {r['setting']} | {r['value']:,.0f} | " + " | ".join(cells)
                     + f" | {r['top_wait']:.1f} | {r['postponed']} |")
    lines.append("")
    write_results(args.out, "online_cause", result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
