"""The occupancy of the (G, T) plan by rigid placements: place, remove,
snapshot, and the block queries every policy asks ("the earliest start
>= t at which job j fits", "every block that fits j at t").

Stored time-major: busy (T, G) bool (fixed cells and placed jobs), the
owner of each placed cell, and the free-run grid of gpualloc.core.blocks,
updated on the rows a placement touches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpualloc.core import blocks as kb
from gpualloc.core.layout import Layout
from gpualloc.plan import IDLE


@dataclass
class Snapshot:
    busy: np.ndarray
    owner: np.ndarray
    run: np.ndarray
    start: np.ndarray
    first: np.ndarray


class Occupancy:
    """Rigid placements on the grid. `fixed` (T, G) int64 holds the cells
    decided before planning (IDLE where free); they stay busy."""

    def __init__(self, lay: Layout, fixed: np.ndarray | None = None):
        self.lay = lay
        self.T, self.G = lay.T, lay.G
        self.fixed = (np.full((lay.T, lay.G), IDLE, dtype=np.int64) if fixed is None
                      else np.ascontiguousarray(fixed, dtype=np.int64))
        self.busy = self.fixed >= 0  # (T, G) bool
        self.owner = np.full((lay.T, lay.G), IDLE, dtype=np.int64)  # placed jobs only
        self.run = kb.runs_of(self.busy)  # (T + 1, G) int32
        self.start = np.full(lay.J, -1, dtype=np.int64)
        self.first = np.full(lay.J, -1, dtype=np.int64)
        self.held: tuple[int, int, int, int] | None = None
        """The EASY reservation (start, end, first GPU, GPUs), if any."""

    # ---- placements ------------------------------------------------------------------
    def length(self, j: int, start: int) -> int:
        """Steps a rigid job started at `start` runs inside the horizon."""
        return min(int(self.lay.duration[j]), self.T - start)

    def place(self, j: int, start: int, first: int) -> None:
        k, end = int(self.lay.gpus[j]), start + self.length(j, start)
        self.busy[start:end, first:first + k] = True
        self.owner[start:end, first:first + k] = j
        kb.update_runs(self.busy, self.run, first, first + k, end)
        self.start[j], self.first[j] = start, first

    def remove(self, j: int) -> None:
        start, first = int(self.start[j]), int(self.first[j])
        k, end = int(self.lay.gpus[j]), start + self.length(j, start)
        self.busy[start:end, first:first + k] = False
        self.owner[start:end, first:first + k] = IDLE
        kb.update_runs(self.busy, self.run, first, first + k, end)
        self.start[j] = self.first[j] = -1

    def hold(self, start: int, end: int, first: int, k: int) -> None:
        """EASY reservation: GPUs [first, first + k) over [start, end) are
        held for the head of a queue; later placements must not overlap them.
        Held cells are busy but owned by no job; `release` frees them."""
        self.busy[start:end, first:first + k] = True
        kb.update_runs(self.busy, self.run, first, first + k, end)
        self.held = (start, end, first, k)

    def release(self) -> tuple[int, int, int, int] | None:
        """Free the reservation, if any; returns it."""
        held, self.held = self.held, None
        if held is not None:
            start, end, first, k = held
            self.busy[start:end, first:first + k] = self.fixed[start:end, first:first + k] >= 0
            kb.update_runs(self.busy, self.run, first, first + k, end)
            return held

    def snapshot(self) -> Snapshot:
        return Snapshot(self.busy.copy(), self.owner.copy(), self.run.copy(), self.start.copy(),
                        self.first.copy())

    def restore(self, snap: Snapshot) -> None:
        self.busy, self.owner, self.run = snap.busy, snap.owner, snap.run
        self.start, self.first = snap.start, snap.first

    # ---- block queries -------------------------------------------------------------------
    def free_at(self, j: int, t: int, length: int | None = None) -> np.ndarray:
        """(B,) bool: j's candidate blocks free for its run (or `length` steps) from t."""
        b = self.lay.blocks(j)
        out = np.zeros(len(b), dtype=np.bool_)
        need = self.length(j, t) if length is None else length
        kb.free_blocks(self.run, b, int(self.lay.gpus[j]), t, need, out)
        return out

    def earliest(self, j: int, after: int, short: np.ndarray | None = None):
        """(t, (B,) bool blocks free then): the earliest start >= after at which
        j fits for its whole run (cut by the horizon), avoiding pools marked in
        short (P, T) when given; (T, None) when it fits nowhere."""
        lay = self.lay
        b = lay.blocks(j)
        out = np.zeros(len(b), dtype=np.bool_)
        guarded = short is not None
        t = kb.earliest(self.run, b, lay.job_block_pool(j), int(lay.gpus[j]),
                        int(lay.duration[j]), after, self.T,
                        short if guarded else _NO_SHORT, guarded, out)
        return (t, out) if t < self.T else (self.T, None)

    def fewest_left(self, j: int, t: int, options: np.ndarray) -> int:
        """First GPU of the option whose node keeps the fewest free GPUs at t
        (ties: the lowest block): best fit of a block among equals."""
        b = self.lay.blocks(j)
        i = kb.fewest_left(self.busy, t, b, options, self.lay.gpu_node, self.lay.N)
        return int(b[i])

    def owner_grid(self) -> np.ndarray:
        """(T, G) int64: placed jobs, fixed cells elsewhere."""
        return np.where(self.owner >= 0, self.owner, self.fixed)


_NO_SHORT = np.zeros((1, 1), dtype=np.bool_)
