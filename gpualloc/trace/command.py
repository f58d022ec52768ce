"""The command, `python -m gpualloc.trace alibaba|csv ...`: options -> records
(`readers`) -> scenario (`convert`) -> a scenario file and the rule counts.
Errors end it with one line naming the file, line and field or the option,
exit code 2.
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from gpualloc.scenario import (KINDS, MAX_HORIZON, RIGID_KINDS, Job, Pool, Scenario,
                               ScenarioError, from_dict, with_min_served, with_preemption)
from gpualloc.trace.convert import Import, Window, _plain, convert, parse_pool, trace_pools
from gpualloc.trace.readers import CsvColumns, TraceError, read_alibaba, read_csv, read_nodes

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str, what: str, default_unit: str = "s") -> float:
    """'134d', '96h', '60m', '90s' or a bare number (in `default_unit`) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([a-z]*)\s*", text)
    unit = (m.group(2) or default_unit) if m else None
    if not m or unit not in _UNITS:
        raise TraceError(f"{what} {text!r}: expected a number with a unit "
                         f"({', '.join(_UNITS)}), e.g. 134d, 96h, 60m")
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value):
        raise TraceError(f"{what} {text!r}: too large")
    return value


def _window(start: float, length: str, step: str) -> Window:
    step_s = seconds(step, "--step")
    length_s = seconds(length, "--length")
    if step_s <= 0 or length_s <= 0:
        raise TraceError("--step and --length must be positive")
    steps = length_s / step_s
    if not steps <= MAX_HORIZON:
        raise TraceError(f"--length {length}: {steps:,.0f} steps of --step {step}, above "
                         f"gpualloc's limit of {MAX_HORIZON:,} timesteps")
    if abs(steps - round(steps)) > 1e-9:
        raise TraceError(f"--length {length} is not a whole number of --step {step}")
    if step_s % 60:
        raise TraceError(f"--step {step}: must be whole minutes")
    return Window(start=start, steps=int(round(steps)), step_s=step_s)


def _pairs(items: list[str], opt: str, value) -> dict:
    out = {}
    for item in items or []:
        key, sep, v = item.partition("=")
        if not sep or not key:
            raise TraceError(f"{opt} {item!r}: expected KEY=VALUE")
        try:
            out[key] = value(v)
        except ValueError as e:
            raise TraceError(f"{opt} {item!r}: {e}") from None
    return out


def _kind(v: str) -> str:
    if v not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    return v


def _priority(v: str) -> float:
    p = float(v)
    if not math.isfinite(p) or p <= 0:
        raise ValueError("priority must be a number > 0")
    return p


def alibaba_command(a: argparse.Namespace) -> Import:
    pods = Path(a.pods)
    records = read_alibaba(pods, _pairs(a.kind, "--kind", _kind),
                           _pairs(a.priority, "--priority", _priority))
    window = _window(seconds(a.start, "--start"), a.length, a.step)
    if a.pool:
        if a.sample_gpus is not None:
            raise TraceError("--pool and --sample-gpus: give one cluster, not both")
        pools = [parse_pool(p) for p in a.pool]
    else:
        nodes = Path(a.nodes) if a.nodes else pods.parent / "openb_node_list_gpu_node.csv"
        pools = trace_pools(read_nodes(nodes), _pairs(a.memory, "--memory", float),
                            a.sample_gpus)
    name = a.name or f"alibaba_{a.start}_{a.length}"
    return convert(records, window, pools, name, never_ran=a.never_ran, demand=a.demand)


def csv_command(a: argparse.Namespace) -> Import:
    cols = CsvColumns(id=a.id_col, submit=a.submit_col, duration=a.duration_col, gpus=a.gpus_col,
                      gpu_type=a.type_col, priority=a.priority_col, kind=a.kind_col)
    unit = seconds("1" + a.time_unit, "--time-unit")
    dunit = seconds("1" + (a.duration_unit or a.time_unit), "--duration-unit")
    records = read_csv(Path(a.file), cols, unit, dunit, kind=_kind_opt(a.kind),
                       priority=_priority_opt(a.default_priority),
                       kind_map=_pairs(a.kind_map, "--kind-map", _kind), type_sep=a.type_sep)
    start = (seconds(a.start, "--start", a.time_unit) if a.start is not None
             else min(r.submit for r in records))
    if a.length is None:  # up to the last end
        step_s = seconds(a.step, "--step")
        if step_s <= 0:
            raise TraceError(f"--step {a.step}: must be positive")
        steps = (max(r.until for r in records) - start) / step_s
        if not steps <= MAX_HORIZON:
            raise TraceError(f"the jobs end {steps:,.0f} steps of --step {a.step} after the "
                             f"start, above gpualloc's limit of {MAX_HORIZON:,} timesteps: "
                             f"give --length")
        a.length = f"{max(1, math.ceil(steps)) * step_s!r}s"  # repr: every digit
    window = _window(start, a.length, a.step)
    if a.pool:
        if a.gpus is not None:
            raise TraceError("--pool and --gpus: give one cluster, not both")
        pools = [parse_pool(p) for p in a.pool]
    elif a.gpus is not None:
        if a.gpus < 1 or a.gpus % a.gpus_per_node:
            raise TraceError(f"--gpus {a.gpus}: must be a positive multiple of "
                             f"--gpus-per-node {a.gpus_per_node}")
        pools = [Pool(name=a.gpu_type.lower(), count=a.gpus // a.gpus_per_node,
                      gpus_per_node=a.gpus_per_node, gpu_type=a.gpu_type, memory_gb=a.memory_gb)]
    else:
        raise TraceError("the CSV has no cluster: give --gpus N or --pool NAME:COUNT:GPN:TYPE:GB")
    name = a.name or Path(a.file).stem
    result = convert(records, window, pools, name, never_ran="drop", demand=a.demand)
    if a.realtime_services:
        result = _add_services(result, a)
    return result


def _kind_opt(v: str) -> str:
    try:
        return _kind(v)
    except ValueError as e:
        raise TraceError(f"--kind {v!r}: {e}") from None


def _priority_opt(v: str) -> float:
    try:
        return _priority(v)
    except ValueError as e:
        raise TraceError(f"--priority {v!r}: {e}") from None


def _add_services(result: Import, a: argparse.Namespace) -> Import:
    from gpualloc.config import RealtimeWorkloadConfig
    from gpualloc.scenario.generate import demand_curve

    s = result.scenario
    if not 0 < a.realtime_peak:
        raise TraceError(f"--realtime-peak {a.realtime_peak}: must be >= 1")
    w = RealtimeWorkloadConfig(services=a.realtime_services, gpus=[a.realtime_gpus],
                               peak_replicas=[a.realtime_peak, a.realtime_peak],
                               priority=[9, 9])
    rng = np.random.default_rng(a.seed)
    jobs = list(s.jobs)
    for i in range(a.realtime_services):
        jobs.append(Job(id=f"rt-synthetic-{i}", kind="realtime_inference",
                        priority=_plain(_priority_opt(a.realtime_priority)), arrival=0,
                        gpus=a.realtime_gpus, demand=demand_curve(rng, w, s.T, s.step_minutes)))
    jobs.sort(key=lambda j: j.arrival)
    doc = Scenario(name=s.name, horizon=s.T, step_minutes=s.step_minutes, pools=s.pools,
                   jobs=jobs).to_dict()
    try:
        scen = from_dict(doc)
    except ScenarioError as e:
        raise TraceError(f"the converted scenario is invalid: {e}") from None
    return Import(scenario=scen, rows=result.rows, counts=result.counts,
                  services=result.services + a.realtime_services)


def _min_served(v: str) -> float:
    try:
        f = float(v)
    except ValueError:
        f = float("nan")
    if not 0 <= f <= 1:
        raise argparse.ArgumentTypeError(f"{v!r}: must be a number in [0, 1]")
    return f


def _restart_cost(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{v!r}: must be an integer >= 0 (timesteps)")
    return n


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpualloc.trace",
                                description="Turn a workload trace into a gpualloc scenario file "
                                            "(rules: the docstring of "
                                            "gpualloc/trace/__init__.py).")
    sub = p.add_subparsers(dest="source", required=True)

    def common(q):
        q.add_argument("-o", "--out", required=True, help="scenario file to write (.json or .yaml)")
        q.add_argument("--name", help="scenario name (default from the file and window)")
        q.add_argument("--step", default="60m", help="timestep length, e.g. 60m (default 60m)")
        q.add_argument("--demand", choices=["peak", "mean"], default="peak",
                       help="serving demand per step: peak or time-mean of replicas wanted")
        q.add_argument("--min-served", type=_min_served, metavar="F",
                       help="guarantee every real-time service this share of its demand at "
                            "every step (rule 4 of PROBLEM.md; default: no guarantee)")
        q.add_argument("--preemptible", nargs="+", choices=RIGID_KINDS, metavar="KIND",
                       help="make every job of these rigid kinds preemptible (PROBLEM.md; "
                            f"{', '.join(RIGID_KINDS)}; default: none)")
        q.add_argument("--restart-cost", type=_restart_cost, metavar="N",
                       help="timesteps a preemptible job restores after each preemption "
                            "(default 0; only with --preemptible)")
        q.add_argument("--pool", action="append", metavar="NAME:COUNT:GPN:TYPE:GB",
                       help="a node pool of the cluster (repeat for several)")

    a = sub.add_parser("alibaba", help="Alibaba GPU cluster trace 2023 (openb_pod_list_*.csv)")
    a.add_argument("pods", help="openb_pod_list_default.csv or openb_pod_list_gpuspec33.csv")
    a.add_argument("--start", required=True, help="window start in trace time, e.g. 134d")
    a.add_argument("--length", required=True, help="window length, e.g. 96h")
    a.add_argument("--nodes", help="node list (default: openb_node_list_gpu_node.csv beside PODS)")
    a.add_argument("--sample-gpus", type=int, help="cluster: a sample of the trace's nodes with "
                                                   "this many GPUs (default: all nodes)")
    a.add_argument("--memory", action="append", metavar="MODEL=GB", help="GPU memory of a model")
    a.add_argument("--kind", action="append", metavar="QOS=KIND", help="kind of a qos class")
    a.add_argument("--priority", action="append", metavar="QOS=P", help="priority of a qos class")
    a.add_argument("--never-ran", choices=["drop", "keep"], default="drop",
                   help="rigid pods without scheduled_time: left out (default) or kept")
    common(a)
    c = sub.add_parser("csv", help="a generic job CSV (id, submit, duration, GPUs)")
    c.add_argument("file")
    c.add_argument("--id-col", default="job_id")
    c.add_argument("--submit-col", default="submit_time")
    c.add_argument("--duration-col", default="duration")
    c.add_argument("--gpus-col", default="num_gpus")
    c.add_argument("--type-col", help="allowed GPU types (separated by --type-sep)")
    c.add_argument("--type-sep", default="|")
    c.add_argument("--priority-col")
    c.add_argument("--kind-col")
    c.add_argument("--kind-map", action="append", metavar="VALUE=KIND",
                   help="map a value of the kind column to a kind")
    c.add_argument("--kind", default="training", help="kind of rows without one (default training)")
    c.add_argument("--default-priority", default="5", help="priority of rows without one")
    c.add_argument("--time-unit", default="s", help="unit of the submit column (ms, s, m, h, d)")
    c.add_argument("--duration-unit", help="unit of the duration column (default: --time-unit)")
    c.add_argument("--start", help="window start, in --time-unit or with a unit "
                                   "(default: the first submit)")
    c.add_argument("--length", help="window length, e.g. 7d (default: up to the last submit)")
    c.add_argument("--gpus", type=int, help="cluster: this many GPUs of one type")
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--gpu-type", default="H100")
    c.add_argument("--memory-gb", type=float, default=80.0)
    c.add_argument("--realtime-services", type=int, default=0,
                   help="add this many synthetic real-time services (the trace has none)")
    c.add_argument("--realtime-peak", type=int, default=4, help="their day-peak replicas")
    c.add_argument("--realtime-gpus", type=int, default=1, help="GPUs per replica")
    c.add_argument("--realtime-priority", default="9")
    c.add_argument("--seed", type=int, default=0, help="seed of the synthetic services")
    common(c)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.restart_cost is not None and not args.preemptible:
            raise TraceError(f"--restart-cost {args.restart_cost}: only with --preemptible "
                             f"KIND (a restart cost is paid by preemptible jobs only)")
        result = alibaba_command(args) if args.source == "alibaba" else csv_command(args)
        if args.min_served is not None:
            result = replace(result, scenario=with_min_served(result.scenario, args.min_served))
        if args.preemptible:
            result = replace(result, scenario=with_preemption(result.scenario, args.preemptible,
                                                              args.restart_cost))
        out = Path(args.out)
        if out.suffix not in (".json", ".yaml", ".yml"):
            raise TraceError(f"--out {args.out}: must end in .json, .yaml or .yml")
        result.scenario.save(out)
    except (TraceError, ScenarioError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {getattr(e, 'filename', '') or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(result.report())
    if args.preemptible:
        n = sum(j.preemptible for j in result.scenario.jobs)
        print(f"preemptible: {n} jobs ({', '.join(dict.fromkeys(args.preemptible))}), "
              f"restart_cost {args.restart_cost or 0}")
    print(f"wrote {out}")
    return 0

