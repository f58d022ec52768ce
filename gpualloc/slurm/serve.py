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
  (`sbatch -w NODE`), and its own replicas cancelled where they are above
  the demand (the newest first) or have waited a whole step without
  starting. The plan places the service freely (its replicas may move
  between steps, PROBLEM.md): serve keeps its replicas on their nodes as
  far as the plan's first step leaves room (`settle`) and cancels the
  others, whose GPUs the plan gives to other work (`--pin-replicas`:
  each is fixed where it runs while the demand keeps it, instead);
- where a guaranteed service (`min_served` in the demand file) is short of
  its guarantee at the step, GPUs are taken from work that may yield, as
  the online loop takes them (`bridge.held_guarantee`);
- a running job marked `preemptible=1` in its comment that the plan or the
  guarantee cuts is requeued held (`scontrol requeuehold`), its progress
  written into its comment first (`done=`), to be released again later and
  planned as its restore and the rest.

The demand file is read again at every step (an autoscaler may rewrite
it). It never cancels a job but its own replicas. A job it cannot place
stays held. Killed and restarted with the same `--since`, it rebuilds everything
from Slurm (a released job is no longer held, so none starts twice).
Pending jobs that are not held are Slurm's own: left to it (a released job
still waiting on its nodes holds its place there in the plan). `--dry-run`
prints the actions instead of taking them. `simulate` is the same loop with
a Slurm that does exactly as it is told.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

import torch

from gpualloc.slurm import bridge
from gpualloc.slurm.client import Slurm
from gpualloc.slurm.executed import load_recorded, record_once, record_requeued
from gpualloc.slurm.read import SlurmJob
from gpualloc.slurm.snapshot import (REPLICA_TAG, Options, Snapshot, build, needed, steps_hint,
                                     waiting)


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
    p.add_argument("--pin-replicas", action="store_true",
                   help="keep each replica where it runs while the demand keeps it (the plan "
                        "works around it); by default serve moves a replica whose GPUs the "
                        "plan gives to other work (cancelled there, started where the plan "
                        "places the service)")
    p.add_argument("--guarantee-headroom", type=float, default=0.0, metavar="F",
                   help="where the demand file's curves are a forecast (an autoscaler rewrites "
                        "it): work that cannot yield starts only where the guaranteed "
                        "replicas of its run, the curves raised by this share, still fit "
                        "(the online loop's online.guarantee_headroom; default 0: the curves "
                        "are the demand)")
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
    comment: dict[int, str] = field(default_factory=dict)
    """The comment each requeued job keeps: its own, with `done=` its progress
    so far (`progress_comment`), which the snapshot reads when it comes back."""
    cancel: list[int] = field(default_factory=list)
    """Replica jobs of gpualloc's own above the demand."""
    move: list[int] = field(default_factory=list)
    """Replica jobs of gpualloc's own on GPUs the plan gives to other work:
    cancelled (the new replicas start where the plan places the service)."""
    short: int = 0
    """Guaranteed replicas the step leaves short (work that cannot yield
    holds their GPUs)."""

    def lines(self) -> list[str]:
        return ([f"release job {j} on {','.join(n)}" for j, n in self.release]
                + [f"replica of {s} on {n} ({g} GPUs)" for s, n, g, _ in self.replicas]
                + [f"requeue held job {j}" + (f" ({self.comment[j].split()[-1]})"
                                              if j in self.comment else "")
                   for j in self.requeue]
                + [f"cancel replica job {j} (above demand)" for j in self.cancel]
                + [f"cancel replica job {j} (its GPUs go to other work)" for j in self.move])


def managed(jobs: list[SlurmJob]) -> list[SlurmJob]:
    """What the plan sees: running jobs, held jobs, and jobs on their way
    (pending on the nodes they are pinned to: released jobs and gpualloc's
    replicas; they count there while those nodes have room); not Slurm's own
    pending jobs."""
    return [j for j in jobs if j.state == "RUNNING" or j.held or waiting(j)]


def _counts(col: torch.Tensor, k: int, snap) -> list[int]:
    """Service k's replicas on each node in the column, the fixed ones (a
    user's, never moved) aside."""
    s = snap.scenario
    mine = (col == k) & (s.fixed[:, 0] != k)  # (G,)
    per_node = torch.bincount(s.gpu_node[mine], minlength=len(snap.nodes))  # (N,) GPUs
    return (per_node // s.jobs[k].gpus).tolist()


def _have(snap, k: int) -> list[int]:
    """Service k's movable replicas on each node."""
    return [sum(1 for _, n in snap.replicas.get(k, []) if n == name) for name in snap.nodes]


def settle(col: torch.Tensor, snap) -> torch.Tensor:
    """The column `col` (G,) with each service's replicas moved, as few as
    the column allows, to the nodes where its movable replicas run
    (`snap.replicas`): a replica the plan puts on a node where none of them
    runs goes instead to a node where one runs and the column leaves one of
    its candidate blocks idle (`Scenario.blocks`). Each service's count and
    every other job's GPUs are unchanged; each such move keeps a replica
    running instead of cancelling it and starting another."""
    col = col.clone()
    s = snap.scenario
    fixed = s.fixed[:, 0]  # (G,)
    for k in snap.replicas:
        gpus = s.jobs[k].gpus
        if gpus > min(p.gpus_per_node for p in s.pools):
            continue  # whole nodes: serve starts replicas on one node only
        blocks = s.blocks(k)  # (B,) first GPUs, ascending
        have, count = _have(snap, k), _counts(col, k, snap)
        short = [n for n in range(len(have)) if count[n] > have[n]]  # starts there
        for n in range(len(have)):
            while have[n] > count[n] and short:
                here = blocks[s.gpu_node[blocks] == n]
                free = [int(g) for g in here if bool((col[g:g + gpus] == bridge.IDLE).all())]
                if not free:
                    break
                d = short[-1]
                drop = ((col == k) & (fixed != k) & (s.gpu_node == d)).nonzero().flatten()[-gpus:]
                col[drop] = bridge.IDLE
                col[free[0]:free[0] + gpus] = k
                count[n] += 1
                count[d] -= 1
                if count[d] == have[d]:
                    short.pop()
    return col


def plan_step(snap, policy: str, cfg, last=None,
              headroom: float = 0.0) -> tuple[torch.Tensor, tuple]:
    """((G,) the column serve takes now, (the plan, its jobs' ids)): the
    plan's first step, the guarantee held where the plan leaves a guaranteed
    service short (`bridge.held_guarantee`: preemptible jobs cut there are
    requeued; with `headroom`, starts of work that cannot yield kept only
    where the guarantee's forecast raised by it still fits,
    `bridge.guarded_starts`), the services' replicas settled on the nodes
    where theirs run (`settle`). `last` = (the plan of a step before, its jobs'
    ids, steps since) is the allocator's hint, as at the online loop's
    replans (`Scenario.hint`: a start its search competes with, so a step's
    plan does not throw away the last one's)."""
    s = snap.scenario
    if last is not None:
        s.hint = carried(last, s)
    plan = bridge.plan_now(s, policy, cfg)
    col = bridge.held_guarantee(s, bridge.guarded_starts(s, in_place(s, plan[:, 0]), headroom))
    return settle(col, snap), (plan, [j.id for j in s.jobs])


def in_place(s, col: torch.Tensor) -> torch.Tensor:
    """The column `col` (G,) with each running preemptible job that it moves
    (a new segment on other GPUs at once, as a plan may make one) taken out:
    Slurm cannot move a running job, so serve requeues it, and the next
    step plans it again."""
    fixed = s.fixed[:, 0]  # (G,)
    out = col
    for k in torch.unique(fixed[fixed != bridge.IDLE]).tolist():
        if s.jobs[k].rigid and not torch.equal(col == k, fixed == k) and bool((col == k).any()):
            out = out.clone() if out is col else out
            out[out == k] = bridge.IDLE
    return out


def carried(last, s) -> torch.Tensor:
    """The plan of `last` = (plan, its jobs' ids, steps since) in `s`'s job
    indices and steps (jobs `s` no longer has, and any GPU count but
    `s`'s: idle)."""
    plan, ids, since = last
    view = {i: k for k, i in enumerate(j.id for j in s.jobs)}
    to_view = torch.tensor([view.get(i, bridge.IDLE) for i in ids] + [bridge.IDLE])  # (J' + 1,)
    grid = plan[:, since:since + s.T]
    out = torch.full((s.G, s.T), bridge.IDLE, dtype=torch.long)
    if grid.shape[0] == s.G:
        out[:, :grid.shape[1]] = to_view[grid]  # IDLE (-1) reads the last entry: IDLE
    return out


def decide(snap, now: torch.Tensor) -> Actions:
    """The actions of the column `now` (G,), the plan's first step."""
    s = snap.scenario
    fixed = s.fixed[:, 0]  # (G,)
    acts = Actions()
    for k, job in enumerate(s.jobs):
        if job.rigid:
            mine = (now == k).nonzero().flatten()
            ids = snap.slurm_ids[k]
            running = bool((s.fixed == k).any())
            if not running and len(mine) and ids:
                nodes = sorted({snap.nodes[int(s.gpu_node[g])] for g in mine.tolist()},
                               key=snap.nodes.index)
                acts.release.append((ids[0], nodes))
            elif (running and job.preemptible and ids and not len(mine) and k not in snap.on_way
                  and bool((fixed == k).any())):
                acts.requeue.append(ids[0])
            continue
        # A service: its movable replicas kept on the nodes where the column has
        # them (the oldest), the others cancelled; a new one for each block
        # it adds on a node.
        where = snap.replicas.get(k, [])
        for name, count in zip(snap.nodes, _counts(now, k, snap)):
            here = [j for j, node in where if node == name]
            acts.move += here[count:]
            acts.replicas += [(job.id, name, job.gpus, (job.gpu_types or [None])[0])] * max(
                0, count - len(here))
    return acts


def act(slurm: Slurm, acts: Actions, a) -> list[str]:
    """Take the actions; returns what failed (one line each). A job Slurm
    refuses to pin or release stays held."""
    failed = []
    try:
        slurm.cancel(acts.cancel + acts.move)
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
            if j in acts.comment:
                slurm.set_comment(j, acts.comment[j])
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


def progress_comment(j: SlurmJob, now: float, step_s: float) -> str:
    """The comment of a running preemptible job serve requeues at `now`, with
    `done=` the progress it made so far (PROBLEM.md's segments): the steps of
    this run, less its restore where serve requeued it before, added to the
    progress before it. The job is expected to resume from there (a
    checkpoint of its own); the snapshot plans its next run as the restore
    and the rest (snapshot.resumed)."""
    restore = steps_hint(j, "restart_cost") if "done" in j.hints else 0
    ran = round((now - (j.start or now)) / step_s)
    done = steps_hint(j, "done") + max(0, ran - restore)
    rest = re.sub(r"(?i)(^|[\s,;])done=[^\s,;]*", r"\1", j.comment).strip(" ,;")
    return f"{rest} done={done}".strip()


def step_once(slurm: Slurm, o: Options, policy: str, cfg, now: float, step: int,
              demand: list[dict] | None, last=None, headroom: float = 0.0):
    """One step: snapshot, plan (`last`: see plan_step), decide. Returns
    (snapshot, the column taken now, actions, jobs, (the plan, its jobs'
    ids))."""
    if demand is not None:  # the curves from this step on
        o.demand = [{**d, "demand": list(d["demand"][step:]) or [0]} for d in demand]
    jobs = slurm.jobs()
    nodes = slurm.nodes()
    drop = surplus(jobs, demand, step, now, o.step_minutes * 60.0)
    snap = build(nodes, [j for j in managed(jobs) if j.id not in drop], o, now)
    now_col, planned = plan_step(snap, policy, cfg, last, headroom)
    acts = decide(snap, now_col)
    acts.cancel = drop
    acts.short = bridge.short_now(snap.scenario, now_col)
    by_id = {j.id: j for j in jobs}
    acts.comment = {i: progress_comment(by_id[i], now, o.step_minutes * 60.0)
                    for i in acts.requeue if i in by_id}
    return snap, now_col, acts, jobs, planned


def main(a) -> int:
    from gpualloc.slurm.__main__ import UsageError, read_demand, epoch, snapshot_options
    if a.time_limit is not None and not a.time_limit > 0:
        raise UsageError(f"--time-limit {a.time_limit:g}: must be above 0 seconds")
    if not (a.guarantee_headroom >= 0 and math.isfinite(a.guarantee_headroom)):
        raise UsageError(f"--guarantee-headroom {a.guarantee_headroom:g}: a share >= 0")
    o = snapshot_options(a)
    o.move_replicas = not a.pin_replicas
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
    planned = made = None  # the last step's plan, its jobs' ids; its step
    while a.steps is None or step < a.steps:
        boundary = since + step * step_s
        wait = boundary - a.lead_seconds - time.time()
        if wait > 0:
            _sleep_recording(slurm, wait, a.recorded, seen)
        last = None if planned is None else (*planned, step - made)
        if a.demand:  # read again at each step: an autoscaler may rewrite it
            try:
                demand = read_demand(a.demand, step)
            except UsageError as e:
                print(f"step {step}: not done: {e} (the last demand kept)", flush=True)
        snap, _, acts, jobs, planned = step_once(slurm, o, a.policy, cfg, boundary, step, demand,
                                                 last, a.guarantee_headroom)
        made = step
        if a.recorded:
            record_once(jobs, a.recorded, seen)
            if acts.requeue and not a.dry_run:  # Slurm keeps only a job's last run
                record_requeued(a.recorded, [j for j in jobs if j.id in acts.requeue], boundary,
                                seen)
        if a.dry_run:
            for line in acts.lines():
                print(f"step {step}: {line}")
        else:
            for line in act(slurm, acts, a):
                print(f"step {step}: not done: {line}")
        if not a.quiet:
            held = sum(1 for j in jobs if j.held)
            print(f"step {step}: {len(acts.release)} released, {len(acts.replicas)} replicas "
                  f"started, {len(acts.cancel)} cancelled above demand, {len(acts.move)} "
                  f"cancelled for other work, "
                  f"{len(acts.requeue)} requeued, {held} held before"
                  + (f", {acts.short} guaranteed replicas short" if acts.short else ""),
                  flush=True)
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


def simulate(s, policy: str, cfg, horizon: int | None = None,
             move_replicas: bool = True, forecast: str = "oracle",
             headroom: float = 0.0) -> torch.Tensor:
    """(G, T) what `serve` does with the scenario `s` when Slurm does exactly
    what it is told, at once: at each step the view it would snapshot (jobs
    arrived and not started, arrival 0; running ones fixed on their GPUs for
    the rest of their run; the demand from this step on, its last value
    repeated), its column (`plan_step`, the last step's plan its hint),
    taken. The service's replicas of the last step, up to this step's
    demand (the lowest blocks), are serve's own: with `move_replicas`
    (serve's default) movable
    (`Options.move_replicas`), else each fixed where it runs while the
    demand keeps it (`snapshot.needed`, serve's --pin-replicas). A running
    preemptible job the column leaves is requeued: it comes back as its
    restore and the rest of its progress (PROBLEM.md's segments).
    `forecast`: the demand file as an autoscaler rewrites it each step (the
    step's actual demand, then this forecast from the demand seen so far:
    `bridge.demand_seen`); oracle: the true curves; `headroom`: serve's
    --guarantee-headroom. Against
    this, an executed run measures what Slurm's execution (timing,
    placement inside nodes) changes; against gpualloc's online loop
    (gpualloc.online), what serve's simpler loop changes."""
    H = horizon or s.T
    owner = torch.full((s.G, s.T), bridge.IDLE, dtype=torch.long)  # (G, T)
    names = [f"node{n}" for n in range(len(s.node_pool))]
    run: dict[int, tuple[int, int, int]] = {}  # rigid job -> its run's first GPU, start, end
    made: dict[int, int] = {}  # preemptible job -> progress of its runs serve requeued
    planned = None  # the last step's plan, its jobs' ids
    whole = s.to_dict()
    docs_all = whole["jobs"]
    for k in range(s.T):
        docs, index, cells, loose = [], [], [], {}
        seen = None if forecast == "oracle" else bridge.demand_seen(s, k, H, forecast)
        for j, job in enumerate(s.jobs):
            if job.arrival > k:
                continue
            d = {**docs_all[j], "arrival": 0}
            if job.rigid:
                if j in run:
                    g0, _, end = run[j]
                    if end <= k:
                        continue  # done
                    d["duration"] = end - k  # running: fixed for the rest of its run
                    cells.append((len(docs), torch.arange(g0, g0 + job.gpus), end - k))
                elif j in made:  # requeued: it restores, then makes the rest of its progress
                    d["duration"] = job.restart_cost + job.duration - made[j]
                docs.append(d)
            else:
                if seen is None:
                    dem = list(job.demand[k:H + k])
                    d["demand"] = dem + [dem[-1]] * (H - len(dem))
                else:
                    d["demand"] = seen[j].tolist()
                held = ((owner[:, k - 1] == j).nonzero().flatten()[: job.demand[k] * job.gpus]
                        if k else torch.empty(0, dtype=torch.long))
                blocks = [held[r * job.gpus:(r + 1) * job.gpus]
                          for r in range(len(held) // job.gpus)]
                if move_replicas and blocks:
                    loose[len(docs)] = blocks
                else:
                    cells += [(len(docs), b, needed(d["demand"], r)) for r, b in enumerate(blocks)]
                docs.append(d)
            index.append(j)
        view = bridge.from_dict({**whole, "name": f"serve@{k}", "horizon": H, "jobs": docs})
        view.fixed = torch.full((view.G, H), bridge.IDLE, dtype=torch.long)  # (G, H)
        for vj, gpus, steps in cells:
            view.fixed[gpus, :steps] = vj
        snap = Snapshot(scenario=view, nodes=names, slurm_ids=[[] for _ in docs], report=[],
                        renumbered=[],
                        replicas={vj: [(-1, names[int(s.gpu_node[b[0]])]) for b in blocks]
                                  for vj, blocks in loose.items()})
        col, planned = plan_step(snap, policy, cfg,
                                 None if planned is None else (*planned, 1), headroom)
        # A running job the column leaves is requeued (serve's `requeue`, only
        # preemptible ones): its cells from now on are cleared before anything
        # starts on them. Its progress: the steps it ran, less its restore
        # after the first run (PROBLEM.md's segments).
        for vj, j in enumerate(index):
            if j in run and run[j][2] > k and not bool((col == vj).any()):
                g0, start, end = run.pop(j)
                job = s.jobs[j]
                restore = job.restart_cost if j in made else 0
                made[j] = made.get(j, 0) + max(0, k - start - restore)
                owner[g0:g0 + job.gpus, k:end] = bridge.IDLE
        for vj, j in enumerate(index):
            mine = (col == vj).nonzero().flatten()
            job = s.jobs[j]
            if job.rigid and len(mine) and j not in run:
                length = (job.restart_cost + job.duration - made[j] if j in made
                          else job.duration)
                g0 = int(mine[0])
                run[j] = (g0, k, min(k + length, s.T))
                owner[g0:g0 + job.gpus, k:k + length] = j
            elif not job.rigid:
                owner[mine, k] = j
    return owner
