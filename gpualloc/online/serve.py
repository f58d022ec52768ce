"""The autoscaler step of the online loop: real-time replicas meet the
actual demand of each step of a window, and the guarantee (rule 4) takes
GPUs from work that may yield (gpualloc.core.reclaim) where the plan left
it short."""
from __future__ import annotations

import numpy as np
import torch

from gpualloc.core import service_order
from gpualloc.core.classes import serve_step
from gpualloc.core.layout import layout
from gpualloc.core.pack import fill_elastic
from gpualloc.core.reclaim import held_by_step, held_replicas, reclaim
from gpualloc.online.view import Committed
from gpualloc.plan import IDLE
from gpualloc.scenario import Scenario


def serve(s: Scenario, replicas: np.ndarray | None, tau: int, stop: int, owner: torch.Tensor,
          committed: Committed) -> list[int]:
    """Serve steps tau..stop-1 of `owner` (G, T), written in place: the
    planned replicas (`replicas`, (R, G): the service planned on each cell
    of the window, by scenario index, else IDLE; None: none planned) up to
    the actual demand, then free GPUs for what is unmet (guaranteed replicas
    first); then, at each step (in time order) where a guaranteed service is
    still short, `reclaim`. A preemptible job cut there ends its segment at
    that step (its later cells freed, `committed` updated; it requeues).
    Returns the jobs cut."""
    lay = layout(s)
    R = stop - tau
    window = np.ascontiguousarray(owner[:, tau:stop].T.numpy())  # (R, G) a copy, written back below
    actual = lay.demand[:, tau:stop]  # (J, R) the present of each step, zero before arrival
    # Each service's planned cells are its own: the order of services changes
    # nothing, nor does one's fill free or take another's cells.
    cells = (np.zeros(0, dtype=np.int64) if replicas is None
             else np.bincount(replicas[replicas >= 0], minlength=s.J))  # per service
    idle = window == IDLE
    for j in np.flatnonzero(cells).tolist():
        mine = (replicas == j) & idle  # (R, G)
        # The lowest planned blocks, up to demand.
        fill_elastic(lay, mine, window, [j], actual[j][None, :])
    services = lay.services  # rigid jobs' demand rows are zero
    order = service_order(s, services[(lay.arrival[services] < stop)
                                      & (actual[services] > 0).any(1)].tolist())
    guaranteed = s.guaranteed.numpy()[:, tau:stop]  # (J, R)
    _fill(lay, window, order, guaranteed, actual)
    cut: list[int] = []
    if guaranteed[order].any():
        later = owner[:, stop:]  # (G, T - stop) a view: cut jobs' cells after the window
        for c in range(R):
            got = reclaim(lay, window[c], order, guaranteed[:, c], actual[:, c])
            if got is None:
                continue
            window[c] = got.column
            for j in got.cut:
                window[c:][window[c:] == j] = IDLE
                later[later == j] = IDLE
                _requeue(committed, j, tau, c, owner, window)
                cut.append(j)
            if got.cut and c + 1 < R:  # freed GPUs serve the later steps
                _fill(lay, window[c + 1:], order, guaranteed[:, c + 1:], actual[:, c + 1:])
    owner[:, tau:stop] = torch.from_numpy(window.T)
    return cut


def _fill(lay, window: np.ndarray, order: list[int], guaranteed: np.ndarray,
          actual: np.ndarray) -> None:
    """Free GPUs of `window` (C, G) to the services in `order`: each one's
    guaranteed replicas first (all services), then the rest of its demand,
    each step packed the best way the core packs one (core.classes.serve_step,
    as at a step no replan planned): first fit alone leaves a multi-GPU
    replica out where a 1-GPU one split the only run that held it."""
    if not order or not len(window):
        return
    jobs = np.asarray(order, dtype=np.int64)
    # Most steps already hold every replica wanted: only the others are served.
    held = held_by_step(lay, window, jobs)  # (C, E)
    for c in np.flatnonzero((held < actual[order].T).any(1)).tolist():
        col, now = window[c], held[c]  # a row of window: served in place
        for want in (guaranteed[order, c], actual[order, c]):
            need = np.maximum(want - now, 0)
            if need.any():
                serve_step(lay, col, col == IDLE, jobs, need, by_class=True)
                now = held_replicas(lay, col, jobs)  # counted again only where it served


def _requeue(committed: Committed, j: int, tau: int, c: int, owner: torch.Tensor,
             window: np.ndarray) -> None:
    """Job j preempted at step tau + c: its segment ends there; a job that
    never ran goes back to the queue as not started (no restore to pay)."""
    committed.end[j] = tau + c
    if not bool((owner[:, :tau] == j).any()) and not (window[:c] == j).any():
        committed.start.pop(j, None)
        committed.end.pop(j, None)
