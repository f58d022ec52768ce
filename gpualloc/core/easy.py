"""The EASY pass (PROBLEM.md's reservations): at one step, the waiting jobs
in order; each starts where it can; the first that cannot holds its earliest
later start (a reservation), and the jobs behind it start only around it.
Backfill and greedy run it with their own `start` (where a job fits: the
lowest free block, best fit beside the footprint) and `reserve`; the
allocator's parallel repair runs the same pass compiled, best fit under the
demand guard (gpualloc.core.insert.insert_parallel)."""
from __future__ import annotations

from typing import Callable, Iterable


def easy_pass(jobs: Iterable[int], start: Callable[[int], bool],
              reserve: Callable[[int], bool], held: bool = False,
              full: Callable[[], bool] | None = None) -> list[int]:
    """Returns the jobs started, in order. `start(j)`: start j now if it can
    (whether it did); `reserve(j)`: hold j's earliest later start (whether a
    reservation is held now: one is made per pass); `held`: one is held
    already (or reservations are off); `full()`: nothing more can start."""
    started = []
    for j in jobs:
        if full is not None and full():
            break
        if start(j):
            started.append(j)
        elif not held:
            held = reserve(j)
    return started
