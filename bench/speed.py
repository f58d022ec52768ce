"""Speed and scale: how far each policy goes, and how fast.

For a ladder of sizes G x J x T, from the benchmark scenarios' size up to a
platform team's cluster, it generates a scenario with the project's
generator (the `mixed` scenario scaled: more nodes, more jobs, the same
offered load) and runs each policy on it in a fresh process, measuring:

- wall time of the policy (the time to its final plan) and its peak memory
  (CPU: peak resident bytes above those before the policy, via
  gpualloc.policies.allocator.memory.measure_rss_peak; CUDA: torch.cuda.max_memory_allocated);
- for the allocator: relaxation iterations per second, relax_s, repair_s,
  local_search_s (its Plan.info), the memory guard's estimate beside the
  measured peak, and its weighted throughput against greedy's and FIFO's;
- on CUDA: the fused step's time against the floor bytes_moved(G, J, T) /
  measured device-to-device copy bandwidth, and the ratio;
- policy `bound` (`--policies greedy,allocator,bound`): the per-pool LP
  bound where its matrix has at most --bound-max-nonzeros entries, and each
  policy's weighted throughput against it.

It writes markdown and JSON under bench/results/ with the machine and the git
commit, and prints the fitted exponent of time against G x J x T (least
squares on logs).

    python -m bench.speed --quick                # < 1 min on a CPU: the small end
    python -m bench.speed                        # CPU ladder up to --max-cpu
    python -m bench.speed --max-cpu 256x1000x168 --timeout 600
    python -m bench.speed --gpu                  # GPU ladder (bench/gpu.sh)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from bench.common import ROOT, cell, git_commit, machine, run_child, warm_up

# (G, J, T). The first rung is `mixed` itself (64 GPUs, 244 jobs, a week).
CPU_LADDER = [(32, 122, 96), (64, 244, 168), (128, 500, 168), (256, 1000, 168),
              (512, 1500, 168), (1024, 3000, 168)]
QUICK_LADDER = [(32, 122, 96), (64, 244, 168)]
GPU_LADDER = [(512, 1500, 168), (1024, 3000, 168), (2048, 5000, 336), (4096, 10000, 336)]
BASE = (64, 244, 168)  # mixed: 8 nodes of 8 H100, 60 + 120 + 60 rigid jobs, 4 services
POLICY_ORDER = ["fifo", "greedy", "allocator"]


# ---- scenarios ----------------------------------------------------------------------------

def scaled_mixed(G: int, J: int, T: int):
    """The `mixed` scenario's config scaled to G GPUs, J jobs, T hourly steps
    at the same offered load: nodes x G/64, real-time services x G/64 (so the
    elastic share stays), rigid job counts in mixed's proportions summing to
    the rest, durations stretched by the GPU-hours per rigid job."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from gpualloc.config import register_configs

    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        cfg = OmegaConf.to_object(compose("config", overrides=["+scenario=mixed"])).scenario
    G0, J0, T0 = BASE
    if G % 8:
        raise SystemExit(f"G={G}: must be a multiple of 8 (whole 8-GPU nodes)")
    cfg.name = f"mixed_{G}x{J}x{T}"
    cfg.horizon = T
    cfg.pools = [replace(cfg.pools[0], count=G // 8)]
    services = max(1, round(cfg.realtime_inference.services * G / G0))
    cfg.realtime_inference = replace(cfg.realtime_inference, services=services)
    kinds = [cfg.training, cfg.batch_inference, cfg.quantization]
    rigid0 = sum(w.count for w in kinds)
    rigid = max(J - services, len(kinds))
    counts = [round(w.count * rigid / rigid0) for w in kinds]
    counts[-1] = rigid - sum(counts[:-1])
    stretch = (G * T / rigid) / (G0 * T0 / rigid0)  # GPU-steps per rigid job, relative
    for name, w, n in zip(("training", "batch_inference", "quantization"), kinds, counts):
        setattr(cfg, name, replace(w, count=n,
                                   duration_median_hours=w.duration_median_hours * stretch,
                                   duration_max_hours=w.duration_max_hours * stretch))
    return cfg


# ---- one run (in a child process) ---------------------------------------------------------

def _bandwidth(device: torch.device, gib: float = 2.0) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + write counted)."""
    n = int(gib * 2**30) // 4
    src = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / reps
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 4 / seconds


def _kernel_step_time(G: int, J: int, T: int, dtype: torch.dtype, device: torch.device) -> float:
    """Seconds per fused step on a full-size grid (warmed up, synchronized)."""
    from gpualloc.kernels.pgd import pgd_step

    x = torch.rand(G, J, T, device=device).to(dtype)  # (G, J, T)
    compat = torch.ones(J, G, dtype=torch.bool, device=device)
    arrival = torch.zeros(J, dtype=torch.long, device=device)
    free = torch.ones(G, T, dtype=torch.bool, device=device)
    gain = 0.1 * torch.randn(J, T, device=device)
    price = 0.1 * torch.rand(G, T, device=device)
    rigid = torch.ones(J, dtype=torch.bool, device=device)
    for _ in range(2):  # compiles the kernel for this shape
        pgd_step(x, compat, arrival, free, gain, price, rigid, 0.1)
    torch.cuda.synchronize(device)
    reps = 10
    start = time.perf_counter()
    for _ in range(reps):
        pgd_step(x, compat, arrival, free, gain, price, rigid, 0.1)
    torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / reps
    del x
    torch.cuda.empty_cache()
    return seconds


def run_bound(s, row: dict, max_nonzeros: int, time_limit_s: float) -> dict:
    """The per-pool LP bound (an upper bound on every plan's weighted
    throughput) where its matrix has at most max_nonzeros entries."""
    from gpualloc.config import ExactConfig
    from gpualloc.policies.allocator.memory import measure_rss_peak
    from gpualloc.policies.bounds import lp_relaxation, pool_lp_nonzeros

    nonzeros = pool_lp_nonzeros(s)
    row["lp_nonzeros"] = nonzeros
    if nonzeros > max_nonzeros:
        return {**row, "status": f"not built: {nonzeros:.3g} nonzeros > {max_nonzeros:.3g}"}
    cfg = ExactConfig(lp_max_nonzeros=0, lp_time_limit_s=time_limit_s)  # the per-pool LP
    start = time.perf_counter()
    bound, peak = measure_rss_peak(lambda: lp_relaxation(s, cfg))
    ok = bound.value is not None
    return {**row, "status": "ok" if ok else f"no optimum in time ({bound.status})",
            "wall_s": time.perf_counter() - start, "peak_bytes": peak,
            "peak_kind": "peak RSS above the start", "weighted_throughput": bound.value,
            "bound_level": bound.level}


def run_one(G: int, J: int, T: int, policy: str, device: str, seed: int,
            solver: dict | None = None, bound: dict | None = None) -> dict:
    """Generate the scaled scenario, run one policy, return its row. `solver`
    overrides SolverConfig fields (default: conf/solver/default.yaml's values).
    Policy "bound": the per-pool LP bound instead (`bound`: max_nonzeros,
    time_limit_s)."""
    from gpualloc.check import check
    from gpualloc.config import RunConfig
    from gpualloc.scenario.generate import generate
    from gpualloc.kernels.pgd import bytes_moved
    from gpualloc.policies.allocator.memory import (ITEMSIZE, fit, grid_bytes, measure_rss_peak,
                                                    scenario_bytes, search_bytes)
    from gpualloc.metrics import metrics
    from gpualloc.policies import POLICIES
    from gpualloc.scenario import ScenarioError

    dev = torch.device(device)
    scfg = scaled_mixed(G, J, T)
    cfg = RunConfig(scenario=scfg, policies=[policy], device=device, seed=seed)
    cfg.solver.progress = False
    cfg.solver.seed = seed
    for key, value in (solver or {}).items():
        if not hasattr(cfg.solver, key):
            raise SystemExit(f"--set solver.{key}: SolverConfig has no such field")
        setattr(cfg.solver, key, value)
    s = generate(scfg, seed)
    row = {"G": s.G, "J": s.J, "T": s.T, "cells": s.G * s.J * s.T, "policy": policy,
           "device": device, "seed": seed, "offered_load": round(s.offered_load, 3),
           "estimate_bytes": scenario_bytes(s)}
    if policy == "bound":
        return run_bound(s, {**row, "estimate_bytes": None}, **(bound or {}))
    if policy == "allocator":
        try:  # the guard's estimate for the grid the run will build, or for no grid
            fitted, note = fit(s, cfg.solver, dev)
            row["estimate_bytes"] = (search_bytes(s) if fitted.rounding == "priority"
                                     else grid_bytes(s, fitted, dev))
        except ScenarioError:
            row["estimate_bytes"] = grid_bytes(s, cfg.solver, dev)
    if dev.type == "cuda" and policy == "allocator":
        itemsize = ITEMSIZE[cfg.solver.dtype]
        try:
            bw = _bandwidth(dev)
            step = _kernel_step_time(s.G, s.J, s.T, getattr(torch, cfg.solver.dtype), dev)
        except RuntimeError as e:  # out of memory, or a kernel fault (the context is lost)
            row.update(status=f"kernel timing failed: {(str(e).splitlines() or ['?'])[0]}")
            return row
        floor = bytes_moved(s.G, s.J, s.T, itemsize) / bw
        row.update(copy_bandwidth_gbs=bw / 1e9, floor_step_s=floor, kernel_step_s=step,
                   kernel_vs_floor=step / floor)
        torch.cuda.reset_peak_memory_stats(dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        before = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)

    def solve():
        start = time.perf_counter()
        plan = POLICIES[policy](s, cfg, dev)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return plan, time.perf_counter() - start

    try:
        (plan, wall), peak = measure_rss_peak(solve)
    except ScenarioError as e:  # the memory guard
        row.update(status=f"refused: {e}")
        return row
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated(dev) - before
    verdict = check(s, plan.owner.cpu())
    m = metrics(s, plan.owner)
    row.update(status="ok" if verdict.ok else f"INFEASIBLE: {verdict}", wall_s=wall,
               peak_bytes=peak, peak_kind="cuda max_memory_allocated" if dev.type == "cuda"
               else "peak RSS above the start",
               weighted_throughput=m["weighted_throughput"], utilization=m["utilization"])
    info = plan.info
    if policy == "allocator":
        iters = cfg.solver.iterations
        row.update(representation=info.get("representation"),
                   search_moves=(info.get("search_budget") or {}).get("moves"),
                   memory_guard=(info.get("memory_guard") or {}).get("relaxation"),
                   iterations=iters, relax_s=info.get("relax_s"), repair_s=info.get("repair_s"),
                   local_search_s=info.get("local_search_s"), rounding=info.get("rounding"),
                   iters_per_s=iters / info["relax_s"] if info.get("relax_s") and
                   info.get("representation") != "none" else None)
        if "floor_step_s" in row:
            row["relax_iter_s"] = info["relax_s"] / iters
            row["relax_iter_vs_floor"] = row["relax_iter_s"] / row["floor_step_s"]
    return row


def _child(spec: dict, timeout: float) -> dict:
    """One run in a fresh process (bench.common.run_child)."""
    return run_child("bench.speed", spec, timeout,
                     {k: spec[k] for k in ("G", "J", "T", "policy", "device", "seed")})


# ---- the report -------------------------------------------------------------------------------

def fit_exponent(rows: list[dict], policy: str) -> float | None:
    """Slope of log(wall) against log(G x J x T), least squares."""
    pts = [(math.log(r["cells"]), math.log(r["wall_s"])) for r in rows
           if r["policy"] == policy and r.get("status") == "ok" and r.get("wall_s")]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return (sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts))


def add_quality(rows: list[dict]) -> None:
    """The allocator's weighted throughput against greedy's and FIFO's, and
    every policy's against the LP bound, per size."""
    by = {(r["G"], r["J"], r["T"], r["policy"]): r for r in rows if r.get("status") == "ok"}
    for r in rows:
        if r["policy"] == "bound" or r.get("status") != "ok":
            continue
        others = ("greedy", "fifo", "bound") if r["policy"] == "allocator" else ("bound",)
        for other in others:
            o = by.get((r["G"], r["J"], r["T"], other))
            if o and o["weighted_throughput"]:
                r[f"vs_{other}"] = r["weighted_throughput"] / o["weighted_throughput"]


def _ms(v) -> str:
    return "-" if v is None else f"{1e3 * v:.2f}"


def _gib(v) -> str:
    return "-" if v is None else f"{v / 2**30:.2f}"


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = [f"# Speed and scale: {report['ladder']} ladder", "",
             f"- commit `{report['commit']}`, {report['date']}",
             f"- machine: {m['cpu']}, {m['cores']} cores (torch threads {m['torch_threads']}), "
             f"{m.get('memory_gib', '?')} GiB; GPU: {m.get('gpu') or 'none'}; "
             f"torch {m['torch']}; Triton {'yes' if m.get('triton') else 'no'}",
             f"- load average at start / end: {report['load_start']} / {report['load_end']}",
             f"- command: `{report['command']}`",
             f"- solver overrides: {report['solver_overrides']}"
             if report.get("solver_overrides") else None,
             f"- note: {report['note']}" if report.get("note") else None,
             "- scenarios: `mixed` scaled by bench/speed.py (same offered load); "
             + ("every policy in a fresh process" if report.get("isolated", True) else
                "all runs in one process (--quick: peaks after the first run are "
                "understated, freed memory is reused)")
             + "; grid: the allocator's relaxed grid, dense (G, J, T) or packed (only "
             "the cells a job can hold); peak = "
             + ("torch.cuda.max_memory_allocated" if report["ladder"] == "gpu" else
                "peak resident memory above the process's before the policy"),
             "", "| G x J x T | cells | load | policy | grid | status | wall s | peak GiB | "
             "estimate GiB | it/s | relax s | repair s | search s | wthr | vs greedy | "
             "vs FIFO | vs bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(
            f"| {r['G']} x {r['J']} x {r['T']} | {cell(r.get('cells'), '.3g')} | "
            f"{cell(r.get('offered_load'), '.2f')} | {r['policy']} | "
            f"{r.get('representation') or '-'} | {r.get('status', '?')[:60]} | "
            f"{cell(r.get('wall_s'), '.2f')} | {_gib(r.get('peak_bytes'))} | "
            f"{_gib(r.get('estimate_bytes'))} | {cell(r.get('iters_per_s'), '.2f')} | "
            f"{cell(r.get('relax_s'), '.1f')} | {cell(r.get('repair_s'), '.1f')} | "
            f"{cell(r.get('local_search_s'), '.1f')} | "
            f"{cell(r.get('weighted_throughput'), ',.0f')} | "
            f"{cell(r.get('vs_greedy'), '.3f')} | {cell(r.get('vs_fifo'), '.3f')} | "
            f"{cell(r.get('vs_bound'), '.4f')} |")
    cuda = [r for r in report["rows"] if "floor_step_s" in r]
    if cuda:
        lines += ["", "## The allocator's step against the memory-traffic floor", "",
                  "floor = bytes_moved(G, J, T, itemsize) / measured device copy bandwidth",
                  "", "| G x J x T | copy GB/s | floor ms | kernel ms | kernel / floor | "
                  "relax iteration ms | iteration / floor |", "|---|---|---|---|---|---|---|"]
        for r in cuda:
            lines.append(
                f"| {r['G']} x {r['J']} x {r['T']} | {r['copy_bandwidth_gbs']:.0f} | "
                f"{1e3 * r['floor_step_s']:.2f} | {1e3 * r['kernel_step_s']:.2f} | "
                f"{r['kernel_vs_floor']:.2f} | {_ms(r.get('relax_iter_s'))} | "
                f"{cell(r.get('relax_iter_vs_floor'), '.2f')} |")
    lines += ["", "## Time against G x J x T", ""]
    for policy, k in report["exponents"].items():
        lines.append(f"- {policy}: time ~ (G x J x T)^{cell(k, '.2f')}")
    if report.get("missing"):
        lines += ["", f"Not run: {report['missing']}"]
    return "\n".join(line for line in lines if line is not None) + "\n"


# ---- main ------------------------------------------------------------------------------

def _size(text: str) -> tuple[int, int, int]:
    try:
        G, J, T = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GxJxT, e.g. 512x1500x168")
    return G, J, T


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="the small end of the CPU ladder in one process (< 1 min)")
    ap.add_argument("--gpu", action="store_true", help="the GPU ladder on CUDA")
    ap.add_argument("--max-cpu", type=_size, default=(512, 1500, 168),
                    help="largest CPU rung, GxJxT (default 512x1500x168)")
    ap.add_argument("--sizes", type=lambda t: [_size(v) for v in t.split(",")],
                    help="explicit ladder, e.g. 64x244x168,128x500x168")
    ap.add_argument("--policies", default=",".join(POLICY_ORDER),
                    help="policies to run (those not registered are skipped)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    ap.add_argument("--budget", type=float, default=None,
                    help="total seconds: rungs not started by then are skipped")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--name", default=None, help="results file stem (default speed_<ladder>)")
    ap.add_argument("--note", default="", help="a line for the results (e.g. machine load)")
    ap.add_argument("--set", action="append", default=[], metavar="solver.KEY=VALUE",
                    help="override a solver setting (repeatable); the results record it")
    ap.add_argument("--bound-max-nonzeros", type=float, default=40e6,
                    help="policy `bound`: build the per-pool LP only up to this many nonzeros")
    ap.add_argument("--bound-time-limit", type=float, default=600.0,
                    help="policy `bound`: HiGHS's time limit, seconds")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(run_one(spec["G"], spec["J"], spec["T"], spec["policy"],
                                 spec["device"], spec["seed"], spec.get("solver"),
                                 spec.get("bound"))), flush=True)
        return 0
    if not args.quick:  # every compiled path cached before the runs' processes start
        warm_up()
    solver = {}
    for item in args.set:
        key, _, value = item.partition("=")
        if not key.startswith("solver.") or not value:
            ap.error(f"--set {item}: expected solver.KEY=VALUE")
        import yaml
        solver[key[len("solver."):]] = yaml.safe_load(value)

    from gpualloc.policies import POLICIES

    if args.gpu and not torch.cuda.is_available():
        print("error: --gpu needs a CUDA device (torch.cuda.is_available() is false); "
              "run the CPU ladder without --gpu", file=sys.stderr)
        return 2
    device = "cuda" if args.gpu else "cpu"
    ladder = "gpu" if args.gpu else "quick" if args.quick else "cpu"
    if args.sizes:
        sizes = args.sizes
    elif args.gpu:
        sizes = GPU_LADDER
    elif args.quick:
        sizes = QUICK_LADDER
    else:
        mx = args.max_cpu
        sizes = [s for s in CPU_LADDER if math.prod(s) <= math.prod(mx)]
        if mx not in sizes:
            sizes.append(mx)
    wanted = [p.strip() for p in args.policies.split(",") if p.strip()]
    policies = [p for p in wanted if p in POLICIES or p == "bound"]
    missing = [p for p in wanted if p not in policies]
    bound = {"max_nonzeros": int(args.bound_max_nonzeros),
             "time_limit_s": args.bound_time_limit}
    if missing:
        print(f"not registered on this commit, skipped: {', '.join(missing)}")

    report = {"ladder": ladder, "commit": git_commit(short=True), "machine": machine(),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m bench.speed " + " ".join(sys.argv[1:] if argv is None
                                                             else argv),
              "load_start": " ".join(f"{v:.1f}" for v in os.getloadavg()),
              "note": args.note, "missing": ", ".join(missing), "rows": [],
              "isolated": not args.quick, "solver_overrides": solver}
    started = time.monotonic()
    for G, J, T in sizes:
        for policy in policies:
            spec = {"G": G, "J": J, "T": T, "policy": policy, "device": device,
                    "seed": args.seed, "solver": solver, "bound": bound}
            if args.budget is not None and time.monotonic() - started > args.budget:
                row = {**spec, "status": "skipped (time budget spent)"}
            elif args.quick:
                row = run_one(G, J, T, policy, device, args.seed, solver, bound)  # here
            else:
                left = args.timeout if args.budget is None else max(
                    10.0, min(args.timeout, args.budget - (time.monotonic() - started)))
                row = _child(spec, left)
            report["rows"].append(row)
            _write(report, args, policies)  # after every run: a killed ladder keeps its rows
            print(f"{G:>5} x {J:>5} x {T:>3}  {policy:<9}  {row.get('status', '?')[:70]:<20}  "
                  f"wall {cell(row.get('wall_s'), '8.2f')} s  peak {_gib(row.get('peak_bytes'))} "
                  f"GiB  est {_gib(row.get('estimate_bytes'))} GiB", flush=True)
    _write(report, args, policies)
    for policy, k in report["exponents"].items():
        print(f"{policy}: time ~ (G x J x T)^{cell(k, '.2f')}")
    print(f"wrote {args.out / (report['stem'] + '.md')} and .json")
    return 0


def _write(report: dict, args, policies: list[str]) -> None:
    from gpualloc.files import atomic_write_text

    add_quality(report["rows"])
    report["exponents"] = {p: fit_exponent(report["rows"], p) for p in policies if p != "bound"}
    report["load_end"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
    report["stem"] = args.name or f"speed_{report['ladder']}"
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"{report['stem']}.json", json.dumps(report, indent=1))
    atomic_write_text(args.out / f"{report['stem']}.md", markdown(report))


if __name__ == "__main__":
    sys.exit(main())
