"""Quality on workloads unlike the seven: the `broad` family (conf/scenario/broad.yaml).

    python -m bench.family                    # 20 seeds at 64 GPUs, 5 at 256 -> bench/results/family.{md,json}
    python -m bench.family --quick            # 3 seeds at 64 GPUs
    python -m bench.family --sizes 32:10 512:3 --name family_sizes   # other sizes
    python -m bench.family --set solver=quality --name family_quality \
        --bounds-from bench/results/family.json   # other settings, the bounds of an earlier run

Heterogeneous clusters (8-GPU H100 and A100 40/80 GB nodes, 4-GPU L40S
nodes), odd and multi-node gangs, type and memory needs, unplaceable jobs,
seven real-time services per 64 GPUs; 256 GPUs is the same family with four
times the nodes, jobs and services. Per run: FIFO, the plain EASY backfill
(policies/backfill.py), greedy and the allocator, every plan checked, and two
upper bounds (gpualloc.policies.exact): the LP (per GPU within 20 s, else per
pool within exact.lp_time_limit_s) and the per-pool MIP's bound proven in 20 s. Reported: gap to the
better bound (1 - value / bound), how much tighter the MIP is, allocator over
greedy, greedy over backfill: medians and worst cases.

The seeds reported start at 100 (`--first-seed`): nothing was tuned on them;
seeds 0-99 are the family's tuning set.
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

from bench.common import ROOT, composed, git_commit, machine, warm_up
from gpualloc.check import check
from gpualloc.scenario.generate import generate
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import POLICIES
from gpualloc.policies.bounds import lp_relaxation, mip_bound

POLICY_ORDER = ["fifo", "backfill", "greedy", "allocator"]
LP_SECONDS = 20.0


def family(scale: float, overrides: tuple[str, ...] = (), scenario: str = "broad"):
    """The broad family's run config at `scale` x 64 GPUs (`overrides`: as on
    the command line of a run): node, job and service counts times `scale`,
    rounded (at least one of each)."""
    cfg = composed(f"+scenario={scenario}", "solver.progress=false", *overrides)
    sc = cfg.scenario
    if scale != 1:
        def times(n: int) -> int:
            return max(1, round(n * scale))
        sc.pools = [replace(p, count=times(p.count)) for p in sc.pools]
        sc.name = f"{scenario}_{sum(p.count * p.gpus_per_node for p in sc.pools)}"
        for kind in ("training", "batch_inference", "quantization"):
            w = getattr(sc, kind)
            setattr(sc, kind, replace(w, count=times(w.count)))
        sc.realtime_inference = replace(sc.realtime_inference,
                                        services=times(sc.realtime_inference.services))
    return cfg


def run(seeds: list[int], scale: float, overrides: tuple[str, ...] = (),
        bounds: dict | None = None, scenario: str = "broad") -> list[dict]:
    torch.set_num_threads(1)
    cfg = family(scale, overrides, scenario)
    cpu = torch.device("cpu")
    rows = []
    for seed in seeds:
        cfg.seed = cfg.solver.seed = seed
        s = generate(cfg.scenario, seed)
        row = {"gpus": s.G, "jobs": s.J, "seed": seed, "offered_load": s.offered_load,
               "unplaceable": int(s.unplaceable.sum())}
        for policy in POLICY_ORDER:
            start = time.perf_counter()
            owner = POLICIES[policy](s, cfg, cpu).owner
            row[f"{policy}_s"] = time.perf_counter() - start
            assert check(s, owner).ok, (policy, seed)
            row[policy] = weighted_throughput(s, owner)
        known = (bounds or {}).get((s.G, seed))
        if (known is not None and known["offered_load"] == row["offered_load"]
                and known["lp"] is not None):
            # The same scenario (same size, seed and load) bounded in an earlier run.
            row.update({k: known[k] for k in ("lp", "lp_level", "lp_s", "mip", "mip_s",
                                               "mip_status", "bound")})
            rows.append(row)
            print(s.G, seed, {p: row[p] for p in POLICY_ORDER + ["lp", "mip"]}, flush=True)
            continue
        # The per-GPU LP within 20 s, else the per-pool aggregate (weaker,
        # still an upper bound) within exact.lp_time_limit_s: the bound of
        # last resort (at 512 GPUs it can take more than 20 s).
        bound = lp_relaxation(s, replace(cfg.exact, lp_time_limit_s=LP_SECONDS))
        if bound.value is None:
            bound = lp_relaxation(s, replace(cfg.exact, lp_max_nonzeros=0))
        mip = mip_bound(s, replace(cfg.exact, mip_time_limit_s=LP_SECONDS))
        row.update(lp=bound.value, lp_level=bound.level, lp_s=bound.seconds,
                   mip=mip.value, mip_s=mip.seconds, mip_status=mip.status,
                   bound=min(b for b in (bound.value, mip.value, float("inf")) if b is not None))
        rows.append(row)
        print(s.G, seed, {p: row[p] for p in POLICY_ORDER + ["lp", "mip"]}, flush=True)
    return rows


def markdown(result: dict) -> str:
    lines = [f"# Quality on the {result.get('scenario', 'broad')} family", "",
             f"Commit {result['commit']}, {result['date']}; {result['machine']['cpu']}, "
             f"{result['machine']['cores']} cores; one torch thread (`{result['command']}`). "
             "Seeds reported start at 100; nothing was tuned on them. Every plan checked.", "",
             "| GPUs | seeds | load (mean) | gap to the better bound: FIFO / backfill / "
             "greedy / allocator (median; worst) | allocator gap to LP (median; worst) | "
             "MIP under LP (median; max) | allocator / greedy (median; min) | "
             "greedy / backfill (median; min) | allocator s (median) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for G in sorted({r["gpus"] for r in result["rows"]}):
        rs = [r for r in result["rows"] if r["gpus"] == G and r["lp"]]
        best = [r.get("bound", r["lp"]) for r in rs]
        gaps = {p: [1 - r[p] / b for r, b in zip(rs, best)] for p in POLICY_ORDER}
        lp_gap = [1 - r["allocator"] / r["lp"] for r in rs]
        tighter = [1 - b / r["lp"] for r, b in zip(rs, best)]
        ag = [r["allocator"] / r["greedy"] for r in rs]
        gb = [r["greedy"] / r["backfill"] for r in rs]
        cell = " / ".join(f"{100 * statistics.median(gaps[p]):.1f}%" for p in POLICY_ORDER)
        worst = " / ".join(f"{100 * max(gaps[p]):.1f}%" for p in POLICY_ORDER)
        lines.append(
            f"| {G} | {len(rs)} | {statistics.mean(r['offered_load'] for r in rs):.2f} | "
            f"{cell}; {worst} | {100 * statistics.median(lp_gap):.1f}%; "
            f"{100 * max(lp_gap):.1f}% | {100 * statistics.median(tighter):.2f}%; "
            f"{100 * max(tighter):.2f}% | x{statistics.median(ag):.3f}; x{min(ag):.3f} | "
            f"x{statistics.median(gb):.3f}; x{min(gb):.3f} | "
            f"{statistics.median(r['allocator_s'] for r in rs):.1f} |")
    lines += ["", "Per run:", "", "| GPUs | seed | load | unplaceable | FIFO | backfill | "
              "greedy | allocator | LP bound | MIP bound |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        bound = f"{r['lp']:,.0f} ({r['lp_level']})" if r["lp"] else "-"
        mip = f"{r['mip']:,.0f}" if r.get("mip") else "-"
        values = " | ".join(f"{r[p]:,.0f}" for p in POLICY_ORDER)
        lines.append(f"| {r['gpus']} | {r['seed']} | {r['offered_load']:.2f} | "
                     f"{r['unplaceable']} | {values} | {bound} | {mip} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 seeds at 64 GPUs only")
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a run override for every policy, e.g. solver.time_limit_s=15")
    ap.add_argument("--name", help="results file stem (default: family or family_quick)")
    ap.add_argument("--sizes", nargs="+", metavar="GPUS:SEEDS",
                    help="cluster sizes (multiples of 32 GPUs) and seeds per size, "
                         "e.g. 32:10 512:3 (default 64:20 256:5; --quick 64:3)")
    ap.add_argument("--scenario", default="broad",
                    help="the family's scenario (conf/scenario/): broad, or broad_types (issue 25)")
    ap.add_argument("--bounds-from", type=Path, metavar="JSON",
                    help="reuse the bounds of an earlier results file for the same scenarios")
    args = ap.parse_args(argv)
    warm_up()  # every compiled path first: the rows time plans
    first = args.first_seed
    sizes = args.sizes or (["64:3"] if args.quick else ["64:20", "256:5"])
    plan = []
    for size in sizes:
        gpus, _, n = size.partition(":")
        if not (gpus.isdigit() and n.isdigit() and int(gpus) % 32 == 0 and int(gpus) > 0):
            ap.error(f"--sizes {size}: expected GPUS:SEEDS, GPUS a multiple of 32")
        plan.append((range(first, first + int(n)), int(gpus) / 64))
    bounds = None
    if args.bounds_from:
        bounds = {(r["gpus"], r["seed"]): r for r in json.loads(args.bounds_from.read_text())["rows"]
                  if "mip" in r}
    rows = []
    for seeds, scale in plan:
        rows += run(list(seeds), scale, tuple(args.set), bounds, args.scenario)
    result = {"scenario": args.scenario, "rows": rows, "commit": git_commit(short=True), "machine": machine(),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m bench.family " + " ".join(
                  sys.argv[1:] if argv is None else argv)}
    stem = args.name or ("family_quick" if args.quick else "family")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    md = markdown(result)
    (args.out / f"{stem}.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
