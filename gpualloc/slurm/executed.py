"""What Slurm actually ran, as a plan file of PROBLEM.md: so that the checker
and the metrics judge the real scheduler, not a plan.

A Slurm job is the scenario job whose id is its comment's `id=`, its
comment's `service=` (a replica of that real-time service), its name, or
`name.jobid`. Its start and end (epoch seconds, from `squeue --json`: the
controller keeps finished jobs for MinJobAge) become steps counted from
`since`, rounded to the nearest step. Its nodes become GPU ranges in the
scenario's node order (the `nodes` list that `snapshot` writes, or the
usable GPU nodes of `sinfo` in natural order).

Inside a node, Slurm picks the GPU indices itself and erases them when the
job ends: `record` keeps them while jobs run. The GPUs of each node are
then renumbered, once for the whole run, so that every job's indices are
adjacent where such a renumbering exists (reported); a job whose indices
were never recorded takes the lowest free adjacent GPUs of its node for its
run (reported). Everything else (which node, when, how many GPUs) is
written as Slurm ran it, and the checker judges it strictly.

Slurm keeps only a job's last run: the runs `serve` ends by requeueing a
preemptible job are kept beside the recorded indices (`RECORDED.runs`,
`record_requeued`), each a segment of that job in the plan.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpualloc.slurm import bridge
from gpualloc.slurm.read import SlurmJob, SlurmReadError, resumed

SEARCH_MAX_GPUS = 16
"""Nodes up to this many GPUs get the renumbering search (backtracking)."""


@dataclass
class Run:
    job: int
    """Scenario job index."""
    slurm_id: int
    node: int
    start: int
    end: int
    count: int
    idx: list[int] | None


@dataclass
class Executed:
    owner: torch.Tensor
    """(G, T) int64."""
    report: list[str] = field(default_factory=list)
    renumbered: list[str] = field(default_factory=list)
    matched: int = 0


def match(s, j: SlurmJob) -> int | None:
    """Scenario job index of a Slurm job, or None."""
    ids = {job.id: i for i, job in enumerate(s.jobs)}
    h = j.hints
    for key in (h.get("id"), h.get("service"), j.name, f"{j.name}.{j.id}"):
        if key is not None and key in ids:
            return ids[key]
    return None


def load_recorded(path: str | Path | None) -> dict[int, dict[str, list[int]]]:
    """job id -> node -> GPU indices, from a file `record` wrote (JSON lines)."""
    out: dict[int, dict[str, list[int]]] = {}
    if path is None or not Path(path).exists():
        return out
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            out[int(rec["job"])] = {str(k): [int(i) for i in v] for k, v in rec["idx"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SlurmReadError(f"{path}: line {n}: not a record of GPU indices") from None
    return out


def node_order(s, order: list[str] | None) -> tuple[list[str], list[int], list[int]]:
    per_node = [p.gpus_per_node for p in s.pools for _ in range(p.count)]
    if order is None or len(order) != len(per_node):
        raise SlurmReadError(f"the scenario has {len(per_node)} nodes; the node list has "
                             f"{0 if order is None else len(order)}")
    first = [sum(per_node[:i]) for i in range(len(per_node))]
    return order, per_node, first


def find_order(size: int, sets: list[frozenset]) -> list[int] | None:
    """A renumbering of a node's GPUs (new position -> old index) under which
    every set is adjacent, or None. Backtracking; a partial order is kept
    only while every set it touches is adjacent and, if not yet whole, ends
    at its last position."""
    sets = sorted({x for x in sets if 1 < len(x) < size}, key=len)
    if all(max(x) - min(x) + 1 == len(x) for x in sets):
        return list(range(size))
    order: list[int] = []
    used = [False] * size

    def ok() -> bool:
        last = len(order) - 1
        for x in sets:
            pos = [i for i, g in enumerate(order) if g in x]
            if not pos:
                continue
            if pos[-1] - pos[0] + 1 != len(pos):
                return False
            if len(pos) < len(x) and pos[-1] != last:
                return False
        return True

    def go() -> bool:
        if len(order) == size:
            return True
        for g in range(size):
            if not used[g]:
                used[g] = True
                order.append(g)
                if ok() and go():
                    return True
                order.pop()
                used[g] = False
        return False

    return list(order) if go() else None


def runs_path(recorded: str | Path) -> Path:
    return Path(f"{recorded}.runs")


def record_requeued(recorded: str | Path, jobs: list[SlurmJob], end: float,
                    seen: dict[int, dict[str, list[int]]]) -> None:
    """Keep the runs of these running jobs, which serve ends at `end` (epoch
    seconds) by requeueing them, in `RECORDED.runs` (JSON lines, rewritten
    whole): their start, end, nodes and GPU indices. Each leaves `seen`, so
    that its next run's indices are recorded afresh."""
    path = runs_path(recorded)
    lines = path.read_text().splitlines() if path.exists() else []
    for j in jobs:
        lines.append(json.dumps({"job": j.id, "start": j.start, "end": end, "nodes": j.nodes,
                                 "idx": seen.pop(j.id, None) or j.idx or {}}))
    bridge.atomic_write_text(path, "".join(f"{x}\n" for x in lines if x.strip()))
    _write_recorded(recorded, seen)  # a restarted serve records their next runs too


def load_runs(recorded: str | Path | None) -> list[SlurmJob]:
    """The runs `record_requeued` kept, each as the Slurm job in that run
    (id, start, end, nodes, GPU indices; state REQUEUED)."""
    path = None if recorded is None else runs_path(recorded)
    if path is None or not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            out.append(SlurmJob(id=int(r["job"]), name="", state="REQUEUED",
                                start=int(r["start"]), end=int(r["end"]),
                                nodes=[str(x) for x in r["nodes"]],
                                idx={str(k): [int(i) for i in v] for k, v in r["idx"].items()}))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SlurmReadError(f"{path}: line {n}: not a run of a requeued job") from None
    return out


def executed(s, jobs: list[SlurmJob], nodes: list[str], since: float, step_s: float,
             recorded: dict[int, dict[str, list[int]]] | None = None,
             requeued: list[SlurmJob] = ()) -> Executed:
    """The (G, T) plan Slurm ran, from `since` (epoch seconds, step 0);
    `requeued`: the earlier runs of jobs serve requeued (`load_runs`)."""
    recorded = recorded or {}
    order, per_node, first = node_order(s, nodes)
    at = {n: i for i, n in enumerate(order)}
    out = Executed(owner=torch.full((s.G, s.T), bridge.IDLE, dtype=torch.long))
    runs: list[Run] = []
    by_id = {j.id: j for j in jobs}
    earlier = [dataclasses.replace(by_id[r.id], state=r.state, start=r.start, end=r.end,
                                   nodes=r.nodes, idx=r.idx)
               for r in requeued if r.id in by_id]
    for j in sorted([*jobs, *earlier], key=lambda j: (j.id, j.start or 0)):
        if j.state == "PENDING" or j.start is None:
            continue
        k = match(s, j)
        tag = f"job {j.id} ({j.name!r})"
        if k is None:
            if j.start >= since:
                out.report.append(f"{tag}: no scenario job of that id or name: not in the plan")
            continue
        start = round((j.start - since) / step_s)
        job = s.jobs[k]
        length = job.duration
        if job.rigid:  # a run after serve requeued it: its restore and the rest
            try:
                length += resumed(j.hints)
            except SlurmReadError:
                pass  # no progress to read: its whole duration
        if j.state == "RUNNING" or j.end is None:
            end = start + (length or 1)
        else:
            end = round((j.end - since) / step_s)
        if start < 0 or start >= s.T:
            out.report.append(f"{tag}: started at step {start}, outside 0..{s.T - 1}: not in "
                              f"the plan")
            continue
        if end <= start:
            out.report.append(f"{tag}: ran less than half a step ({j.state}): not in the plan")
            continue
        if job.rigid and end - start != length and min(end, s.T) < s.T and j.state != "REQUEUED":
            out.report.append(f"{tag}: ran {end - start} steps, its run is {length} "
                              f"({j.state})")
        if any(n not in at for n in j.nodes) or not j.nodes:
            out.report.append(f"{tag}: ran on {','.join(j.nodes)}, not all nodes of the "
                              f"scenario: not in the plan")
            continue
        idx = (j.idx if j.state == "REQUEUED" else recorded.get(j.id) or j.idx) or {}
        count = job.gpus // len(j.nodes) if job.gpus % len(j.nodes) == 0 else None
        if count is None:
            out.report.append(f"{tag}: {job.gpus} GPUs do not split evenly over "
                              f"{len(j.nodes)} nodes: not in the plan")
            continue
        out.matched += 1
        for n in j.nodes:
            got = idx.get(n)
            if got is not None and len(got) != count:
                out.report.append(f"{tag}: holds {len(got)} GPUs of {n}, expected {count}")
                got = None
            runs.append(Run(job=k, slurm_id=j.id, node=at[n], start=start, end=min(end, s.T),
                            count=count, idx=got))
    missing = sorted({r.slurm_id for r in runs if r.idx is None})
    if missing:
        out.report.append(f"{len(missing)} jobs' GPU indices were not recorded (Slurm erases "
                          f"them at the end): each takes the lowest free adjacent GPUs of its "
                          f"node (jobs {', '.join(map(str, missing[:8]))}"
                          f"{' ...' if len(missing) > 8 else ''})")
    for n in range(len(order)):
        mine = [r for r in runs if r.node == n]
        if mine:
            _place_node(out, mine, order[n], per_node[n], first[n])
    return out


def _place_node(out: Executed, runs: list[Run], name: str, size: int, g0: int) -> None:
    """Write a node's runs into the plan: under one renumbering of its GPUs
    when one makes every recorded job's adjacent; else each job, in start
    order, on its recorded GPUs when they are adjacent, or the lowest
    adjacent GPUs free for its run, or (reported: the checker will see it)
    its recorded GPUs as they are."""
    known = [r for r in runs if r.idx is not None]
    perm = find_order(size, [frozenset(r.idx) for r in known]) if size <= SEARCH_MAX_GPUS else None
    owner = out.owner
    if perm is not None:
        if perm != list(range(size)):
            out.renumbered.append(f"node {name}: GPUs renumbered {perm} (new position -> "
                                  f"Slurm's index) so that every job's are adjacent")
        pos = {g: i for i, g in enumerate(perm)}
        for r in known:
            a = min(pos[g] for g in r.idx)
            _put(out, r, name, list(range(a, a + r.count)), g0)
        rest = [r for r in runs if r.idx is None]
    else:
        layout = pack(runs, size)
        if layout is not None:
            out.renumbered.append(f"node {name}: no one renumbering makes every job's GPUs "
                                  f"adjacent: each job placed on adjacent GPUs of its own for "
                                  f"its run (same node, steps, counts)")
            for r, a in zip(runs, layout):
                _put(out, r, name, list(range(a, a + r.count)), g0)
            return
        out.renumbered.append(f"node {name}: no layout makes every job's GPUs adjacent: jobs "
                              f"placed one by one in start order")
        rest = runs
    for r in sorted(rest, key=lambda r: (r.start, r.slurm_id)):
        free = (owner[g0:g0 + size, r.start:r.end] < 0).all(1)  # (size,)
        mine = sorted(r.idx) if r.idx is not None else None
        if mine and mine[-1] - mine[0] + 1 == len(mine) and bool(free[mine].all()):
            _put(out, r, name, mine, g0)
            continue
        at = next((a for a in range(size - r.count + 1) if bool(free[a:a + r.count].all())), None)
        if at is not None:
            _put(out, r, name, list(range(at, at + r.count)), g0)
        elif mine:
            out.report.append(f"node {name}: job {r.slurm_id} kept on its own GPUs {mine}, not "
                              f"adjacent (no adjacent GPUs free for its run)")
            _put(out, r, name, mine, g0)
        else:
            out.report.append(f"node {name}: no {r.count} adjacent GPUs free for job "
                              f"{r.slurm_id} at steps {r.start}..{r.end - 1}: not in the plan")


PACK_BUDGET = 20_000
"""Search steps `pack` may take per node before it gives up."""


def pack(runs: list[Run], size: int) -> list[int] | None:
    """First GPU (in the node) for every run such that each holds adjacent
    GPUs for its whole run and no two overlap, or None. Depth-first in start
    order, each job's own first GPU tried first, within PACK_BUDGET steps."""
    order = sorted(range(len(runs)), key=lambda i: (runs[i].start, -runs[i].count))
    T = max(r.end for r in runs)
    busy = [[False] * T for _ in range(size)]
    first = [0] * len(runs)
    budget = [PACK_BUDGET]

    def fits(r: Run, a: int) -> bool:
        return all(not busy[g][t] for g in range(a, a + r.count) for t in range(r.start, r.end))

    def mark(r: Run, a: int, v: bool) -> None:
        for g in range(a, a + r.count):
            for t in range(r.start, r.end):
                busy[g][t] = v

    def go(n: int) -> bool:
        if n == len(order):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        r = runs[order[n]]
        own = [min(r.idx)] if r.idx else []
        for a in own + [a for a in range(size - r.count + 1) if a not in own]:
            if a + r.count <= size and fits(r, a):
                mark(r, a, True)
                first[order[n]] = a
                if go(n + 1):
                    return True
                mark(r, a, False)
        return False

    return first if go(0) else None


def _put(out: Executed, r: Run, name: str, gpus: list[int], g0: int) -> None:
    cells = out.owner[[g0 + g for g in gpus], r.start:r.end]  # (k, steps) a copy
    if (cells >= 0).any():
        out.report.append(f"node {name}: job {r.slurm_id} overlaps another job's GPUs at "
                          f"steps {r.start}..{r.end - 1} (rounding of times to steps)")
    cells[cells < 0] = r.job
    out.owner[[g0 + g for g in gpus], r.start:r.end] = cells


def record_once(jobs: list[SlurmJob], path: str | Path,
                seen: dict[int, dict[str, list[int]]]) -> int:
    """Add the GPU indices of the running jobs not yet in `seen` to it and,
    when any is new, rewrite `path` (JSON lines, atomically). Returns how
    many were new."""
    new = 0
    for j in jobs:
        if j.state == "RUNNING" and j.idx and j.id not in seen and len(j.idx) == len(j.nodes):
            seen[j.id] = j.idx
            new += 1
    if new:
        _write_recorded(path, seen)
    return new


def _write_recorded(path: str | Path, seen: dict[int, dict[str, list[int]]]) -> None:
    text = "".join(json.dumps({"job": k, "idx": v}) + "\n" for k, v in sorted(seen.items()))
    bridge.atomic_write_text(path, text)
