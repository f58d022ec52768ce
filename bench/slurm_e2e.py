"""The same workload on a real Slurm (the lab: 8 nodes x 8 GPUs on this
host), four ways, each read back from Slurm and judged by the checker:

1. `fifo`: Slurm as most clusters run it: `sched/builtin`, jobs in
   submission order, a fixed reservation (PROBLEM.md's FIFO size, nodes
   from the end) for the real-time replicas;
2. `backfill`: Slurm's own `sched/backfill`, each job's priority
   (`sbatch --priority`) from the scenario's, replicas first;
3. `serve-greedy`, 4. `serve-allocator`: jobs submitted held, gpualloc's
   `serve` releasing them on planned nodes and keeping the replicas.

    python -m bench.slurm_e2e              # 40 steps of 3 s, 70 jobs
    python -m bench.slurm_e2e --jobs 130   # the same steps, contended (offered load 1.4)
    python -m bench.slurm_e2e --quick      # 8 steps, 14 jobs (under 3 minutes)
    python -m bench.slurm_e2e --jobs 130 --guarantee   # the service guaranteed, training preemptible

Every way runs on a fresh lab of its own (its own folder and state, the
scheduler it needs), brought up and down by gpualloc.slurm.lab, root.
Rigid jobs are submitted at their arrival step, a second before its
boundary; each runs gpualloc.slurm.sleep, ending just before its last
step's boundary. A step's replicas come from the demand curve (for ways
1-2 the benchmark plays the autoscaler: replicas above demand cancelled,
pending ones first). After the horizon, what still runs is cancelled and
`executed` reads back what ran (GPU indices recorded while jobs ran).

Reported per way: utilization, weighted throughput and real-time service
of what executed, against the prediction for the same workload: PROBLEM.md's
FIFO plan, gpualloc's `backfill` policy (a priority-backfill simulation),
and gpualloc's online loop (simulated, oracle demand) with greedy and the
allocator. With `--guarantee` the service is guaranteed (`min_served` 1.0)
and training preemptible at restart cost 1 (bench.common.GUARANTEE): serve
requeues what its plans or the guarantee cut (the jobs resume from their
progress, gpualloc.slurm.sleep), Slurm's own ways preempt nothing, and the
replica-steps short of the guarantee are reported per way. Writes
bench/results/slurm_e2e{,_quick}{,_Njobs}{,_guarantee}.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.common import ROOT, provenance, write_results
from gpualloc.slurm import bridge, lab
from gpualloc.slurm.client import Slurm, SlurmUnreachable
from gpualloc.slurm.executed import executed, load_runs, record_once
from gpualloc.slurm.serve import simulate
from gpualloc.slurm.workload import submit

WAYS = ("fifo", "backfill", "serve-greedy", "serve-allocator")
PORT = 18817
SERVE_WARMUP_S = 12.0
"""serve's first plan compiles the placement core before step 0."""
SERVE_LEAD_S = 0.5
"""serve snapshots and plans this long before each boundary: after the jobs
of the step end (0.4 s before it), so that what it starts finds free GPUs."""


def workload(seed: int, T: int, jobs: int):
    """A scaled mixed scenario: 64 GPUs as 8 x 8, `jobs` rigid jobs of the
    three kinds arriving over the first 60% of the horizon, one real-time
    service with a two-peak curve."""
    rng = np.random.default_rng(seed)
    kinds = [("training", 3, [8, 16], (3, 8)), ("batch_inference", 1, [1, 2, 4], (1, 4)),
             ("quantization", 2, [1, 2, 4, 8], (1, 3))]
    docs = []
    for i in range(jobs):
        kind, prio, sizes, (lo, hi) = kinds[rng.choice(3, p=[0.35, 0.4, 0.25])]
        docs.append({"id": f"{kind[:5]}-{i}", "kind": kind, "priority": prio,
                     "arrival": int(rng.integers(0, max(1, int(0.6 * T)))),
                     "gpus": int(rng.choice(sizes)), "duration": int(rng.integers(lo, hi + 1))})
    docs.sort(key=lambda d: d["arrival"])
    t = np.arange(T)
    demand = np.round(8 + 4 * np.sin(2 * np.pi * t / max(T, 2) * 2)).astype(int)
    docs.append({"id": "chat", "kind": "realtime_inference", "priority": 5, "arrival": 0,
                 "gpus": 1, "demand": demand.tolist()})
    return bridge.from_dict({"name": f"slurm_e2e_{T}x{jobs}_s{seed}", "horizon": T,
                             "step_minutes": 0.05,
                             "cluster": {"pools": [{"name": "lab", "count": 8, "gpus_per_node": 8,
                                                    "gpu_type": "h100", "memory_gb": 80}]},
                             "jobs": docs})


def offered_load(s) -> float:
    """The rigid jobs' GPU-steps over what the service's demand leaves."""
    rigid = sum(j.gpus * j.duration for j in s.jobs if j.rigid)
    service = sum(j.gpus * sum(j.demand) for j in s.jobs if not j.rigid)
    return rigid / max(s.G * s.T - service, 1)


def reserve_nodes(s) -> list[str]:
    """PROBLEM.md's FIFO reservation: the fewest nodes from the end whose GPUs
    cover the peak real-time demand."""
    n = min(8, math.ceil(s.peak_elastic_gpus() / 8))
    return [f"n{i}" for i in range(9 - n, 9)]


def until(t: float, slurm: Slurm | None = None, rec=None, seen=None) -> None:
    """Sleep until `t`; with `slurm`, recording the running jobs' GPU
    indices about twice a second (a job of one step is seen)."""
    while True:
        left = t - time.time()
        if left <= 0:
            return
        if slurm is not None:
            record_once(slurm.jobs(), rec, seen)
        time.sleep(min(0.5, max(left, 0.0)))


class Autoscaler:
    """Ways 1-2: the replicas of each step, as a serving system's autoscaler
    keeps them (the benchmark's own jobs)."""

    def __init__(self, slurm: Slurm, svc, cap: int, extra: list[str]):
        self.slurm, self.svc, self.cap, self.extra = slurm, svc, cap, extra
        self.ids: list[int] = []

    def step(self, t: int, jobs) -> None:
        want = min(int(self.svc.demand[t]), self.cap)
        live = [j for j in jobs if j.id in self.ids and j.state in ("PENDING", "RUNNING")]
        pending = [j.id for j in live if j.state == "PENDING"]
        running = sorted(j.id for j in live if j.state == "RUNNING")
        drop = (pending + running[::-1])[:max(0, len(live) - want)]
        self.slurm.cancel(drop)
        for _ in range(want - len(live)):
            self.ids.append(self.slurm.sbatch(
                ["-J", self.svc.id, "--comment", f"service={self.svc.id}", "--gres=gpu:h100:1",
                 "-t", "60", "-o", "/dev/null", "-e", "/dev/null", *self.extra,
                 "--wrap", "sleep 3600"]))


def run_way(way: str, s, step_s: float, root: Path, seed: int, log) -> dict:
    d = root / way
    lab.down(d)
    shutil.rmtree(d, ignore_errors=True)  # a fresh cluster: no job or reservation of a last run
    shape = lab.Shape(port=PORT, scheduler="sched/builtin" if way == "fifo" else "sched/backfill")
    lab.up(d, shape)
    slurm = Slurm(str(d / "slurm.conf"))
    svc = next(j for j in s.jobs if not j.rigid)
    rec = d / "gpus.jsonl"
    seen: dict = {}
    serve = None
    extra_rigid: dict = {}
    if way == "fifo":
        nodes = reserve_nodes(s)
        slurm.run(["scontrol", "create", "reservation", "ReservationName=realtime",
                   "StartTime=now", "Duration=infinite", "Users=root", "Flags=IGNORE_JOBS",
                   f"Nodes={','.join(nodes)}"])
        # Replicas first in the queue: sched/builtin starts nothing behind a
        # head that does not fit, and FIFO serves the reservation apart.
        scaler = Autoscaler(slurm, svc, 8 * len(nodes),
                            ["--reservation=realtime", "--priority=1000000"])
        # Rigid jobs all of one priority (Slurm's default ones are above 4e9):
        # the queue is the submission order, behind the replicas.
        extra_rigid = {"priority": 1000}
    elif way == "backfill":
        scaler = Autoscaler(slurm, svc, s.G, ["--priority=1000000"])
    else:
        scaler = None
    # Whole seconds, as Slurm records its times.
    since = float(math.ceil(time.time() + (SERVE_WARMUP_S if scaler is None else 2.0)))
    if scaler is None:
        demand = d / "demand.json"
        demand.write_text(json.dumps({"jobs": [{"id": svc.id, "kind": svc.kind,
                                                "priority": svc.priority, "gpus": svc.gpus,
                                                "demand": svc.demand,
                                                "min_served": svc.min_served}]}))
        serve = subprocess.Popen(
            [sys.executable, "-m", "gpualloc.slurm", "serve", "--policy", way.split("-")[1],
             "--step-seconds", str(step_s), "--step-minutes", str(step_s / 60),
             "--horizon", str(s.T), "--demand", str(demand), "--since", f"{since:.3f}",
             "--steps", str(s.T), "--recorded", str(rec), "--quiet", "--seed", str(seed),
             "--lead-seconds", str(SERVE_LEAD_S)],
            env=slurm.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ids = []
    # A step's jobs a second early; held ones (serve) before serve's snapshot.
    early = 1.0 if scaler is not None else SERVE_LEAD_S + 1.5
    for t in range(s.T):
        until(since + t * step_s - early, slurm, rec, seen)
        for j in s.jobs:
            if j.rigid and j.arrival == t:
                kw = {"held": True} if scaler is None else dict(extra_rigid)
                if way == "backfill":
                    kw["priority"] = int(j.priority * 1000)
                ids.append(submit(slurm, j, 8, since, step_s, **kw))
        if scaler is not None:
            until(since + t * step_s - 0.5, slurm, rec, seen)
            scaler.step(t, slurm.jobs())
        record_once(slurm.jobs(), rec, seen)
    until(since + s.T * step_s - 0.3, slurm, rec, seen)
    out = serve.communicate(timeout=120)[0] if serve is not None else ""
    if serve is not None and serve.returncode != 0:
        raise RuntimeError(f"serve failed ({serve.returncode}): {out[-2000:]}")
    from gpualloc.slurm.executed import load_recorded
    seen.update(load_recorded(rec))
    record_once(slurm.jobs(), rec, seen)
    live = [j.id for j in slurm.jobs() if j.state in ("PENDING", "RUNNING")]
    slurm.cancel(live)  # the horizon is over: what runs is cut there
    time.sleep(1.5)
    jobs = slurm.jobs()
    ex = executed(s, jobs, [f"n{i}" for i in range(1, 9)], since, step_s, seen, load_runs(rec))
    verdict = bridge.check(s, ex.owner)
    bridge.save_plan(d / "executed.json", s, way, ex.owner)
    m = bridge.metrics(s, ex.owner)
    starts = [j for j in jobs if j.start and j.id in ids]
    late = [((j.start - since) / step_s) % 1 for j in starts]
    late = [x if x < 0.5 else x - 1 for x in late]  # seconds off the boundary, in steps
    lab.down(d)
    log(f"{way}: {len(starts)} rigid jobs started, weighted throughput "
        f"{m['weighted_throughput']:.0f}, {'feasible' if verdict.ok_but_guarantee else 'INFEASIBLE'}")
    return {"executed": _row(m, s, ex.owner), "feasible": verdict.ok_but_guarantee,
            "violations": str(verdict) if not verdict.ok_but_guarantee else "",
            "report": ex.report + ex.renumbered, "rigid_submitted": len(ids),
            "rigid_started": len(starts),
            "start_offset_steps_max": max((abs(x) for x in late), default=0.0),
            "serve_log_tail": out[-1500:]}


def _row(m: dict, s, owner) -> dict:
    from gpualloc.check import shortfall
    from gpualloc.plan import segments
    out = {k: m[k] for k in ("utilization", "weighted_throughput", "realtime_slo",
                             "jobs_started", "jobs_completed")}
    out["short"] = int(shortfall(s, owner).sum())  # replica-steps below the guarantee
    out["requeued"] = int((segments(s, owner).new.sum(1) - 1).clamp(min=0).sum())
    return out


def predictions(s, seed: int) -> dict:
    pred = {"fifo": bridge.policy_plan(s, "fifo", seed),
            "backfill": bridge.policy_plan(s, "backfill", seed),
            "serve-greedy": bridge.simulate_online(s, "greedy", seed),
            "serve-allocator": bridge.simulate_online(s, "allocator", seed)}
    for p in ("greedy", "allocator"):  # serve's own loop, Slurm doing exactly as told
        pred[f"serve-{p}/loop"] = simulate(s, p, bridge.serve_config(seed), s.T)
    out = {}
    for way, owner in pred.items():
        v = bridge.check(s, owner)
        assert v.ok_but_guarantee, f"{way} prediction infeasible: {v}"
        out[way] = _row(bridge.metrics(s, owner), s, owner)
    return out


def _gap(e: dict, p: dict) -> float:
    return e["weighted_throughput"] / p["weighted_throughput"] - 1 if p["weighted_throughput"] else 0.0


def table(result: dict) -> str:
    c = result["config"]
    lines = [f"# Slurm end to end ({'quick' if c['quick'] else 'full'})", "",
             f"Workload `{result['scenario']}`: {c['jobs']} rigid jobs and one real-time service "
             f"on 8 nodes x 8 GPUs, {c['steps']} steps of {c['step_s']:g} s, seed {c['seed']}"
             + (f", offered load {c['offered_load']:.2f} (the rigid jobs' GPU-steps over "
                "what the demand leaves)" if "offered_load" in c else "") + ". "
             + ("The service guaranteed (`min_served` 1.0), training preemptible at "
                "restart cost 1. " if c.get("guarantee") else "")
             + "Each way on a fresh lab Slurm 22.05 cluster; what ran is read back "
             "(`executed`) and checked (rules 1-3).", "",
             "| way | feasible | utilization % executed / predicted | weighted throughput "
             "executed / predicted | gap | serve's loop simulated (gap) | real-time served "
             "executed / predicted | jobs started | worst start offset (steps) |"
             + (" replica-steps short of the guarantee, executed / predicted | runs "
                "requeued, executed / predicted |" if c.get("guarantee") else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if c.get("guarantee") else "")]
    for way, r in result["ways"].items():
        e, p = r["executed"], result["predicted"][way]
        loop = result["predicted"].get(f"{way}/loop")
        lp = (f"{loop['weighted_throughput']:.0f} "
              f"({100 * _gap(e, loop):+.1f}%)" if loop else "")
        lines.append(f"| {way} | {'yes' if r['feasible'] else 'NO'} | "
                     f"{100 * e['utilization']:.1f} / {100 * p['utilization']:.1f} | "
                     f"{e['weighted_throughput']:.0f} / {p['weighted_throughput']:.0f} | "
                     f"{100 * _gap(e, p):+.1f}% | {lp} | "
                     f"{e['realtime_slo']:.3f} / {p['realtime_slo']:.3f} | "
                     f"{r['rigid_started']} of {r['rigid_submitted']} | "
                     f"{r['start_offset_steps_max']:.2f} |"
                     + (f" {e['short']} / {p['short']} | {e['requeued']} / {p['requeued']} |"
                        if c.get("guarantee") else ""))
    w = {k: v["executed"]["weighted_throughput"] for k, v in result["ways"].items()}
    if "fifo" in w and w["fifo"]:
        lines += ["", "Executed weighted throughput against Slurm FIFO: " + ", ".join(
            f"{k} {100 * (v / w['fifo'] - 1):+.1f}%" for k, v in w.items() if k != "fifo") + "."]
    lines += ["", "Predicted: `fifo` PROBLEM.md's FIFO plan; `backfill` gpualloc's "
              "priority-backfill simulation (true durations; Slurm sees whole-minute time "
              "limits); `serve-*` gpualloc's online loop (gpualloc.online), simulated (oracle demand); "
              "serve's loop simulated: serve's own per-step replan with Slurm doing exactly as "
              "told (gpualloc.slurm.serve.simulate).",
              "", f"Commit {result['commit']}, {result['machine']['cpu']}, "
              f"{result['machine']['cores']} cores, load average at start "
              f"{result['machine'].get('load_average_at_start')}, at end "
              f"{result.get('load_average_at_end')}; {result['date']}.",
              f"Command: `{result['command']}`.", ""]
    for way, r in result["ways"].items():
        if r["report"]:
            lines.append(f"- {way}: " + "; ".join(r["report"][:6]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, help="rigid jobs (default 70; 14 with --quick)")
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--guarantee", action="store_true",
                    help="the service guaranteed, training preemptible (module docstring)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--lab", type=Path, default=Path(os.environ.get(
        "GPUALLOC_SLURM_BENCH_LAB", "/tmp/gpualloc-slurm-bench")))
    a = ap.parse_args(argv)
    T, jobs, step_s = (8, 14, 3.0) if a.quick else (40, 70, 3.0)
    if a.jobs is not None:
        if a.jobs < 1:
            print(f"error: --jobs {a.jobs}: at least 1", file=sys.stderr)
            return 2
        jobs = a.jobs
    ways = [w for w in a.ways.split(",") if w]
    bad = [w for w in ways if w not in WAYS]
    if bad:
        print(f"error: --ways {bad[0]}: one of {', '.join(WAYS)}", file=sys.stderr)
        return 2
    s = workload(a.seed, T, jobs)
    if a.guarantee:
        from bench.common import GUARANTEE
        from gpualloc.scenario.edit import with_min_served, with_preemption
        s = with_min_served(with_preemption(s, GUARANTEE["preemptible"],
                                            GUARANTEE["restart_cost"]), GUARANTEE["min_served"])
    result = {**provenance("bench.slurm_e2e", argv), "scenario": s.name,
              "config": {"quick": a.quick, "steps": T, "jobs": jobs, "step_s": step_s,
                         "seed": a.seed, "offered_load": offered_load(s),
                         "guarantee": a.guarantee},
              "predicted": predictions(s, a.seed), "ways": {}}
    try:
        for way in ways:
            result["ways"][way] = run_way(way, s, step_s, a.lab, a.seed,
                                          lambda m: print(m, file=sys.stderr, flush=True))
    except (lab.LabError, SlurmUnreachable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        for way in WAYS:
            lab.down(a.lab / way)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    stem = "slurm_e2e_quick" if a.quick else "slurm_e2e"
    if a.jobs is not None:
        stem += f"_{jobs}jobs"
    if a.guarantee:
        stem += "_guarantee"
    write_results(a.out, stem, result, table(result))
    return 0 if all(r["feasible"] for r in result["ways"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
