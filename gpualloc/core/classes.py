"""Real-time service by compatibility class (issue 25): who is served, and
where, when services may use different GPU types.

A service's class is the set of pools it may use (its types and memory).
Hall's condition over every union of classes says which replica counts fit
at all; `hall_served` takes them in the order of service (priority), so a
service that runs anywhere never takes the only GPUs of a lower-priority
service confined to one type while other GPUs would do. `serve` then packs
those counts, the most restricted services first (`restricted_first`). The
demand guard (gpualloc.core.guard) checks the same condition over the rigid
jobs' runs; the footprint (gpualloc.core.footprint) and the Schedule's
elastic service (gpualloc.core.schedule) pack with `serve`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

from gpualloc.core.blocks import fewest_left, free_blocks, update_columns
from gpualloc.core.pack import fill, serve_best_fit


def unions(lay, elastic, max_subsets: int = 64) -> np.ndarray:
    """(U, P) bool: every union of the pool sets (compatibility classes) of
    the services `elastic`, sorted; beyond max_subsets, the single sets and
    their union."""
    masks = frozenset(tuple(row) for row in lay.pool_ok[list(elastic)].tolist())
    return _unions(masks, lay.P, max_subsets)


@lru_cache(maxsize=256)  # a replan builds them again for the same few classes (issue 28)
def _unions(masks: frozenset, P: int, max_subsets: int) -> np.ndarray:
    subsets = set(masks)
    grown = True
    while grown and len(subsets) <= max_subsets:
        grown = False
        for a in list(subsets):
            for b in masks:
                u = tuple(x or y for x, y in zip(a, b))
                if u not in subsets:
                    subsets.add(u)
                    grown = True
    if len(subsets) > max_subsets:  # too many pools: the single masks and their union
        subsets = masks | {tuple(any(m[p] for m in masks) for p in range(P))}
    out = np.array(sorted(subsets), dtype=np.bool_).reshape(len(subsets), P)
    # Shared by every caller; and every array of unions the kernels take is
    # readonly (numba compiles a kernel again for a writable one).
    out.flags.writeable = False
    return out


def hall_served(lay, subset_pools: np.ndarray, free: np.ndarray, jobs, need: np.ndarray
                ) -> np.ndarray:
    """(E, C) int64: replicas of `jobs` (in order of service, i.e. priority)
    that Hall's condition admits in each column of `free` (C, G) bool, need
    (E, C) wanted: each service in turn takes as many as every union of
    classes holding its pool set still has free GPUs for. For 1-GPU replicas
    this is the priority-optimal service (a transversal matroid, greedy by
    weight); larger replicas may still fail to pack into blocks."""
    jobs = np.asarray(jobs, dtype=np.int64)
    out = np.zeros(need.shape, dtype=np.int64)
    # C order: numba compiles the loop again for each layout (a transposed grid is F).
    _hall(subset_pools, lay.gpu_pool, np.ascontiguousarray(free), lay.gpus[jobs],
          lay.pool_ok[jobs], np.ascontiguousarray(need, dtype=np.int64), out)
    return out


@njit(cache=True)
def _hall(subset_pools, gpu_pool, free, gpus, pool_ok, need, out):
    U, P = subset_pools.shape
    C, G = free.shape
    free_u = np.zeros((U, C), dtype=np.int64)  # free GPUs of each union, per column
    for c in range(C):
        for g in range(G):
            if free[c, g]:
                for u in range(U):
                    if subset_pools[u, gpu_pool[g]]:
                        free_u[u, c] += 1
    _hall_take(free_u, subset_pools, gpus, pool_ok, need, out)


@njit(cache=True)
def _hall_take(free_u, subset_pools, gpus, pool_ok, need, out):
    """_hall's counts from the free GPUs of each union per column, free_u
    (U, C), which they use up."""
    U, P = subset_pools.shape
    C = free_u.shape[1]
    holds = np.zeros(U, dtype=np.bool_)
    for i in range(gpus.shape[0]):
        for u in range(U):  # the unions holding job i's pool set
            holds[u] = True
            for p in range(P):
                if pool_ok[i, p] and not subset_pools[u, p]:
                    holds[u] = False
                    break
        k = gpus[i]
        for c in range(C):
            n = need[i, c]
            for u in range(U):
                if holds[u]:
                    n = min(n, free_u[u, c] // k)
            out[i, c] = n
            for u in range(U):
                if holds[u]:
                    free_u[u, c] -= n * k


def starts_at_once(lay, owner: np.ndarray, tau: int, jobs: np.ndarray, subset_pools: np.ndarray,
                   services: np.ndarray, need: np.ndarray) -> np.ndarray | None:
    """The rigid `jobs` (in order) started at tau in `owner` (G, T) (its
    rigid cells hold their GPUs), each on the best-fit block free for its
    whole run (blocks.fewest_left; runs cut at T), where `need` (E, T - tau)
    replicas of `services` (in order of service) still fit beside them at
    every step by Hall's condition (hall_served, over the unions
    `subset_pools`). Their first GPUs, or None where any fails. One compiled
    call: the online loop asks this at most arrivals (issue 28)."""
    lengths = np.minimum(lay.duration[jobs], owner.shape[1] - tau)
    first = np.zeros(len(jobs), dtype=np.int64)
    services = np.asarray(services, dtype=np.int64)
    ok = fits_at_once(owner, tau, lay.rigid_cells, lay.gpus[jobs], lengths, lay.job_class[jobs],
                      lay.class_ptr, lay.class_blocks, lay.gpu_node, lay.N, subset_pools,
                      lay.gpu_pool, lay.gpus[services], lay.pool_ok[services],
                      np.ascontiguousarray(need, dtype=np.int64), first)
    return first if ok else None


@njit(cache=True)
def fits_at_once(owner, tau, held, gpus, lengths, job_class, class_ptr, class_blocks,
                 gpu_node, n_nodes, subset_pools, gpu_pool, service_gpus, service_pool_ok,
                 need, first):
    """`starts_at_once`, compiled, on the layout's arrays of the jobs and
    services: whether all fit, their first GPUs written into `first`."""
    if not blocks_at_once(owner, tau, held, gpus, lengths, job_class, class_ptr, class_blocks,
                          gpu_node, n_nodes, first):
        return False
    if service_gpus.shape[0] == 0:
        return True
    free_u = union_free(owner, tau, held, subset_pools, gpu_pool)
    take_blocks(free_u, np.int64(0), first, gpus, lengths, subset_pools, gpu_pool)
    return all_served(free_u, subset_pools, service_gpus, service_pool_ok, need)


@njit(cache=True)
def blocks_at_once(owner, tau, held, gpus, lengths, job_class, class_ptr, class_blocks,
                   gpu_node, n_nodes, first):
    """`fits_at_once`'s blocks: each job in turn on the best-fit block free
    for its whole run in `owner` and of the jobs before it, its first GPU
    written into `first`; False where one has none."""
    G = owner.shape[0]
    H = 0  # the steps the jobs' runs take
    for i in range(lengths.shape[0]):
        H = max(H, lengths[i])
    busy = np.empty((H, G), dtype=np.bool_)
    for g in range(G):
        for c in range(H):
            busy[c, g] = held[owner[g, tau + c]]
    now = np.int64(0)  # tau, as a row of busy (a literal 0 would compile the callees again)
    for i in range(gpus.shape[0]):
        k, length, cls = gpus[i], lengths[i], job_class[i]
        blocks = class_blocks[class_ptr[cls]:class_ptr[cls + 1]]
        run = np.zeros((length + 1, G), dtype=np.int32)  # free runs of the job's own steps
        update_columns(busy, run, now, length)
        options = np.zeros(blocks.shape[0], dtype=np.bool_)
        if free_blocks(run, blocks, k, now, length, options) == 0:
            return False
        b = blocks[fewest_left(busy, now, blocks, options, gpu_node, n_nodes)]
        for c in range(length):
            for g in range(b, b + k):
                busy[c, g] = True
        first[i] = b
    return True


@njit(cache=True)
def union_free(owner, tau, held, subset_pools, gpu_pool):
    """(U, T - tau) int64: the GPUs of each union of `subset_pools` no rigid
    cell of `owner` (G, T) holds, at each step from tau (_hall's count, read
    from the grid by GPU)."""
    G, T = owner.shape
    U = subset_pools.shape[0]
    free_u = np.zeros((U, T - tau), dtype=np.int64)
    for g in range(G):
        for u in range(U):
            if subset_pools[u, gpu_pool[g]]:
                for c in range(T - tau):
                    if not held[owner[g, tau + c]]:
                        free_u[u, c] += 1
    return free_u


@njit(cache=True)
def take_blocks(free_u, col, first, gpus, lengths, subset_pools, gpu_pool):
    """The jobs' blocks (from `first`, each for its `lengths` steps) taken
    from `free_u`, their first step at its column `col`."""
    U = subset_pools.shape[0]
    for i in range(gpus.shape[0]):
        for g in range(first[i], first[i] + gpus[i]):
            for u in range(U):
                if subset_pools[u, gpu_pool[g]]:
                    for c in range(col, col + lengths[i]):
                        free_u[u, c] -= 1


@njit(cache=True)
def all_served(free_u, subset_pools, service_gpus, service_pool_ok, need):
    """Whether Hall's condition admits all of `need` (E, C) at each column of
    `free_u` (U, C), which it uses up."""
    served = np.zeros(need.shape, dtype=np.int64)
    _hall_take(free_u, subset_pools, service_gpus, service_pool_ok, need, served)
    for e in range(need.shape[0]):
        for c in range(need.shape[1]):
            if served[e, c] != need[e, c]:
                return False
    return True


def compatible_gpus(lay, jobs) -> np.ndarray:
    """(E,) int64: the GPUs each of `jobs` may use."""
    return lay.pool_ok[np.asarray(jobs, dtype=np.int64)].astype(np.int64) \
        @ np.bincount(lay.gpu_pool, minlength=lay.P)


def restricted_first(lay, elastic: list[int]) -> np.ndarray:
    """(E,) int64: positions in `elastic` (services in their order of service)
    in the footprint's packing order: the fewest compatible GPUs first, ties
    in the given order (a stable sort of `compatible_gpus`)."""
    return np.argsort(compatible_gpus(lay, elastic), kind="stable").astype(np.int64)


def serve(lay, free: np.ndarray, owner: np.ndarray | None, jobs: list[int], need: np.ndarray,
          high: bool, subsets: np.ndarray | None, order: np.ndarray | None) -> np.ndarray:
    """(E, C) int64 replicas of `jobs` (in order of service) served in the
    columns of `free` (C, G) bool, which is updated (and `owner` (C, G) when
    given), need (E, C): with `subsets` (unions of classes), per column the
    better (priority x GPUs) of the counts Hall's condition admits by
    priority, packed in `order` (positions in `jobs`, e.g. restricted_first),
    and fill_elastic in the order of service; without, the latter only. One
    compiled call (`serve_columns`)."""
    jobs = np.asarray(jobs, dtype=np.int64)
    out = np.zeros((len(jobs), free.shape[0]), dtype=np.int64)
    if len(jobs) == 0 or free.shape[0] == 0:
        return out
    serve_columns(free, _NO_OWNER if owner is None else owner,
                  jobs if owner is not None else np.full(len(jobs), -1, dtype=np.int64),
                  np.ascontiguousarray(need, dtype=np.int64), lay.gpus[jobs], lay.pool_ok[jobs],
                  lay.node_first, lay.node_end, lay.node_pool, lay.pool_gpn, lay.pool_nodes, high,
                  lay.gpu_node, _NO_SUBSETS if subsets is None else subsets, lay.gpu_pool,
                  _NO_ORDER if order is None else order,
                  (lay.priority[jobs] * lay.gpus[jobs]).astype(np.float64), owner is not None, out)
    return out


def serve_step(lay, row: np.ndarray, free: np.ndarray, jobs, need: np.ndarray,
               by_class: bool = False) -> None:
    """One step's real-time service, written into `row` (G,) (an owner row,
    replicas on its `free` (G,) GPUs), `need` (E,) replicas of `jobs` (in
    order of service): serve_steps at one step."""
    serve_steps(lay, row[None, :], free[None, :], jobs, np.asarray(need)[:, None], by_class)


def serve_steps(lay, rows: np.ndarray, free: np.ndarray, jobs, need: np.ndarray,
                by_class: bool = False) -> None:
    """Real-time service at each of C steps, written into `rows` (C, G)
    (owner rows, replicas on their `free` (C, G) GPUs): `need` (E, C)
    replicas of `jobs` (in order of service), each step packed the best of
    these ways (priority x GPUs served; the first on ties): best fit
    replica by replica (pack.serve_best_fit), the highest free blocks first
    (pack.fill), and, with `by_class`, `serve` by compatibility class.
    Greedy's service, and the online loop's at a step no replan planned.
    One compiled pass."""
    jobs = np.asarray(jobs, dtype=np.int64)
    if not len(jobs) or not len(rows):
        return
    out = rows if rows.flags.c_contiguous else np.ascontiguousarray(rows)  # written in place
    subsets = unions(lay, jobs) if by_class else _NO_SUBSETS
    order = restricted_first(lay, jobs) if by_class else _NO_ORDER
    gpus = lay.gpus[jobs]
    _serve_steps(out, np.ascontiguousarray(free), jobs, np.ascontiguousarray(need, dtype=np.int64),
                 gpus, lay.pool_ok[jobs], (lay.priority[jobs] * gpus).astype(np.float64),
                 lay.gpu_pool, lay.class_ptr, lay.class_blocks, lay.job_class, lay.gpu_node,
                 lay.node_first, lay.node_end, lay.node_pool, lay.pool_gpn, lay.pool_nodes,
                 np.bool_(by_class), subsets, order, np.bool_(True))
    if out is not rows:
        rows[:] = out


@njit(cache=True)
def _serve_steps(rows, free, jobs, need, gpus, pool_ok, weight, gpu_pool, class_ptr,
                 class_blocks, job_class, gpu_node, node_first, node_end, node_pool, pool_gpn,
                 pool_nodes, by_class, subsets, order, high):
    """serve_steps at each column c of rows: best fit; where it leaves a
    replica out (else no way serves more), the highest free blocks first
    (fill) and, by_class, the classes' way (serve_columns), the most
    valuable kept (ties: the first), values summed in job order. `high`: True
    (an argument, so that the loops it is handed to are typed as for their
    other callers, not for a literal)."""
    E, C = need.shape
    G = rows.shape[1]
    picks = np.zeros((E, max(need.max(), 1)), dtype=np.int64)
    n_picks = np.zeros(E, dtype=np.int64)
    wanted = np.zeros((E, 1), dtype=np.int64)
    served = np.zeros((E, 1), dtype=np.int64)
    want = np.zeros(E, dtype=np.int64)
    first = np.zeros(1, dtype=np.int64)
    for c in range(C):
        for i in range(E):
            want[i] = wanted[i, 0] = need[i, c]
        serve_best_fit(np.logical_not(free[c]), jobs, want, gpus, pool_ok,
                       gpu_pool, class_ptr, class_blocks, job_class, gpu_node, node_first,
                       node_end, picks, n_picks)
        whole = True
        for i in range(E):
            if n_picks[i] < wanted[i, 0]:
                whole = False
        if whole:  # no way serves more
            _write_replicas(rows[c], picks, n_picks, jobs, gpus)
            continue
        best_value = 0.0
        for i in range(E):
            best_value += weight[i] * n_picks[i]
        best = np.empty((0, G), dtype=np.int64)
        for way in range(2 if by_class else 1):
            col_free = free[c:c + 1].copy()
            col = rows[c:c + 1].copy()
            served[:, 0] = 0
            if way == 0:
                fill(col_free, col, jobs, wanted, gpus, pool_ok, node_first, node_end,
                     node_pool, pool_gpn, pool_nodes, high, served, gpu_node, first)
            else:
                serve_columns(col_free, col, jobs, wanted, gpus, pool_ok, node_first, node_end,
                              node_pool, pool_gpn, pool_nodes, not high, gpu_node, subsets,
                              gpu_pool, order, weight, high, served)
            value = 0.0
            for i in range(E):
                value += weight[i] * served[i, 0]
            if value > best_value:
                best, best_value = col, value
        if best.shape[0]:
            rows[c] = best[0]
        else:
            _write_replicas(rows[c], picks, n_picks, jobs, gpus)


@njit(cache=True)
def _write_replicas(row, picks, n_picks, jobs, gpus):
    """Each replica's block into `row`: its first GPU (picks) and the k - 1
    after it, owned by its service."""
    for i in range(jobs.shape[0]):
        for r in range(n_picks[i]):
            g = picks[i, r]
            for x in range(gpus[i]):
                row[g + x] = jobs[i]


_NO_OWNER = np.zeros((1, 1), dtype=np.int64)
_NO_SUBSETS = np.zeros((0, 1), dtype=np.bool_)
_NO_SUBSETS.flags.writeable = False  # as unions' are: one compiled kernel for both
_NO_ORDER = np.zeros(0, dtype=np.int64)


@njit(cache=True)
def serve_columns(free, owner, labels, need, gpus, pool_ok, node_first, node_end, node_pool,
                  pool_gpn, pool_nodes, high, gpu_node, subset_pools, gpu_pool, order, worth,
                  has_owner, out):
    """`serve`, compiled: services (E,) by their GPUs, pools and worths (one
    replica-step's value), labels (E,) written into owner (C, G) where
    has_owner; served replicas into out (E, C)."""
    C = free.shape[0]
    E = gpus.shape[0]
    first = np.zeros(C, dtype=np.int64)
    if subset_pools.shape[0] <= 1 or E == 0:
        # One class (every service on the same pools): nothing confined to
        # protect, the plain fill in the order of service is the rule.
        fill(free, owner, labels, need, gpus, pool_ok, node_first, node_end, node_pool, pool_gpn,
             pool_nodes, high, out, gpu_node, first)
        return
    plain_free = free.copy()
    plain_owner = owner.copy()
    plain = np.zeros_like(out)
    fill(plain_free, plain_owner, labels, need, gpus, pool_ok, node_first, node_end, node_pool,
         pool_gpn, pool_nodes, high, plain, gpu_node, first)
    admitted = np.zeros_like(out)
    _hall(subset_pools, gpu_pool, free, gpus, pool_ok, need, admitted)
    packed = np.zeros_like(out)
    fill(free, owner, labels[order], admitted[order], gpus[order], pool_ok[order], node_first,
         node_end, node_pool, pool_gpn, pool_nodes, high, packed, gpu_node, first)
    for x in range(E):
        out[order[x]] = packed[x]
    for c in range(C):  # columns where the plain fill serves more
        a = b = 0.0
        for i in range(E):
            a += worth[i] * plain[i, c]
            b += worth[i] * out[i, c]
        if a > b:
            out[:, c] = plain[:, c]
            free[c] = plain_free[c]
            if has_owner:
                owner[c] = plain_owner[c]


@njit(cache=True)
def served_counts(free, need, gpus, pool_ok, node_first, node_end, node_pool, pool_gpn,
                  pool_nodes, gpu_node, subset_pools, gpu_pool, order, worth, out):
    """serve_columns' replica counts only (nothing written but out (E, C);
    `free` (C, G) is left as it was): where the plain fill in the order of
    service serves every replica wanted, no packing serves more, and the
    counts are the demand whichever serve_columns keeps (every worth > 0),
    so only the other columns are packed again (most of the steps a local
    search serves are whole)."""
    C, G = free.shape
    E = gpus.shape[0]
    plain_free = free.copy()
    labels = np.full(E, -1, dtype=np.int64)
    no_owner = np.zeros((1, 1), dtype=np.int64)
    no = np.bool_(False)  # not the literal: one compiled form of fill and serve_columns
    fill(plain_free, no_owner, labels, need, gpus, pool_ok, node_first, node_end, node_pool,
         pool_gpn, pool_nodes, no, out, gpu_node, np.zeros(C, dtype=np.int64))
    if subset_pools.shape[0] <= 1 or E == 0:
        return
    short = np.zeros(C, dtype=np.bool_)
    if (worth <= 0).any():  # a whole fill is then not the only best one
        short[:] = True
    for c in range(C):
        for i in range(E):
            if out[i, c] != need[i, c]:
                short[c] = True
                break
    cols = np.flatnonzero(short)
    if cols.shape[0] == 0:
        return
    sub_free = np.empty((cols.shape[0], G), dtype=np.bool_)
    sub_need = np.empty((E, cols.shape[0]), dtype=np.int64)
    for x in range(cols.shape[0]):
        sub_free[x] = free[cols[x]]
        sub_need[:, x] = need[:, cols[x]]
    sub_out = np.zeros((E, cols.shape[0]), dtype=np.int64)
    serve_columns(sub_free, no_owner, labels, sub_need, gpus, pool_ok, node_first, node_end,
                  node_pool, pool_gpn, pool_nodes, no, gpu_node, subset_pools, gpu_pool,
                  order, worth, no, sub_out)
    for x in range(cols.shape[0]):
        out[:, cols[x]] = sub_out[:, x]
