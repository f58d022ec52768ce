"""The free-block index: which candidate blocks of a job are free, and from when.

Occupancy is kept as a free-run grid `run` (T + 1, G) int32: run[t, g] is
the number of timesteps GPU g stays free from t (run[T] = 0). A block
[b, b + k) is free for `need` steps from t exactly when
min(run[t, b:b + k]) >= need, so "does j fit at t", "every block that fits
j at t" and "the earliest start >= t at which j fits" are loops over a
job's candidate blocks with no allocation. Compiled with numba.
"""
from __future__ import annotations

import numpy as np
from numba import njit

EPS = 1e-9
"""Values closer than this are equal (the displacement rule's margins)."""


@njit(cache=True)
def update_runs(busy, run, g0, g1, t_hi):
    """Recompute run[:t_hi, g0:g1] after cells of GPUs [g0, g1) changed in
    columns before t_hi (later columns are unchanged)."""
    for g in range(g0, g1):
        for t in range(t_hi - 1, -1, -1):
            run[t, g] = 0 if busy[t, g] else run[t + 1, g] + 1


@njit(cache=True)
def update_columns(busy, run, t_lo, t_hi):
    """Recompute run[t_lo:t_hi] for every GPU (column t_hi is unchanged)."""
    for t in range(t_hi - 1, t_lo - 1, -1):
        for g in range(busy.shape[1]):
            run[t, g] = 0 if busy[t, g] else run[t + 1, g] + 1


@njit(cache=True)
def settle_columns(busy, run, t_lo, t_hi, changed_lo):
    """update_columns(busy, run, t_lo, t_hi) when the cells of `busy` changed
    only in columns >= changed_lo: below that, a column that comes out as it
    was leaves every earlier one as it was, and the pass stops there."""
    G = busy.shape[1]
    for t in range(t_hi - 1, t_lo - 1, -1):
        moved = False
        for g in range(G):
            new = 0 if busy[t, g] else run[t + 1, g] + 1
            if new != run[t, g]:
                run[t, g] = new
                moved = True
        if not moved and t < changed_lo:
            return


def runs_of(busy: np.ndarray) -> np.ndarray:
    """(T, G) bool busy -> (T + 1, G) int32 free-run grid."""
    T, G = busy.shape
    run = np.zeros((T + 1, G), dtype=np.int32)
    update_columns(busy, run, 0, T)
    return run


@njit(cache=True)
def block_free(run, b, k, t, need):
    """GPUs [b, b + k) all free for `need` steps from t."""
    for g in range(b, b + k):
        if run[t, g] < need:
            return False
    return True


@njit(cache=True)
def free_blocks(run, blocks, k, t, need, out):
    """out[i] = block i free for `need` steps from t; returns how many are."""
    n = 0
    for i in range(blocks.shape[0]):
        out[i] = block_free(run, blocks[i], k, t, need)
        n += out[i]
    return n


@njit(cache=True)
def any_free(run, blocks, k, t, need):
    for i in range(blocks.shape[0]):
        if block_free(run, blocks[i], k, t, need):
            return True
    return False


@njit(cache=True)
def longest_free(run, blocks, k, t):
    """The most steps some block stays free from t: max over blocks of
    min(run[t, b:b + k]); a block is free for `need` steps exactly when
    need <= this (0: none is free). One pass answers any_free for every
    job of a class at once."""
    best = 0
    for i in range(blocks.shape[0]):
        m = run[t, blocks[i]]
        for g in range(blocks[i] + 1, blocks[i] + k):
            if run[t, g] < m:
                m = run[t, g]
        if m > best:
            best = m
    return best


@njit(cache=True)
def first_free(run, blocks, k, t, need, taken_cs):
    """Index of the lowest block free for `need` steps from t that holds none
    of the GPUs counted in taken_cs ((G + 1,) prefix sums); -1 if none."""
    for i in range(blocks.shape[0]):
        b = blocks[i]
        if taken_cs[b + k] == taken_cs[b] and block_free(run, b, k, t, need):
            return i
    return -1


@njit(cache=True)
def earliest(run, blocks, k, d, after, T, out):
    """The earliest start t in [after, T) at which some block is free for
    min(d, T - t) steps; out[i] marks the blocks free then. Returns T when
    there is none. (Under the demand guard: gpualloc.core.guard.)"""
    for t in range(after, T):
        need = min(d, T - t)
        found = False
        for i in range(blocks.shape[0]):
            ok = block_free(run, blocks[i], k, t, need)
            out[i] = ok
            found = found or ok
        if found:
            return t
    return T


@njit(cache=True)
def any_start(run, blocks, k, d, after, T):
    """Whether earliest(...) finds a start in [after, T) (unguarded): the
    latest starts, which need the fewest steps, are tried first."""
    for t in range(T - 1, after - 1, -1):
        need = min(d, T - t)
        for i in range(blocks.shape[0]):
            if block_free(run, blocks[i], k, t, need):
                return True
    return False


@njit(cache=True)
def fewest_left(busy, t, blocks, options, gpu_node, n_nodes):
    """Index of the option (options[i] true) whose node keeps the fewest free
    GPUs at t; ties: the lowest block. -1 when there is no option."""
    best, count = -1, 0
    for i in range(blocks.shape[0]):
        if options[i]:
            count += 1
            if best < 0:
                best = i
    if count <= 1:
        return best
    node_free = np.zeros(n_nodes, dtype=np.int64)
    for g in range(busy.shape[1]):
        if not busy[t, g]:
            node_free[gpu_node[g]] += 1
    for i in range(blocks.shape[0]):
        if options[i] and node_free[gpu_node[blocks[i]]] < node_free[gpu_node[blocks[best]]]:
            best = i
    return best


@njit(cache=True)
def cheapest_eviction(at, usable, blocks, k, weight):
    """Index of the block of k GPUs (first GPUs `blocks`) that is `usable`
    (G,) throughout and whose victims (the ids >= 0 of `at` (L, G) in its
    columns, each counted once) cost the least `weight` in all; ties: the
    first such block. -1 when no block has a victim."""
    best, best_cost = -1, 0.0
    seen = np.full(weight.shape[0], -1, dtype=np.int64)  # the block a victim was last counted in
    for i in range(blocks.shape[0]):
        b = blocks[i]
        whole = True
        for g in range(b, b + k):
            whole = whole and usable[g]
        if not whole:
            continue
        cost, any_victim = 0.0, False
        for x in range(at.shape[0]):
            for g in range(b, b + k):
                r = at[x, g]
                if r >= 0 and seen[r] != i:
                    seen[r] = i
                    cost += weight[r]
                    any_victim = True
        if any_victim and (best < 0 or cost < best_cost):
            best, best_cost = i, cost
    return best


@njit(cache=True)
def best_displacing(run, blocks, block_pool, k, d, after, t_safe, T, price, value_per_step,
                    out):
    """Displacement: the start before t_safe whose value (value_per_step x
    steps run, cut by the horizon) minus price[pool, t] (the elastic service
    it displaces) is highest, when that beats starting at t_safe (0 when
    t_safe == T). out marks the blocks reaching that net value at the start
    returned; -1 when no start is worth it."""
    base = value_per_step * min(T - t_safe, d) if t_safe < T else 0.0
    best = -1.0
    early = False
    for t in range(after, t_safe):
        need = min(d, T - t)
        for i in range(blocks.shape[0]):
            net = value_per_step * need - price[block_pool[i], t]
            # A block that cannot raise the best is not looked at (the net
            # is the pool's: blocks of one pool share it).
            if (not early or net > best) and block_free(run, blocks[i], k, t, need):
                best = net
                early = True
    if not early:
        return -2
    if best <= base + EPS:
        return -1
    for t in range(after, t_safe):
        need = min(d, T - t)
        found = False
        for i in range(blocks.shape[0]):
            ok = (value_per_step * need - price[block_pool[i], t] >= best - EPS
                  and block_free(run, blocks[i], k, t, need))
            out[i] = ok
            found = found or ok
        if found:
            return t
    return -1


@njit(cache=True)
def runs_in_nodes(free, gpu_node, node_first, node_end, out):
    """out[g]: length of the run of free GPUs (inside g's node) holding g."""
    for n in range(node_first.shape[0]):
        g = node_first[n]
        while g < node_end[n]:
            if not free[g]:
                out[g] = 0
                g += 1
                continue
            a = g
            while g < node_end[n] and free[g]:
                g += 1
            for x in range(a, g):
                out[x] = g - a
