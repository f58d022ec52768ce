"""FIFO against the allocator on the seven benchmark scenarios, several seeds.

    python -m bench.allocator                 # seeds 0-2, writes bench/results/allocator.{md,json}
    python -m bench.allocator --seeds 1 --quick

Every plan goes through the checker. Gains are against FIFO in the same run;
the published comparison (+33 utilization points at best, +105% weighted
throughput) is printed beside ours. The scenarios were fixed before the
allocator existed (tests/test_scenario.py pins their load).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from bench.common import SEVEN, git_commit, machine, warm_up
from gpualloc.check import check
from gpualloc.config import register_configs
from gpualloc.scenario.generate import generate
from gpualloc.metrics import gains, metrics
from gpualloc.policies import POLICIES

PUBLISHED = {"best_utilization_points": 33.0, "best_weighted_throughput_pct": 105.0}


def run(seeds: list[int], overrides: list[str], policies: list[str]) -> list[dict]:
    register_configs()
    rows = []
    with initialize_config_module("gpualloc.conf", version_base=None):
        for name in SEVEN:
            for seed in seeds:
                cfg = OmegaConf.to_object(compose("config", overrides=[
                    f"+scenario={name}", f"seed={seed}", "solver.progress=false", *overrides]))
                s = generate(cfg.scenario, seed)
                device = torch.device("cpu")
                result = {}
                for policy in policies:
                    start = time.perf_counter()
                    plan = POLICIES[policy](s, cfg, device)
                    wall = time.perf_counter() - start
                    verdict = check(s, plan.owner)
                    assert verdict.ok, f"{policy} on {name} seed {seed}: {verdict}"
                    result[policy] = {**metrics(s, plan.owner), "wall_s": wall}
                for policy in policies:
                    result[policy]["gains"] = gains(result[policy], result["fifo"])
                    rows.append({"scenario": name, "seed": seed, "policy": policy,
                                 "offered_load": s.offered_load, **{
                                     k: result[policy][k] for k in (
                                         "utilization", "weighted_throughput", "realtime_slo",
                                         "jobs_completed", "mean_wait", "wall_s")},
                                 **result[policy]["gains"]})
                    r = rows[-1]
                    print(f"{name:18s} seed {seed} {policy:9s} util {100 * r['utilization']:5.1f}% "
                          f"wthr {r['weighted_throughput']:9.0f} slo {r['realtime_slo']:.3f} "
                          f"+{r['utilization_points']:5.1f} pts {r['weighted_throughput_pct']:+6.1f}% "
                          f"{r['wall_s']:6.2f} s", flush=True)
    return rows


def summarize(rows: list[dict], policy: str) -> dict:
    per = {}
    for name in SEVEN:
        mine = [r for r in rows if r["scenario"] == name and r["policy"] == policy]
        per[name] = {k: statistics.mean(r[k] for r in mine) for k in (
            "offered_load", "utilization", "weighted_throughput", "realtime_slo",
            "utilization_points", "weighted_throughput_pct", "wall_s")}
        per[name]["wall_s_max"] = max(r["wall_s"] for r in mine)
        fifo = [r for r in rows if r["scenario"] == name and r["policy"] == "fifo"]
        per[name]["fifo_utilization"] = statistics.mean(r["utilization"] for r in fifo)
        per[name]["fifo_realtime_slo"] = statistics.mean(r["realtime_slo"] for r in fifo)
        per[name]["above_fifo_all_seeds"] = all(
            r["weighted_throughput_pct"] > 0 for r in mine)
        per[name]["at_least_fifo_all_seeds"] = all(
            r["weighted_throughput_pct"] >= 0 for r in mine)
    points = [v["utilization_points"] for v in per.values()]
    pct = [v["weighted_throughput_pct"] for v in per.values()]
    return {"per_scenario": per, "mean_utilization_points": statistics.mean(points),
            "best_utilization_points": max(points), "mean_weighted_throughput_pct":
            statistics.mean(pct), "best_weighted_throughput_pct": max(pct)}


def markdown(summary: dict, info: dict, seeds: list[int], policy: str) -> str:
    lines = [f"# FIFO vs {policy} on the seven benchmark scenarios", "",
             f"Seeds {seeds}; commit {info['commit']}; {info['cpu']}, {info['cores']} cores; "
             f"torch {info['torch']}; device cpu; load average at start "
             f"{info.get('load_average_at_start', '-')}. Means over seeds; every plan checked.", "",
             "| scenario | load | FIFO util % | util % | +pts | wthr gain % | FIFO SLO | SLO | "
             "wall s (mean / max) | above FIFO, every seed |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in summary["per_scenario"].items():
        lines.append(
            f"| {name} | {v['offered_load']:.2f} | {100 * v['fifo_utilization']:.1f} | "
            f"{100 * v['utilization']:.1f} | {v['utilization_points']:+.1f} | "
            f"{v['weighted_throughput_pct']:+.1f} | {v['fifo_realtime_slo']:.3f} | "
            f"{v['realtime_slo']:.3f} | {v['wall_s']:.1f} / {v['wall_s_max']:.1f} | "
            f"{'yes' if v['above_fifo_all_seeds'] else 'no'} |")
    lines += ["", f"Mean gain: {summary['mean_utilization_points']:+.1f} utilization points, "
              f"{summary['mean_weighted_throughput_pct']:+.1f}% weighted throughput. Best: "
              f"{summary['best_utilization_points']:+.1f} points, "
              f"{summary['best_weighted_throughput_pct']:+.1f}%.",
              f"Published (best over its seven scenarios): +{PUBLISHED['best_utilization_points']:.0f} "
              f"points, +{PUBLISHED['best_weighted_throughput_pct']:.0f}%. Our scenarios and "
              "theirs differ; the comparison is indicative, not like for like. The allocator "
              "here plans offline (it knows every job and demand curve in advance), which FIFO "
              "does not: see bench/results/online.md for the online numbers.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small solver budgets")
    parser.add_argument("--policy", default="allocator")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    warm_up()  # every compiled path first: the rows time plans
    overrides = ["solver.iterations=10", "solver.local_search_iters=10"] if args.quick else []
    seeds = list(range(args.seeds))
    info = {**machine(), "commit": git_commit(short=True)}  # before the runs: what they ran on
    rows = run(seeds, overrides, ["fifo", args.policy])
    summary = summarize(rows, args.policy)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(summary, info, seeds, args.policy)
    (out / f"{args.policy}.md").write_text(text)
    (out / f"{args.policy}.json").write_text(json.dumps(
        {"machine": info, "seeds": seeds, "overrides": overrides, "rows": rows,
         "summary": summary, "published": PUBLISHED}, indent=1))
    print(text)


if __name__ == "__main__":
    sys.exit(main())
