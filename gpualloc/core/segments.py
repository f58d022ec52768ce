"""Segments in idle cells: preemptible jobs that are not done run pieces of
their remaining work wherever whole blocks sit idle in a finished plan
(PROBLEM.md: a later segment first restores for `restart_cost` steps, and a
job holds nothing once done).

Only idle cells are taken, so the plan's value can only grow: this is how a
planner that places whole runs uses preemption where it pays after restore
costs (a piece shorter than its restore is never placed) and never
otherwise. Jobs go in the order given (priority first), each from its last
held step on, into the longest idle run of a compatible block, again and
again until done or out of room.
"""
from __future__ import annotations

import numpy as np
import torch
from numba import njit

from gpualloc.core import owner_of, priority_order, time_major
from gpualloc.core.blocks import runs_of
from gpualloc.core.layout import layout
from gpualloc.plan import segments
from gpualloc.scenario import Scenario


@njit(cache=True)
def read_segments(owner, preemptible, running, restart_cost, duration, first, last, count, new,
                  restoring, progress, after_done, done):
    """gpualloc.plan.segments' answers, written into its zeroed (J, T) arrays
    (first: G, last: -1 to start with) and done (J,): one pass over the
    (G, T) owner grid, then one over each preemptible job's steps. `running`
    (J,): jobs already running at step 0 (an online view's), whose first
    segment is a later one unless it starts at 0. Returns the cells that
    hold neither -1 nor a job index (with any, it stops there)."""
    G, T = owner.shape
    J = preemptible.shape[0]
    bad = 0
    for g in range(G):
        for t in range(T):
            j = owner[g, t]
            if j < -1 or j >= J:
                bad += 1
            elif j >= 0 and preemptible[j]:
                first[j, t] = min(first[j, t], g)
                last[j, t] = max(last[j, t], g)
                count[j, t] += 1
    if bad:
        return bad
    for j in range(preemptible.shape[0]):
        if not preemptible[j]:
            continue
        segment, start, made, progressed = 0, -1, 0, 0  # made: progress before t
        for t in range(T):
            if count[j, t] == 0:
                continue
            if not (t > 0 and count[j, t - 1] == count[j, t] and first[j, t - 1] == first[j, t]):
                new[j, t] = True
                segment += 1
                start = t
            restoring[j, t] = ((segment > 1 or (running[j] and start > 0))
                               and t - start < restart_cost[j])
            after_done[j, t] = made >= duration[j]
            if not restoring[j, t]:
                if made < duration[j]:
                    progress[j, t] = True
                    progressed += 1
                made += 1
        done[j] = progressed >= duration[j]
    return 0


@njit(cache=True)
def count_held(owner, count):
    """n_j(t) of the (G, T) owner grid, written into the zeroed (J, T)
    `count`. Returns the cells that hold neither -1 nor a job index."""
    G, T = owner.shape
    J = count.shape[0]
    bad = 0
    for g in range(G):
        for t in range(T):
            j = owner[g, t]
            if j < -1 or j >= J:
                bad += 1
            elif j >= 0:
                count[j, t] += 1
    return bad


@njit(cache=True)
def _fill(owner, run, jobs, arrival, gpus, restart_cost, need, closed, last_end, last_first,
          job_class, class_ptr, class_blocks):
    """owner, run: (T, G) time-major plan and its free-run grid (run[t, g]:
    idle steps from t on GPU g), edited in place. Per job: `need` progress
    still missing, `closed` segments so far, the step after its last held
    one and the first GPU there. Returns the segments placed."""
    T = owner.shape[0]
    placed = 0
    for i in range(jobs.shape[0]):
        j = jobs[i]
        k = gpus[j]
        c = job_class[j]
        t = max(arrival[j], last_end[j])
        while t < T and need[j] > 0:
            restore = restart_cost[j] if closed[j] > 0 else 0
            best, best_len = -1, 0
            for x in range(class_ptr[c], class_ptr[c + 1]):
                b = class_blocks[x]
                if t == last_end[j] and b == last_first[j]:
                    continue  # the same GPUs right after: not a new segment
                length = T
                for g in range(b, b + k):
                    length = min(length, run[t, g])
                if length > best_len:
                    best, best_len = b, length
            length = min(best_len, restore + need[j])
            if best < 0 or length <= restore:
                t += 1
                continue
            for r in range(t, t + length):
                for g in range(best, best + k):
                    owner[r, g] = j
            for g in range(best, best + k):
                for r in range(t + length - 1, -1, -1):
                    run[r, g] = 0 if owner[r, g] >= 0 else run[r + 1, g] + 1
            need[j] -= length - restore
            closed[j] += 1
            last_end[j], last_first[j] = t + length, best
            t += length
            placed += 1
    return placed


def fill_segments(s: Scenario, owner: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The (G, T) plan with preemptible jobs' remaining work run in its idle
    blocks (module docstring), and how many segments that added."""
    lay = layout(s)
    jobs = np.array([j for j in priority_order(s) if lay.preemptible[j]
                     and not lay.unplaceable[j]], dtype=np.int64)
    if not len(jobs):
        return owner, 0
    owner = owner.cpu().long()
    seg = segments(s, owner)
    held = seg.count > 0
    steps = torch.arange(s.T)
    last = torch.where(held, steps, -1).amax(1)  # (J,) last held step
    need = (s.duration - seg.progress.sum(1)).clamp(min=0).numpy().astype(np.int64)
    closed = seg.new.sum(1).numpy().astype(np.int64)
    last_end = (last + 1).numpy().astype(np.int64)
    last_first = seg.first[torch.arange(s.J), last.clamp(min=0)].numpy().astype(np.int64)
    grid = time_major(owner)  # (T, G), written into
    run = runs_of(grid >= 0).astype(np.int64)
    placed = _fill(grid, run, jobs, lay.arrival, lay.gpus, lay.restart_cost, need, closed,
                   last_end, last_first, lay.job_class, lay.class_ptr, lay.class_blocks)
    return owner_of(grid), int(placed)


def cuts_in(s: Scenario, plan: torch.Tensor) -> dict[int, int]:
    """Running preemptible jobs (online: in `s.fixed`) that the (G, T) `plan`
    stops, and the step it stops each at (the form scenario.with_cuts takes)."""
    if s.fixed is None:
        return {}
    fixed, plan = s.fixed.cpu().numpy(), plan.cpu().numpy()
    g, t = np.nonzero(fixed >= 0)
    j = fixed[g, t]
    mine = np.zeros((s.J, s.T), dtype=np.bool_)  # steps of each one's current segment
    mine[j, t] = True
    kept = np.zeros((s.J, s.T), dtype=np.bool_)  # ... where the plan keeps it there
    same = plan[g, t] == j
    kept[j[same], t[same]] = True
    kept_steps = np.cumprod(kept, axis=1).sum(1)  # from the first step on, unbroken
    out = {}
    for j in np.flatnonzero(mine.any(1) & s.preemptible.numpy()).tolist():
        if kept_steps[j] < mine[j].sum() and kept_steps[j] + 1 < s.T:
            out[j] = int(kept_steps[j])
    return out
