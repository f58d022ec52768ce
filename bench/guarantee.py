"""Gains at parity: the seven with real-time service free (today's objective)
and guaranteed (`min_served=1.0`: every replica of the demand curve served,
rule 4 of PROBLEM.md), offline.

    python -m bench.guarantee                 # seeds 0-2, writes bench/results/guarantee.{md,json}
    python -m bench.guarantee --seeds 1

Per scenario and seed: FIFO, greedy and the allocator, each plan checked
(rule 4 enforced for greedy and the allocator; FIFO runs as defined and its
shortfall is reported). Gains against FIFO's plan both ways, and the price
of the guarantee: the weighted throughput a policy gives up to hold it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common import ROOT, SEVEN, composed, provenance, warm_up, write_results
from gpualloc.check import check
from gpualloc.core.guarantee import GuaranteeError, check_guarantee
from gpualloc.metrics import metrics
from gpualloc.policies import POLICIES
from gpualloc.run import build_scenario
from gpualloc.scenario import with_min_served

POLICY_ORDER = ["fifo", "greedy", "allocator"]


def measure(seeds: list[int], share: float) -> list[dict]:
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    rows = []
    for name in SEVEN:
        for seed in seeds:
            cfg = composed(f"+scenario={name}", f"seed={seed}", "solver.progress=false")
            free = build_scenario(cfg.scenario, seed)
            held = with_min_served(free, share)
            settings = [("free", free), ("guaranteed", held)]
            try:
                check_guarantee(held)
            except GuaranteeError as e:  # the run would stop here, exit 2
                rows.append({"scenario": name, "seed": seed, "setting": "guaranteed",
                             "policy": "all", "impossible": str(e)})
                settings = settings[:1]
            for setting, s in settings:
                for policy in POLICY_ORDER:
                    start = time.perf_counter()
                    owner = POLICIES[policy].offline(s, cfg, cpu).owner
                    wall = time.perf_counter() - start
                    verdict = check(s, owner)
                    assert verdict.ok_but_guarantee if policy == "fifo" else verdict.ok, (
                        name, seed, setting, policy, str(verdict))
                    m = metrics(s, owner)
                    rows.append({"scenario": name, "seed": seed, "setting": setting,
                                 "policy": policy, "wall_s": wall,
                                 **{k: m[k] for k in ("weighted_throughput", "utilization",
                                                      "realtime_slo", "guarantee_shortfall")}})
            print(name, seed, flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    def value(name, seed, setting, policy, key="weighted_throughput"):
        return next(r[key] for r in rows if (r["scenario"], r["seed"], r["setting"],
                                             r["policy"]) == (name, seed, setting, policy))

    out = {}
    for name in SEVEN:
        impossible = sorted(r["seed"] for r in rows
                            if r["scenario"] == name and r.get("policy") == "all")
        seeds = sorted({r["seed"] for r in rows if r["scenario"] == name} - set(impossible))
        row = {"impossible_seeds": impossible}
        if not seeds:
            out[name] = row
            continue
        for setting in ("free", "guaranteed"):
            for policy in ("greedy", "allocator"):
                gains = [100 * (value(name, s, setting, policy) / value(name, s, setting, "fifo")
                                - 1) for s in seeds]
                row[f"{policy}_{setting}_pct"] = statistics.mean(gains)
                row[f"{policy}_{setting}_slo"] = statistics.mean(
                    value(name, s, setting, policy, "realtime_slo") for s in seeds)
            row[f"allocator_over_greedy_{setting}"] = [
                value(name, s, setting, "allocator") / value(name, s, setting, "greedy")
                for s in seeds]
        for policy in ("greedy", "allocator"):
            row[f"{policy}_price_pct"] = statistics.mean(
                100 * (1 - value(name, s, "guaranteed", policy) / value(name, s, "free", policy))
                for s in seeds)
        row["fifo_slo"] = statistics.mean(value(name, s, "free", "fifo", "realtime_slo")
                                          for s in seeds)
        row["fifo_shortfall"] = statistics.mean(
            value(name, s, "guaranteed", "fifo", "guarantee_shortfall") for s in seeds)
        row["above_fifo_guaranteed"] = all(
            value(name, s, "guaranteed", p) > value(name, s, "guaranteed", "fifo")
            for s in seeds for p in ("greedy", "allocator"))
        out[name] = row
    return out


def markdown(result: dict) -> str:
    summary = result["summary"]
    lines = ["# Gains over FIFO, real-time service free and guaranteed", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`). Seeds "
             f"{result['seeds']}, means; `guaranteed` is `min_served={result['share']:g}` on "
             "every real-time service (rule 4; every greedy and allocator plan checked against "
             "it). FIFO's plan is the same either way (it ignores min_served): its real-time SLO "
             "and its replicas short of the guarantee are shown.", "",
             "| scenario | FIFO SLO (short) | greedy free | allocator free | greedy guaranteed "
             "| allocator guaranteed | price: greedy / allocator | allocator / greedy, "
             "guaranteed |", "|---|---|---|---|---|---|---|---|"]
    for name, r in summary.items():
        if "fifo_slo" not in r:
            lines.append(f"| {name} | rule 4 impossible on seeds {r['impossible_seeds']} | "
                         "| | | | | |")
            continue
        ratio = ", ".join(f"x{v:.3f}" for v in r["allocator_over_greedy_guaranteed"])
        lines.append(
            f"| {name} | {r['fifo_slo']:.3f} ({r['fifo_shortfall']:,.0f}) | "
            f"{r['greedy_free_pct']:+.1f}% (SLO {r['greedy_free_slo']:.3f}) | "
            f"{r['allocator_free_pct']:+.1f}% (SLO {r['allocator_free_slo']:.3f}) | "
            f"{r['greedy_guaranteed_pct']:+.1f}% | {r['allocator_guaranteed_pct']:+.1f}% | "
            f"{r['greedy_price_pct']:.1f}% / {r['allocator_price_pct']:.1f}% | {ratio} |")
    impossible = {n: r["impossible_seeds"] for n, r in summary.items() if r["impossible_seeds"]}
    if impossible:
        lines += ["", "Rule 4 impossible at this share (the guaranteed replicas do not fit even "
                  "on an empty cluster: the run stops before planning, exit 2), so those seeds "
                  "are left out of the row above: " + "; ".join(
                      f"{n} seeds {v}" for n, v in impossible.items()) + ". First message: "
                  + next(r["impossible"] for r in result["rows"] if r.get("policy") == "all")]
    done = [r for r in summary.values() if "fifo_slo" in r]
    mean = {k: statistics.mean(r[k] for r in done)
            for k in ("greedy_free_pct", "allocator_free_pct", "greedy_guaranteed_pct",
                      "allocator_guaranteed_pct")}
    lines += ["", f"Mean over the scenarios measured: greedy {mean['greedy_free_pct']:+.1f}% free, "
              f"{mean['greedy_guaranteed_pct']:+.1f}% guaranteed; allocator "
              f"{mean['allocator_free_pct']:+.1f}% free, {mean['allocator_guaranteed_pct']:+.1f}% "
              "guaranteed. Price of the guarantee = 1 - guaranteed / free weighted throughput "
              "of the same policy.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--share", type=float, default=1.0, help="min_served of the guaranteed runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    seeds = list(range(args.seeds))
    rows = measure(seeds, args.share)
    result = {"seeds": seeds, "share": args.share, "rows": rows, "summary": summarize(rows),
              **provenance("bench.guarantee", argv)}
    write_results(args.out, "guarantee", result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
