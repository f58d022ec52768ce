"""Online plans against the best upper bound there is: how much of the room
above FIFO a policy takes, offline and online (issue 28 judges online against
greedy, the optimum and the LP bound).

    python -m bench.online_bound bench/results/online_traces_s59_seven.json \
        bench/results/online_traces_s59_traces.json --out bench/results/online_bound_s59

Reads the values of `bench.online_traces` runs (their JSON; the plans are not
made again) and bounds each scenario they ran, the seven (regenerated from
their seeds) and the real-trace windows, as `bench.quality` bounds the seven:
the smaller of the LP relaxation and the per-pool MIP's proven bound (HiGHS,
exact.mip_time_limit_s). The bound is offline, every job and the true demand
known, so it bounds any online plan too. The generated speed cases are not
bounded here.

gap = 1 - value / bound; share = (value - FIFO) / (bound - FIFO), the part of
the room above FIFO's plan that a plan takes.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from bench.common import provenance, write_results
from bench.online_traces import TRACES
from bench.quality import bound_of


def scenario(row: dict):
    import gpualloc as ga

    if row["kind"] == "trace":
        return ga.load(TRACES / f"{row['case']}.json")
    return ga.generate(row["case"], seed=row["seed"])


def cases(runs: list[dict]) -> list[dict]:
    """One entry per (kind, case, seed) the runs hold, their values by
    (policy, mode, replan_every), without the guarantee."""
    out: dict[tuple, dict] = {}
    for result in runs:
        for r in result["rows"]:
            if r["kind"] not in ("seven", "trace") or r.get("guarantee") or (
                    "weighted_throughput" not in r):
                continue
            key = (r["kind"], r["case"], r["seed"])
            case = out.setdefault(key, {"kind": r["kind"], "case": r["case"], "seed": r["seed"],
                                        "role": r["role"], "G": r["G"], "J": r["J"],
                                        "T": r["T"], "values": {}})
            case["values"][column(r["policy"], r["mode"], r["replan_every"])] = (
                r["weighted_throughput"])
    return list(out.values())


def judge(case: dict, bound: float) -> dict:
    """`case` with its bound, and each value's gap to it and share of the room
    above FIFO's plan (None where FIFO is at the bound)."""
    fifo = case["values"]["fifo offline"]
    room = bound - fifo
    case["bound"] = bound
    case["gap"] = {k: 1 - v / bound for k, v in case["values"].items()}
    case["share"] = {k: (v - fifo) / room if room > 1e-9 else None
                     for k, v in case["values"].items()}
    return case


def column(policy: str, mode: str, every: int | None) -> str:
    return f"{policy} {mode} {every or ''}".strip()


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = ["# Online plans against the upper bound", "",
             f"Machine: {m['cpu']}, {m['cores']} CPUs; commit `{result['commit']}`; the values "
             f"from {', '.join(f'`{p}`' for p in result['from'])} (commits "
             f"{', '.join(f'`{c}`' for c in result['from_commits'])}).", "",
             f"`{result['command']}`", "",
             "Bound: the smaller of the LP relaxation and the per-pool MIP's proven bound, "
             "offline (every job and the true demand known): no online plan can pass it. "
             "gap = 1 - value / bound; share = (value - FIFO) / (bound - FIFO), the part of "
             "the room above FIFO's plan a plan takes (- where FIFO is at the bound). Online: "
             f"replanning every N steps and at arrivals, forecast `{result['forecast']}`, "
             "defaults otherwise.", ""]
    modes = [("offline", None)] + [("online", e) for e in result["replan_every"]]
    heads = [column(p, mo, e) for p in result["policies"] for mo, e in modes]
    lines += ["## Mean gap to the bound, per scenario", "",
              "| case | seeds | bound s | " + " | ".join(heads) + " |",
              "|---|---|---|" + "---|" * len(heads)]
    for name, s in result["summary"].items():
        lines.append(f"| {name} | {s['seeds']} | {s['bound_s']:.1f} | " + " | ".join(
            "-" if s["gap"].get(h) is None else f"{100 * s['gap'][h]:.2f}%" for h in heads)
            + " |")
    lines += ["", "## Per run", "",
              "| case | seed | bound | kind | FIFO | " + " | ".join(
                  f"{h} (gap, share)" for h in heads) + " |",
              "|---|---|---|---|---|" + "---|" * len(heads)]
    for c in result["cases"]:
        cells = []
        for h in heads:
            v = c["values"].get(h)
            cells.append("-" if v is None else
                         f"{v:,.0f} ({100 * c['gap'][h]:.2f}%, "
                         + ("-" if c["share"][h] is None else f"{100 * c['share'][h]:.1f}%")
                         + ")")
        lines.append(f"| {c['case']} | {c['seed']} | {c['bound']:,.0f} | {c['bound_kind']} | "
                     f"{c['values'].get('fifo offline', 0):,.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="bench.online_traces JSON files")
    ap.add_argument("--out", default="bench/results/online_bound")
    ap.add_argument("--lp-time-limit", type=float, default=None,
                    help="seconds for the LP relaxation (default: exact.lp_time_limit_s)")
    args = ap.parse_args(argv)
    from gpualloc.config import ExactConfig

    runs = [json.loads(Path(p).read_text()) for p in args.runs]
    policies = [p for p in runs[0]["policies"] if p != "fifo"]
    result = {**provenance("bench.online_bound", argv), "from": args.runs,
              "from_commits": [r["machine"].get("commit", "?") for r in runs],
              "policies": policies, "replan_every": runs[0]["replan_every"],
              "forecast": runs[0]["forecast"], "cases": []}
    exact = ExactConfig()
    if args.lp_time_limit is not None:
        exact = replace(exact, lp_time_limit_s=args.lp_time_limit)
    for c in cases(runs):
        s = scenario(c)
        b = bound_of(s, exact)
        if b["bound"] == float("inf"):  # neither finished within its time limit
            print(f"{c['case']} seed {c['seed']}: no bound", file=sys.stderr)
            continue
        c.update(bound_kind=b["kind"], lp=b["lp"], mip=b["mip"], bound_s=b["seconds"])
        result["cases"].append(judge(c, b["bound"]))
        print(f"{c['case']:24s} seed {c['seed']}: bound {c['bound']:,.0f} ({c['bound_kind']}, "
              f"{c['bound_s']:.1f} s)  " + "  ".join(
                  f"{k} {100 * g:.2f}%" for k, g in c["gap"].items()), file=sys.stderr,
              flush=True)
    summary: dict = {}
    for name in dict.fromkeys(c["case"] for c in result["cases"]):
        mine = [c for c in result["cases"] if c["case"] == name]
        gaps = {}
        for h in {k for c in mine for k in c["gap"]}:
            got = [c["gap"][h] for c in mine if h in c["gap"]]
            gaps[h] = statistics.fmean(got) if len(got) == len(mine) else None
        summary[name] = {"seeds": ", ".join(str(c["seed"]) for c in mine), "gap": gaps,
                         "bound_s": statistics.fmean(c["bound_s"] for c in mine)}
    result["summary"] = summary
    out = Path(args.out)
    write_results(out.parent, out.name, result, markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
