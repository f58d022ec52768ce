"""Online wall times before and after a change, interleaved on one machine.

    python -m bench.online_before_after --base 35d24e3 --out bench/results/online_before_after
    python -m bench.online_before_after --base HEAD~1 --scenarios mixed --seeds 0 --rounds 1 --out /tmp/x
    python -m bench.online_before_after --base HEAD~1 --guarantee --out /tmp/g

Greedy and the allocator online on the same cases (bench.online_traces's:
the seven's scenarios x seeds, trace windows, generated sizes), once with
this checkout and once with `--base` (checked out into a temporary git
worktree), each side in its own process. The sides alternate over
`--rounds` (base first in odd rounds, this checkout first in even ones), so
both see this VM's speed drift alike. Per run: whether the two plans are
the same bit for bit, both values, each side's median wall time (the
policy's own, `wall_s`) and their ratio. With `--guarantee`, every run
guarantees each real-time service (`min_served=1.0`) with training
preemptible (`preemptible=[training] restart_cost=1`), as
bench.online_guarantee runs them (a scenario where it cannot be met is left
out). Writes OUT.md and OUT.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from bench.common import GUARANTEE, ROOT, SEVEN, git_commit, machine, run_in, worktree
from gpualloc.files import atomic_write_text

# Runs in a checkout of either commit: only what both have.
RECORD = r'''
import argparse, hashlib, json, sys
spec = json.loads(sys.argv[1])
import gpualloc as ga
from bench.online_traces import cases, warm_up  # both sides have it there

extra = spec.get("settings", {})  # the run's options (--guarantee)
warm_up()
for name in ("mixed", "heterogeneous"):  # every timed path compiled before timing
    small = ga.generate(name, seed=0, horizon=48)
    for policy in ("greedy", "allocator"):
        for every in spec["replan_every"]:
            ga.plan(small, policy, mode="online", online={"replan_every": every}, **extra)
out = []
args = argparse.Namespace(only=spec["only"], windows=spec["windows"], generated=spec["generated"],
                          scenarios=spec["scenarios"], seeds=spec["seeds"])
for kind, name, seed, make in cases(args):
    s = make()
    for policy in ("greedy", "allocator"):
        for every in spec["replan_every"]:
            try:
                p = ga.plan(s, policy, seed=seed, mode="online", online={"replan_every": every},
                            **extra)
            except ga.ScenarioError:  # the guarantee impossible on this scenario: no row
                continue
            out.append({"case": name, "seed": seed, "policy": policy, "replan_every": every,
                        "wall_s": p.wall_s,
                        "value": ga.metrics(p.scenario, p)["weighted_throughput"],
                        "plan": hashlib.sha1(p.owner.numpy().tobytes()).hexdigest()})
print(json.dumps(out))
'''


def key(row: dict) -> tuple:
    return row["case"], row["seed"], row["policy"], row["replan_every"]


def compare(args) -> dict:
    spec = {"only": "all" if args.windows else "seven", "windows": args.windows,
            "generated": args.generated, "scenarios": args.scenarios, "seeds": args.seeds,
            "replan_every": args.replan_every,
            "settings": GUARANTEE if args.guarantee else {}}
    runs: dict[str, list[list[dict]]] = {"base": [], "head": []}
    with worktree(args.base) as base:
        for r in range(args.rounds):
            for side in (("base", "head") if r % 2 == 0 else ("head", "base")):
                runs[side].append(run_in(base if side == "base" else ROOT, RECORD, spec))
                print(f"round {r + 1}: {side} done", file=sys.stderr, flush=True)
    rows = []
    for i, first in enumerate(runs["base"][0]):
        b = [rnd[i] for rnd in runs["base"]]
        h = [rnd[i] for rnd in runs["head"]]
        assert all(key(x) == key(first) for x in b + h)
        wb = statistics.median(x["wall_s"] for x in b)
        wh = statistics.median(x["wall_s"] for x in h)
        rows.append({"case": first["case"], "seed": first["seed"], "policy": first["policy"],
                     "replan_every": first["replan_every"],
                     "same_plan": len({x["plan"] for x in b + h}) == 1,
                     "value_base": b[0]["value"], "value_head": h[0]["value"],
                     "wall_base_s": wb, "wall_head_s": wh, "walls_base": [x["wall_s"] for x in b],
                     "walls_head": [x["wall_s"] for x in h]})
    return {"machine": machine(), "commit": git_commit(), "base": args.base,
            "command": "python -m bench.online_before_after " + " ".join(sys.argv[1:]),
            "rounds": args.rounds, "settings": spec["settings"], "rows": rows}


def report(result: dict) -> str:
    rows = result["rows"]
    lines = [
        "# Online wall times before and after",
        "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} CPUs; "
        f"this checkout `{result['commit']}` against `{result['base']}`; "
        f"{result['rounds']} rounds, the sides alternating"
        + (f"; every run with {result['settings']}." if result.get("settings") else "."),
        "",
        f"`{result['command']}`",
        "",
        "Wall: the policy's own time online, the median over the rounds; ratio: this "
        "checkout's against the base's (below 1: faster).",
        "",
        "| case | seed | policy | every | same plan | value base | value now | wall base s "
        "| wall now s | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['seed']} | {r['policy']} | {r['replan_every']} | "
            f"{'yes' if r['same_plan'] else 'no'} | {r['value_base']:,.0f} | "
            f"{r['value_head']:,.0f} | {r['wall_base_s']:.2f} | {r['wall_head_s']:.2f} | "
            f"x{r['wall_head_s'] / r['wall_base_s']:.2f} |")
    lines += ["", "| policy | every | runs | same plans | wall base s (sum) | wall now s (sum) "
              "| ratio |", "|---|---|---|---|---|---|---|"]
    for policy in ("greedy", "allocator"):
        for every in sorted({r["replan_every"] for r in rows}, reverse=True):
            part = [r for r in rows if r["policy"] == policy and r["replan_every"] == every]
            wb, wh = sum(r["wall_base_s"] for r in part), sum(r["wall_head_s"] for r in part)
            lines.append(f"| {policy} | {every} | {len(part)} | "
                         f"{sum(r['same_plan'] for r in part)} | {wb:.1f} | {wh:.1f} | "
                         f"x{wh / wb:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="the commit to compare with")
    p.add_argument("--scenarios", nargs="*", default=SEVEN)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--windows", nargs="*", default=[])
    p.add_argument("--generated", nargs="*", default=[], metavar="GxJxT")
    p.add_argument("--replan-every", type=int, nargs="+", default=[6, 1])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--guarantee", action="store_true",
                   help="every run with min_served=1.0 and training preemptible")
    p.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    args = p.parse_args()
    result = compare(args)
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(result, indent=1))
    atomic_write_text(args.out.with_suffix(".md"), report(result))
    print(report(result))


if __name__ == "__main__":
    main()
