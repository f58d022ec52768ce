"""What preemption buys: the seven with training preemptible at a restart
cost, greedy and the allocator with and without preemption, offline and
online.

    python -m bench.preemption                     # seeds 0-2, restart_cost 1
    python -m bench.preemption --seeds 1 --restart-cost 3 --out /tmp/p

Per scenario and seed, on the same scenario (training jobs preemptible, the
run options `preemptible=[training] restart_cost=N`): FIFO (never preempts),
then greedy and the allocator with `greedy.preempt` / `solver.preempt` off
and on, offline and online (replan every 6 steps, `last_day` forecast).
Every plan is checked (rules 1-3; rule 4 does not apply: no min_served).
Reported: weighted throughput, its gain over FIFO, preemptions and the
GPU-steps spent restoring. Writes bench/results/preemption.{md,json}.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common import ROOT, SEVEN, composed, provenance, warm_up, write_results
from gpualloc.check import check
from gpualloc.metrics import metrics
from gpualloc.online import run_policy
from gpualloc.run import build_scenario
from gpualloc.scenario import with_preemption

POLICIES = ("greedy", "allocator")
MODES = ("offline", "online")


def measure(seeds: list[int], restart_cost: int) -> list[dict]:
    torch.set_num_threads(1)
    rows = []
    for name in SEVEN:
        for seed in seeds:
            base = composed(f"+scenario={name}", f"seed={seed}", "solver.progress=false",
                            "online.forecast=last_day", "online.replan_every=6")
            s = with_preemption(build_scenario(base.scenario, seed), ["training"], restart_cost)
            runs = [("fifo", "offline", False)] + [(p, m, pre) for m in MODES for p in POLICIES
                                                   for pre in (False, True)]
            for policy, mode, preempt in runs:
                cfg = copy.deepcopy(base)
                cfg.mode = mode
                cfg.greedy.preempt = cfg.solver.preempt = preempt
                start = time.perf_counter()
                owner = run_policy(policy, s, cfg, torch.device("cpu")).owner
                wall = time.perf_counter() - start
                verdict = check(s, owner)
                assert verdict.ok, (name, seed, policy, mode, preempt, str(verdict))
                m = metrics(s, owner)
                rows.append({"scenario": name, "seed": seed, "policy": policy, "mode": mode,
                             "preempt": preempt, "wall_s": wall,
                             **{k: m[k] for k in ("weighted_throughput", "utilization",
                                                  "preemptions", "restore_gpu_steps",
                                                  "jobs_completed")}})
            print(name, seed, flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    def get(name, seed, policy, mode="offline", preempt=False, key="weighted_throughput"):
        return next(r[key] for r in rows if (r["scenario"], r["seed"], r["policy"], r["mode"],
                                             r["preempt"]) == (name, seed, policy, mode, preempt))

    out = {}
    for name in SEVEN:
        seeds = sorted({r["seed"] for r in rows if r["scenario"] == name})
        row = {}
        for mode in MODES:
            for policy in POLICIES:
                for preempt in (False, True):
                    key = f"{policy}_{mode}_{'pre' if preempt else 'whole'}"
                    row[f"{key}_pct"] = statistics.mean(
                        100 * (get(name, s, policy, mode, preempt) / get(name, s, "fifo") - 1)
                        for s in seeds)
                    for metric in ("preemptions", "restore_gpu_steps"):
                        row[f"{key}_{metric}"] = statistics.mean(
                            get(name, s, policy, mode, preempt, metric) for s in seeds)
                row[f"{policy}_{mode}_buys"] = [
                    get(name, s, policy, mode, True) / get(name, s, policy, mode, False)
                    for s in seeds]
            row[f"allocator_over_greedy_{mode}_pre"] = [
                get(name, s, "allocator", mode, True) / get(name, s, "greedy", mode, True)
                for s in seeds]
        out[name] = row
    return out


def markdown(result: dict) -> str:
    summary = result["summary"]
    lines = ["# What preemption buys", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`). The seven, seeds "
             f"{result['seeds']}, training jobs preemptible at restart_cost="
             f"{result['restart_cost']} (every other rigid job runs in one piece). Online: "
             "replan every 6 steps, `last_day` forecast. Weighted throughput gain over FIFO "
             "(which never preempts), mean over seeds; `whole` = the policy's preemption "
             "switch off (every job runs in one piece), `pre` = on. `buys`: pre / whole per "
             "seed. Preemptions and restore GPU-steps: mean over seeds, with preemption on.", ""]
    for mode in MODES:
        lines += [f"## {mode}", "",
                  "| scenario | greedy whole | greedy pre | greedy buys | allocator whole | "
                  "allocator pre | allocator buys | allocator / greedy, pre | preemptions "
                  "greedy / allocator | restore GPU-steps greedy / allocator |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, r in summary.items():
            def buys(policy):
                return ", ".join(f"x{v:.3f}" for v in r[f"{policy}_{mode}_buys"])
            ratio = ", ".join(f"x{v:.3f}" for v in r[f"allocator_over_greedy_{mode}_pre"])
            lines.append(
                f"| {name} | {r[f'greedy_{mode}_whole_pct']:+.1f}% | "
                f"{r[f'greedy_{mode}_pre_pct']:+.1f}% | {buys('greedy')} | "
                f"{r[f'allocator_{mode}_whole_pct']:+.1f}% | {r[f'allocator_{mode}_pre_pct']:+.1f}% | "
                f"{buys('allocator')} | {ratio} | "
                f"{r[f'greedy_{mode}_pre_preemptions']:.1f} / "
                f"{r[f'allocator_{mode}_pre_preemptions']:.1f} | "
                f"{r[f'greedy_{mode}_pre_restore_gpu_steps']:.0f} / "
                f"{r[f'allocator_{mode}_pre_restore_gpu_steps']:.0f} |")
        mean = {k: statistics.mean(r[k] for r in summary.values())
                for k in (f"greedy_{mode}_whole_pct", f"greedy_{mode}_pre_pct",
                          f"allocator_{mode}_whole_pct", f"allocator_{mode}_pre_pct")}
        lines.append(f"| mean of the seven | {mean[f'greedy_{mode}_whole_pct']:+.1f}% | "
                     f"{mean[f'greedy_{mode}_pre_pct']:+.1f}% | | "
                     f"{mean[f'allocator_{mode}_whole_pct']:+.1f}% | "
                     f"{mean[f'allocator_{mode}_pre_pct']:+.1f}% | | | | |")
        lines.append("")
    below = [(n, mode, i) for n, r in summary.items() for mode in MODES
             for i, v in enumerate(r[f"allocator_{mode}_buys"]) if v < 1 - 1e-12]
    lines.append("Allocator with preemption below itself without: "
                 + (", ".join(f"{n} {m} seed {result['seeds'][i]}" for n, m, i in below)
                    if below else "never") + ".")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--restart-cost", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    seeds = list(range(args.seeds))
    rows = measure(seeds, args.restart_cost)
    result = {"seeds": seeds, "restart_cost": args.restart_cost, "rows": rows,
              "summary": summarize(rows), **provenance("bench.preemption", argv)}
    write_results(args.out, "preemption", result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
