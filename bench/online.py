"""Offline against online: each policy's gains over FIFO when it sees the whole
scenario, and when it learns jobs as they arrive and demand as it happens
(gpualloc.online), side by side. The offline number is what a planner with
perfect knowledge gains; the online one is what a cluster would see.

    python -m bench.online                      # the seven scenarios (seeds 0-2) + the trace week
    python -m bench.online --quick              # seed 0, replan every 6 steps
    python -m bench.online --policies greedy --forecasts last_day --replan-every 1

(`python -m` from the repository root works without installing gpualloc;
`python bench/online.py` needs it installed.)

Runs every policy of the registry (FIFO is the yardstick and online by
nature). Every plan goes through the checker. Writes bench/results/online.md
and online.json (--out), with the machine and the commit.
"""
from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench.common import ROOT, SEVEN, composed, git_commit, machine, warm_up
from gpualloc.check import check
from gpualloc.files import atomic_write_text
from gpualloc.metrics import gains, metrics
from gpualloc.online import FORECASTS, online, run_policy
from gpualloc.policies import POLICIES
from gpualloc.core.guarantee import check_guarantee
from gpualloc.run import build_scenario
from gpualloc.scenario import ScenarioError, with_min_served

TRACES = ["alibaba"]  # file scenarios: one run, seeds do not change them


def load_extra(spec: str):
    """NAME=MODULE:FUNCTION (MODULE a dotted name or a .py path): a policy not
    (yet) in the registry, e.g. one under development."""
    name, _, target = spec.partition("=")
    module, _, func = target.partition(":")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(module).stem, module)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return name, getattr(loaded, func)
    return name, getattr(importlib.import_module(module), func)


def plan_with(name, policy, s, cfg, device):
    """Registry policies through run_policy; extra ones through the online loop."""
    if policy is None:
        return run_policy(name, s, cfg, device)
    if cfg.mode == "online":
        return online(s, policy, cfg, device, name=name)
    return policy(s, cfg, device)


def bench(args) -> dict:
    where = {**machine(), "commit": git_commit()}  # before the runs: what they ran on
    device = torch.device(args.device)
    extra = dict(load_extra(e) for e in args.extra_policy or [])
    names = [p for p in (args.policies or list(POLICIES)) if p != "fifo"] + list(extra)
    unknown = [p for p in names if p not in POLICIES and p not in extra]
    if unknown:
        sys.exit(f"error: unknown policies {', '.join(unknown)} (known: {', '.join(POLICIES)})")
    rows = []
    # Composed up front: the YAML is read once, before anything runs.
    runs = [(scenario, seed, composed(f"+scenario={scenario}", f"seed={seed}")) for scenario in args.scenarios
            for seed in ([0] if scenario in TRACES else args.seeds)]
    for scenario, seed, cfg in runs:
        s = build_scenario(cfg.scenario, seed)
        if args.min_served is not None:
            s = with_min_served(s, args.min_served)
            try:
                check_guarantee(s)
            except ScenarioError as e:  # rule 4 impossible: the run would stop here
                rows.append({"scenario": scenario, "seed": seed, "policy": "all",
                             "mode": "all", "forecast": None, "refused": str(e)})
                print(f"{scenario:18s} seed {seed} refused: {e}", file=sys.stderr)
                continue
        base = metrics(s, POLICIES["fifo"](s, cfg, device).owner)
        for name in names:
            for mode, forecast in [("offline", None)] + [("online", f) for f in args.forecasts]:
                if POLICIES[name].online_by_nature and mode == "online":
                    continue
                c = copy.deepcopy(cfg)
                c.mode = mode
                if forecast:
                    c.online.forecast = forecast
                    c.online.replan_every = args.replan_every
                start = time.perf_counter()
                try:
                    plan = plan_with(name, extra.get(name), s, c, device)
                except ScenarioError as e:  # e.g. exact above its size limit
                    rows.append({"scenario": scenario, "seed": seed, "policy": name,
                                 "mode": mode, "forecast": forecast, "refused": str(e)})
                    print(f"{scenario:18s} seed {seed} {name:12s} {mode:7s} {forecast or '':8s} "
                          f"refused: {e}", file=sys.stderr)
                    continue
                wall = time.perf_counter() - start
                verdict = check(s, plan.owner)
                if not (verdict.ok_but_guarantee if mode == "online" else verdict.ok):
                    raise SystemExit(f"{name} {mode} {forecast} on {s.name} seed {seed}: "
                                     f"infeasible plan\n{verdict}")
                m = metrics(s, plan.owner)
                g = gains(m, base)
                rows.append({"scenario": scenario, "seed": seed, "policy": name,
                             "mode": mode, "forecast": forecast,
                             "replan_every": args.replan_every if forecast else None,
                             "utilization": m["utilization"],
                             "weighted_throughput": m["weighted_throughput"],
                             "realtime_slo": m["realtime_slo"],
                             "guarantee_shortfall": m["guarantee_shortfall"],
                             "fifo_weighted_throughput": base["weighted_throughput"],
                             "fifo_utilization": base["utilization"], **g, "wall_s": wall})
                print(f"{scenario:18s} seed {seed} {name:12s} {mode:7s} {forecast or '':8s} "
                      f"wthr {_pct(g['weighted_throughput_pct'])} util "
                      f"{g['utilization_points']:+.1f} pts  {wall:.1f} s", file=sys.stderr)
    return {"machine": where, "command": "python -m bench.online " + " ".join(sys.argv[1:]),
            "policies": names, "forecasts": args.forecasts,
            "replan_every": args.replan_every, "seeds": args.seeds, "rows": rows,
            "min_served": args.min_served,
            "extra_policies": {k: v for k, v in zip(extra, args.extra_policy or [])}}


def _pct(v) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _mean(values):
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def markdown(result: dict) -> str:
    cols = [("offline", None)] + [("online", f) for f in result["forecasts"]]
    head = ["scenario", "policy"] + [
        f"wthr {'offline' if m == 'offline' else f'online {f}'}" for m, f in cols] + [
        f"util {'offline' if m == 'offline' else f'online {f}'}" for m, f in cols] + [
        "wall online s"]
    lines = ["# Offline and online gains over FIFO", "",
             f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} CPUs, "
             f"GPU {result['machine']['gpu'] or 'none'}, torch {result['machine']['torch']}; "
             f"commit `{result['machine']['commit']}`.", "", f"`{result['command']}`", "",
             f"Weighted throughput gain in percent and utilization gain in points over FIFO's "
             f"plan of the same scenario, mean over seeds {result['seeds']} (the trace row: one "
             f"run). Online: replanning every {result['replan_every']} step(s), seeing only "
             f"arrived jobs, demand forecast as named (oracle: the true future)."
             + (f" Every real-time service guaranteed min_served={result['min_served']:g} "
                "(rule 4; online plans aim at it, their shortfall is in the JSON); runs where "
                "it is impossible are left out: " + ", ".join(
                    f"{r['scenario']} seed {r['seed']}" for r in result["rows"]
                    if r["policy"] == "all") if result.get("min_served") is not None else ""),
             ""]
    if result["extra_policies"]:
        lines += ["Policies from outside the registry: " + ", ".join(
            f"`{v}`" for v in result["extra_policies"].values()), ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = result["rows"]
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    for policy in result["policies"]:
        for scenario in scenarios + ["mean of the seven"]:
            if scenario == "mean of the seven":
                pick = [r for r in rows if r["policy"] == policy and r["scenario"] in SEVEN]
            else:
                pick = [r for r in rows if r["policy"] == policy and r["scenario"] == scenario]
            if not pick:
                continue
            cells = [scenario, policy]
            for key, fmt in (("weighted_throughput_pct", "{:+.1f}%"),
                             ("utilization_points", "{:+.1f}")):
                for mode, f in cols:
                    same = [r for r in pick if r["mode"] == mode and r["forecast"] == f]
                    v = _mean([r.get(key) for r in same])
                    cells.append("refused" if same and all("refused" in r for r in same)
                                 else "-" if v is None else fmt.format(v))
            wall = _mean([r.get("wall_s") for r in pick if r["mode"] == "online"])
            cells.append("-" if wall is None else f"{wall:.1f}")
            lines.append("| " + " | ".join(cells) + " |")
    if not result["policies"]:
        lines += ["", "No policy besides FIFO in the registry: nothing to compare yet."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", nargs="+", default=SEVEN + TRACES)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--policies", nargs="+", help="registry policies (default: all)")
    p.add_argument("--extra-policy", action="append", metavar="NAME=MODULE:FUNCTION",
                   help="a policy outside the registry that honours Scenario.fixed")
    p.add_argument("--forecasts", nargs="+", default=list(FORECASTS), choices=FORECASTS)
    p.add_argument("--replan-every", type=int, default=1)
    p.add_argument("--min-served", type=float, default=None,
                   help="guarantee every real-time service this share of its demand (rule 4)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true", help="seed 0, replan every 6 steps")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "online"),
                   help="writes OUT.md and OUT.json")
    args = p.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    if args.quick:
        args.seeds, args.replan_every = [0], 6
    result = bench(args)
    text = markdown(result)
    atomic_write_text(args.out + ".json", json.dumps(result, indent=1))
    atomic_write_text(args.out + ".md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
