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
nodes' free counts, which let the scans skip full nodes).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpualloc.core.blocks import runs_in_nodes


@njit(cache=True)
def _take(free, owner, c, label, lo, hi, gpu_node, node_free):
    for x in range(lo, hi):
        free[c, x] = False
        node_free[gpu_node[x]] -= 1
        if label >= 0:
            owner[c, x] = label


@njit(cache=True)
def pack_column(free, c, owner, label, k, n, pool_ok, node_first, node_end, node_pool,
                pool_gpn, pool_nodes, high, gpu_node, node_free, edge):
    """Take up to n replicas of k GPUs in column c of `free` (C, G) bool,
    restricted to pools with pool_ok (P,); taken GPUs become not free and, when
    label >= 0, owner[c, g] = label. Returns the replicas taken.

    node_free (N,): free GPUs per node of the column, kept up to date here;
    edge (P,): per pool, the first node the scan visits (from the top when
    `high`, else from the bottom): the nodes before it are full. Both only
    skip nodes the scan would pass over without taking anything (a node with
    fewer than k free GPUs holds no run of k; a run of whole nodes restarts
    at one that is not whole), so the replicas are those of the plain scan:
    what they save is the rescan of the full nodes by every job (issue 26:
    hundreds of services over thousands of GPUs)."""
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
        first_ni = edge[p]
        if k <= gpn:
            for ni in range(first_ni, hi - lo):
                node = hi - 1 - ni if high else lo + ni
                if node_free[node] < k:
                    continue
                a, b = node_first[node], node_end[node]
                count = 0
                for gi in range(b - a):
                    g = b - 1 - gi if high else a + gi
                    if free[c, g]:
                        count += 1
                        if count == k:
                            first = g if high else g - k + 1
                            _take(free, owner, c, label, first, first + k, gpu_node, node_free)
                            taken += 1
                            count = 0
                            if taken == n:
                                break
                    else:
                        count = 0
                if taken == n:
                    break
        elif k % gpn == 0:
            m = k // gpn
            count = 0
            for ni in range(first_ni, hi - lo):
                node = hi - 1 - ni if high else lo + ni
                if node_free[node] != gpn:
                    count = 0
                    continue
                count += 1
                if count == m:
                    first_node = node if high else node - m + 1
                    _take(free, owner, c, label, node_first[first_node],
                          node_end[first_node + m - 1], gpu_node, node_free)
                    taken += 1
                    count = 0
                    if taken == n:
                        break
        # Full nodes at the scan's start stay skipped for the jobs after this one.
        ni = edge[p]
        while ni < hi - lo and node_free[hi - 1 - ni if high else lo + ni] == 0:
            ni += 1
        edge[p] = ni
        if taken == n:
            return taken
    return taken


@njit(cache=True)
def fill(free, owner, jobs, need, gpus, pool_ok, node_first, node_end, node_pool, pool_gpn,
         pool_nodes, high, served, gpu_node):
    """Serve `jobs` (E,) in order in every column of `free` (C, G): job
    jobs[i] up to need[i, c] replicas of gpus[i] GPUs on pools pool_ok[i]
    (E, P). Writes owner[c, g] = jobs[i] where jobs[i] >= 0 and served[i, c]."""
    C, G = free.shape
    node_free = np.zeros(node_first.shape[0], dtype=np.int64)
    edge = np.zeros(pool_gpn.shape[0], dtype=np.int64)
    for c in range(C):
        node_free[:] = 0
        for g in range(G):
            if free[c, g]:
                node_free[gpu_node[g]] += 1
        edge[:] = 0
        for i in range(jobs.shape[0]):
            served[i, c] = pack_column(free, c, owner, jobs[i], gpus[i], need[i, c], pool_ok[i],
                                       node_first, node_end, node_pool, pool_gpn, pool_nodes,
                                       high, gpu_node, node_free, edge)


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
         lay.pool_nodes, high, served, lay.gpu_node)
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
    for g in range(G):
        free[g] = not occ[g]
    runs_in_nodes(free, gpu_node, node_first, node_end, run)
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
                free[g] = False
            # Only the runs of the nodes the replica took change.
            n0, n1 = gpu_node[best], gpu_node[best + k - 1] + 1
            runs_in_nodes(free, gpu_node, node_first[n0:n1], node_end[n0:n1], run)
            picks[i, n_picks[i]] = best
            n_picks[i] += 1
