"""Upper bounds on every plan (HiGHS, optional: `pip install gpualloc[exact]`):
the LP relaxation of exact's time-indexed model (gpualloc.policies.exact),
per GPU up to ExactConfig.lp_max_nonzeros and a per-pool aggregate above, and
the per-pool MIP (exact's module docstring says what each relaxes)."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gpualloc.config import ExactConfig
from gpualloc.core import still_wanted, time_major
from gpualloc.objective import weighted_throughput
from gpualloc.policies.exact import Model, _cells, _fixed, build_model
from gpualloc.scenario import Scenario

# ---- LP bound ----------------------------------------------------------------------

@dataclass
class LPBound:
    value: float | None  # None when HiGHS did not prove an optimum in time
    level: str  # "gpu": the relaxation of the CP-SAT model; "pool": the per-pool aggregate
    seconds: float
    status: str


def lp_bound(s: Scenario, cfg: ExactConfig | None = None) -> float | None:
    """An upper bound on the weighted throughput of every feasible plan."""
    return lp_relaxation(s, cfg).value


def lp_relaxation(s: Scenario, cfg: ExactConfig | None = None, m: Model | None = None) -> LPBound:
    cfg = cfg or ExactConfig()
    start = time.perf_counter()
    m = m if m is not None else _small_model(s, cfg)
    if m is not None and m.nonzeros <= cfg.lp_max_nonzeros:
        level = "gpu"
        c, rows, cols, vals, upper, col_upper, constant = _gpu_lp(s, m)
    else:
        level = "pool"
        c, rows, cols, vals, upper, col_upper, constant = _pool_lp(s)
    value, status = _solve_lp(c, rows, cols, vals, upper, col_upper, cfg.lp_time_limit_s)
    return LPBound(value=None if value is None else value + constant, level=level,
                   seconds=time.perf_counter() - start, status=status)


def mip_bound(s: Scenario, cfg: ExactConfig | None = None) -> LPBound:
    """The per-pool MIP's proven bound after `cfg.mip_time_limit_s` (level
    "pool-mip"); value None when HiGHS proved none in time, or when jobs are
    preemptible (a job's segments may run in several pools, which the
    one-start model cannot hold). A limit that hits before HiGHS has solved
    its root LP leaves a bound weaker than the LP's: use the smaller."""
    cfg = cfg or ExactConfig()
    start = time.perf_counter()
    if bool(s.preemptible.any()):
        return LPBound(value=None, level="pool-mip", seconds=0.0, status="preemptible jobs")
    c, rows, cols, vals, upper, col_upper, constant = _pool_lp(s)
    value, status = _solve_lp(c, rows, cols, vals, upper, col_upper, cfg.mip_time_limit_s,
                              integer=True)
    return LPBound(value=None if value is None else value + constant, level="pool-mip",
                   seconds=time.perf_counter() - start, status=status)


def _small_model(s: Scenario, cfg: ExactConfig) -> Model | None:
    """The per-GPU model when it is small enough to build: estimated first."""
    est = 0
    for j, job in enumerate(s.jobs):
        if s.unplaceable[j]:
            continue
        n_blocks = len(s.blocks(j))
        if job.rigid:
            est += n_blocks * job.gpus * sum(min(job.duration, s.T - t)
                                             for t in range(job.arrival, s.T))
        else:
            est += n_blocks * job.gpus * int((s.demand[j] > 0).sum())
    return build_model(s) if est <= cfg.lp_max_nonzeros else None


def _gpu_lp(s: Scenario, m: Model):
    """Rows: one per rigid job (<= 1), per (elastic job, t) (<= need), per cell (<= 1)."""
    rows, cols, vals, upper = [], [], [], []
    n_rows = 0
    rj = np.nonzero(m.rigid)[0]
    if len(rj):
        _, r = np.unique(m.job[rj], return_inverse=True)
        rows.append(r)
        cols.append(rj)
        vals.append(np.ones(len(rj)))
        upper.append(np.ones(r.max() + 1))
        n_rows = r.max() + 1
    el = np.nonzero(~m.rigid)[0]
    if len(el):
        key = m.job[el] * s.T + m.t0[el]
        uk, r = np.unique(key, return_inverse=True)
        rows.append(n_rows + r)
        cols.append(el)
        vals.append(np.ones(len(el)))
        upper.append(m.need[uk // s.T, uk % s.T].astype(np.float64))
        n_rows += len(uk)
    cell, var = _cells(m, s.T)
    uc, r = np.unique(cell, return_inverse=True)
    rows.append(n_rows + r)
    cols.append(var)
    vals.append(np.ones(len(var)))
    upper.append(np.ones(len(uc)))
    return (m.value, *(np.concatenate(a) if a else np.zeros(0) for a in (rows, cols, vals, upper)),
            np.ones(m.size), m.constant)


def _pool_lp(s: Scenario):
    """Per pool and t, the GPUs held at most the pool's GPUs not fixed.
    Rigid variables per (job, start, pool), elastic per (job, pool, t) with
    up to `need` replicas."""
    T = s.T
    fixed = _fixed(s)
    n_pools = len(s.pools)
    gpu_pool = s.gpu_pool.numpy()
    free = np.zeros((n_pools, T))
    np.add.at(free, gpu_pool, (fixed < 0).numpy().astype(np.float64))  # (P, T)
    in_fixed = np.zeros(s.J, dtype=bool)
    in_fixed[fixed[fixed >= 0].unique().numpy()] = True
    need = still_wanted(s, time_major(fixed))  # (J, T) what the fixed cells leave
    c, col_upper = [], []
    rows, cols, vals = [], [], []
    cap_rows = n_pools * T  # rows 0 .. P*T-1: capacity of (pool, t)
    n_rows, n_cols = cap_rows, 0
    upper = [free.ravel()]
    for j, job in enumerate(s.jobs):
        if s.unplaceable[j] or (job.rigid and in_fixed[j]):
            continue
        pools = np.unique(gpu_pool[s.blocks(j).numpy()])
        k = job.gpus
        if job.rigid:
            st = np.arange(job.arrival, T)
            length = np.minimum(job.duration, T - st)
            pp, ss = np.meshgrid(pools, st, indexing="ij")
            ll = np.broadcast_to(length, pp.shape)
            pp, ss, ll = pp.ravel(), ss.ravel(), ll.ravel()
            n = len(pp)
            idx = n_cols + np.arange(n)
            c.append(job.priority * k * ll.astype(np.float64))
            col_upper.append(np.ones(n))
            # capacity: k on (p, t) for t in [s, s + L)
            var = np.repeat(idx, ll)
            off = np.arange(len(var)) - np.repeat(np.cumsum(ll) - ll, ll)
            rows.append(np.repeat(pp, ll) * T + np.repeat(ss, ll) + off)
            cols.append(var)
            vals.append(np.full(len(var), float(k)))
            # at most one start
            rows.append(np.full(n, n_rows))
            cols.append(idx)
            vals.append(np.ones(n))
            upper.append(np.ones(1))
            n_rows += 1
            n_cols += n
        else:
            ts = np.nonzero(need[j])[0]
            if len(ts) == 0:
                continue
            pp, tt = np.meshgrid(pools, ts, indexing="ij")
            pp, tt = pp.ravel(), tt.ravel()
            n = len(pp)
            idx = n_cols + np.arange(n)
            c.append(np.full(n, job.priority * k, dtype=np.float64))
            col_upper.append(need[j, tt].astype(np.float64))
            rows.append(pp * T + tt)
            cols.append(idx)
            vals.append(np.full(n, float(k)))
            # at most `need` replicas over all pools
            _, r = np.unique(tt, return_inverse=True)
            rows.append(n_rows + r)
            cols.append(idx)
            vals.append(np.ones(n))
            upper.append(need[j, ts].astype(np.float64))
            n_rows += len(ts)
            n_cols += n
    constant = weighted_throughput(s, fixed) if s.fixed is not None else 0.0
    cat = lambda a: np.concatenate(a) if a else np.zeros(0)  # noqa: E731
    return (cat(c), cat(rows).astype(np.int64), cat(cols).astype(np.int64), cat(vals), cat(upper),
            cat(col_upper), constant)


def pool_lp_nonzeros(s: Scenario) -> int:
    """Nonzeros of _pool_lp's matrix, counted without building it: a rigid
    job's (start, pool) columns hold its steps and its one-start row, a
    service's (pool, step) columns a capacity and a demand row each."""
    T, gpu_pool = s.T, s.gpu_pool.numpy()
    fixed = _fixed(s)
    in_fixed = np.zeros(s.J, dtype=bool)
    in_fixed[fixed[fixed >= 0].unique().numpy()] = True
    need = still_wanted(s, time_major(fixed))
    total = 0
    for j, job in enumerate(s.jobs):
        if s.unplaceable[j] or (job.rigid and in_fixed[j]):
            continue
        pools = len(np.unique(gpu_pool[s.blocks(j).numpy()]))
        if job.rigid:
            starts = np.arange(job.arrival, T)
            total += pools * (int(np.minimum(job.duration, T - starts).sum()) + len(starts))
        else:
            total += 2 * pools * int((need[j] > 0).sum())
    return total


def _highs(highspy):
    """A Highs instance; the first one prints a banner on the C stdout, which
    would land in the run's table, so that one is made with fd 1 muted."""
    import os
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            return highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solve_lp(c, rows, cols, vals, upper, col_upper, time_limit: float, integer: bool = False):
    """max c.x subject to A x <= upper, 0 <= x <= col_upper (A in COO), with
    HiGHS: the optimum, or with `integer` (x integer) the best proven bound,
    which holds at a time limit too."""
    import highspy

    n = len(c)
    if n == 0:
        return 0.0, "empty"
    m = len(upper)
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    start = np.searchsorted(rows, np.arange(m + 1))
    lp = highspy.HighsLp()
    lp.num_col_ = n
    lp.num_row_ = m
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.asarray(c, dtype=np.float64)
    lp.col_lower_ = np.zeros(n)
    lp.col_upper_ = np.asarray(col_upper, dtype=np.float64)
    lp.row_lower_ = np.full(m, -highspy.kHighsInf)
    lp.row_upper_ = np.asarray(upper, dtype=np.float64)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = start.astype(np.int32)
    lp.a_matrix_.index_ = cols.astype(np.int32)
    lp.a_matrix_.value_ = vals.astype(np.float64)
    h = _highs(highspy)
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.passModel(lp)
    if integer:
        h.changeColsIntegrality(n, np.arange(n, dtype=np.int32),
                                np.full(n, 1, dtype=np.uint8))  # 1: kInteger
    h.run()
    status = h.modelStatusToString(h.getModelStatus())
    if integer:
        bound = float(h.getInfo().mip_dual_bound)
        return (bound, status) if np.isfinite(bound) else (None, status)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None, status
    return float(h.getInfo().objective_function_value), status
