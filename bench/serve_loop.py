"""`serve`'s loop simulated: the plans `gpualloc slurm serve` would execute
on a Slurm that does exactly as told (gpualloc.slurm.serve.simulate), per
scenario and seed, greedy and the allocator side by side.

    python -m bench.serve_loop                         # seeds 0-2, the six contended
    python -m bench.serve_loop --seeds 6 7 8 9 --tag _tuning

At each step serve snapshots what runs and waits, plans the view (the true
demand curves, as its --demand file gives them) and takes the plan's first
step. Per run, with serve's settings (`bridge.serve_config`: a full replan
of the online loop): greedy and the allocator as serve runs by default (its
replicas movable: the plan places the service, serve moves a replica whose
GPUs it gives to other work), and with `--pin-replicas` (each replica held
where it runs while the demand keeps it: serve before s80); and, for
reference, gpualloc's own online loop with the allocator (oracle demand,
replanning every step: `bridge.simulate_online`). Every plan goes through
the checker (rules 1-3). Per moving way, the replica moves a step: a
replica stopped on one node while one starts on another. Writes
bench/results/serve_loop.{md,json} (the stem takes --tag).

With `--guarantee`, each scenario is planned with every service
guaranteed and training preemptible (bench.common.GUARANTEE: min_served
1.0, restart cost 1), serve holding rule 4 at each step
(`bridge.held_guarantee`: preemptible jobs requeued where the plan leaves a
guaranteed service short), beside the same policies free (no guarantee, no
preemption: `greedy free`, `allocator free`); per run, the replica-steps
short of the guarantee and the runs serve requeued (segments after a
job's first).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench.common import ROOT, provenance, write_results
from bench.online_traces import CONTENDED, TRACES, WINDOWS

WAYS = ("greedy", "allocator", "greedy pinned", "allocator pinned", "online loop")
GUARANTEED_WAYS = ("greedy", "allocator", "online loop", "greedy free", "allocator free")


def replica_moves(s, owner) -> int:
    """Replica moves in the (G, T) plan: at each step, per service, the
    fewer of the replicas it stops on some nodes and starts on others."""
    import torch

    on = s.gpu_node[:, None] == torch.arange(len(s.node_pool))  # (G, N)
    total = 0
    for j, job in enumerate(s.jobs):
        if job.rigid:
            continue
        count = ((owner == j).T.long() @ on.long()) // job.gpus  # (T, N) replicas a node
        change = count[1:] - count[:-1]
        total += int(torch.minimum(change.clamp(min=0).sum(1), (-change).clamp(min=0).sum(1))
                     .sum())
    return total


def rule4_possible(s) -> bool:
    """Whether the guaranteed replicas of every step fit on the cluster with
    no rigid job running (PROBLEM.md rule 4: else no plan keeps it, offline
    or online)."""
    from gpualloc.core.guarantee import GuaranteeError, check_guarantee
    try:
        check_guarantee(s)
    except GuaranteeError:
        return False
    return True


def measure(scenarios: list[str], seeds: list[int], windows: list[str] = (),
            guarantee: bool = False, forecast: str = "oracle",
            headroom: float = 0.0, only: list[str] | None = None) -> list[dict]:
    """Each of the seven's `scenarios` with each seed, then each real-trace
    window (bench.online_traces.WINDOWS, seed 0); `guarantee`: as the module
    docstring says; `forecast`, `headroom`: serve.simulate's (the online
    loop with the same forecast)."""
    import gpualloc as ga
    from bench.common import GUARANTEE
    from gpualloc.check import check, shortfall
    from gpualloc.plan import segments
    from gpualloc.scenario.edit import with_min_served, with_preemption
    from gpualloc.slurm import bridge
    from gpualloc.slurm.serve import simulate

    rows = []
    runs = [(name, seed, lambda name=name, seed=seed: ga.generate(name, seed=seed))
            for name in scenarios for seed in seeds]
    runs += [(w, 0, lambda w=w: ga.load(TRACES / f"{w}.json")) for w in windows]
    for name, seed, load in runs:
        free = s = load()
        if guarantee:
            s = with_min_served(with_preemption(free, GUARANTEE["preemptible"],
                                                GUARANTEE["restart_cost"]),
                                GUARANTEE["min_served"])
        cfg = bridge.serve_config(seed)
        kw = dict(forecast=forecast, headroom=headroom)
        ways = {"greedy": (s, lambda: simulate(s, "greedy", cfg, **kw)),
                "allocator": (s, lambda: simulate(s, "allocator", cfg, **kw)),
                "greedy pinned":
                    (s, lambda: simulate(s, "greedy", cfg, move_replicas=False, **kw)),
                "allocator pinned":
                    (s, lambda: simulate(s, "allocator", cfg, move_replicas=False, **kw)),
                "online loop":
                    (s, lambda: bridge.simulate_online(s, "allocator", seed, forecast)),
                "greedy free": (free, lambda: simulate(free, "greedy", cfg, **kw)),
                "allocator free": (free, lambda: simulate(free, "allocator", cfg, **kw))}
        row = {"scenario": name, "seed": seed, "value": {}, "wall_s": {}, "moves": {},
               "short": {}, "requeued": {}}
        if guarantee:
            row["rule4_possible"] = rule4_possible(s)
        for way in [w for w in (GUARANTEED_WAYS if guarantee else WAYS)
                    if only is None or w in only]:
            planned, run = ways[way]
            start = time.perf_counter()
            owner = run()
            row["wall_s"][way] = time.perf_counter() - start
            verdict = check(planned, owner)
            assert verdict.ok_but_guarantee, (name, seed, way, str(verdict))
            row["value"][way] = bridge.metrics(planned, owner)["weighted_throughput"]
            row["short"][way] = int(shortfall(planned, owner).sum())
            row["requeued"][way] = int((segments(planned, owner).new.sum(1) - 1).clamp(min=0)
                                       .sum())
            if way in ("greedy", "allocator"):
                row["moves"][way] = replica_moves(s, owner) / s.T
        rows.append(row)
        print(name, seed, row["value"], flush=True)
    return rows


def summarize(rows: list[dict]) -> dict:
    """Per scenario: each way's mean ratio to greedy's value and the seeds
    where it is below greedy; the mean time of each way, and the moving
    ways' replica moves a step."""
    out = {}
    ways = list(rows[0]["value"])
    for name in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == name]
        out[name] = {"runs": len(mine), "wall_s": {
            w: statistics.mean(r["wall_s"][w] for r in mine) for w in ways},
            "moves": {w: statistics.mean(r["moves"][w] for r in mine) for w in mine[0]["moves"]},
            "short": {w: sum(r.get("short", {}).get(w, 0) for r in mine
                             if r.get("rule4_possible", True)) for w in ways},
            "impossible": [r["seed"] for r in mine if not r.get("rule4_possible", True)],
            "requeued": {w: statistics.mean(r.get("requeued", {}).get(w, 0) for r in mine)
                         for w in ways}}
        if "allocator free" in ways:  # what the guarantee costs each policy
            out[name]["kept"] = {p: statistics.mean(r["value"][p] / r["value"][f"{p} free"]
                                                    for r in mine)
                                 for p in ("greedy", "allocator")}
        for way in ways[1:]:
            out[name][way] = {
                "lead": statistics.mean(r["value"][way] / r["value"]["greedy"] for r in mine),
                "below": [r["seed"] for r in mine if r["value"][way] < r["value"]["greedy"]]}
    return out


def markdown(result: dict) -> str:
    ways = list(result["rows"][0]["value"])
    others = ways[1:]
    guaranteed = bool(result.get("guarantee")) or "allocator free" in ways
    lines = ["# serve's loop simulated" + (", every service guaranteed" if guaranteed else ""),
             "",
             f"Commit {result['commit']}, {result['date']}; machine: "
             f"{result['machine']['cpu']}, {result['machine']['cores']} cores "
             f"(`{result['command']}`).", "",
             (f"Seeds {result['seeds']} of the seven's contended scenarios. "
              if any(r["scenario"] not in result.get("windows", []) for r in result["rows"])
              else "") + "At each step the view serve would snapshot, the "
             "policy's plan of it ("
             + ("true demand curves" if result.get("forecast", "oracle") == "oracle" else
                f"the step's actual demand, then the `{result['forecast']}` forecast from the "
                f"demand seen so far, as an autoscaler would rewrite serve's demand file; "
                f"--guarantee-headroom {result.get('headroom', 0):g}; the online loop with "
                f"the same forecast")
             + "), its first step taken "
             "(`gpualloc.slurm.serve.simulate`), with serve's settings (the online loop's "
             "full replan). Lead: the way's weighted throughput over greedy's (serve's "
             "default: replicas movable), mean over seeds; below: the seeds where it is "
             "lower. `pinned`: serve --pin-replicas (each replica held where it runs while "
             "the demand keeps it; serve before s80); `online loop`: gpualloc's online loop, "
             "oracle demand, every step. Moves: replica moves a step (a replica stopped on "
             "one node while one starts on another), greedy / allocator."
             + ("" if not result.get("windows") else " Real-trace windows (seed 0; "
                "bench/traces, see bench.online_traces): " + ", ".join(
                    f"`{w}` ({WINDOWS[w]})" for w in result["windows"]) + ".")
             + ("" if not guaranteed else
                " Every service guaranteed (`min_served` 1.0) and training preemptible at "
                "restart cost 1 (bench.common.GUARANTEE); `free`: the same policy on the "
                "scenario without either. Short: replica-steps below the guarantee, summed "
                "over the seeds where rule 4 is possible at all (its guaranteed replicas fit "
                "the cluster with no rigid job running), greedy / allocator / online loop; "
                "the seeds where it is not follow it in brackets; requeued: runs a step cut "
                "and resumed later (segments after a job's first), mean a run, greedy / "
                "allocator; kept: the guaranteed run's value over its free run's, greedy / "
                "allocator.") + (f" {result['note']}" if result.get("note") else ""), "",
             "| scenario | runs | " + " | ".join(f"{w} | below" for w in others)
             + " | moves a step"
             + (" | short | requeued | kept" if guaranteed else "")
             + " | time " + " / ".join(ways) + " (s) |",
             "|---|---|" + "---|---|" * len(others) + "---|"
             + ("---|---|---|" if guaranteed else "") + "---|"]
    for name, r in result["summary"].items():
        cells = " | ".join(f"x{r[w]['lead']:.4f} | {r[w]['below']}" for w in others)
        moves = " / ".join(f"{v:.2f}" for v in r["moves"].values())
        times = " / ".join(f"{r['wall_s'][w]:.1f}" for w in ways)
        extra = ""
        if guaranteed:
            planned = [w for w in ways if not w.endswith(" free")]
            extra = (" | " + " / ".join(str(r["short"][w]) for w in planned)
                     + (f" {r['impossible']}" if r["impossible"] else "")
                     + " | " + " / ".join(f"{r['requeued'][w]:.1f}" for w in ways[:2])
                     + " | " + (" / ".join(f"x{v:.4f}" for v in r["kept"].values())
                                if "kept" in r else "-"))
        lines.append(f"| {name} | {r['runs']} | {cells} | {moves}{extra} | {times} |")
    lines += ["", "| scenario | seed | " + " | ".join(ways) + " |",
              "|---|---|" + "---|" * len(ways)]
    for row in result["rows"]:
        lines.append(f"| {row['scenario']} | {row['seed']} | "
                     + " | ".join(f"{row['value'][w]:,.0f}" for w in ways) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", default=CONTENDED)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--windows", nargs="*", default=[], choices=list(WINDOWS),
                    help="real-trace windows too (seed 0 each; their role in WINDOWS)")
    ap.add_argument("--guarantee", action="store_true",
                    help="every service guaranteed, training preemptible (module docstring)")
    ap.add_argument("--forecast", default="oracle", choices=["oracle", "last_day", "ewma"],
                    help="the demand file as an autoscaler rewrites it each step: the step's "
                         "actual demand, then this forecast (oracle: the true curves)")
    ap.add_argument("--headroom", type=float, default=0.0,
                    help="serve's --guarantee-headroom")
    ap.add_argument("--ways", help="only these ways, comma-separated (greedy first)")
    ap.add_argument("--tag", default="", help="suffix of the output stem")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    rows = measure(args.scenarios, args.seeds, args.windows, args.guarantee, args.forecast,
                   args.headroom, args.ways.split(",") if args.ways else None)
    result = {"seeds": args.seeds, "windows": args.windows, "guarantee": args.guarantee,
              "forecast": args.forecast, "headroom": args.headroom,
              "rows": rows,
              "summary": summarize(rows),
              **provenance("bench.serve_loop", argv)}
    write_results(args.out, "serve_loop" + args.tag, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
