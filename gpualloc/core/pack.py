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

Compiled with numba; everything is a loop over one column's G GPUs.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core.blocks import runs_in_nodes


@njit(cache=True)
def _take(free, owner, c, label, lo, hi):
    for x in range(lo, hi):
        free[c, x] = False
        if label >= 0:
            owner[c, x] = label


@njit(cache=True)
def pack_column(free, c, owner, label, k, n, pool_ok, node_first, node_end, node_pool,
                pool_gpn, pool_nodes, high):
    """Take up to n replicas of k GPUs in column c of `free` (C, G) bool,
    restricted to pools with pool_ok (P,); taken GPUs become not free and, when
    label >= 0, owner[c, g] = label. Returns the replicas taken."""
    taken = 0
    if n <= 0:
        return 0
    P = pool_gpn.shape[0]
    for pi in range(P):
        p = P - 1 - pi if high else pi
        if not pool_ok[p]:
            continue
        gpn = pool_gpn[p]
        lo, hi = pool_nodes[p], pool_nodes[p + 1]
        if k <= gpn:
            for ni in range(hi - lo):
                node = hi - 1 - ni if high else lo + ni
                a, b = node_first[node], node_end[node]
                count = 0
                for gi in range(b - a):
                    g = b - 1 - gi if high else a + gi
                    if free[c, g]:
                        count += 1
                        if count == k:
                            first = g if high else g - k + 1
                            _take(free, owner, c, label, first, first + k)
                            taken += 1
                            if taken == n:
                                return taken
                            count = 0
                    else:
                        count = 0
        elif k % gpn == 0:
            m = k // gpn
            count = 0
            for ni in range(hi - lo):
                node = hi - 1 - ni if high else lo + ni
                whole = True
                for g in range(node_first[node], node_end[node]):
                    if not free[c, g]:
                        whole = False
                        break
                if not whole:
                    count = 0
                    continue
                count += 1
                if count == m:
                    first_node = node if high else node - m + 1
                    _take(free, owner, c, label, node_first[first_node],
                          node_end[first_node + m - 1])
                    taken += 1
                    if taken == n:
                        return taken
                    count = 0
    return taken


@njit(cache=True)
def fill(free, owner, jobs, need, gpus, pool_ok, node_first, node_end, node_pool, pool_gpn,
         pool_nodes, high, served):
    """Serve `jobs` (E,) in order in every column of `free` (C, G): job
    jobs[i] up to need[i, c] replicas of gpus[i] GPUs on pools pool_ok[i]
    (E, P). Writes owner[c, g] = jobs[i] where jobs[i] >= 0 and served[i, c]."""
    C = free.shape[0]
    for c in range(C):
        for i in range(jobs.shape[0]):
            served[i, c] = pack_column(free, c, owner, jobs[i], gpus[i], need[i, c], pool_ok[i],
                                       node_first, node_end, node_pool, pool_gpn, pool_nodes,
                                       high)


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
    if owner is None:
        owner = _NO_OWNER
    fill(free, owner, labels, np.ascontiguousarray(need, dtype=np.int64), lay.gpus[jobs],
         lay.pool_ok[jobs], lay.node_first, lay.node_end, lay.node_pool, lay.pool_gpn,
         lay.pool_nodes, high, served)
    return served


_NO_OWNER = np.zeros((1, 1), dtype=np.int64)


@njit(cache=True)
def serve_best_fit(occ, jobs, need, gpus, pool_ok, gpu_pool, class_ptr, class_blocks,
                    job_class, gpu_node, node_first, node_end, picks, n_picks):
    """Elastic replicas at one timestep, best fit replica by replica (greedy's
    elastic service; fill_elastic is the packing of every other): jobs
    in order, each on the free block (occ (G,) bool busy) whose GPUs the
    fewest later jobs can use, then the shortest free run, then the lowest
    index. Writes picks[i, :n_picks[i]] (first GPUs)."""
    G = occ.shape[0]
    E, P = jobs.shape[0], pool_ok.shape[1]
    run = np.zeros(G, dtype=np.int64)
    free = np.zeros(G, dtype=np.bool_)
    want_cs = np.zeros(G + 1, dtype=np.int64)
    for i in range(E):
        j = jobs[i]
        k = gpus[i]
        pool_want = np.zeros(P, dtype=np.int64)
        for f in range(i + 1, E):
            if need[f] > 0:
                for p in range(P):
                    pool_want[p] += pool_ok[f, p]
        for g in range(G):
            want_cs[g + 1] = want_cs[g] + pool_want[gpu_pool[g]]
        c = job_class[j]
        n_picks[i] = 0
        for _ in range(need[i]):
            for g in range(G):
                free[g] = not occ[g]
            runs_in_nodes(free, gpu_node, node_first, node_end, run)
            best, best_s, best_r = -1, 0, 0
            for x in range(class_ptr[c], class_ptr[c + 1]):
                b = class_blocks[x]
                ok = True
                for g in range(b, b + k):
                    if occ[g]:
                        ok = False
                        break
                if not ok:
                    continue
                s = want_cs[b + k] - want_cs[b]
                r = min(run[b], G)
                if best < 0 or s < best_s or (s == best_s and r < best_r):
                    best, best_s, best_r = b, s, r
            if best < 0:
                break
            for g in range(best, best + k):
                occ[g] = True
            picks[i, n_picks[i]] = best
            n_picks[i] += 1
