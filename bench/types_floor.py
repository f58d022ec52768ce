"""Greedy's own rule against the plain priority backfill on the mixed-type
families (issue 25), before and after, in one run.

    python -m bench.types_floor                 # broad_types and broad, seeds 100-119
    python -m bench.types_floor --seeds 0:20    # the tuning seeds

Greedy runs with `greedy.variants=false` (by default greedy also plans with
the plain backfill and keeps the better plan, which makes the floor hold by
construction); `before` is the fit key of issue 23 (`greedy.fit_ahead=false`),
`after` the defaults, `type_aware` the defaults with greedy's footprint served
by compatibility class (`greedy.type_aware=true`). Every plan checked.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import datetime, timezone

import torch

from bench.common import ROOT, composed, git_commit, machine
from gpualloc.check import check
from gpualloc.metrics import weighted_throughput
from gpualloc.policies.backfill import backfill
from gpualloc.policies.greedy import greedy
from gpualloc.scenario.generate import generate

RULES = {"before": ["greedy.fit_ahead=false"], "after": [], "type_aware": ["greedy.type_aware=true"]}


def run(scenario: str, seeds: range) -> list[dict]:
    cfgs = {k: composed(f"+scenario={scenario}", "greedy.variants=false", *o)
            for k, o in RULES.items()}
    rows = []
    for seed in seeds:
        s = generate(cfgs["after"].scenario, seed)
        plain = backfill(s).owner
        assert check(s, plain).ok
        row = {"scenario": scenario, "seed": seed, "backfill": weighted_throughput(s, plain)}
        for k, cfg in cfgs.items():
            owner = greedy(s, cfg.greedy).owner
            assert check(s, owner).ok, (scenario, seed, k)
            row[k] = weighted_throughput(s, owner)
        rows.append(row)
        print(row, flush=True)
    return rows


def markdown(result: dict) -> str:
    out = ["# Greedy's own rule against the plain backfill (issue 25)", "",
           f"Commit {result['commit']}, {result['date']}; {result['machine']['cpu']}, "
           f"{result['machine']['cores']} cores, load `{result['uptime']}`; "
           f"`{result['command']}`. Weighted throughput; greedy with variants off; "
           "every plan checked.", "",
           "| scenario | seeds | greedy / backfill before: median; min; seeds below | after | "
           "type_aware | sum after / before |", "|---|---|---|---|---|---|"]
    for sc in dict.fromkeys(r["scenario"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["scenario"] == sc]
        cells = []
        for k in RULES:
            ratio = [r[k] / r["backfill"] for r in rows]
            cells.append(f"x{statistics.median(ratio):.3f}; x{min(ratio):.3f}; "
                         f"{sum(x < 1 for x in ratio)}")
        total = sum(r["after"] for r in rows) / sum(r["before"] for r in rows)
        out.append(f"| {sc} | {rows[0]['seed']}-{rows[-1]['seed']} | " + " | ".join(cells)
                   + f" | {100 * (total - 1):+.2f}% |")
    out += ["", "| scenario | seed | backfill | before | after | type_aware |",
            "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        out.append(f"| {r['scenario']} | {r['seed']} | {r['backfill']:,.0f} | "
                   f"{r['before']:,.0f} | {r['after']:,.0f} | {r['type_aware']:,.0f} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="100:120", help="FIRST:END (default 100:120)")
    ap.add_argument("--scenarios", nargs="+", default=["broad_types", "broad"])
    ap.add_argument("--name", default="types_floor")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lo, hi = (int(x) for x in args.seeds.split(":"))
    rows = [r for sc in args.scenarios for r in run(sc, range(lo, hi))]
    result = {"rows": rows, "commit": git_commit(short=True), "machine": machine(),
              "uptime": os.popen("uptime").read().strip(),
              "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "command": "python -m bench.types_floor " + " ".join(
                  sys.argv[1:] if argv is None else argv)}
    out = ROOT / "bench" / "results"
    (out / f"{args.name}.json").write_text(json.dumps(result, indent=1))
    (out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
