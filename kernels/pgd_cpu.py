"""The projected-gradient step (gpualloc.kernels.pgd) compiled for the CPU:
the same function as `pgd_step_ref` and `pgd_step_packed_ref`, in two sweeps of
the grid instead of a dozen torch passes over it.

Sweep 1, GPU rows in parallel: each cell's new value (from the old values of
its time neighbours) and the per-(GPU, t) sums S, N. Sweep 2, in parallel
over jobs (dense) or column chunks (packed): the per-(job, t) sums C, M. Each
sum runs in one fixed order whatever the thread count, so a seed gives the
same relaxation on any number of cores. float32 grids only; the torch
reference serves the others.
"""
from __future__ import annotations

import os
import threading

import numba
import numpy as np
import torch
from numba import njit, prange

# numba's own thread pool (workqueue) rather than GNU OpenMP, unless the user
# chose: OpenMP terminates a child forked after it started (a multiprocessing
# pool, a pre-forking server). The workqueue pool is not safe for launches
# from two Python threads at once: `_run` takes them one at a time.
if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"
_LAUNCH = threading.Lock()


# The loops index views from 0 (`range(n)`), never `range(a, b)` over a
# whole row: an index LLVM cannot prove non-negative keeps numba's
# negative-index wraparound and no loop vectorises (measured 4.5x slower).

@njit(cache=True, parallel=True)
def _dense(x, compat, arrival, free, gain, price, rigid, smooth, S, N, C, M):
    G, J, T = x.shape
    zero, one = np.float32(0.0), np.float32(1.0)
    for g in prange(G):
        old = np.empty(T + 2, np.float32)  # a row before the step, its ends repeated
        room = np.empty(T, np.float32)  # 1 where the GPU is free at t
        free_g, price_g, S_g, N_g = free[g], price[g], S[g], N[g]
        for t in range(T):
            room[t] = one if free_g[t] else zero
        for j in range(J):
            row = x[g, j]
            if not compat[j, g]:
                row[:] = zero
                continue
            a = min(arrival[j], T)
            n = T - a
            w = smooth * rigid[j]
            if w != zero:
                old[1:T + 1] = row
                old[0], old[T + 1] = old[1], old[T]
            row[:a] = zero
            r, gn, pr, rm, sg, ng = row[a:], gain[j, a:], price_g[a:], room[a:], S_g[a:], N_g[a:]
            if w != zero:
                ol = old[a:]  # ol[u + 1]: the old value at t = a + u
                for u in range(n):
                    o = ol[u + 1]
                    v = o + gn[u] - pr[u] + w * (ol[u + 2] - o) - w * (o - ol[u])
                    v = min(max(v, zero), one) * rm[u]
                    r[u] = v
                    sg[u] += v
                    ng[u] += one if v > zero else zero
            else:
                for u in range(n):
                    v = min(max(r[u] + gn[u] - pr[u], zero), one) * rm[u]
                    r[u] = v
                    sg[u] += v
                    ng[u] += one if v > zero else zero
    for j in prange(J):
        C_j, M_j = C[j], M[j]
        for g in range(G):
            row = x[g, j]
            for t in range(T):
                C_j[t] += row[t]
                M_j[t] += one if row[t] > zero else zero


@njit(cache=True, parallel=True)
def _packed(x, seg_first, seg_t0, seg_w, mask, gain_col, price, pull, smooth, S, N, col_sum,
            col_pos):
    G, L = x.shape
    zero, one = np.float32(0.0), np.float32(1.0)
    n_seg = seg_first.shape[0] - 1
    longest = 0
    for i in range(n_seg):
        longest = max(longest, seg_first[i + 1] - seg_first[i])
    for g in prange(G):
        old = np.empty(longest + 2, np.float32)  # a job's columns before the step, ends repeated
        row, mask_g, price_g, S_g, N_g = x[g], mask[g], price[g], S[g], N[g]
        for i in range(n_seg):  # one job's columns: consecutive timesteps from seg_t0[i]
            c0, n, t0, w = seg_first[i], seg_first[i + 1] - seg_first[i], seg_t0[i], seg_w[i]
            r, mk, gn, pl = row[c0:c0 + n], mask_g[c0:c0 + n], gain_col[c0:c0 + n], pull[c0:c0 + n]
            pr, sg, ng = price_g[t0:t0 + n], S_g[t0:t0 + n], N_g[t0:t0 + n]
            old[1:n + 1] = r
            old[0], old[n + 1] = old[1], old[n]
            for u in range(n):
                o = old[u + 1]
                v = o + gn[u] - pr[u] + w * (old[u + 2] - o) - w * (o - old[u]) - smooth * pl[u] * o
                v = min(max(v, zero), one) * mk[u]
                r[u] = v
                sg[u] += v
                ng[u] += one if v > zero else zero
    chunk = 2048
    for b in prange((L + chunk - 1) // chunk):
        lo = b * chunk
        n = min(chunk, L - lo)
        cs, cp = col_sum[lo:lo + n], col_pos[lo:lo + n]
        for g in range(G):
            r = x[g, lo:lo + n]
            for u in range(n):
                cs[u] += r[u]
                cp[u] += one if r[u] > zero else zero


def _run(kernel, *args) -> None:
    """On torch's thread count (gpualloc.threads.cpu_threads sets it): one sum
    order whatever it is, so the result is the same."""
    with _LAUNCH:
        numba.set_num_threads(max(1, min(torch.get_num_threads(),
                                         numba.config.NUMBA_NUM_THREADS)))
        kernel(*args)


def compiled(x: torch.Tensor) -> bool:
    """Whether the compiled step serves this grid."""
    return x.device.type == "cpu" and x.dtype == torch.float32


def pgd_step_cpu(x, compat, arrival, free, gain, price, rigid, smooth: float):
    """`pgd_step_ref` on a float32 CPU grid (no mask: it is computed per cell)."""
    G, J, T = x.shape
    f32 = np.float32
    S, N = np.zeros((G, T), f32), np.zeros((G, T), f32)
    C, M = np.zeros((J, T), f32), np.zeros((J, T), f32)
    _run(_dense, x.numpy(), compat.numpy(), arrival.numpy(), free.numpy(),
         gain.float().contiguous().numpy(), price.float().contiguous().numpy(),
         rigid.numpy().astype(f32), f32(smooth), S, N, C, M)
    C, M = torch.from_numpy(C), torch.from_numpy(M)
    return x, torch.from_numpy(S), torch.from_numpy(N), C, M, C.sum(1), M.sum(1)


def pgd_step_packed_cpu(x, cols_job, cols_t, mask, gain, price, smooth_cols, edges,
                        smooth: float, J: int):
    """`pgd_step_packed_ref` on a float32 CPU grid (the same arguments, no
    work buffers)."""
    G, L = x.shape
    T = price.shape[1]
    f32 = np.float32
    S, N = np.zeros((G, T), f32), np.zeros((G, T), f32)
    col_sum, col_pos = np.zeros(L, f32), np.zeros(L, f32)
    # The grid's columns per job: consecutive, timesteps rising by one.
    job = cols_job.numpy()
    first = np.concatenate([[0], np.flatnonzero(job[1:] != job[:-1]) + 1, [L]] if L else [[0]])
    first = first.astype(np.int64)
    inner = np.concatenate([smooth_cols.numpy(), np.zeros(1, f32)])  # (L,) weight to the next
    # Per column, how many of its time neighbours lie outside the window (a
    # one-column window may have two): each pulls it toward zero.
    pull = np.bincount(edges.numpy(), minlength=L).astype(f32)
    _run(_packed, x.numpy(), first, cols_t.numpy()[first[:-1]], f32(smooth) * inner[first[:-1]],
         mask.numpy(), gain.float()[cols_job, cols_t].numpy(),
         price.float().contiguous().numpy(), pull, f32(smooth), S, N, col_sum, col_pos)
    flat = cols_job * T + cols_t
    C = torch.zeros(J * T).index_add_(0, flat, torch.from_numpy(col_sum)).view(J, T)
    M = torch.zeros(J * T).index_add_(0, flat, torch.from_numpy(col_pos)).view(J, T)
    return x, torch.from_numpy(S), torch.from_numpy(N), C, M, C.sum(1), M.sum(1)
