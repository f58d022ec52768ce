"""Quality benchmark (issue 4): weighted throughput of every policy against the
best bound there is, on the seven benchmark scenarios and on random small ones.

    python -m bench.quality            # the seven x 3 seeds, 30 small seeds
    python -m bench.quality --quick    # the seven x 1 seed, 5 small seeds, short limits

- Small scenarios (SMALL below, 8 GPUs, 16 steps, 11 jobs): fifo, greedy,
  allocator (when the registry has it) and exact (CP-SAT). The bound is the
  proven optimum, or CP-SAT's best bound (and the LP bound) when the time
  limit hits first.
- The seven (conf/scenario/, composed with Hydra): fifo, greedy, allocator;
  exact is far above its size limit there, so the bound is the better of the
  LP relaxation and the per-pool MIP (HiGHS's proven bound after
  exact.mip_time_limit_s; 5 s with --quick).
- gap = 1 - policy / bound. Also: wall times, and how long CP-SAT took to
  reach each policy's objective on small ones (hinted with greedy's plan
  unless --no-hint, so "to match greedy" is near 0 by construction).

Writes bench/results/quality[_quick][_small|_seven][_nohint].{json,md} with the
machine and the commit.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from bench.common import SEVEN, git_commit, machine, warm_up
from gpualloc.config import (ExactConfig, GeneratedScenarioConfig, PoolConfig,
                             RealtimeWorkloadConfig, RigidWorkloadConfig, RunConfig,
                             register_configs)
from gpualloc.check import check
from gpualloc.policies.bounds import lp_relaxation, mip_bound
from gpualloc.policies.exact import exact, model_size
from gpualloc.scenario.generate import generate
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import POLICIES
from gpualloc.policies import rivals

# Random small scenarios that CP-SAT proves optimal in seconds on 2 cores
# (most in under 3 s; about 1 in 10 still open at 30 s). Two 4-GPU H100
# nodes, 16 one-hour steps, 10 rigid jobs and one real-time service: offered
# load about 1.2.
SMALL = GeneratedScenarioConfig(
    name="small", horizon=16, step_minutes=60,
    pools=[PoolConfig(name="h100", count=2, gpus_per_node=4, gpu_type="H100", memory_gb=80.0)],
    training=RigidWorkloadConfig(count=2, gpus=[1, 2, 4, 8], priority=[3, 8],
                                 duration_median_hours=6.0),
    batch_inference=RigidWorkloadConfig(count=5, gpus=[1, 2, 4], priority=[1, 6],
                                        duration_median_hours=3.0),
    quantization=RigidWorkloadConfig(count=3, gpus=[1, 2, 4], priority=[1, 6],
                                     duration_median_hours=2.0),
    realtime_inference=RealtimeWorkloadConfig(services=1, gpus=[1, 2], peak_replicas=[2, 4],
                                              priority=[7, 10]))


def heuristics() -> list[str]:
    """The registry's heuristic policies, in report order."""
    return [p for p in ("fifo", "greedy", "allocator") if p in POLICIES]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(name: str, s, cfg: RunConfig, device: torch.device) -> dict:
    sync(device)
    start = time.perf_counter()
    plan = POLICIES[name](s, cfg, device)
    sync(device)
    wall = time.perf_counter() - start
    verdict = check(s, plan.owner)
    if not verdict.ok:
        raise RuntimeError(f"{name} returned an infeasible plan on {s.name}:\n{verdict}")
    return {"objective": weighted_throughput(s, plan.owner), "wall_s": wall}


def gap(value: float, bound: float | None) -> float | None:
    return None if not bound else 1.0 - value / bound


def time_to_reach(trajectory, value: float) -> float | None:
    """Seconds CP-SAT took to find a plan at least as good as `value`."""
    for t, obj in trajectory:
        if obj >= value - 1e-9 * max(1.0, abs(value)):
            return t
    return None


def run_small(seeds, cfg: RunConfig, device, log) -> list[dict]:
    rows = []
    for seed in seeds:
        s = generate(SMALL, seed)
        row = {"seed": seed, "gpus": s.G, "jobs": s.J, "offered_load": s.offered_load,
               "policies": {p: timed(p, s, cfg, device) for p in heuristics()}}
        start = time.perf_counter()
        plan = exact(s, cfg.exact, device, seed=seed, rivals=rivals())
        wall = time.perf_counter() - start
        info = plan.info
        assert check(s, plan.owner).ok
        bounds = [b for b in (info["best_bound"], info["lp_bound"]) if b is not None]
        bound = info["objective"] if info["optimal"] else min(bounds)
        row["policies"]["exact"] = {"objective": info["objective"], "wall_s": wall,
                                    "solve_s": info["solve_s"], "optimal": info["optimal"],
                                    "status": info["status"]}
        row.update(bound=bound, optimal=info["optimal"], lp_bound=info["lp_bound"],
                   variables=info["variables"])
        for name, r in row["policies"].items():
            r["gap"] = gap(r["objective"], bound)
            if name != "exact":
                r["cpsat_s_to_match"] = time_to_reach(info["trajectory"], r["objective"])
                # What a user waits for: building the model counts too.
                r["cpsat_wall_to_match"] = (None if r["cpsat_s_to_match"] is None
                                            else info["build_s"] + r["cpsat_s_to_match"])
        rows.append(row)
        log(f"small seed {seed:3d}: " + "  ".join(
            f"{n} {pct(r['gap'])}" for n, r in row["policies"].items())
            + f"  ({info['status']}, {info['solve_s']:.1f}s)")
    return rows


def compose_seven() -> dict[str, RunConfig]:
    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return {n: OmegaConf.to_object(compose("config", overrides=[f"+scenario={n}"]))
                for n in SEVEN}


def bound_of(s, exact_cfg: ExactConfig) -> dict:
    """The best upper bound on `s`'s weighted throughput: the smaller of the LP
    relaxation and the per-pool MIP's proven bound (the MIP may stop before
    its root LP is solved: the smaller wins). bound, kind ("LP" or "MIP"),
    lp and mip values (None: none), seconds, and both runs (LPBound)."""
    lp = lp_relaxation(s, exact_cfg)
    mip = mip_bound(s, exact_cfg)
    bound = min(b for b in (lp.value, mip.value, float("inf")) if b is not None)
    return {"bound": bound, "kind": "LP" if bound == lp.value else "MIP", "lp": lp.value,
            "mip": mip.value, "seconds": lp.seconds + mip.seconds, "lp_run": lp, "mip_run": mip}


def run_seven(seeds, cfgs: dict[str, RunConfig], exact_cfg: ExactConfig, device, log):
    rows = []
    for name in SEVEN:
        for seed in seeds:
            cfg = cfgs[name]
            s = generate(cfg.scenario, seed)
            row = {"scenario": name, "seed": seed, "gpus": s.G, "jobs": s.J,
                   "timesteps": s.T, "offered_load": s.offered_load,
                   "policies": {p: timed(p, s, cfg, device) for p in heuristics()}}
            row["exact_variables"] = model_size(s)  # vs exact.max_variables
            b = bound_of(s, exact_cfg)
            lp, mip = b["lp_run"], b["mip_run"]
            row.update(bound=b["bound"], bound_kind=b["kind"],
                       lp=lp.value, lp_level=lp.level, lp_s=lp.seconds, lp_status=lp.status,
                       mip=mip.value, mip_s=mip.seconds, mip_status=mip.status)
            for r in row["policies"].values():
                r["gap"] = gap(r["objective"], b["bound"])
                r["gap_lp"] = gap(r["objective"], lp.value)
            rows.append(row)
            log(f"{name:18s} seed {seed}: " + "  ".join(
                f"{n} {pct(r['gap'])}" for n, r in row["policies"].items())
                + f"  (LP {lp.level} {lp.seconds:.1f}s, MIP {mip.status} {mip.seconds:.1f}s)")
    return rows


# ---- summary and files ---------------------------------------------------------

def summarize(small: list[dict], seven: list[dict]) -> dict:
    out: dict = {"small": {}, "seven": {}}
    names = list(small[0]["policies"]) if small else []
    for n in names:
        gaps = [r["policies"][n]["gap"] for r in small]
        walls = [r["policies"][n]["wall_s"] for r in small]
        out["small"][n] = {"median_gap": statistics.median(gaps), "mean_gap": statistics.mean(gaps),
                           "max_gap": max(gaps), "median_wall_s": statistics.median(walls)}
    if small:
        out["small_proven_optimal"] = sum(r["optimal"] for r in small) / len(small)
        out["small_scenarios"] = len(small)
        if "allocator" in names:
            ahead = [r["policies"]["allocator"]["objective"] > r["policies"]["greedy"]["objective"]
                     + 1e-9 for r in small]
            out["small_allocator_above_greedy"] = sum(ahead) / len(ahead)
            level = [r["policies"]["allocator"]["objective"] >= r["policies"]["greedy"]["objective"]
                     - 1e-9 for r in small]
            out["small_allocator_at_least_greedy"] = sum(level) / len(level)
            # Where greedy is already optimal nothing can be above it: the share
            # that can move is the seeds where greedy is below the proven optimum.
            open_ = [r for r in small if r["optimal"] and r["policies"]["greedy"]["objective"]
                     < r["policies"]["exact"]["objective"] - 1e-9]
            out["small_greedy_below_optimum"] = len(open_)
            out["small_allocator_above_greedy_there"] = sum(
                r["policies"]["allocator"]["objective"] > r["policies"]["greedy"]["objective"]
                + 1e-9 for r in open_)
            out["small_allocator_optimal"] = sum(
                r["optimal"] and r["policies"]["allocator"]["objective"]
                >= r["policies"]["exact"]["objective"] - 1e-9 for r in small)
            # The allocator's wall time over CP-SAT's wall time (model build plus
            # solve) to reach the same objective; seeds where CP-SAT never reached
            # it within its limit are counted apart.
            ratios = [r["policies"]["allocator"]["wall_s"] / r["policies"]["allocator"]["cpsat_wall_to_match"]
                      for r in small if r["policies"]["allocator"].get("cpsat_wall_to_match")]
            out["small_allocator_not_reached_by_cpsat"] = sum(
                r["policies"]["allocator"].get("cpsat_wall_to_match") is None for r in small)
            out["small_allocator_time_over_cpsat_median"] = (statistics.median(ratios)
                                                             if ratios else None)
            out["small_allocator_time_over_cpsat_at_most_tenth"] = (
                sum(x <= 0.1 for x in ratios) / len(ratios) if ratios else None)
            captured = [(r["policies"]["allocator"]["objective"] - r["policies"]["fifo"]["objective"])
                        / (r["policies"]["exact"]["objective"] - r["policies"]["fifo"]["objective"])
                        for r in small if r["optimal"]
                        and r["policies"]["exact"]["objective"] > r["policies"]["fifo"]["objective"]]
            out["small_allocator_gap_captured_median"] = (statistics.median(captured)
                                                          if captured else None)
    for name in SEVEN:
        rs = [r for r in seven if r["scenario"] == name]
        if not rs:
            continue
        out["seven"][name] = {
            n: {"mean_gap": statistics.mean(r["policies"][n]["gap"] for r in rs),
                "mean_gap_lp": statistics.mean(r["policies"][n]["gap_lp"] for r in rs),
                "mean_wall_s": statistics.mean(r["policies"][n]["wall_s"] for r in rs)}
            for n in rs[0]["policies"]}
        out["seven"][name]["lp_s"] = statistics.mean(r["lp_s"] for r in rs)
        out["seven"][name]["mip_under_lp"] = statistics.mean(1 - r["bound"] / r["lp"] for r in rs)
    return out


def pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown(result: dict) -> str:
    m, summ = result["machine"], result["summary"]
    lines = [f"# Quality benchmark{' (quick)' if result['quick'] else ''}", "",
             f"- command: `{result['command']}`",
             f"- commit: `{result['commit']}`, date {result['date']}",
             f"- machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}, "
             f"OR-Tools {m.get('ortools', '-')}, device {result['device']}; "
             f"load average at start {m.get('load_average_at_start', '-')}",
             f"- exact: CP-SAT time limit {result['exact']['time_limit_s']} s, workers "
             f"{result['exact']['workers'] or 'all cores'}, hinted with greedy's plan: "
             f"{result['exact']['hint']}",
             "", "gap = 1 - policy / bound; lower is better.", ""]
    small = result["small"]
    if small:
        names = list(summ["small"])
        lines += [f"## Random small scenarios ({len(small)} seeds, 8 GPUs, 16 steps)", "",
                  f"Bound: the CP-SAT optimum (proven on {pct(summ['small_proven_optimal'])} of "
                  f"the seeds), else min(CP-SAT best bound, LP bound).", "",
                  "| policy | median gap | mean gap | max gap | median wall s |",
                  "|---|---|---|---|---|"]
        for n in names:
            r = summ["small"][n]
            lines.append(f"| {n} | {pct(r['median_gap'])} | {pct(r['mean_gap'])} | "
                         f"{pct(r['max_gap'])} | {r['median_wall_s']:.2f} |")
        if "small_allocator_above_greedy" in summ:
            ratio = summ["small_allocator_time_over_cpsat_median"]
            lines += ["", f"Allocator above greedy on {pct(summ['small_allocator_above_greedy'])} "
                      f"of the small scenarios, at least equal on "
                      f"{pct(summ['small_allocator_at_least_greedy'])}; greedy is below the proven "
                      f"optimum on {summ['small_greedy_below_optimum']} of them, and the allocator "
                      f"above greedy on {summ['small_allocator_above_greedy_there']} of those; the "
                      f"allocator is optimal on {summ['small_allocator_optimal']}; median share of the "
                      f"FIFO-to-optimum gap captured: "
                      f"{pct(summ['small_allocator_gap_captured_median'])}. Allocator wall time "
                      f"over CP-SAT's wall time (model build and solve) to reach the same "
                      f"objective: median {'-' if ratio is None else f'{ratio:.2f}'}, at most "
                      f"0.1 on {pct(summ['small_allocator_time_over_cpsat_at_most_tenth'])} of "
                      f"the seeds CP-SAT reached; CP-SAT never reached the allocator's objective "
                      f"within its limit on {summ['small_allocator_not_reached_by_cpsat']}."]
        else:
            lines += ["", "No allocator in the registry on this commit: its columns are absent."]
        matched = [n for n in ("greedy", "allocator") if n in names]
        lines += ["", "Per seed (gap; CP-SAT status and solve time; CP-SAT seconds, model "
                  "build included, to reach each heuristic's objective, and the heuristic's "
                  "own seconds):", "",
                  "| seed | load | " + " | ".join(names) + " | CP-SAT | "
                  + " | ".join(f"CP-SAT s to {n} / {n} s" for n in matched) + " |",
                  "|---|---|" + "---|" * len(names) + "---|" + "---|" * len(matched)]
        for r in small:
            ex = r["policies"]["exact"]
            cells = []
            for n in matched:
                match = r["policies"][n].get("cpsat_wall_to_match")
                cells.append(("-" if match is None else f"{match:.2f}")
                             + f" / {r['policies'][n]['wall_s']:.2f}")
            lines.append(f"| {r['seed']} | {r['offered_load']:.2f} | " + " | ".join(
                pct(r["policies"][n]["gap"]) for n in names)
                + f" | {ex['status']} {ex['solve_s']:.1f}s | " + " | ".join(cells) + " |")
    if result["seven"]:
        names = [n for n in next(iter(summ["seven"].values()))
                 if n not in ("lp_s", "mip_under_lp")]
        seeds = sorted({r["seed"] for r in result["seven"]})
        with_mip = all("mip" in r for r in result["seven"])  # older results: LP only
        bound = "the better of the LP relaxation and the per-pool MIP" if with_mip else "LP relaxation"
        lines += ["", f"## The seven scenarios (seeds {', '.join(map(str, seeds))}; bound: "
                  f"{bound}, exact is above its size limit)", "",
                  f"Mean gap to the bound ({bound}) over the seeds"
                  + (", the allocator's to the LP alone, how far under the LP the bound is"
                     if with_mip else "") + ", and mean wall time.", "",
                  "| scenario | " + " | ".join(f"{n} gap" for n in names) + " | "
                  + ("allocator gap to LP | bound under LP | " if with_mip else "")
                  + " | ".join(f"{n} s" for n in names) + " | LP s |",
                  "|---|" + "---|" * (2 * len(names) + 1 + 2 * with_mip)]
        for name, r in summ["seven"].items():
            lines.append(f"| {name} | " + " | ".join(pct(r[n]["mean_gap"]) for n in names)
                         + (f" | {pct(r['allocator']['mean_gap_lp'])} | "
                            f"{100 * r['mip_under_lp']:.2f}%" if with_mip else "")
                         + " | " + " | ".join(f"{r[n]['mean_wall_s']:.2f}" for n in names)
                         + f" | {r['lp_s']:.1f} |")
        lines += ["", "Per run (MIP: HiGHS's proven bound at its time limit; -: none):", "",
                  "| scenario | seed | GPUs | jobs | load | LP | MIP | "
                  + " | ".join(names) + " |", "|---|---|---|---|---|---|---|" + "---|" * len(names)]
        for r in result["seven"]:
            lp, mip = r.get("lp", r["bound"]), r.get("mip")
            lines.append(f"| {r['scenario']} | {r['seed']} | {r['gpus']} | {r['jobs']} | "
                         f"{r['offered_load']:.2f} | {lp:,.0f} | "
                         f"{'-' if mip is None else f'{mip:,.0f}'} | " + " | ".join(
                             f"{r['policies'][n]['objective']:,.0f} ({pct(r['policies'][n]['gap'])})"
                             for n in names) + " |")
    return "\n".join(lines) + "\n"


def print_summary(result: dict) -> None:
    summ = result["summary"]
    if summ["small"]:
        print(f"\nsmall scenarios ({summ['small_scenarios']}, proven optimal "
              f"{pct(summ['small_proven_optimal'])}): median gap "
              + ", ".join(f"{n} {pct(r['median_gap'])}" for n, r in summ["small"].items()))
        if "small_allocator_above_greedy" in summ:
            ratio = summ["small_allocator_time_over_cpsat_median"]
            print(f"allocator above greedy on {pct(summ['small_allocator_above_greedy'])} of them, "
                  f"at least equal on {pct(summ['small_allocator_at_least_greedy'])}; wall time "
                  f"over CP-SAT's time to the same objective: median "
                  f"{'-' if ratio is None else f'{ratio:.2f}'}")
        else:
            print("allocator: not in the registry on this commit")
    for name, r in summ["seven"].items():
        print(f"{name:18s} gap to the bound: " + ", ".join(
            f"{n} {pct(v['mean_gap'])}" for n, v in r.items()
            if n not in ("lp_s", "mip_under_lp")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="one seed of the seven, 5 small seeds, 10 s CP-SAT limit")
    ap.add_argument("--seeds", type=int, default=None, help="seeds of the seven (default 3)")
    ap.add_argument("--small-seeds", type=int, default=None, help="small seeds (default 30)")
    ap.add_argument("--time-limit", type=float, default=None, help="CP-SAT seconds (default 30)")
    ap.add_argument("--no-hint", action="store_true",
                    help="CP-SAT without greedy's plan as a hint: its time to reach a policy's "
                         "objective is then CP-SAT's own")
    ap.add_argument("--only", choices=["small", "seven"], default=None)
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    seeds = range(args.seeds if args.seeds is not None else (1 if args.quick else 3))
    small_seeds = range(args.small_seeds if args.small_seeds is not None
                        else (5 if args.quick else 30))
    limit = args.time_limit if args.time_limit is not None else (10.0 if args.quick else 30.0)
    device = torch.device(args.device)

    cfgs = compose_seven()
    run_cfg = RunConfig()
    run_cfg.exact = replace(run_cfg.exact, time_limit_s=limit, hint=not args.no_hint,
                            **({"mip_time_limit_s": 5.0} if args.quick else {}))

    def log(msg: str) -> None:
        print(msg, flush=True)

    # Warm up: imports, allocator caches, the CP-SAT and HiGHS libraries.
    warm = generate(SMALL, 10_000)
    for p in heuristics():
        POLICIES[p](warm, run_cfg, device)
    exact(warm, replace(run_cfg.exact, time_limit_s=1.0), device, rivals=rivals())

    result = {"quick": args.quick, "command": " ".join(["python -m bench.quality", *sys.argv[1:]]),
              "commit": git_commit(),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "machine": machine(), "device": str(device),
              "exact": {"time_limit_s": limit, "workers": run_cfg.exact.workers,
                        "hint": run_cfg.exact.hint},
              "small_config": OmegaConf.to_container(OmegaConf.structured(SMALL)),
              "policies": heuristics() + ["exact"]}
    result["small"] = (run_small(small_seeds, run_cfg, device, log)
                       if args.only in (None, "small") else [])
    result["seven"] = (run_seven(seeds, cfgs, run_cfg.exact, device, log)
                       if args.only in (None, "seven") else [])
    result["summary"] = summarize(result["small"], result["seven"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "quality" + "".join(f"_{part}" for part, on in (
        ("quick", args.quick), (args.only, args.only), ("nohint", args.no_hint)) if on)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(markdown(result))
    print_summary(result)
    print(f"\nwrote {out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
