"""The search's own spread online: the allocator online with several search
seeds (`solver.seed`) beside greedy online, per scenario and seed, so a run
below greedy can be told apart from the noise of the search's seed.

    python -m bench.online_spread                     # seeds 6-10 (tuning), 5 searches, every 6
    python -m bench.online_spread --seeds 0 1 2 3 4 5 --searches 5 --replan-every 6 --tag _report

Per scenario and seed: greedy online once; the allocator online with the
run's own search seed (the default plan) and `--searches - 1` others
(`solver.seed` = seed + 1000 k). Every plan goes through the checker
(`ga.plan`). A run is below greedy *beyond the spread* when every search
seed's plan is below greedy's; *inside* when some are below and some not.
Writes bench/results/online_spread.{md,json} (the stem takes --tag).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench.common import ROOT, provenance, write_results
from bench.online_traces import CONTENDED


def measure(scenarios: list[str], seeds: list[int], searches: int, every: int) -> list[dict]:
    import gpualloc as ga

    rows = []
    for name in scenarios:
        for seed in seeds:
            s = ga.generate(name, seed=seed)
            online = {"replan_every": every}
            greedy = ga.plan(s, "greedy", seed=seed, mode="online", online=online)
            values = []
            for k in range(searches):
                solver = {"seed": seed + 1000 * k} if k else {}  # k = 0: the default plan
                p = ga.plan(s, "allocator", seed=seed, mode="online", online=online,
                            solver=solver)
                values.append(ga.metrics(s, p)["weighted_throughput"])
            rows.append({"scenario": name, "seed": seed,
                         "greedy": ga.metrics(s, greedy)["weighted_throughput"],
                         "allocator": values})
            print(name, seed, rows[-1]["greedy"], values, flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Per scenario: the default plan's mean ratio to greedy, the mean spread
    (max - min over search seeds, % of their mean), and the runs below
    greedy by default, with some search seed, and with every one."""
    out = {}
    for name in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == name]
        out[name] = {
            "runs": len(mine),
            "lead": statistics.mean(r["allocator"][0] / r["greedy"] for r in mine),
            "spread_pct": statistics.mean(
                100 * (max(r["allocator"]) - min(r["allocator"])) / statistics.mean(r["allocator"])
                for r in mine),
            "below_default": [r["seed"] for r in mine if r["allocator"][0] < r["greedy"]],
            "below_some": [r["seed"] for r in mine if min(r["allocator"]) < r["greedy"]],
            "below_every": [r["seed"] for r in mine if max(r["allocator"]) < r["greedy"]],
        }
    return out


def markdown(result: dict) -> str:
    lines = ["# The search's own spread online", "",
             f"Commit {result['commit']}, {result['date']}; machine: "
             f"{result['machine']['cpu']}, {result['machine']['cores']} cores "
             f"(`{result['command']}`).", "",
             f"Online, `last_day` forecast, replanning every {result['replan_every']} steps; "
             f"seeds {result['seeds']}; the allocator with {result['searches']} search seeds "
             "(the run's own first, then `solver.seed` = seed + 1000 k). Lead: the default "
             "plan's weighted throughput over greedy's online, mean over seeds. Spread: max - "
             "min over the search seeds, % of their mean, mean over seeds. Below: the seeds "
             "where the default plan, some search seed's, or every one is below greedy's "
             "(every one: below beyond the spread).", "",
             "| scenario | runs | lead | spread | below (default) | below (some seed) "
             "| below (every seed) |", "|---|---|---|---|---|---|---|"]
    for name, r in result["summary"].items():
        lines.append(f"| {name} | {r['runs']} | x{r['lead']:.4f} | {r['spread_pct']:.2f}% "
                     f"| {r['below_default']} | {r['below_some']} | {r['below_every']} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="+", default=CONTENDED)
    ap.add_argument("--seeds", type=int, nargs="+", default=[6, 7, 8, 9, 10])
    ap.add_argument("--searches", type=int, default=5, help="search seeds per run (>= 2)")
    ap.add_argument("--replan-every", type=int, default=6)
    ap.add_argument("--tag", default="", help="suffix of the output stem")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    if args.searches < 2:
        ap.error("--searches: at least 2 (one search seed has no spread)")
    rows = measure(args.scenarios, args.seeds, args.searches, args.replan_every)
    result = {"seeds": args.seeds, "searches": args.searches, "replan_every": args.replan_every,
              "rows": rows, "summary": summarize(rows),
              **provenance("bench.online_spread", argv)}
    write_results(args.out, "online_spread" + args.tag, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
