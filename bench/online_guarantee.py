"""The guarantee held online: the seven with every real-time service
guaranteed (`min_served=1.0`) and training preemptible
(`preemptible=[training] restart_cost=1`), greedy and the allocator online,
against the free run (the same scenario without min_served).

    python -m bench.online_guarantee                  # seeds 0-2, replan every 6
    python -m bench.online_guarantee --seeds 1 --replan-every 1 --out /tmp/g

Per scenario and seed where rule 4 is feasible offline (`check_guarantee`):
each policy online (`last_day` forecast, greedy.preempt / solver.preempt on)
with and without the guarantee. Every plan is checked against rules 1-3 and
its replicas short of the guarantee (rule 4, `guarantee_shortfall`) are
reported with the value lost against the free run. Writes
bench/results/online_guarantee.{md,json} (the stem takes --tag).
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
from gpualloc.config import OnlineConfig
from gpualloc.core.guarantee import GuaranteeError, check_guarantee
from gpualloc.metrics import metrics
from gpualloc.online import run_policy
from gpualloc.run import build_scenario
from gpualloc.scenario import with_min_served, with_preemption

POLICIES = ("greedy", "allocator")


def measure(seeds: list[int], replan_every: int, headroom: float,
            scenarios: list[str], settings=("free", "guaranteed")) -> list[dict]:
    torch.set_num_threads(1)
    rows = []
    for name in scenarios:
        for seed in seeds:
            base = composed(f"+scenario={name}", f"seed={seed}", "solver.progress=false",
                            "online.forecast=last_day", f"online.replan_every={replan_every}",
                            "mode=online", "greedy.preempt=true", "solver.preempt=true",
                            f"online.guarantee_headroom={headroom}")
            free = with_preemption(build_scenario(base.scenario, seed), ["training"], 1)
            held = with_min_served(free, 1.0)
            try:
                check_guarantee(held)
            except GuaranteeError:
                rows.append({"scenario": name, "seed": seed, "impossible": True})
                continue
            for policy in POLICIES:
                for setting, s in (("free", free), ("guaranteed", held)):
                    if setting not in settings:
                        continue
                    start = time.perf_counter()
                    owner = run_policy(policy, s, copy.deepcopy(base), torch.device("cpu")).owner
                    wall = time.perf_counter() - start
                    verdict = check(s, owner)
                    assert verdict.ok_but_guarantee, (name, seed, policy, setting, str(verdict))
                    m = metrics(s, owner)
                    rows.append({"scenario": name, "seed": seed, "policy": policy,
                                 "setting": setting, "wall_s": wall,
                                 **{k: m.get(k, 0) for k in (
                                     "weighted_throughput", "guarantee_shortfall",
                                     "realtime_slo", "preemptions", "restore_gpu_steps")}})
            print(name, seed, flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    def get(name, seed, policy, setting, key):
        return next(r[key] for r in rows if (r["scenario"], r["seed"], r.get("policy"),
                                             r.get("setting")) == (name, seed, policy, setting))

    out = {}
    for name in dict.fromkeys(r["scenario"] for r in rows):
        seeds = sorted({r["seed"] for r in rows if r["scenario"] == name and "policy" in r})
        row = {"impossible_seeds": sorted(r["seed"] for r in rows
                                          if r["scenario"] == name and r.get("impossible")),
               "seeds": seeds}
        for p in POLICIES:
            if not seeds:
                continue
            row[f"{p}_shortfall"] = [get(name, s, p, "guaranteed", "guarantee_shortfall")
                                     for s in seeds]
            row[f"{p}_lost_pct"] = statistics.mean(
                100 * (1 - get(name, s, p, "guaranteed", "weighted_throughput")
                       / get(name, s, p, "free", "weighted_throughput")) for s in seeds)
            row[f"{p}_preemptions"] = statistics.mean(
                get(name, s, p, "guaranteed", "preemptions") for s in seeds)
            row[f"{p}_wall_s"] = statistics.mean(
                get(name, s, p, "guaranteed", "wall_s") for s in seeds)
        out[name] = row
    return out


def markdown(result: dict) -> str:
    lines = ["# The guarantee held online", "",
             f"Commit {result['commit']}, {result['date']}; machine: {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores, shared with other work (wall times are "
             f"indicative only) (`{result['command']}`).", "",
             f"Online, `last_day` forecast, replanning every {result['replan_every']} steps, "
             f"`online.guarantee_headroom={result['headroom']:g}`; training preemptible "
             "(restart_cost 1), greedy.preempt and solver.preempt on. `guaranteed`: "
             "`min_served=1.0` on every real-time service; `free`: the same scenario without. "
             "Every plan checked against rules 1-3. Short: replicas below rule 4's guarantee "
             "summed over services and steps, per seed. Lost: 1 - guaranteed / free weighted throughput of the same "
             "policy online, mean over seeds.", "",
             "| scenario | seeds | greedy short | greedy lost | greedy preemptions "
             "| allocator short | allocator lost | allocator preemptions |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in result["summary"].items():
        if not r["seeds"]:
            lines.append(f"| {name} | rule 4 impossible offline on seeds "
                         f"{r['impossible_seeds']} | | | | | | |")
            continue
        cells = []
        for p in POLICIES:
            cells += [f"{r[p + '_shortfall']}",
                      f"{r[p + '_lost_pct']:.2f}%", f"{r[p + '_preemptions']:.1f}"]
        lines.append(f"| {name} | {r['seeds']} | " + " | ".join(cells) + " |")
    left = {n: r["impossible_seeds"] for n, r in result["summary"].items()
            if r["impossible_seeds"]}
    if left:
        lines += ["", "Rule 4 impossible offline (left out): "
                  + "; ".join(f"{n} seeds {v}" for n, v in left.items()) + "."]
    total = {p: sum(sum(r.get(p + "_shortfall", [])) for r in result["summary"].values())
             for p in POLICIES}
    lines += ["", "Replicas short in all: " + ", ".join(f"{p} {v:,}" for p, v in total.items())
              + ".", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--replan-every", type=int, default=6)
    ap.add_argument("--headroom", type=float, default=OnlineConfig().guarantee_headroom,
                    help="online.guarantee_headroom (default: its default)")
    ap.add_argument("--scenarios", nargs="+", default=SEVEN)
    ap.add_argument("--tag", default="", help="suffix of the output stem")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    rows = measure(args.seeds, args.replan_every, args.headroom, args.scenarios)
    result = {"seeds": args.seeds, "replan_every": args.replan_every, "headroom": args.headroom,
              "rows": rows, "summary": summarize(rows),
              **provenance("bench.online_guarantee", argv)}
    write_results(args.out, "online_guarantee" + args.tag, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
