"""The allocator under two (or more) search budgets, on the same scenarios in
one run: its value per scenario and seed, and its time ratio (issue 25).

    python -m bench.budget --arm old=solver.deep_search_cells=0 --arm new= \\
        --scenarios seven --seeds 3 --name budget_seven
    python -m bench.budget --arm default= --arm quality=solver=quality \\
        --scenarios broad --first-seed 0 --seeds 20 --no-write

An arm is NAME=OVERRIDES (comma-separated run overrides, as on the command
line; empty: the defaults). The arms of one scenario and seed run back to
back, so their time ratio is measured under the same load; values do not
depend on the load (the search counts moves). Only the allocator runs (its
rivals, FIFO's and greedy's plans, are computed inside it, with their
defaults, the same in every arm). Every plan checked. The seven run at their
own size; broad and broad_types at --gpus (bench/family.py's scaling).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from bench.common import ROOT, SEVEN, composed, provenance, write_results
from gpualloc.check import check
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import POLICIES
from gpualloc.scenario.generate import generate


def configs(scenario: str, gpus: int, overrides: tuple[str, ...]):
    """The run config of one arm on one scenario (the family scaled to `gpus`)."""
    if scenario in ("broad", "broad_types"):
        from bench.family import family
        return family(gpus / 64, overrides, scenario)
    return composed(f"+scenario={scenario}", "solver.progress=false", *overrides)


def run(scenarios: list[str], seeds: list[int], arms: dict[str, tuple[str, ...]],
        gpus: int = 64) -> list[dict]:
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    rows = []
    for name in scenarios:
        cfgs = {arm: configs(name, gpus, o) for arm, o in arms.items()}
        for seed in seeds:
            row = {"scenario": name, "seed": seed}
            for arm, cfg in cfgs.items():
                cfg.seed = cfg.solver.seed = seed
                s = generate(cfg.scenario, seed)
                row.update(gpus=s.G, jobs=s.J, steps=s.T)
                start = time.perf_counter()
                plan = POLICIES["allocator"](s, cfg, cpu)
                row[f"{arm}_s"] = time.perf_counter() - start
                assert check(s, plan.owner).ok, (name, seed, arm)
                row[arm] = weighted_throughput(s, plan.owner)
                anneal = plan.info.get("anneal")
                row[f"{arm}_moves"] = plan.info["local_search"]["iterations"] + (
                    anneal["iterations"] if anneal else 0)
            rows.append(row)
            print(row, flush=True)
    return rows


def markdown(result: dict) -> str:
    arms = list(result["arms"])
    base, rest = arms[0], arms[1:]
    lines = [f"# The allocator's search budget: {' / '.join(arms)}", "",
             f"Commit {result['commit']}, {result['date']}; {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores; one torch thread (`{result['command']}`). "
             "Arms: " + "; ".join(f"{a}: `{','.join(o) or 'defaults'}`"
                                  for a, o in result["arms"].items()) + ". "
             "The arms of a run ran back to back; every plan checked.", "",
             "| scenario | runs | " + " | ".join(
                 f"{a}/{base} value (median; min; max) | {a}/{base} time (sum)" for a in rest)
             + " | below " + base + " |",
             "|---|---|" + "---|---|" * len(rest) + "---|"]
    for name in dict.fromkeys(r["scenario"] for r in result["rows"]):
        rs = [r for r in result["rows"] if r["scenario"] == name]
        cells = []
        below = []
        for a in rest:
            ratio = [r[a] / r[base] for r in rs]
            below += [f"{a} s{r['seed']}" for r in rs if r[a] < r[base] - 1e-6]
            cells.append(f"x{statistics.median(ratio):.4f}; x{min(ratio):.4f}; x{max(ratio):.4f} | "
                         f"x{sum(r[a + '_s'] for r in rs) / sum(r[base + '_s'] for r in rs):.2f}")
        lines.append(f"| {name} | {len(rs)} | " + " | ".join(cells)
                     + f" | {', '.join(below) or 'none'} |")
    lines += ["", "Per run (weighted throughput; seconds; search moves):", "",
              "| scenario | seed | G x J x T | " + " | ".join(arms) + " |",
              "|---|---|---|" + "---|" * len(arms)]
    for r in result["rows"]:
        lines.append(f"| {r['scenario']} | {r['seed']} | {r['gpus']} x {r['jobs']} x {r['steps']} | "
                     + " | ".join(f"{r[a]:,.0f}; {r[a + '_s']:.1f} s; {r[a + '_moves']}"
                                  for a in arms) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, metavar="NAME=OVERRIDES",
                    help="a budget to compare; the first is the base of the ratios")
    ap.add_argument("--scenarios", nargs="+", default=["seven"],
                    help="seven, names of the seven, broad, broad_types")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gpus", type=int, default=64, help="broad, broad_types: cluster size")
    ap.add_argument("--name", default="budget", help="results file stem")
    ap.add_argument("--no-write", action="store_true", help="print only (tuning runs)")
    args = ap.parse_args(argv)
    arms = {}
    for arm in args.arm:
        name, _, overrides = arm.partition("=")
        arms[name] = tuple(o for o in overrides.split(",") if o)
    scenarios = [n for x in args.scenarios for n in (SEVEN if x == "seven" else [x])]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    rows = run(scenarios, seeds, arms, args.gpus)
    result = {"arms": arms, "rows": rows, **provenance("bench.budget", argv)}
    md = markdown(result)
    if args.no_write:
        print(md)
    else:
        write_results(ROOT / "bench" / "results", args.name, result, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
