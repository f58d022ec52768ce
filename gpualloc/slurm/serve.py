"""The loop an operator runs beside slurmctld: every step, snapshot, replan,
act through Slurm's own commands.

    python -m gpualloc.slurm serve --policy allocator --step-seconds 60 \\
        --demand services.yaml --recorded gpus.jsonl [--dry-run]

Jobs it manages are the ones submitted held (`sbatch --hold`): Slurm starts
none of them by itself. At each step boundary (`--since` + k x step) it
reads the queue and the nodes (gpualloc.slurm.snapshot: running jobs fixed
where they run), plans with the policy, and for the plan's first step:

- a held job the plan starts now is pinned to its planned nodes
  (`scontrol update JobId=.. NodeList=..`), then released;
- a real-time service (`--demand`) gets one replica job per replica the
  plan gives it now, on the planned node (`sbatch -w NODE`), lasting one
  step; replicas still running count;
- a running job marked `preemptible=1` in its comment that the plan cuts is
  requeued held (`scontrol requeuehold`), to be released again later.

It never cancels a job. A job it cannot place stays held. Killed and
restarted with the same `--since`, it rebuilds everything from Slurm (a
released job is no longer held, so none starts twice). Pending jobs that
are not held are Slurm's own: left to it. `--dry-run` prints the actions
instead of taking them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from gpualloc.slurm import bridge
from gpualloc.slurm.client import Slurm
from gpualloc.slurm.executed import load_recorded, record_once
from gpualloc.slurm.read import SlurmJob
from gpualloc.slurm.snapshot import Options, build

REPLICA_TAG = "gpualloc=replica"


def add_options(p) -> None:
    p.add_argument("--policy", default="allocator", choices=list(bridge.SERVE_POLICIES))
    p.add_argument("--step-seconds", type=float,
                   help="wall-clock length of a step (default: --step-minutes x 60)")
    p.add_argument("--since", help="wall time of step 0, epoch seconds (default: now); give the "
                                   "same value to a restarted serve")
    p.add_argument("--steps", type=int, help="stop after this step (default: never)")
    p.add_argument("--until-idle", action="store_true",
                   help="stop when no job is held, pending or running")
    p.add_argument("--lead-seconds", type=float, default=0.5,
                   help="act this long before each step boundary (Slurm starts a released "
                        "job within about a second)")
    p.add_argument("--recorded", help="keep running jobs' GPU indices here (for `executed`)")
    p.add_argument("--replica-command", default="sleep {seconds}",
                   help="what a replica job runs ({seconds}: until just before its step ends)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true", help="print the actions, take none")
    p.add_argument("--quiet", action="store_true")


@dataclass
class Actions:
    release: list[tuple[int, list[str]]] = field(default_factory=list)
    """(Slurm job, nodes)"""
    replicas: list[tuple[str, str, int, str | None]] = field(default_factory=list)
    """(service, node, GPUs, GPU type)"""
    requeue: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        return ([f"release job {j} on {','.join(n)}" for j, n in self.release]
                + [f"replica of {s} on {n} ({g} GPUs)" for s, n, g, _ in self.replicas]
                + [f"requeue held job {j}" for j in self.requeue])


def managed(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """What the plan sees: running jobs and held jobs (not Slurm's own pending ones)."""
    return [j for j in jobs if j.state == "RUNNING" or j.held]


def decide(snap, plan: torch.Tensor) -> Actions:
    """The actions of the plan's first step (column 0 of the (G, T) plan)."""
    s = snap.scenario
    per_node = [p.gpus_per_node for p in s.pools for _ in range(p.count)]
    node_of = torch.repeat_interleave(torch.arange(len(per_node)), torch.tensor(per_node))  # (G,)
    now = plan[:, 0]  # (G,)
    fixed = s.fixed[:, 0]  # (G,)
    acts = Actions()
    for k, job in enumerate(s.jobs):
        mine = (now == k).nonzero().flatten()
        if job.rigid:
            ids = snap.slurm_ids[k]
            running = bool((s.fixed == k).any())
            if not running and len(mine) and ids:
                nodes = sorted({snap.nodes[int(node_of[g])] for g in mine.tolist()},
                               key=snap.nodes.index)
                acts.release.append((ids[0], nodes))
            elif running and job.preemptible and ids and not len(mine) and bool((fixed == k).any()):
                acts.requeue.append(ids[0])
            continue
        # A service: a new replica on every block of its new GPUs.
        new = ((now == k) & (fixed != k)).nonzero().flatten().tolist()
        for b in range(0, len(new), job.gpus):
            g = new[b]
            acts.replicas.append((job.id, snap.nodes[int(node_of[g])], job.gpus,
                                  (job.gpu_types or [None])[0]))
    return acts


def act(slurm: Slurm, acts: Actions, step_s: float, lead: float, command: str) -> list[str]:
    """Take the actions; returns what failed (one line each). A job Slurm
    refuses to pin or release stays held."""
    failed = []
    for j, nodes in acts.release:
        try:
            slurm.pin(j, nodes)
            slurm.release([j])
        except Exception as e:  # noqa: BLE001 - SlurmUnreachable, reported, the loop goes on
            failed.append(f"job {j}: {e}")
    for svc, node, gpus, gtype in acts.replicas:
        # Ends a second before the next step's actions: a replica of the next
        # step is then never mistaken for this one.
        seconds = max(1.0, round(step_s - 1.0, 1))
        gres = f"gpu:{gtype}:{gpus}" if gtype else f"gpu:{gpus}"
        try:
            slurm.sbatch(["-J", svc, "--comment", f"service={svc} {REPLICA_TAG} runtime={seconds}s", "-w", node,
                          f"--gres={gres}", "-t", str(max(1, -(-int(seconds) // 60))),
                          "-o", "/dev/null", "--wrap", command.format(seconds=seconds)])
        except Exception as e:  # noqa: BLE001
            failed.append(f"replica of {svc}: {e}")
    for j in acts.requeue:
        try:
            slurm.requeue_hold(j)
        except Exception as e:  # noqa: BLE001
            failed.append(f"requeue {j}: {e}")
    return failed


def step_once(slurm: Slurm, o: Options, policy: str, cfg, now: float, step: int,
              demand: list[dict] | None):
    """One step: snapshot, plan, decide. Returns (snapshot, plan, actions, jobs)."""
    jobs = slurm.jobs()
    nodes = slurm.nodes()
    if demand is not None:  # the curves from this step on
        o.demand = [{**d, "demand": list(d["demand"][step:]) or [0]} for d in demand]
    view_jobs = [j for j in managed(jobs) if REPLICA_TAG not in j.comment or (
        j.state == "RUNNING" and (j.start or now) + _runtime(j) > now + 0.5)]
    snap = build(nodes, view_jobs, o, now)
    plan = bridge.plan_now(snap.scenario, policy, cfg)
    return snap, plan, decide(snap, plan), jobs


def _runtime(j: SlurmJob) -> float:
    from gpualloc.slurm.snapshot import expected_seconds
    return expected_seconds(j) or 0.0


def main(a) -> int:
    from gpualloc.slurm.__main__ import epoch, snapshot_options
    o = snapshot_options(a)
    demand = o.demand
    slurm = Slurm(a.slurm_conf)
    step_s = a.step_seconds or o.step_minutes * 60.0
    o.step_minutes = step_s / 60.0
    cfg = bridge.serve_config(a.seed)
    seen = load_recorded(a.recorded) if a.recorded else {}
    # Slurm unreachable or a bad option: one line, exit 2, before anything.
    # The first plan compiles the placement core: done before the clock starts.
    step_once(slurm, o, a.policy, cfg, time.time(), 0, demand)
    since = epoch(a.since) if a.since else time.time()
    print(f"serve: since {since:.3f}, steps of {step_s:g} s, policy {a.policy}"
          f"{', dry run' if a.dry_run else ''}", flush=True)
    step = max(0, int((time.time() - since) // step_s))
    while a.steps is None or step < a.steps:
        boundary = since + step * step_s
        wait = boundary - a.lead_seconds - time.time()
        if wait > 0:
            _sleep_recording(slurm, wait, a.recorded, seen)
        snap, plan, acts, jobs = step_once(slurm, o, a.policy, cfg, boundary, step, demand)
        if a.recorded:
            record_once(jobs, a.recorded, seen)
        if a.dry_run:
            for line in acts.lines():
                print(f"step {step}: {line}")
        else:
            for line in act(slurm, acts, step_s, a.lead_seconds, a.replica_command):
                print(f"step {step}: not done: {line}")
        if not a.quiet:
            held = sum(1 for j in jobs if j.held)
            print(f"step {step}: {len(acts.release)} released, {len(acts.replicas)} replicas, "
                  f"{len(acts.requeue)} requeued, {held} held before", flush=True)
        if a.dry_run and a.steps is None:
            break  # a dry run shows one step
        if a.until_idle and not any(j.state in ("PENDING", "RUNNING") for j in jobs) \
                and not acts.replicas and not acts.release:
            break
        step += 1
    return 0


def _sleep_recording(slurm: Slurm, seconds: float, path: str | None, seen: dict) -> None:
    """Sleep, reading the running jobs' GPU indices about every second."""
    end = time.time() + seconds
    while True:
        left = end - time.time()
        if left <= 0:
            return
        if path:
            try:
                record_once(slurm.jobs(), path, seen)
            except Exception:  # noqa: BLE001 - a missed poll; the next one reads again
                pass
        time.sleep(min(1.0, max(left, 0)))
