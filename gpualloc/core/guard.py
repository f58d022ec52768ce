"""The demand-aware guard: a rigid job may start only where the known
elastic demand over its whole run still fits on the GPUs rigid jobs leave
free, and displacing that demand has a price.

Hall's condition on pools: for every union U of the pool sets elastic jobs
may use, the free GPUs of U must cover the demand (in GPUs) of the elastic
jobs confined to U. `slack[u, t]` is that margin; a k-GPU rigid job placed
in pool p at t takes k from every union holding p. Exact for 1-GPU replicas;
a replica short of one GPU does not run at all, so a displaced shortfall is
priced in whole replicas of the union's top-priority job, at its priority.
"""
from __future__ import annotations

import copy

import numpy as np
from numba import njit

from gpualloc.core.blocks import (EPS, best_displacing, block_free, earliest, fewest_left,
                                  free_blocks)
from gpualloc.core.classes import unions


@njit(cache=True)
def _price(slack, subset_pools, subset_priority, subset_replica, k, d, out, after=0):
    """out[p, t]: priority-weighted elastic GPU-steps a k-GPU run of d steps
    starting at t in pool p takes from the known demand (the worst union);
    for t >= after only (0 before). The sums are of integers: exact from
    any start."""
    U, T = slack.shape
    P = subset_pools.shape[1]
    out[:] = 0.0
    cs = np.zeros(T + 1, dtype=np.float64)
    for u in range(U):
        size = subset_replica[u]
        for t in range(after, T):
            lack = min(max(k - max(slack[u, t], 0), 0), k)
            cs[t + 1] = cs[t] + float((lack + size - 1) // size * size)
        for t in range(after, T):
            w = (cs[min(t + d, T)] - cs[t]) * subset_priority[u]
            for p in range(P):
                if subset_pools[u, p] and w > out[p, t]:
                    out[p, t] = w


@njit(cache=True)
def _short_from(slack, subset_pools, k, t, d, out):
    """out[p]: some union holding pool p has less than k GPUs to spare at some
    step of [t, min(t + d, T)) (O(U x d))."""
    U, T = slack.shape
    out[:] = False
    for u in range(U):
        low = slack[u, t]
        for x in range(t + 1, min(t + d, T)):
            low = min(low, slack[u, x])
        if low < k:
            for p in range(subset_pools.shape[1]):
                if subset_pools[u, p]:
                    out[p] = True


@njit(cache=True)
def _take(slack, subset_pools, pool, t0, t1, k):
    for u in range(slack.shape[0]):
        if subset_pools[u, pool]:
            for t in range(t0, t1):
                slack[u, t] -= k


@njit(cache=True)
def guarded_fit(run, busy, blocks, block_pool, k, length, steps, d, t, slack, subset_pools,
                subset_priority, subset_replica, guarded, displace, value, prefer, gpu_node,
                n_nodes):
    """(first GPU of the best-fit block where a rigid job can start at t, or
    -1; whether that failure holds for any longer job of its class too): the
    blocks free for its `length` steps from t that, when guarded, leave the
    known elastic demand room; with displace too, where none does, those
    whose value net of the displaced service (`_price`) is highest, when
    that is positive and beats the job's value at its earliest start after
    t that displaces nothing (gpualloc.core.footprint.worth_displacing;
    `steps`: its segment's steps, `d`: its duration, as `guarded_find`
    reads it). `value`: the job's value per step; `prefer`: a first GPU
    returned when it is one of the best (-1: none)."""
    T = busy.shape[0]
    B = blocks.shape[0]
    free = np.zeros(B, dtype=np.bool_)
    if free_blocks(run, blocks, k, t, length, free) == 0:
        return -1, True
    ok = free.copy()
    if guarded:
        P = subset_pools.shape[1]
        short = np.zeros(P, dtype=np.bool_)
        _short_from(slack, subset_pools, k, t, length, short)
        n = 0
        for i in range(B):
            ok[i] = free[i] and not short[block_pool[i]]
            n += ok[i]
        if n == 0:
            if not displace:
                return -1, True
            price = np.zeros((P, T), dtype=np.float64)
            _price(slack, subset_pools, subset_priority, subset_replica, k, length, price, t)
            net = np.full(B, -1.0)
            for i in range(B):
                if free[i]:
                    net[i] = value * length - price[block_pool[i], t]
            best = net.max()
            if not best > EPS:
                return -1, False
            later = 0.0
            at, _, _ = guarded_find(run, busy, blocks, block_pool, k, d, t + 1, slack,
                                    subset_pools, subset_priority, subset_replica, np.bool_(True),
                                    np.bool_(False), value, gpu_node, n_nodes)
            if at >= 0:
                later = value * min(steps, T - at)
            if not best > later + EPS:
                return -1, False
            for i in range(B):
                ok[i] = net[i] >= best - EPS
    if prefer >= 0:
        for i in range(B):
            if blocks[i] == prefer:
                if ok[i]:
                    return prefer, False
                break
    return blocks[fewest_left(busy, t, blocks, ok, gpu_node, n_nodes)], False



class DemandGuard:
    """Slack of every union of elastic pool sets against the elastic demand
    still to serve, kept up to date as rigid jobs are placed and removed."""

    def __init__(self, lay, demand: np.ndarray, free: np.ndarray, elastic: list[int],
                 max_subsets: int = 64):
        """demand: (J, T) replicas still to serve; free: (T, G) bool GPUs no
        rigid job or fixed cell holds; elastic: the placeable elastic jobs."""
        P, T = lay.P, lay.T
        subsets = unions(lay, elastic, max_subsets)
        U = self.U = subsets.shape[0]
        self.subset_pools = subsets  # (U, P)
        self.subset_priority = np.zeros(U, dtype=np.float64)
        self.subset_replica = np.ones(U, dtype=np.int64)
        el = np.asarray(elastic, dtype=np.int64)
        # inside[e, u]: union u holds every pool of service el[e].
        inside = (~lay.pool_ok[el][:, None, :] | self.subset_pools[None, :, :]).all(2)  # (E, U)
        need = inside.T.astype(np.int64) @ (demand[el] * lay.gpus[el][:, None])  # (U, T)
        # The union's replica size: its top-priority service's (the first of
        # the highest priority), whose priority prices the displaced service.
        priority = np.where(inside, lay.priority[el][:, None], 0.0)  # (E, U)
        if len(el):
            self.subset_priority = np.maximum(priority.max(0), 0.0)
            top = (priority == self.subset_priority) & (priority > 0)  # (E, U)
            has = top.any(0)
            self.subset_replica[has] = lay.gpus[el][top.argmax(0)[has]]
        gpu_in = self.subset_pools[:, lay.gpu_pool]  # (U, G)
        self.slack = gpu_in.astype(np.int64) @ free.T.astype(np.int64) - need  # (U, T)

    def take(self, pool: int, t0: int, t1: int, k: int) -> None:
        """A k-GPU rigid job holds GPUs of `pool` over [t0, t1) (negative k: releases them)."""
        if self.U:
            _take(self.slack, self.subset_pools, pool, t0, t1, k)

    def short_at(self, k: int, t: int, length: int) -> np.ndarray:
        """(P,) bool: a k-GPU run of `length` steps from t in pool p leaves some
        union short of the demand (`_short_from`)."""
        out = np.zeros(self.subset_pools.shape[1], dtype=np.bool_)
        _short_from(self.slack, self.subset_pools, k, t, length, out)
        return out

    def price_at(self, k: int, t: int, length: int) -> np.ndarray:
        """(P,) float64: the priority-weighted elastic service such a run
        displaces (`_price`, read at t)."""
        out = np.zeros((self.subset_pools.shape[1], self.slack.shape[1]), dtype=np.float64)
        _price(self.slack, self.subset_pools, self.subset_priority, self.subset_replica, k,
               length, out, t)
        return out[:, t]

    def copy(self) -> "DemandGuard":
        out = copy.copy(self)
        out.slack = self.slack.copy()
        return out

    def snapshot(self) -> np.ndarray:
        return self.slack.copy()

    def restore(self, slack: np.ndarray) -> None:
        self.slack = slack


@njit(cache=True)
def lows(slack, k, after, out):
    """out[u, t] for t >= after: the first step >= t at which union u has
    less than k GPUs to spare (T if none). A k-GPU run [t, t + d) in a pool
    leaves a union holding that pool short of the demand exactly when the
    union's out[u, t] < min(t + d, T): one table per job size answers every
    length."""
    U, T = slack.shape
    for u in range(U):
        low = T
        for t in range(T - 1, after - 1, -1):
            if slack[u, t] < k:
                low = t
            out[u, t] = low


@njit(cache=True)
def _earliest_guarded(run, blocks, block_pool, k, d, after, low, subset_pools, out):
    """gpualloc.core.blocks.earliest under the guard: a block counts only
    where no union holding its pool runs short over the run, read from
    `lows`' table (only at the steps tried)."""
    T = run.shape[0] - 1
    U, P = subset_pools.shape
    short = np.zeros(P, dtype=np.bool_)
    for t in range(after, T):
        need, end = min(d, T - t), min(t + d, T)
        short[:] = False
        for u in range(U):
            if low[u, t] < end:
                for p in range(P):
                    short[p] = short[p] or subset_pools[u, p]
        found = False
        for i in range(blocks.shape[0]):
            ok = not short[block_pool[i]] and block_free(run, blocks[i], k, t, need)
            out[i] = ok
            found = found or ok
        if found:
            return t
    return T


@njit(cache=True)
def guarded_find(run, busy, blocks, block_pool, k, d, after, slack, subset_pools,
                 subset_priority, subset_replica, guarded, displace, value_per_step, gpu_node,
                 n_nodes):
    """The earliest feasible (start, first GPU) of a rigid job, or (-1, -1):
    its earliest start >= after on a free block that, when guarded, leaves
    the known elastic demand room over the whole run; with displace too, an
    earlier start that displaces demand when its value net of the displaced
    service beats that (gpualloc.core.blocks.best_displacing). The third
    value is true when no block is free from `after` on at all, guard or
    not (then no longer job of the class fits from then on either)."""
    low = np.empty((slack.shape[0] if guarded else 0, busy.shape[0]), dtype=np.int64)
    if guarded:
        lows(slack, k, after, low)
    return guarded_find_low(run, busy, blocks, block_pool, k, d, after, slack, subset_pools,
                            subset_priority, subset_replica, guarded, displace,
                            value_per_step, gpu_node, n_nodes, low)


@njit(cache=True)
def guarded_find_low(run, busy, blocks, block_pool, k, d, after, slack, subset_pools,
                     subset_priority, subset_replica, guarded, displace, value_per_step,
                     gpu_node, n_nodes, low):
    """`guarded_find` with `lows`' table for k (valid from `after` on) given:
    a serial insertion keeps one per job size while nothing is placed."""
    T = busy.shape[0]
    B = blocks.shape[0]
    P = subset_pools.shape[1]
    options = np.zeros(B, dtype=np.bool_)
    if guarded:
        t0 = _earliest_guarded(run, blocks, block_pool, k, d, after, low, subset_pools, options)
    else:
        t0 = earliest(run, blocks, k, d, after, T, options)
    none_free = t0 >= T and not guarded
    # A start before t0 is worth more than t0 only when the horizon cuts the
    # run at t0: the price is never negative, so no net value beats the run
    # at t0 when a whole run from `after` is worth no more (best_displacing
    # would answer "not worth it", which changes nothing when t0 < T).
    worth_trying = t0 >= T or (value_per_step * min(d, T - after)
                                > value_per_step * min(T - t0, d) + EPS)
    if guarded and displace and t0 > after and worth_trying:
        price = np.zeros((P, T), dtype=np.float64)
        _price(slack, subset_pools, subset_priority, subset_replica, k, d, price, after)
        early = np.zeros(B, dtype=np.bool_)
        t = best_displacing(run, blocks, block_pool, k, d, after, t0, T, price, value_per_step,
                            early)
        if t >= 0:
            return t, blocks[fewest_left(busy, t, blocks, early, gpu_node, n_nodes)], False
        none_free = t0 >= T and t == -2
    if t0 >= T:
        return -1, -1, none_free
    return t0, blocks[fewest_left(busy, t0, blocks, options, gpu_node, n_nodes)], False
