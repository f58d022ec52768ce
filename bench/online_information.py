"""What information is worth online: greedy and the allocator online with
the demand forecast (`last_day`) or the true demand (`online.forecast=oracle`),
and with the rigid jobs known at their arrival or all from the start
(`online.arrivals=oracle`), against their own offline plans.

    python -m bench.online_information --seeds 0 1 2 3 4 5 --out bench/results/online_information
    python -m bench.online_information --scenarios --windows openb_118d_64 --out /tmp/w

An offline plan knows everything; an online one only the past. Where the
allocator online with both oracles reaches its offline value, what it loses
online is information, not the rolling horizon: a replan that knew the
future would plan as the offline plan does. Greedy decides each step from
the jobs waiting then, so information moves it little. Every plan is the
Python API's, so it goes through the checker.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from types import SimpleNamespace

from bench.common import GUARANTEE, ROOT, provenance, warm_up, write_results
from bench.online_traces import CONTENDED, WINDOWS, cases

LEVELS = {  # name -> (online.forecast, online.arrivals)
    "forecast": ("last_day", "none"),
    "true demand": ("oracle", "none"),
    "arrivals known": ("last_day", "oracle"),
    "both": ("oracle", "oracle"),
}
POLICIES = ("greedy", "allocator")


def measure(scenarios: list[str], seeds: list[int], windows: list[str],
            every: int, settings: dict | None = None) -> list[dict]:
    """One row per case (the seven's scenarios by seed, bench/traces/ windows
    at seed 0) and policy; `settings` (GUARANTEE) for every run."""
    import gpualloc as ga

    warm_up()
    rows = []
    where = SimpleNamespace(only="all", windows=windows, generated=[], scenarios=scenarios,
                            seeds=seeds)
    for _, name, seed, make in cases(where):
        s = make()
        settings = settings or {}
        for policy in POLICIES:
            try:
                offline = ga.plan(s, policy, seed=seed, **settings)
            except ga.ScenarioError as e:  # rule 4 cannot be met there
                print(f"{name} seed {seed}: {e}", flush=True)
                break
            row = {"scenario": name, "seed": seed, "policy": policy,
                   "offline": ga.metrics(offline.scenario, offline)["weighted_throughput"]}
            for level, (forecast, arrivals) in LEVELS.items():
                p = ga.plan(s, policy, seed=seed, mode="online",
                            online={"replan_every": every, "forecast": forecast,
                                    "arrivals": arrivals}, **settings)
                m = ga.metrics(p.scenario, p)
                row[level] = m["weighted_throughput"]
                row[f"{level} short"] = m.get("guarantee_shortfall", 0)
            rows.append(row)
            print(row, flush=True)
    return rows


def _geo(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(result: dict) -> str:
    rows = result["rows"]
    runs = {(r["scenario"], r["seed"], r["policy"]): r for r in rows}
    names = list(dict.fromkeys(r["scenario"] for r in rows))  # in the order they ran
    cases = sorted({(r["scenario"], r["seed"]) for r in rows},
                   key=lambda c: (names.index(c[0]), c[1]))
    levels = list(LEVELS)
    lines = ["# What information is worth online", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`).", "",
             f"Online every {result['replan_every']} steps (and at arrivals). Levels: "
             + "; ".join(f"{k}: `online.forecast={f}`, `online.arrivals={a}`"
                         for k, (f, a) in LEVELS.items())
             + ". Value: weighted throughput (PROBLEM.md)."
             + (f" Every run, offline and online, with {result['settings']}."
                if result.get("settings") else ""), "",
             "## Online against the policy's own offline plan", "",
             "Geometric mean over seeds of online / offline, per scenario (a window: "
             "its one run).", "",
             "| scenario | policy | " + " | ".join(levels) + " |",
             "|---|---|" + "---|" * len(levels)]
    for name in names:
        mine = [c for c in cases if c[0] == name]
        for policy in POLICIES:
            own = [runs[c + (policy,)] for c in mine]
            cells = [f"x{_geo([r[k] / r['offline'] for r in own]):.4f}" for k in levels]
            lines.append(f"| {name} | {policy} | " + " | ".join(cells) + " |")
    lines += ["", "## The allocator against greedy, online", "",
              "Per level: the geometric mean over every run of allocator / greedy online, "
              "its minimum, and the runs where the allocator is below.", "",
              "| level | runs | mean | min | below greedy "
              "| allocator online / its offline (mean, min) |",
              "|---|---|---|---|---|---|"]
    for k in levels:
        ratio = [runs[c + ("allocator",)][k] / runs[c + ("greedy",)][k] for c in cases]
        own = [runs[c + ("allocator",)][k] / runs[c + ("allocator",)]["offline"] for c in cases]
        lines.append(f"| {k} | {len(cases)} | x{_geo(ratio):.4f} | x{min(ratio):.4f} | "
                     f"{sum(x < 1 for x in ratio)} | x{_geo(own):.4f}, x{min(own):.4f} |")
    if result.get("settings"):
        lines += ["", "## Replicas short of the guarantee online", "",
                  "Summed over the runs (offline plans meet rule 4: none short).", "",
                  "| policy | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
        for policy in POLICIES:
            short = [sum(runs[c + (policy,)][f"{k} short"] for c in cases) for k in levels]
            lines.append(f"| {policy} | " + " | ".join(map(str, short)) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", default=CONTENDED)
    ap.add_argument("--windows", nargs="*", default=[], choices=list(WINDOWS),
                    help="bench/traces/ windows too (seed 0)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--replan-every", type=int, default=6)
    ap.add_argument("--guarantee", action="store_true",
                    help="every service kept whole, training preemptible (module docstring)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "online_information",
                    help="writes OUT.md and OUT.json")
    args = ap.parse_args(argv)
    settings = GUARANTEE if args.guarantee else {}
    result = {"scenarios": args.scenarios, "seeds": args.seeds, "windows": args.windows,
              "replan_every": args.replan_every, "settings": settings,
              "rows": measure(args.scenarios, args.seeds, args.windows, args.replan_every,
                              settings),
              **provenance("bench.online_information", argv)}
    write_results(args.out.parent, args.out.name, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
