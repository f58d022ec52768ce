"""The loop an operator runs beside slurmctld: every step, snapshot, replan,
act through Slurm's own commands.

    python -m gpualloc.slurm serve --policy allocator --step-seconds 60 \\
        --demand services.yaml --recorded gpus.jsonl [--dry-run]

Jobs it manages are the ones submitted held (`sbatch --hold`): Slurm starts
none of them by itself. At each step boundary (`--since` + k x step, acting
`--lead-seconds` early) it reads the queue and the nodes
(gpualloc.slurm.snapshot: running jobs fixed where they run, rigid jobs
ending at the boundary taken as done), plans with the policy, and for the
plan's first step:

- a held job the plan starts now is pinned to its planned nodes
  (`scontrol update JobId=.. NodeList=..`), then released;
- a real-time service (`--demand`) keeps replica jobs (its own, tagged
  `gpualloc=replica` in their comment) up to the demand of the step: a
  new one on the planned node for each replica the plan adds
  (`sbatch -w NODE`; while it waits to start it counts on that node), and
  its own replicas cancelled where they are above the demand (the newest
  first) or have waited a whole step without starting;
- a running job marked `preemptible=1` in its comment that the plan cuts is
  requeued held (`scontrol requeuehold`), to be released again later.

It never cancels a job but its own replicas. A job it cannot place stays
held. Killed and restarted with the same `--since`, it rebuilds everything
from Slurm (a released job is no longer held, so none starts twice).
Pending jobs that are not held are Slurm's own: left to it (a released job
still waiting on its nodes holds its place there in the plan). `--dry-run`
prints the actions instead of taking them. `simulate` is the same loop with
a Slurm that does exactly as it is told.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch

from gpualloc.slurm import bridge
from gpualloc.slurm.client import Slurm
from gpualloc.slurm.executed import load_recorded, record_once
from gpualloc.slurm.read import SlurmJob
from gpualloc.slurm.snapshot import REPLICA_TAG, Options, build, needed, waiting


def add_options(p) -> None:
    p.add_argument("--policy", default="allocator", choices=list(bridge.SERVE_POLICIES))
    p.add_argument("--step-seconds", type=float,
                   help="wall-clock length of a step (default: --step-minutes x 60)")
    p.add_argument("--since", help="wall time of step 0, epoch seconds (default: now); give the "
                                   "same value to a restarted serve")
    p.add_argument("--steps", type=int, help="stop after this step (default: never)")
    p.add_argument("--until-idle", action="store_true",
                   help="stop when no job is held, pending or running (replicas aside)")
    p.add_argument("--lead-seconds", type=float, default=0.5,
                   help="act this long before each step boundary (Slurm starts a released "
                        "job within about a second)")
    p.add_argument("--recorded", help="keep running jobs' GPU indices here (for `executed`)")
    p.add_argument("--replica-command", default="sleep {seconds}",
                   help="what a replica job runs ({seconds}: its time limit)")
    p.add_argument("--replica-minutes", type=int, default=1440,
                   help="time limit of a replica job (it runs until the demand falls)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="stop the allocator's search on the clock too (default: its budget "
                        "of moves only, one plan per seed)")
    p.add_argument("--dry-run", action="store_true", help="print the actions, take none")
    p.add_argument("--quiet", action="store_true")


@dataclass
class Actions:
    release: list[tuple[int, list[str]]] = field(default_factory=list)
    """(Slurm job, nodes)"""
    replicas: list[tuple[str, str, int, str | None]] = field(default_factory=list)
    """(service, node, GPUs, GPU type)"""
    requeue: list[int] = field(default_factory=list)
    cancel: list[int] = field(default_factory=list)
    """Replica jobs of gpualloc's own above the demand."""

    def lines(self) -> list[str]:
        return ([f"release job {j} on {','.join(n)}" for j, n in self.release]
                + [f"replica of {s} on {n} ({g} GPUs)" for s, n, g, _ in self.replicas]
                + [f"requeue held job {j}" for j in self.requeue]
                + [f"cancel replica job {j} (above demand)" for j in self.cancel])


def managed(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """What the plan sees: running jobs, held jobs, and jobs on their way
    (pending on the nodes they are pinned to: released jobs and gpualloc's
    replicas; they count there while those nodes have room); not Slurm's own
    pending jobs."""
    return [j for j in jobs if j.state == "RUNNING" or j.held or waiting(j)]


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
            elif (running and job.preemptible and ids and not len(mine) and k not in snap.on_way
                  and bool((fixed == k).any())):
                acts.requeue.append(ids[0])
            continue
        # A service: a new replica on every block of its new GPUs.
        new = ((now == k) & (fixed != k)).nonzero().flatten().tolist()
        for b in range(0, len(new), job.gpus):
            g = new[b]
            acts.replicas.append((job.id, snap.nodes[int(node_of[g])], job.gpus,
                                  (job.gpu_types or [None])[0]))
    return acts


def act(slurm: Slurm, acts: Actions, a) -> list[str]:
    """Take the actions; returns what failed (one line each). A job Slurm
    refuses to pin or release stays held."""
    failed = []
    try:
        slurm.cancel(acts.cancel)
    except Exception as e:  # noqa: BLE001 - SlurmUnreachable, reported, the loop goes on
        failed.append(f"cancel replicas: {e}")
    for j, nodes in acts.release:
        try:
            slurm.pin(j, nodes)
            slurm.release([j])
        except Exception as e:  # noqa: BLE001
            failed.append(f"job {j}: {e}")
    for svc, node, gpus, gtype in acts.replicas:
        gres = f"gpu:{gtype}:{gpus}" if gtype else f"gpu:{gpus}"
        try:
            slurm.sbatch(["-J", svc, "--comment", f"service={svc} {REPLICA_TAG}",
                          "-w", node, f"--gres={gres}", "-t", str(a.replica_minutes),
                          "-o", "/dev/null", "-e", "/dev/null",
                          "--wrap", a.replica_command.format(seconds=60 * a.replica_minutes)])
        except Exception as e:  # noqa: BLE001
            failed.append(f"replica of {svc}: {e}")
    for j in acts.requeue:
        try:
            slurm.requeue_hold(j)
        except Exception as e:  # noqa: BLE001
            failed.append(f"requeue {j}: {e}")
    return failed


def surplus(jobs: list[SlurmJob], demand: list[dict] | None, step: int, now: float,
            step_s: float) -> list[int]:
    """gpualloc's own replica jobs to cancel at `step`: those pending for a
    step already (they did not start where the plan put them; it places
    them again), and the newest above the step's demand."""
    mine = [j for j in jobs if REPLICA_TAG in j.comment and j.state in ("PENDING", "RUNNING")]
    out = [j.id for j in mine if j.state == "PENDING" and (j.submit or now) < now - step_s]
    for d in demand or []:
        live = sorted((j for j in mine if j.id not in out and j.hints.get("service") == d["id"]),
                      key=lambda j: (j.state != "RUNNING", j.id))
        want = d["demand"][step] if step < len(d["demand"]) else (d["demand"] or [0])[-1]
        out += [j.id for j in live[want:]]
    return out


def step_once(slurm: Slurm, o: Options, policy: str, cfg, now: float, step: int,
              demand: list[dict] | None):
    """One step: snapshot, plan, decide. Returns (snapshot, plan, actions, jobs)."""
    if demand is not None:  # the curves from this step on
        o.demand = [{**d, "demand": list(d["demand"][step:]) or [0]} for d in demand]
    jobs = slurm.jobs()
    nodes = slurm.nodes()
    drop = surplus(jobs, demand, step, now, o.step_minutes * 60.0)
    snap = build(nodes, [j for j in managed(jobs) if j.id not in drop], o, now)
    plan = bridge.plan_now(snap.scenario, policy, cfg)
    acts = decide(snap, plan)
    acts.cancel = drop
    return snap, plan, acts, jobs


def main(a) -> int:
    from gpualloc.slurm.__main__ import UsageError, epoch, snapshot_options
    if a.time_limit is not None and not a.time_limit > 0:
        raise UsageError(f"--time-limit {a.time_limit:g}: must be above 0 seconds")
    o = snapshot_options(a)
    demand = o.demand
    slurm = Slurm(a.slurm_conf)
    step_s = a.step_seconds or o.step_minutes * 60.0
    o.step_minutes = step_s / 60.0
    o.finishing_s = a.lead_seconds + 1.0  # rigid jobs ending at the boundary: done
    cfg = bridge.serve_config(a.seed, a.time_limit)
    seen = load_recorded(a.recorded) if a.recorded else {}
    # Slurm unreachable or a bad option: one line, exit 2, before anything.
    # The first plan compiles the placement core: done before the clock starts.
    step_once(slurm, o, a.policy, cfg, time.time(), 0, demand)
    since = epoch(a.since) if a.since else float(math.ceil(time.time()))  # Slurm's whole seconds
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
            for line in act(slurm, acts, a):
                print(f"step {step}: not done: {line}")
        if not a.quiet:
            held = sum(1 for j in jobs if j.held)
            print(f"step {step}: {len(acts.release)} released, {len(acts.replicas)} replicas "
                  f"started, {len(acts.cancel)} cancelled, "
                  f"{len(acts.requeue)} requeued, {held} held before", flush=True)
        if a.dry_run and a.steps is None:
            break  # a dry run shows one step
        if a.until_idle and not acts.release and not any(
                j.state in ("PENDING", "RUNNING") and REPLICA_TAG not in j.comment for j in jobs):
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


def simulate(s, policy: str, cfg, horizon: int | None = None) -> torch.Tensor:
    """(G, T) what `serve` does with the scenario `s` when Slurm does exactly
    what it is told, at once: at each step the view it would snapshot (jobs
    arrived and not started, arrival 0; running ones fixed on their GPUs for
    the rest of their run; the service's replicas of the last step, up to
    this step's demand, fixed while the demand keeps them; the demand from
    this step on, its last value repeated), the policy's plan of it, and
    the plan's first step taken. A replica stays where it runs while the
    demand keeps it, as the snapshot holds it (`snapshot.needed`: serve
    cancels replicas above a step's demand). Against this, an executed run measures what Slurm's execution
    (timing, placement inside nodes) changes; against gpualloc's online
    loop (gpualloc.online), what serve's simpler loop changes."""
    H = horizon or s.T
    owner = torch.full((s.G, s.T), bridge.IDLE, dtype=torch.long)  # (G, T)
    start: dict[int, int] = {}  # rigid job -> first GPU
    docs_all = s.to_dict()["jobs"]
    for k in range(s.T):
        docs, index, cells = [], [], []
        for j, job in enumerate(s.jobs):
            if job.arrival > k:
                continue
            d = {**docs_all[j], "arrival": 0}
            if job.rigid:
                if j in start:
                    left = int((owner[start[j], k:] == j).sum())
                    if left == 0:
                        continue
                    d["duration"] = left
                    cells.append((len(docs), torch.arange(start[j], start[j] + job.gpus), left))
                docs.append(d)
            else:
                dem = list(job.demand[k:H + k])
                d["demand"] = dem + [dem[-1]] * (H - len(dem))
                if k:  # last step's replicas, the lowest blocks up to this step's demand,
                    # each held while the demand keeps it (as the snapshot holds them)
                    held = (owner[:, k - 1] == j).nonzero().flatten()[: job.demand[k] * job.gpus]
                    for r in range(len(held) // job.gpus):
                        cells.append((len(docs), held[r * job.gpus:(r + 1) * job.gpus],
                                      needed(d["demand"], r)))
                docs.append(d)
            index.append(j)
        doc = {**s.to_dict(), "name": f"serve@{k}", "horizon": H, "jobs": docs}
        view = bridge.from_dict(doc)
        fixed = torch.full((view.G, H), bridge.IDLE, dtype=torch.long)  # (G, H)
        for vj, gpus, steps in cells:
            fixed[gpus, :steps] = vj
        view.fixed = fixed
        col = bridge.plan_now(view, policy, cfg)[:, 0]  # (G,)
        for vj, j in enumerate(index):
            mine = (col == vj).nonzero().flatten()
            job = s.jobs[j]
            if job.rigid and j not in start and len(mine):
                start[j] = int(mine[0])
                owner[start[j]:start[j] + job.gpus, k:k + job.duration] = j
            elif not job.rigid:
                owner[mine, k] = j
    return owner
