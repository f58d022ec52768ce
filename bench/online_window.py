"""Where the allocator's offline-to-online loss goes: the forecast, the steps
between replans, the commitments made at a replan for later steps, or how
late the planner learns of an arrival.

    python -m bench.online_window                  # tuning seeds 3-5 -> bench/results/online_window.md
    python -m bench.online_window --seeds 3 4 5 6 7 8 9 --settings default no-commit-at-start
    python -m bench.online_window --settings default no-arrival-replan --stem online_arrival_replans

For each setting of the online loop (replanning every 6 steps with the
`last_day` forecast unless the setting says otherwise) over the six
contended scenarios of the seven: the allocator's mean weighted-throughput
gain over FIFO, its mean loss from its offline plan (points of gain, summed
over the contended runs and divided by seven, as the online issue counts it:
`low_contention` loses nothing), how often it is below greedy's online plan
(default settings, last_day, every 6), and its value split into rigid and
real-time work (percent of FIFO's value). Every plan goes through the checker.

`every-step-arrivals-batched` replans every step but shows the planner each
rigid job only from the first multiple of 6 at or after its arrival (the
scenario's arrivals are moved there); its plan is checked and valued on the
true scenario, where it is feasible (no job starts before it arrives). Next
to `every-step` and `default` it separates what a replan at each arrival is
worth from what the steps between replans cost otherwise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path

import torch

from bench.common import ROOT, SEVEN, composed, provenance, write_results
from gpualloc.check import check
from gpualloc.objective import job_values
from gpualloc.online import run_policy
from gpualloc.run import build_scenario
from gpualloc.scenario import Scenario

CONTENDED = [name for name in SEVEN if name != "low_contention"]
SETTINGS = {
    "default": (),
    "no-commit-at-start": ("online.commit_at_start=false",),
    "oracle": ("online.forecast=oracle",),
    "every-step": ("online.replan_every=1",),
    "every-step-oracle": ("online.replan_every=1", "online.forecast=oracle"),
    "every-2": ("online.replan_every=2",),
    "every-3": ("online.replan_every=3",),
    "every-step-arrivals-batched": ("online.replan_every=1",),
    "no-arrival-replan": ("online.replan_on_arrival=none",),
}
BATCHED = {"every-step-arrivals-batched": 6}
"""Settings whose planner sees rigid arrivals only at multiples of this many steps."""


def _batched(s: Scenario, every: int) -> Scenario:
    """`s` with each rigid job arriving at the first multiple of `every` at or
    after its arrival (kept inside the horizon)."""
    jobs = [replace(j, arrival=min(-(-j.arrival // every) * every, s.T - 1)) if j.rigid else j
            for j in s.jobs]
    return replace(s, jobs=jobs)


def _value(args) -> tuple[tuple, dict]:
    name, seed, policy, mode, overrides, batch = args
    torch.set_num_threads(1)
    cfg = composed(f"+scenario={name}", f"seed={seed}", f"mode={mode}",
                   "online.forecast=last_day", "online.replan_every=6", "solver.progress=false",
                   *overrides)
    s = build_scenario(cfg.scenario, seed)
    owner = run_policy(policy, _batched(s, batch) if batch else s, cfg, "cpu").owner
    report = check(s, owner)
    if not report.ok_but_guarantee:
        raise SystemExit(f"{policy} on {name} seed {seed}: infeasible plan")
    value = job_values(s, owner)  # (J,)
    return args, {"rigid": float(value[s.rigid].sum()), "realtime": float(value[~s.rigid].sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 4, 5])
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--stem", default="online_window", help="out/STEM.md and out/STEM.json")
    args = ap.parse_args(argv)
    runs = [(n, sd, policy, mode, (), 0) for n in CONTENDED for sd in args.seeds
            for policy, mode in (("fifo", "offline"), ("allocator", "offline"),
                                 ("greedy", "online"))]
    for setting in args.settings:
        runs += [(n, sd, "allocator", "online", SETTINGS[setting], BATCHED.get(setting, 0))
                 for n in CONTENDED for sd in args.seeds]
    with Pool(args.workers) as pool:
        got = dict(pool.imap_unordered(_value, runs))

    def total(n, sd, policy, mode, overrides=(), batch=0):
        v = got[(n, sd, policy, mode, overrides, batch)]
        return v["rigid"] + v["realtime"], v

    rows = []
    for setting in args.settings:
        gains, losses, ratios, rigid, realtime = [], [], [], [], []
        for n in CONTENDED:
            for sd in args.seeds:
                fifo, _ = total(n, sd, "fifo", "offline")
                offline, _ = total(n, sd, "allocator", "offline")
                greedy, _ = total(n, sd, "greedy", "online")
                online, parts = total(n, sd, "allocator", "online", SETTINGS[setting],
                                      BATCHED.get(setting, 0))
                gains.append(100 * (online / fifo - 1))
                losses.append(100 * (offline - online) / fifo)
                ratios.append(online / greedy)
                rigid.append(100 * parts["rigid"] / fifo)
                realtime.append(100 * parts["realtime"] / fifo)
        batch = BATCHED.get(setting, 0)
        shown = list(SETTINGS[setting]) + ([f"(rigid arrivals seen at multiples of {batch})"]
                                           if batch else [])
        rows.append({"setting": setting, "overrides": shown,
                     "gain": statistics.fmean(gains),
                     "loss": sum(losses) / len(args.seeds) / len(SEVEN),
                     "below_greedy": sum(r < 1 - 1e-9 for r in ratios), "runs": len(ratios),
                     "min_over_greedy": min(ratios), "rigid": statistics.fmean(rigid),
                     "realtime": statistics.fmean(realtime)})
        print(rows[-1], flush=True)
    result = {"seeds": args.seeds, "rows": rows, **provenance("bench.online_window", argv)}
    lines = ["# Where the online loss goes", "",
             f"Commit {result['commit']}, {result['date']}; {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores (`{result['command']}`). The allocator "
             f"online on the six contended scenarios of the seven, seeds {args.seeds}; "
             "replanning every 6 steps with the last_day forecast unless the setting says "
             "otherwise. Loss: points of gain over FIFO from the allocator's offline plan, "
             "over the seven (low_contention loses none). Below greedy: runs under greedy's "
             "online plan (default settings). Rigid and real-time: the allocator's value "
             "from each, percent of FIFO's whole value.", "",
             "| setting | overrides | gain over FIFO | loss (points) | below greedy | "
             "min x greedy | rigid | real-time |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['setting']} | {' '.join(r['overrides']) or '-'} | "
                     f"{r['gain']:+.2f}% | {r['loss']:.2f} | {r['below_greedy']}/{r['runs']} | "
                     f"x{r['min_over_greedy']:.4f} | {r['rigid']:.1f} | {r['realtime']:.1f} |")
    lines.append("")
    write_results(args.out, args.stem, result, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
