"""Online settings side by side: one policy online under each named setting,
on the same cases, run back to back per case so both see the same machine.
How a default of `online.*` (or `solver.*`) is chosen and checked.

    python -m bench.online_settings --setting base= --setting relax30=online.relax_iterations=30 \\
        --scenarios mixed training_heavy --seeds 3 4 5 --replan-every 6 --out bench/results/x

A setting is NAME=OVERRIDE[,OVERRIDE...] (Hydra overrides; NAME= alone: the
defaults); the first is the reference. Cases are bench.online_traces's: the
seven's contended scenarios by seed, windows of bench/traces/, bench.speed's
scaled `mixed`. Every plan is the Python API's, so it goes through the
checker. Values do not depend on load (the search's budget is work); wall
times are the policy call's, each setting's beside the reference's.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from types import SimpleNamespace

from bench.common import git_commit, machine, warm_up
from bench.online_traces import CONTENDED, WINDOWS, cases, load_avg
from gpualloc.files import atomic_write_text


def parse_setting(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=OVERRIDE[,OVERRIDE...]")
    return name, [o for o in overrides.split(",") if o]


def run(args, result: dict, save) -> None:
    import gpualloc as ga

    warm_up()
    where = SimpleNamespace(only="all" if args.windows else "seven", windows=args.windows,
                            generated=args.generated, scenarios=args.scenarios, seeds=args.seeds)
    if not args.scenarios:
        where.only = "traces" if args.windows else "none"
    for every in args.replan_every:
        for kind, name, seed, make in cases(where):
            s = make()
            for setting, overrides in args.setting:
                before = load_avg()
                start = time.perf_counter()
                p = ga.online(s, args.policy, seed=seed, replan_every=every, overrides=overrides)
                wall = time.perf_counter() - start
                result["rows"].append({
                    "case": name, "kind": kind, "seed": seed, "replan_every": every,
                    "setting": setting, "wall_s": wall, "load_avg_before": before,
                    "weighted_throughput": ga.metrics(s, p)["weighted_throughput"]})
                save(result)


def markdown(result: dict) -> str:
    rows, names = result["rows"], [n for n, _ in result["settings"]]
    ref = names[0]
    out = [f"# Online settings side by side: {result['policy']}", "",
           f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} CPUs; "
           f"commit `{result['machine']['commit']}`.", "", f"`{result['command']}`", "",
           "Settings: " + "; ".join(f"`{n}`: {' '.join(o) or 'the defaults'}"
                                    for n, o in result["settings"]), "",
           f"Value: weighted throughput summed over the seeds, against `{ref}`; runs below and "
           f"above `{ref}`'s value; wall: the policy calls summed, against `{ref}`'s.", ""]
    head = "| case | every | seeds | " + " | ".join(
        f"{n} value | {n} below/above | {n} wall s" for n in names) + " |"
    out += [head, "|" + "---|" * (3 + 3 * len(names))]
    keys = sorted({(r["replan_every"], r["case"]) for r in rows},
                  key=lambda k: (k[0], list(WINDOWS).index(k[1]) if k[1] in WINDOWS else 99, k[1]))
    totals = {n: [0.0, 0.0, 0, 0] for n in names}
    for every, case in keys:
        by = {(r["setting"], r["seed"]): r for r in rows
              if r["case"] == case and r["replan_every"] == every}
        seeds = sorted({seed for _, seed in by})
        cells = []
        for n in names:
            runs = [(by[(n, x)], by.get((ref, x))) for x in seeds if (n, x) in by]
            v = sum(r["weighted_throughput"] for r, _ in runs)
            v_ref = sum(b["weighted_throughput"] for _, b in runs if b)
            w = sum(r["wall_s"] for r, _ in runs)
            w_ref = sum(b["wall_s"] for _, b in runs if b)
            gaps = [r["weighted_throughput"] - b["weighted_throughput"] for r, b in runs if b]
            below, above = sum(g < -1e-6 for g in gaps), sum(g > 1e-6 for g in gaps)
            t = totals[n]
            t[0], t[1], t[2], t[3] = t[0] + v, t[1] + w, t[2] + below, t[3] + above
            rel = "" if n == ref or not v_ref else f" (x{v / v_ref:.4f})"
            wrel = "" if n == ref or not w_ref else f" (x{w / w_ref:.2f})"
            cells.append(f"{v:,.0f}{rel} | {below}/{above} | {w:.1f}{wrel}")
        span = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"{seeds[0]}"
        out.append(f"| {case} | {every} | {span} | " + " | ".join(cells) + " |")
    t_ref = totals[ref]
    out += ["", "All cases: " + "; ".join(
        f"`{n}` value x{t[0] / t_ref[0]:.4f}, below/above on {t[2]}/{t[3]} runs, wall "
        f"x{t[1] / t_ref[1]:.2f}" for n, t in totals.items() if n != ref) + "."]
    return "\n".join(out) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--setting", action="append", type=parse_setting, required=True,
                   help="NAME=OVERRIDE[,OVERRIDE...]; the first is the reference")
    p.add_argument("--policy", default="allocator")
    p.add_argument("--scenarios", nargs="*", default=CONTENDED)
    p.add_argument("--seeds", nargs="+", type=int, default=[3, 4, 5])
    p.add_argument("--windows", nargs="*", default=[], choices=list(WINDOWS))
    p.add_argument("--generated", nargs="*", default=[], metavar="GxJxT")
    p.add_argument("--replan-every", nargs="+", type=int, default=[6])
    p.add_argument("--out", required=True, help="writes OUT.md and OUT.json")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    cmd = "python -m bench.online_settings " + " ".join(sys.argv[1:] if argv is None else argv)

    def save(result):
        atomic_write_text(args.out + ".json", json.dumps(result, indent=1))
        atomic_write_text(args.out + ".md", markdown(result))

    result = {"machine": {**machine(), "commit": git_commit()}, "command": cmd,
              "policy": args.policy, "settings": args.setting, "rows": []}
    run(args, result, save)
    save(result)
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
