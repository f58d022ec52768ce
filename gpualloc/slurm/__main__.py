"""gpualloc beside a Slurm cluster.

    python -m gpualloc.slurm snapshot -o scenario.json [--step-minutes 60 --horizon 48]
    python -m gpualloc.slurm serve --policy allocator --step-seconds 60 [--dry-run]
    python -m gpualloc.slurm record -o gpus.jsonl --until-idle
    python -m gpualloc.slurm executed --scenario scenario.json --since EPOCH -o plan.json
    python -m gpualloc.slurm lab up|down|status

Every command: Slurm unreachable or bad input -> one line on stderr, exit 2.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

from gpualloc.slurm import bridge
from gpualloc.slurm.client import Slurm, SlurmUnreachable
from gpualloc.slurm.read import SlurmReadError, hostlist

USER_ERRORS = (SlurmUnreachable, SlurmReadError, bridge.ScenarioError, OSError)


class UsageError(ValueError):
    """A bad option value."""


def _pairs(items: list[str] | None, what: str, number: bool = False) -> dict:
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key or not value or ":" not in key:
            raise UsageError(f"{what} {item!r}: expected partition:NAME=VALUE or qos:NAME=VALUE")
        if number:
            try:
                value = float(value)
            except ValueError:
                raise UsageError(f"{what} {item!r}: the value must be a number") from None
            if not value > 0 or value == float("inf"):
                raise UsageError(f"{what} {item!r}: the value must be a finite number > 0")
        out[key] = value
    return out


def epoch(text: str) -> float:
    """Epoch seconds, or an ISO time (as Slurm prints them, local time)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise UsageError(f"{text!r}: a time is epoch seconds or an ISO time "
                         f"(2026-12-01T12:28:04)") from None


def read_demand(path: str | None, step: int | None = None) -> list[dict] | None:
    """The services of a demand file, each curve from step 0 (`step`: the
    step serve reads it at, which the curves must not start after)."""
    if path is None:
        return None
    import yaml
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid JSON or YAML ({str(e).splitlines()[0]})") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not all(
            isinstance(j, dict) and j.get("kind") in bridge.ELASTIC_KINDS for j in jobs):
        raise UsageError(f"{path}: expected {{jobs: [...]}} of realtime_inference jobs")
    # A file rewritten while serve runs (an autoscaler's) may start its curves
    # at a later step: `step: K`, the step of each list's first entry. The
    # steps before it are never read again: padded.
    first = doc.get("step", 0)
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        raise UsageError(f"{path}: step {first!r}: the step of the curves' first entry, a "
                         f"whole number >= 0")
    if step is not None and first > step:
        raise UsageError(f"{path}: step {first}: its curves start after this step, {step}")
    return [{**j, "demand": [0] * first + list(j.get("demand") or [])} if first else j
            for j in jobs] if first else jobs


def add_snapshot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--step-minutes", type=float, default=60.0, help="length of one step")
    p.add_argument("--horizon", type=int, default=48, help="steps planned ahead")
    p.add_argument("--kind-map", action="append", metavar="partition:NAME=KIND",
                   help="kind of the jobs of a partition or QOS (repeat)")
    p.add_argument("--priority-map", action="append", metavar="qos:NAME=P",
                   help="priority of the jobs of a partition or QOS (repeat)")
    p.add_argument("--default-kind", default="training",
                   help="kind of a job nothing else names ('none': such jobs are left out)")
    p.add_argument("--default-priority", type=float, default=1.0)
    p.add_argument("--slurm-priority", action="store_true",
                   help="priorities from Slurm's own (rank, scaled to 1..10)")
    p.add_argument("--memory-gb", action="append", metavar="TYPE=GB",
                   help="memory per GPU of a GRES type (default: 80, or the type's known size)")
    p.add_argument("--demand", help="real-time services and their demand curves (a file of "
                                    "realtime_inference jobs, demand from now on)")


def snapshot_options(a):
    from gpualloc.slurm.snapshot import Options
    if not (a.step_minutes > 0 and a.step_minutes != float("inf")):
        raise UsageError(f"--step-minutes {a.step_minutes}: must be a positive number")
    if not 1 <= a.horizon <= 100_000:
        raise UsageError(f"--horizon {a.horizon}: must be in [1, 100000]")
    kinds = _pairs(a.kind_map, "--kind-map")
    bad = [k for k, v in kinds.items() if v not in bridge.KINDS]
    if bad:
        raise UsageError(f"--kind-map {bad[0]}={kinds[bad[0]]}: the kind must be one of "
                         f"{', '.join(bridge.KINDS)}")
    dk = None if a.default_kind == "none" else a.default_kind
    if dk is not None and dk not in bridge.KINDS:
        raise UsageError(f"--default-kind {dk!r}: one of {', '.join(bridge.KINDS)} or none")
    mem = {}
    for item in a.memory_gb or []:
        t, eq, v = item.partition("=")
        try:
            mem[t] = float(v)
        except ValueError:
            raise UsageError(f"--memory-gb {item!r}: expected TYPE=GB") from None
    return Options(step_minutes=a.step_minutes, horizon=a.horizon, kind_map=kinds,
                   priority_map=_pairs(a.priority_map, "--priority-map", number=True),
                   default_kind=dk, default_priority=a.default_priority,
                   slurm_priority=a.slurm_priority, memory_gb=mem, demand=read_demand(a.demand))


def _read_state(a, slurm: Slurm, nodes: bool = True):
    """(nodes, jobs) from the live cluster, or from saved `sinfo --json` /
    `squeue --json` outputs (--sinfo-json, --squeue-json)."""
    from gpualloc.slurm import read
    jobs = (read.squeue(Path(a.squeue_json).read_bytes()) if a.squeue_json else slurm.jobs())
    if not nodes:
        return None, jobs
    return (read.sinfo(Path(a.sinfo_json).read_bytes()) if a.sinfo_json else slurm.nodes()), jobs


def add_saved_options(p: argparse.ArgumentParser, nodes: bool = True) -> None:
    p.add_argument("--squeue-json", metavar="FILE",
                   help="read the jobs from this saved `squeue --json` output, not from Slurm")
    if nodes:
        p.add_argument("--sinfo-json", metavar="FILE",
                       help="read the nodes from this saved `sinfo --json` output")


def cmd_snapshot(a) -> int:
    from gpualloc.slurm.snapshot import build, to_dict
    o = snapshot_options(a)
    slurm = Slurm(a.slurm_conf)
    now = epoch(a.now) if a.now else time.time()
    nodes, jobs = _read_state(a, slurm)
    snap = build(nodes, jobs, o, now)
    scen, fixed = to_dict(snap)
    fixed["since"] = now
    out = Path(a.output)
    fixed_path = Path(a.fixed) if a.fixed else out.with_name(out.stem + ".fixed.json")
    # The scenario last: a reader who finds it finds its fixed cells beside it.
    bridge.atomic_write_text(fixed_path, json.dumps(fixed))
    bridge.atomic_write_text(out, json.dumps(scen, indent=1))
    s = snap.scenario
    running = int((s.fixed >= 0).any(1).sum())
    print(f"{out}: {len(s.pools)} pools, {s.G} GPUs on {len(snap.nodes)} nodes, {s.J} jobs "
          f"({running} GPUs held by running jobs, in {fixed_path})")
    for line in snap.report + snap.renumbered:
        print(f"  {line}")
    return 0


def cmd_record(a) -> int:
    from gpualloc.slurm.executed import load_recorded, record_once
    slurm = Slurm(a.slurm_conf)
    seen = load_recorded(a.output)
    end = time.time() + a.seconds if a.seconds else None
    while True:
        jobs = slurm.jobs()
        record_once(jobs, a.output, seen)
        if a.until_idle and not any(j.state in ("PENDING", "RUNNING", "CONFIGURING")
                                    for j in jobs):
            break
        if end is not None and time.time() >= end:
            break
        time.sleep(a.interval)
    print(f"{a.output}: GPU indices of {len(seen)} jobs")
    return 0


def cmd_executed(a) -> int:
    from gpualloc.slurm.executed import executed, load_recorded, load_runs
    s = bridge.load(a.scenario)
    slurm = Slurm(a.slurm_conf)
    step_s = a.step_seconds or s.step_minutes * 60.0
    if not step_s > 0:
        raise UsageError(f"--step-seconds {a.step_seconds}: must be > 0")
    if a.nodes and Path(a.nodes).is_file():
        nodes = json.loads(Path(a.nodes).read_text()).get("nodes")
    elif a.nodes:
        nodes = hostlist(a.nodes)
    else:
        nodes = [n.name for n in slurm.nodes() if n.gpus > 0 and n.usable]
    ex = executed(s, _read_state(a, slurm, nodes=False)[1], nodes, epoch(a.since), step_s,
                  load_recorded(a.recorded), load_runs(a.recorded))
    verdict = bridge.check(s, ex.owner)
    bridge.save_plan(a.output, s, "slurm", ex.owner)
    m = bridge.metrics(s, ex.owner)
    print(f"{a.output}: {ex.matched} Slurm jobs in the plan; "
          f"{'feasible' if verdict.ok else 'INFEASIBLE'}; utilization {m['utilization']:.4f}, "
          f"weighted throughput {m['weighted_throughput']:.1f}")
    for line in ex.report + ex.renumbered:
        print(f"  {line}")
    if not verdict.ok_but_guarantee:
        print(str(verdict))
        return 1
    return 0


def cmd_serve(a) -> int:
    from gpualloc.slurm.serve import main as serve_main
    return serve_main(a)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gpualloc slurm", description=__doc__.splitlines()[0])
    ap.add_argument("--slurm-conf", help="slurm.conf of the cluster (default: $SLURM_CONF)")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("snapshot", help="the cluster and its queue as a scenario file")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--fixed", help="where the running jobs' cells go (a plan file; default: "
                                   "OUTPUT's stem + .fixed.json)")
    p.add_argument("--now", help="the time of step 0 (default: now); with saved outputs")
    add_saved_options(p)
    add_snapshot_options(p)
    p = sub.add_parser("record", help="keep the GPU indices of running jobs (Slurm erases them)")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--seconds", type=float, help="stop after this long")
    p.add_argument("--until-idle", action="store_true", help="stop when no job is pending or running")
    p = sub.add_parser("executed", help="what Slurm ran, as a plan file")
    p.add_argument("--scenario", required=True)
    p.add_argument("--since", required=True, help="step 0: epoch seconds or an ISO time")
    p.add_argument("--step-seconds", type=float, help="default: the scenario's step_minutes")
    p.add_argument("--nodes", help="node order: a host list (n[1-8]) or the .fixed.json of "
                                   "snapshot (default: sinfo's GPU nodes)")
    p.add_argument("--recorded", help="GPU indices kept by `record` or `serve`")
    p.add_argument("-o", "--output", required=True)
    add_saved_options(p, nodes=False)
    p = sub.add_parser("serve", help="plan every step and act through Slurm's commands")
    from gpualloc.slurm.serve import add_options
    add_options(p)
    add_snapshot_options(p)
    sub.add_parser("lab", help="the lab cluster: lab up|down|status (see gpualloc.slurm.lab)",
                   add_help=False)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["lab"]:
        from gpualloc.slurm.lab import main as lab_main
        return lab_main(argv[1:])
    ap = parser()
    try:
        a = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return {"snapshot": cmd_snapshot, "record": cmd_record, "executed": cmd_executed,
                "serve": cmd_serve}[a.command](a)
    except (*USER_ERRORS, UsageError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, OSError) and getattr(e, "filename", None):
            msg = f"{e.filename}: {e.strerror}"
        print(f"error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run as gpualloc.slurm.__main__, the module the commands import UsageError
    # from (as `__main__` its class would be a second one, and escape the except).
    from gpualloc.slurm.__main__ import main as run
    sys.exit(run())
