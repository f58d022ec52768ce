"""One online replan at a cluster's size: can a cluster of G GPUs be replanned
every step?

For each size G x J x T (bench.speed's scaled `mixed`), greedy runs online
(replanning every `--every` steps) up to step `--at`; the view the loop builds
there is kept: the jobs known then, the forecast real-time demand, the running
jobs fixed, and the last plan (greedy's) as the hint a replan starts from.
On that one view, each in a fresh process, it times:

- the allocator's full replan (relaxation, `online.search_moves` of search),
- its light replan (priority-order builds and the last plan grown with the
  new jobs, `online.arrival_search_moves` of search: what a replan between
  two full ones is, with `online.full_every`),
- greedy's replan (its backfill variant weighed over the whole view),

each plan checked against the view and valued (weighted throughput of the
view, PROBLEM.md). Writes bench/results/NAME.md and .json.

    python -m bench.online_replan --sizes 256x1000x168,1024x3000x168 --at 48
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.common import ROOT, cell, git_commit, machine, run_child

KINDS = ["allocator full", "allocator light", "greedy"]


class _Stop(Exception):
    pass


def view_at(G: int, J: int, T: int, at: int, every: int, seed: int):
    """(cfg, the loop's view at the first replan at or after `at`, its step)."""
    from bench.speed import scaled_mixed
    from gpualloc.config import OnlineConfig, RunConfig
    from gpualloc.online.loop import online
    from gpualloc.policies import POLICIES
    from gpualloc.run import build_scenario

    scfg = scaled_mixed(G, J, T)
    s = build_scenario(scfg, seed)
    cfg = RunConfig(scenario=scfg, mode="online", seed=seed, device="cpu",
                    online=OnlineConfig(replan_every=every))
    cfg.solver.progress = False
    cfg.solver.seed = seed
    got = {}

    def keep(tau, v, index):
        if tau >= at:
            got.update(view=v, tau=tau)
            raise _Stop

    # Greedy reads no hint; asked for one, the loop puts its last plan in the view.
    hinted = dataclasses.replace(POLICIES["greedy"], reads_hint=True)
    try:
        online(s, hinted, cfg, "cpu", name="greedy", on_view=keep)
    except _Stop:
        pass
    if "view" not in got:
        raise SystemExit(f"no replan at or after step {at} (T = {T})")
    return cfg, got["view"], got["tau"]


def run_one(G: int, J: int, T: int, kind: str, at: int, every: int, seed: int,
            device: str = "cpu") -> dict:
    import torch

    from gpualloc.check import check
    from gpualloc.objective import weighted_throughput
    from gpualloc.online.loop import replan_configs
    from gpualloc.policies import POLICIES
    from gpualloc.policies.allocator.memory import measure_rss_peak

    cfg, v, tau = view_at(G, J, T, at, every, seed)
    full, light = replan_configs(cfg)
    policy = "greedy" if kind == "greedy" else "allocator"
    use = light if kind == "allocator light" else full
    v.carry = None  # as at a full replan: greedy weighs its variants over the view
    row = {"G": G, "J": J, "T": T, "kind": kind, "device": device, "tau": tau, "view_T": v.T,
           "view_J": v.J, "hint": v.hint is not None, "window": v.window}

    def solve():
        start = time.perf_counter()
        plan = POLICIES[policy](v, use, torch.device(device))
        if device != "cpu":
            torch.cuda.synchronize()
        return plan, time.perf_counter() - start

    if device == "cpu":
        (plan, wall), peak = measure_rss_peak(solve)
    else:
        torch.cuda.reset_peak_memory_stats()
        plan, wall = solve()
        peak = torch.cuda.max_memory_allocated()
    verdict = check(v, plan.owner)
    info = plan.info
    row.update(status="ok" if verdict.ok else f"INFEASIBLE: {verdict}", wall_s=wall,
               peak_bytes=peak, value=weighted_throughput(v, plan.owner),
               relax_s=info.get("relax_s"), repair_s=info.get("repair_s"),
               search_s=info.get("local_search_s"), rounding=info.get("rounding"),
               moves=(info.get("search_budget") or {}).get("moves"))
    return row


def _child(spec: dict, timeout: float) -> dict:
    return run_child("bench.online_replan", spec, timeout, spec)


def markdown(report: dict) -> str:
    m = report["machine"]
    lines = ["# One online replan at a cluster's size", "",
             f"- commit `{report['commit']}`, {report['date']}",
             f"- machine: {m['cpu']}, {m['cores']} cores, torch {m['torch']}; GPU: "
             f"{m.get('gpu') or 'none'}; the replans on `{report.get('device', 'cpu')}` (peak: "
             "resident bytes on the CPU, allocated bytes on CUDA)",
             f"- load average at start / end: {report['load_start']} / {report['load_end']}",
             f"- command: `{report['command']}`",
             "- the view: greedy online (replanning every "
             f"{report['every']} steps) on bench.speed's scaled `mixed` up to the first replan "
             f"at or after step {report['at']}; the last plan is greedy's; each row in a fresh "
             "process; value: the view's weighted throughput", "",
             "| G x J x T | step | view jobs x steps | replan | status | wall s | peak GiB | "
             "relax s | repair s | search s (moves) | start kept | value | vs greedy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    greedy = {(r["G"], r["J"], r["T"]): r.get("value") for r in report["rows"]
              if r["kind"] == "greedy"}
    for r in report["rows"]:
        g = greedy.get((r["G"], r["J"], r["T"]))
        vs = r["value"] / g if g and r.get("value") is not None else None
        lines.append(
            f"| {r['G']} x {r['J']} x {r['T']} | {r.get('tau', '-')} | "
            f"{r.get('view_J', '-')} x {r.get('view_T', '-')} | {r['kind']} | "
            f"{r.get('status', '?')[:50]} | {cell(r.get('wall_s'), '.2f')} | "
            f"{cell(None if r.get('peak_bytes') is None else r['peak_bytes'] / 2**30, '.2f')} | "
            f"{cell(r.get('relax_s'), '.1f')} | {cell(r.get('repair_s'), '.1f')} | "
            f"{cell(r.get('search_s'), '.1f')} ({cell(r.get('moves'), 'd')}) | "
            f"{r.get('rounding') or '-'} | {cell(r.get('value'), ',.0f')} | {cell(vs, '.4f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from bench.speed import _size
    from gpualloc.files import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=lambda t: [_size(v) for v in t.split(",")],
                    default=[(256, 1000, 168), (1024, 3000, 168)])
    ap.add_argument("--at", type=int, default=48, help="the replan step (first at or after)")
    ap.add_argument("--every", type=int, default=6, help="greedy's replans on the way there")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="where the replans run (the view is "
                    "built on the CPU)")
    ap.add_argument("--kinds", type=lambda t: t.split(","), default=KINDS,
                    help="which replans, comma-separated: " + ", ".join(KINDS))
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per run")
    ap.add_argument("--name", default="online_replan")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(run_one(**spec)), flush=True)
        return 0
    report = {"commit": git_commit(short=True), "machine": machine(),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m bench.online_replan " + " ".join(
                  sys.argv[1:] if argv is None else argv),
              "at": args.at, "every": args.every, "device": args.device,
              "load_start": " ".join(f"{v:.1f}" for v in os.getloadavg()), "rows": []}
    for G, J, T in args.sizes:
        for kind in args.kinds:
            spec = {"G": G, "J": J, "T": T, "kind": kind, "at": args.at, "every": args.every,
                    "seed": args.seed, "device": args.device}
            row = _child(spec, args.timeout)
            report["rows"].append(row)
            report["load_end"] = " ".join(f"{v:.1f}" for v in os.getloadavg())
            atomic_write_text(args.out / f"{args.name}.json", json.dumps(report, indent=1))
            atomic_write_text(args.out / f"{args.name}.md", markdown(report))
            print(f"{G} x {J} x {T}  {kind:<16} {row.get('status', '?')[:40]:<10} "
                  f"wall {cell(row.get('wall_s'), '.2f')} s", flush=True)
    print(f"wrote {args.out / args.name}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
