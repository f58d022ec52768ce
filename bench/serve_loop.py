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


def measure(scenarios: list[str], seeds: list[int], windows: list[str] = ()) -> list[dict]:
    """Each of the seven's `scenarios` with each seed, then each real-trace
    window (bench.online_traces.WINDOWS, seed 0)."""
    import gpualloc as ga
    from gpualloc.check import check
    from gpualloc.slurm import bridge
    from gpualloc.slurm.serve import simulate

    rows = []
    runs = [(name, seed, lambda name=name, seed=seed: ga.generate(name, seed=seed))
            for name in scenarios for seed in seeds]
    runs += [(w, 0, lambda w=w: ga.load(TRACES / f"{w}.json")) for w in windows]
    for name, seed, load in runs:
        s = load()
        cfg = bridge.serve_config(seed)
        ways = {"greedy": lambda: simulate(s, "greedy", cfg),
                "allocator": lambda: simulate(s, "allocator", cfg),
                "greedy pinned": lambda: simulate(s, "greedy", cfg, move_replicas=False),
                "allocator pinned":
                    lambda: simulate(s, "allocator", cfg, move_replicas=False),
                "online loop": lambda: bridge.simulate_online(s, "allocator", seed)}
        row = {"scenario": name, "seed": seed, "value": {}, "wall_s": {}, "moves": {}}
        for way, run in ways.items():
            start = time.perf_counter()
            owner = run()
            row["wall_s"][way] = time.perf_counter() - start
            verdict = check(s, owner)
            assert verdict.ok_but_guarantee, (name, seed, way, str(verdict))
            row["value"][way] = bridge.metrics(s, owner)["weighted_throughput"]
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
    for name in dict.fromkeys(r["scenario"] for r in rows):
        mine = [r for r in rows if r["scenario"] == name]
        out[name] = {"runs": len(mine), "wall_s": {
            w: statistics.mean(r["wall_s"][w] for r in mine) for w in WAYS},
            "moves": {w: statistics.mean(r["moves"][w] for r in mine) for w in mine[0]["moves"]}}
        for way in WAYS[1:]:
            out[name][way] = {
                "lead": statistics.mean(r["value"][way] / r["value"]["greedy"] for r in mine),
                "below": [r["seed"] for r in mine if r["value"][way] < r["value"]["greedy"]]}
    return out


def markdown(result: dict) -> str:
    others = WAYS[1:]
    lines = ["# serve's loop simulated", "",
             f"Commit {result['commit']}, {result['date']}; machine: "
             f"{result['machine']['cpu']}, {result['machine']['cores']} cores "
             f"(`{result['command']}`).", "",
             (f"Seeds {result['seeds']} of the seven's contended scenarios. "
              if any(r["scenario"] not in result.get("windows", []) for r in result["rows"])
              else "") + "At each step the view serve would snapshot, the "
             "policy's plan of it (true demand curves), its first step taken "
             "(`gpualloc.slurm.serve.simulate`), with serve's settings (the online loop's "
             "full replan). Lead: the way's weighted throughput over greedy's (serve's "
             "default: replicas movable), mean over seeds; below: the seeds where it is "
             "lower. `pinned`: serve --pin-replicas (each replica held where it runs while "
             "the demand keeps it; serve before s80); `online loop`: gpualloc's online loop, "
             "oracle demand, every step. Moves: replica moves a step (a replica stopped on "
             "one node while one starts on another), greedy / allocator."
             + ("" if not result.get("windows") else " Real-trace windows (seed 0; "
                "bench/traces, see bench.online_traces): " + ", ".join(
                    f"`{w}` ({WINDOWS[w]})" for w in result["windows"]) + "."), "",
             "| scenario | runs | " + " | ".join(f"{w} | below" for w in others)
             + " | moves a step | time " + " / ".join(WAYS) + " (s) |",
             "|---|---|" + "---|---|" * len(others) + "---|---|"]
    for name, r in result["summary"].items():
        cells = " | ".join(f"x{r[w]['lead']:.4f} | {r[w]['below']}" for w in others)
        moves = " / ".join(f"{v:.2f}" for v in r["moves"].values())
        times = " / ".join(f"{r['wall_s'][w]:.1f}" for w in WAYS)
        lines.append(f"| {name} | {r['runs']} | {cells} | {moves} | {times} |")
    lines += ["", "| scenario | seed | " + " | ".join(WAYS) + " |",
              "|---|---|" + "---|" * len(WAYS)]
    for row in result["rows"]:
        lines.append(f"| {row['scenario']} | {row['seed']} | "
                     + " | ".join(f"{row['value'][w]:,.0f}" for w in WAYS) + " |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", nargs="*", default=CONTENDED)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--windows", nargs="*", default=[], choices=list(WINDOWS),
                    help="real-trace windows too (seed 0 each; their role in WINDOWS)")
    ap.add_argument("--tag", default="", help="suffix of the output stem")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    rows = measure(args.scenarios, args.seeds, args.windows)
    result = {"seeds": args.seeds, "windows": args.windows, "rows": rows,
              "summary": summarize(rows),
              **provenance("bench.serve_loop", argv)}
    write_results(args.out, "serve_loop" + args.tag, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
