"""Elastic fill: replicas packed into free GPUs, one timestep (column) at a
time, every column independent.

The rule (PROBLEM.md's blocks, taken in order): for a replica of k GPUs,
inside a node the free GPUs form runs; a run of length L holds floor(L / k)
replicas, aligned at the run's first GPU. For replicas larger than a node
(k a multiple of the node size n), runs of whole free nodes inside a pool
hold floor(runs / (k / n)) replicas. `lowest` takes the replicas from the
lowest GPU index up, the highest-first variant from the top down (runs then
align at their last GPU). Jobs are served in the order given, each up to
its replicas wanted, on the GPUs the ones before it left free.

Compiled with numba; everything is a loop over one column's G GPUs (and its
nodes' free counts, which let the scans pass over full nodes).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core.blocks import runs_in_nodes


# The column's packing runs once per service and column, and most calls take
# little: numba's reference counts (an atomic increment and decrement per
# array argument of every call) cost more than the scan did, measured at a
# fifth of an online run. These three allocate nothing, so they run without
# them (numba's `_nrt` option); their callers hold the arrays. The option's
# name has a leading underscore: a numba without it gets the plain options
# (the same results, slower), not an error at the first call.
def refcount_options(options: type | None = None) -> dict:
    """njit's options for a function that allocates nothing: without reference
    counts where `options` (numba's CPU target options) knows `_nrt`."""
    if options is None:
        try:
            from numba.core.cpu import CPUTargetOptions as options
        except ImportError:  # moved: take the plain options
            return dict(cache=True)
    return dict(cache=True, _nrt=False) if hasattr(options, "_nrt") else dict(cache=True)


NO_REFCOUNTS = refcount_options()


@njit(**NO_REFCOUNTS)
def _take(free, owner, c, label, lo, hi, gpu_node, node_free, skip, step):
    for x in range(lo, hi):
        free[c, x] = False
        node = gpu_node[x]
        node_free[node] -= 1
        if node_free[node] == 0:  # full: scans pass over it from now on
            skip[node + 1] = node + 1 + step
        if label >= 0:
            owner[c, x] = label


@njit(**NO_REFCOUNTS)
def _next_open(skip, x):
    """The first node at or after position x (node + 1) in scan order with a
    free GPU (0 or N + 1 past the ends), halving the paths walked."""
    while skip[x] != x:
        skip[x] = skip[skip[x]]
        x = skip[x]
    return x


@njit(**NO_REFCOUNTS)
def pack_column(free, c, owner, label, k, n, pool_ok, row, node_first, node_end, node_pool,
                pool_gpn, pool_nodes, high, gpu_node, node_free, skip):
    """Take up to n replicas of k GPUs in column c of `free` (C, G) bool,
    restricted to pools with pool_ok[row] (of an (E, P) table: no row view
    made per call); taken GPUs become not free and, when
    label >= 0, owner[c, g] = label. Returns the replicas taken.

    node_free (N,): free GPUs per node of the column; skip (N + 2,): from
    each node (at node + 1), the next one in scan order (down when `high`)
    that is not full; both kept up to date here. They only pass over nodes
    the plain scan would cross without taking anything (a node with fewer
    than k free GPUs holds no run of k; a run of whole nodes restarts after
    one that is not whole), so the replicas are those of the plain scan:
    what they save is every job rescanning the full nodes (issue 26:
    hundreds of services over thousands of GPUs)."""
    taken = 0
    if n <= 0:
        return 0
    P = pool_gpn.shape[0]
    step = -1 if high else 1
    for pi in range(P):
        p = P - 1 - pi if high else pi
        if not pool_ok[row, p]:
            continue
        gpn = pool_gpn[p]
        lo, hi = pool_nodes[p], pool_nodes[p + 1]
        node = _next_open(skip, (hi - 1 if high else lo) + 1) - 1
        if k <= gpn:
            while lo <= node < hi:
                if node_free[node] >= k:
                    a, b = node_first[node], node_end[node]
                    count = 0
                    for gi in range(b - a):
                        g = b - 1 - gi if high else a + gi
                        if free[c, g]:
                            count += 1
                            if count == k:
                                first = g if high else g - k + 1
                                _take(free, owner, c, label, first, first + k, gpu_node,
                                      node_free, skip, step)
                                taken += 1
                                count = 0
                                if taken == n:
                                    return taken
                        else:
                            count = 0
                node = _next_open(skip, node + 1 + step) - 1
        elif k % gpn == 0:
            m = k // gpn
            count = 0
            last = -2
            while lo <= node < hi:
                if node != last + step or node_free[node] != gpn:
                    count = 0  # a node passed over, or this one, is not whole
                if node_free[node] == gpn:
                    count += 1
                    if count == m:
                        first_node = node if high else node - m + 1
                        _take(free, owner, c, label, node_first[first_node],
                              node_end[first_node + m - 1], gpu_node, node_free, skip, step)
                        taken += 1
                        count = 0
                        if taken == n:
                            return taken
                last = node
                node = _next_open(skip, node + 1 + step) - 1
    return taken


@njit(cache=True)
def fill(free, owner, jobs, need, gpus, pool_ok, node_first, node_end, node_pool, pool_gpn,
         pool_nodes, high, served, gpu_node, first):
    """Serve `jobs` (E,) in order in every column of `free` (C, G): job
    jobs[i] up to need[i, c] replicas of gpus[i] GPUs on pools pool_ok[i]
    (E, P), from jobs[first[c]] on (those before are left as they are).
    Writes owner[c, g] = jobs[i] where jobs[i] >= 0 and served[i, c]."""
    C, G = free.shape
    N = node_first.shape[0]
    node_free = np.zeros(N, dtype=np.int64)
    skip = np.zeros(N + 2, dtype=np.int64)
    step = -1 if high else 1
    for c in range(C):
        node_free[:] = 0
        for g in range(G):
            if free[c, g]:
                node_free[gpu_node[g]] += 1
        skip[0], skip[N + 1] = 0, N + 1
        for x in range(N):
            skip[x + 1] = x + 1 if node_free[x] > 0 else x + 1 + step
        for i in range(first[c], jobs.shape[0]):
            if need[i, c] <= 0:  # nothing to take: not even the call
                served[i, c] = 0
                continue
            served[i, c] = pack_column(free, c, owner, jobs[i], gpus[i], need[i, c], pool_ok, i,
                                       node_first, node_end, node_pool, pool_gpn, pool_nodes,
                                       high, gpu_node, node_free, skip)


def fill_elastic(lay, free: np.ndarray, owner: np.ndarray | None, jobs, need: np.ndarray,
                 high: bool = False) -> np.ndarray:
    """Elastic fill of `jobs` (scenario indices, in service order) into the
    free GPUs of every column of `free` (C, G) bool, which is updated; need:
    (E, C) replicas wanted. Writes the job index into `owner` (C, G) when
    given. Returns served (E, C) int64."""
    jobs = np.asarray(jobs, dtype=np.int64)
    served = np.zeros((len(jobs), free.shape[0]), dtype=np.int64)
    if len(jobs) == 0 or free.shape[0] == 0:
        return served
    labels = jobs if owner is not None else np.full(len(jobs), -1, dtype=np.int64)
    # The compiled loop takes C-ordered grids only (each layout would compile
    # it again): others are filled as copies, written back.
    grid_free = np.ascontiguousarray(free)
    grid_owner = _NO_OWNER if owner is None else np.ascontiguousarray(owner)
    fill(grid_free, grid_owner, labels, np.ascontiguousarray(need, dtype=np.int64),
         lay.gpus[jobs], lay.pool_ok[jobs], lay.node_first, lay.node_end, lay.node_pool,
         lay.pool_gpn, lay.pool_nodes, bool(high), served, lay.gpu_node,
         np.zeros(free.shape[0], dtype=np.int64))
    if grid_free is not free:
        free[...] = grid_free
    if owner is not None and grid_owner is not owner:
        owner[...] = grid_owner
    return served


_NO_OWNER = np.zeros((1, 1), dtype=np.int64)


@njit(cache=True)
def _open(occ, b, k):
    """No GPU of [b, b + k) is busy in occ (G,)."""
    for g in range(b, b + k):
        if occ[g]:
            return False
    return True


@njit(cache=True)
def _node_best(occ, class_blocks, lo, hi, k, run, G):
    """The free block among class_blocks[lo:hi] (those of one node) with the
    shortest free run (ties: the lowest): (index, run); index -1 when none
    is free."""
    best, best_r = -1, 0
    for x in range(lo, hi):
        b = class_blocks[x]
        if not _open(occ, b, k):
            continue
        r = min(run[b], G)
        if best < 0 or r < best_r:
            best, best_r = x, r
    return best, best_r


@njit(cache=True)
def serve_best_fit(occ, jobs, need, gpus, pool_ok, gpu_pool, class_ptr, class_blocks,
                    job_class, gpu_node, node_first, node_end, picks, n_picks):
    """Elastic replicas at one timestep, best fit replica by replica (greedy's
    elastic service; fill_elastic is the packing of every other): jobs
    in order, each on the free block (occ (G,) bool busy) whose GPUs the
    fewest later jobs can use, then the shortest free run, then the lowest
    index. Writes picks[i, :n_picks[i]] (first GPUs).

    Issue 26 (hundreds of services on thousands of GPUs): a block inside one
    node has the want of its node's pool on each GPU, so a node's best block
    is the one with the shortest run whatever the job; each class keeps its
    best block per node, a replica compares nodes, and a pick makes only its
    own nodes' bests stale. Blocks of whole nodes are compared one by one."""
    G, N = occ.shape[0], node_first.shape[0]
    E, P = jobs.shape[0], pool_ok.shape[1]
    C = class_ptr.shape[0] - 1
    run = np.zeros(G, dtype=np.int64)
    free = np.zeros(G, dtype=np.bool_)
    for g in range(G):
        free[g] = not occ[g]
    runs_in_nodes(free, gpu_node, node_first, node_end, run)
    # Per class (built when a job of it first comes): its blocks by node,
    # each node's best block and run, and which nodes went stale since.
    built = np.zeros(C, dtype=np.bool_)
    inside = np.zeros(C, dtype=np.bool_)
    node_ptr = np.zeros((C, N + 1), dtype=np.int64)
    best_x = np.full((C, N), -1, dtype=np.int64)
    best_r = np.zeros((C, N), dtype=np.int64)
    stale = np.zeros((C, N), dtype=np.bool_)
    node_pool = gpu_pool[node_first]  # (N,)
    pool_want = np.zeros(P, dtype=np.int64)
    for i in range(E):
        j = jobs[i]
        k = gpus[i]
        n_picks[i] = 0
        if need[i] <= 0:
            continue
        # Later jobs still wanting replicas, per pool: the want of each GPU.
        pool_want[:] = 0
        for f in range(i + 1, E):
            if need[f] > 0:
                for p in range(P):
                    pool_want[p] += pool_ok[f, p]
        c = job_class[j]
        lo, hi = class_ptr[c], class_ptr[c + 1]
        if not built[c]:
            built[c] = True
            inside[c] = True
            for x in range(lo, hi):
                if gpu_node[class_blocks[x]] != gpu_node[class_blocks[x] + k - 1]:
                    inside[c] = False
                    break
            if inside[c]:  # blocks ascend, so each node's are contiguous
                node_ptr[c, :] = lo
                for x in range(lo, hi):
                    node_ptr[c, gpu_node[class_blocks[x]] + 1] = x + 1
                for n in range(N):  # a node without blocks starts where the one before ends
                    if node_ptr[c, n + 1] < node_ptr[c, n]:
                        node_ptr[c, n + 1] = node_ptr[c, n]
                stale[c, :] = True
        if inside[c]:
            for n in range(N):
                if stale[c, n]:
                    stale[c, n] = False
                    best_x[c, n], best_r[c, n] = _node_best(
                        occ, class_blocks, node_ptr[c, n], node_ptr[c, n + 1], k, run, G)
        for _ in range(need[i]):
            best = -1
            if inside[c]:
                pick, pick_s = -1, 0
                for n in range(N):
                    if best_x[c, n] < 0:
                        continue
                    s = k * pool_want[node_pool[n]]
                    if (pick < 0 or s < pick_s
                            or (s == pick_s and best_r[c, n] < best_r[c, pick])):
                        pick, pick_s = n, s
                if pick >= 0:
                    best = class_blocks[best_x[c, pick]]
            else:
                best_s, best_rr = 0, 0
                for x in range(lo, hi):
                    b = class_blocks[x]
                    if not _open(occ, b, k):
                        continue
                    s = 0
                    for g in range(b, b + k):
                        s += pool_want[gpu_pool[g]]
                    r = min(run[b], G)
                    if best < 0 or s < best_s or (s == best_s and r < best_rr):
                        best, best_s, best_rr = b, s, r
            if best < 0:
                break
            for g in range(best, best + k):
                occ[g] = True
                free[g] = False
            # Only the runs (and best blocks) of the nodes the replica took change.
            n0, n1 = gpu_node[best], gpu_node[best + k - 1] + 1
            runs_in_nodes(free, gpu_node, node_first[n0:n1], node_end[n0:n1], run)
            for n in range(n0, n1):
                stale[:, n] = True
            if inside[c]:
                for n in range(n0, n1):
                    stale[c, n] = False
                    best_x[c, n], best_r[c, n] = _node_best(
                        occ, class_blocks, node_ptr[c, n], node_ptr[c, n + 1], k, run, G)
            picks[i, n_picks[i]] = best
            n_picks[i] += 1
