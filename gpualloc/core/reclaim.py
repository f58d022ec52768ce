"""Reclaiming one timestep for the guarantee (PROBLEM.md rule 4, online):
when the actual demand of step t is known only at t, the guaranteed
replicas take GPUs from work that may yield, in this order:

1. idle GPUs;
2. GPUs held by real-time replicas above their own service's guarantee
   (every service's guaranteed replicas are packed before any replica above
   a guarantee, and those go in service order, so the lower priorities yield
   first);
3. preemptible rigid jobs, lowest priority first (then the higher restore
   cost last, then the later index first): each one cut at t ends its
   segment there and pays its restore when it runs again. Only the jobs
   whose GPUs the guarantee needs are cut: after a packing is found, each
   cut is undone again (the last first) where the packing holds without it.

What non-preemptible rigid work holds never yields: the replicas that still
do not fit are the step's shortfall. The guaranteed replicas are packed as
the footprint packs a step (core.guarantee.pack_steps: first fit on the
highest blocks in the footprint's order, then the exhaustive search where
that leaves one out), and the rest of the demand with the same elastic fill
as everywhere (gpualloc.core.pack).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpualloc.core.guarantee import pack_steps, packing_order
from gpualloc.core.pack import fill_elastic
from gpualloc.plan import IDLE


RECLAIM_STEPS = 20_000
"""Blocks the exhaustive search of a reclaimed step may try: more than a
view's (AIM_STEPS), since it runs only at a step still short after first
fit (measured: a window of the Alibaba trace where 2,000 and 5,000 gave up
on one 8-GPU replica that 20,000 placed)."""


@dataclass
class Reclaimed:
    column: np.ndarray
    """(G,) int64 the step's new owners."""
    cut: list[int]
    """Preemptible jobs preempted at this step (they hold nothing in `column`)."""
    short: int
    """Guaranteed replicas still missing at this step (non-preemptible work holds the rest)."""


def held_replicas(lay, column: np.ndarray, jobs) -> np.ndarray:
    """(len(jobs),) replicas each job holds in `column` (G,): held_by_step at one step."""
    return held_by_step(lay, column[None, :], jobs)[0]


def held_by_step(lay, window: np.ndarray, jobs) -> np.ndarray:
    """(C, E) replicas each of `jobs` (E,) holds in each column of `window`
    (C, G): floor(cells / gpus)."""
    jobs = np.asarray(jobs, dtype=np.int64)
    C, E = window.shape[0], len(jobs)
    at = np.full(len(lay.gpus) + 1, -1, dtype=np.int64)  # job -> its place in jobs; IDLE: last
    at[jobs] = np.arange(E)
    place = at[window]  # (C, G)
    cells = (np.arange(C)[:, None] * E + place)[place >= 0]
    return np.bincount(cells, minlength=C * E).reshape(C, E) // lay.gpus[jobs]


def _pack_guaranteed(lay, base: np.ndarray, released: list[int], order: np.ndarray,
                     guaranteed: np.ndarray) -> tuple[np.ndarray, int]:
    """`base` (G,) with the `released` jobs' GPUs freed and every service's
    guaranteed replicas packed there, the services in `order`
    (core.guarantee.packing_order), as the footprint packs a step
    (core.guarantee.pack_steps). Returns the column and the guaranteed
    replicas left out."""
    col = base.copy()[None, :]
    col[np.isin(col, released)] = IDLE
    missing = pack_steps(lay, col, col == IDLE, order, guaranteed[order][:, None], RECLAIM_STEPS)
    return col[0], int(missing[0])


def _packed(lay, order) -> np.ndarray:
    """The services of `order` in the order their guaranteed replicas pack."""
    return np.asarray(packing_order(lay, order), dtype=np.int64)


def guaranteed_short(lay, column: np.ndarray, order, guaranteed: np.ndarray) -> int:
    """Guaranteed replicas (J,) of the services in `order` that do not fit
    on the idle GPUs of `column` (G,), packed as a reclaimed step packs them."""
    return _pack_guaranteed(lay, column, [], _packed(lay, order), guaranteed)[1]


def reclaim(lay, column: np.ndarray, order, guaranteed: np.ndarray,
            wanted: np.ndarray) -> Reclaimed | None:
    """The step `column` (G,) int64 re-packed so that the services in `order`
    (service order) hold their `guaranteed` replicas (J,), taking GPUs as the
    module docstring says, then up to `wanted` (J,) replicas each on what is
    left. None when that leaves no fewer guaranteed replicas short than
    `column` does (it is then kept as it is)."""
    order = np.asarray(order, dtype=np.int64)
    now_short = int(np.maximum(guaranteed[order] - held_replicas(lay, column, order), 0).sum())
    if now_short == 0:
        return None
    packed = _packed(lay, order)
    base = column.copy()
    base[(base >= 0) & ~lay.rigid[np.maximum(base, 0)]] = IDLE  # every replica re-packed
    present = np.unique(base[base >= 0])
    donors = sorted((int(j) for j in present if lay.preemptible[j]),
                    key=lambda j: (lay.priority[j], -lay.restart_cost[j], -j))
    released: list[int] = []
    col, short = _pack_guaranteed(lay, base, released, packed, guaranteed)
    for j in donors:
        if short == 0:
            break
        released = released + [j]  # kept even when alone it frees no block: two may
        col, short = _pack_guaranteed(lay, base, released, packed, guaranteed)
    for j in reversed(list(released)):  # cut only what the packing needs
        trial = [x for x in released if x != j]
        c2, s2 = _pack_guaranteed(lay, base, trial, packed, guaranteed)
        if s2 <= short:
            released, col, short = trial, c2, s2
    if short >= now_short:
        return None
    rest = np.maximum(wanted[order] - held_replicas(lay, col, order), 0)
    fill_elastic(lay, (col == IDLE)[None, :], col[None, :], order, rest[:, None])
    return Reclaimed(column=col, cut=released, short=short)
