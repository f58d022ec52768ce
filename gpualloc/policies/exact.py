"""The optimum for small scenarios (OR-Tools CP-SAT) and the LP upper bound for
any size (HiGHS). Both are optional: `pip install gpualloc[exact]`.

The time-indexed model, maximizing weighted throughput:
- one Boolean per (rigid job, start, block) candidate, at most one chosen per
  job; it holds block x [start, min(start + duration, T)) and is worth
  priority x GPUs x that length;
- one Boolean per (elastic job, block, t): a replica, at most `demand` per
  job and t, worth priority x GPUs;
- at most one holder per (GPU, t); cells fixed before planning
  (`Scenario.fixed`) hold nothing new, and their value is a constant.

The LP relaxation of that model (variables in [0, 1]) is an upper bound on
every plan. Above `ExactConfig.lp_max_nonzeros` the bound uses a per-pool
aggregate instead (per pool and t, the GPUs used at most the pool's free
GPUs): it relaxes the per-GPU model further, so it is still a valid bound.

The MIP bound keeps that per-pool aggregate but its starts and replica counts
integer: a job is run whole or not at all, at one start, in one pool. Node
and GPU boundaries are still dropped, so its optimum bounds every plan; HiGHS's
branch and bound proves a bound on that optimum within a time limit, which is
at most the LP's once its root (the LP plus cuts) is solved; a limit that hits
before may leave a weaker one. It is tighter where gangs compete for most of
a pool, which the LP fills with fractions of jobs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from gpualloc.config import ExactConfig
from gpualloc.core import still_wanted, time_major
from gpualloc.core.guarantee import GuaranteeError
from gpualloc.objective import weighted_throughput
from gpualloc.plan import IDLE, Plan, held
from gpualloc.scenario import Scenario, ScenarioError


class ExactTooLarge(ScenarioError):
    """The scenario is above `exact.max_variables`: CP-SAT would not finish."""


@dataclass
class Model:
    """The time-indexed model as arrays; both solvers read it.

    Variable i holds GPUs [g[i], g[i] + k[i]) over timesteps [t0[i], t1[i])
    for job job[i] and is worth value[i]."""

    job: np.ndarray  # (N,) int64
    g: np.ndarray  # (N,) int64 first GPU of the block
    k: np.ndarray  # (N,) int64
    t0: np.ndarray  # (N,) int64
    t1: np.ndarray  # (N,) int64
    value: np.ndarray  # (N,) float64
    rigid: np.ndarray  # (N,) bool
    need: np.ndarray  # (J, T) int64 replicas still wanted after the fixed cells
    fixed: torch.Tensor  # (G, T) int64 owner grid of fixed cells
    constant: float  # weighted throughput of the fixed cells alone

    @property
    def size(self) -> int:
        return len(self.job)

    @property
    def nonzeros(self) -> int:
        return int((self.k * (self.t1 - self.t0)).sum())


def refuse_preemptible(s: Scenario) -> None:
    """exact models each rigid job as one run: with preemptible jobs its
    optimum and bound would not be the problem's. Refuse, naming a job."""
    if bool(s.preemptible.any()):
        j = int(s.preemptible.nonzero()[0])
        n = int(s.preemptible.sum())
        raise ScenarioError(
            f"exact: job {s.jobs[j].id!r} is preemptible ({n} jobs are); the CP-SAT model "
            f"runs every rigid job in one piece, so its optimum and bound would not hold "
            f"with segments. Run exact without preemption (preemptible=[])")


def _fixed(s: Scenario) -> torch.Tensor:
    if s.fixed is None:
        return torch.full((s.G, s.T), IDLE, dtype=torch.long)
    return s.fixed.cpu().long()


def build_model(s: Scenario) -> Model:
    """Every candidate variable of the model, vectorized per job."""
    G, T = s.G, s.T
    fixed = _fixed(s)
    P = np.zeros((G + 1, T + 1), dtype=np.int64)  # 2-D prefix of fixed cells
    P[1:, 1:] = (fixed >= 0).numpy().astype(np.int64).cumsum(0).cumsum(1)
    in_fixed = np.zeros(s.J, dtype=bool)
    in_fixed[fixed[fixed >= 0].unique().numpy()] = True
    need = still_wanted(s, time_major(fixed))  # (J, T) what the fixed cells leave
    parts = []
    for j, job in enumerate(s.jobs):
        if s.unplaceable[j]:
            continue
        b = s.blocks(j).numpy()
        k = job.gpus
        if job.rigid:
            if in_fixed[j]:
                continue  # done or running: its cells are fixed
            st = np.arange(job.arrival, T)
            gg, tt = np.meshgrid(b, st, indexing="ij")  # (B, S)
            gg, t0 = gg.ravel(), tt.ravel()
            t1 = np.minimum(t0 + job.duration, T)
        else:
            ts = np.nonzero(need[j])[0]
            gg, tt = np.meshgrid(b, ts, indexing="ij")
            gg, t0 = gg.ravel(), tt.ravel()
            t1 = t0 + 1
        free = (P[gg + k, t1] - P[gg, t1] - P[gg + k, t0] + P[gg, t0]) == 0
        gg, t0, t1 = gg[free], t0[free], t1[free]
        value = job.priority * k * (t1 - t0).astype(np.float64)
        parts.append((np.full(len(gg), j), gg, np.full(len(gg), k), t0, t1, value,
                      np.full(len(gg), job.rigid)))
    if parts:
        cols = [np.concatenate(c) for c in zip(*parts)]
    else:
        cols = [np.zeros(0, dtype=np.int64)] * 5 + [np.zeros(0), np.zeros(0, dtype=bool)]
    return Model(*cols, need=need, fixed=fixed,
                 constant=weighted_throughput(s, fixed) if s.fixed is not None else 0.0)


def model_size(s: Scenario) -> int:
    """Variables of the model without fixed cells (an upper bound with them),
    counted without building it."""
    n = 0
    for j, job in enumerate(s.jobs):
        if s.unplaceable[j]:
            continue
        steps = s.T - job.arrival if job.rigid else int((s.demand[j] > 0).sum())
        n += len(s.blocks(j)) * steps
    return n


def _cells(m: Model, T: int) -> tuple[np.ndarray, np.ndarray]:
    """COO of the capacity rows: (cell index g * T + t, variable index)."""
    area = m.k * (m.t1 - m.t0)
    var = np.repeat(np.arange(m.size), area)
    off = np.arange(len(var)) - np.repeat(np.cumsum(area) - area, area)  # position in the rectangle
    width = np.repeat(m.t1 - m.t0, area)
    g = np.repeat(m.g, area) + off // width
    t = np.repeat(m.t0, area) + off % width
    return g * T + t, var


def _groups(keys: np.ndarray, var: np.ndarray):
    """Split var by equal keys: yields (key, vars) for each key."""
    order = np.argsort(keys, kind="stable")
    keys, var = keys[order], var[order]
    cut = np.nonzero(np.diff(keys))[0] + 1
    for ks, vs in zip(np.split(keys, cut), np.split(var, cut)):
        if len(vs):
            yield int(ks[0]), vs


# ---- CP-SAT ----------------------------------------------------------------------

def exact(s: Scenario, cfg: ExactConfig | None = None, device: torch.device | str = "cpu",
          seed: int = 0, rivals: dict | None = None) -> Plan:
    """The CP-SAT plan maximizing weighted throughput, started from greedy's
    plan where the registry hands it (`rivals`: gpualloc.policies.rivals). info: objective,
    best_bound, optimal (proven), status, build_s, solve_s, variables,
    trajectory (each improving solution: seconds into the solve, objective;
    the first one is usually greedy's hint), and lp_bound."""
    from ortools.sat.python import cp_model

    cfg = cfg or ExactConfig()
    refuse_preemptible(s)
    start = time.perf_counter()
    # Data.
    size = model_size(s)
    if size > cfg.max_variables and s.fixed is not None:
        size = build_model(s).size  # fixed cells remove candidates: count them exactly
    if size > cfg.max_variables:
        raise ExactTooLarge(
            f"exact: scenario {s.name!r} needs {size:,} CP-SAT variables, above "
            f"exact.max_variables={cfg.max_variables:,} (raise it, or use the LP bound "
            f"gpualloc.policies.bounds.lp_bound for scenarios this large)")
    m = build_model(s)
    info: dict = {"variables": m.size}

    # Variables: one Boolean per candidate.
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"x{i}") for i in range(m.size)]

    # A rigid job starts at most once.
    for _, vs in _groups(m.job[m.rigid], np.nonzero(m.rigid)[0]):
        if len(vs) > 1:
            model.add_at_most_one(x[i] for i in vs)

    # An elastic job holds at most `demand` replicas at each t, and at least
    # its guarantee (rule 4: ceil(min_served x demand), less what fixed cells hold).
    el = np.nonzero(~m.rigid)[0]
    floor = (s.guaranteed.numpy() - (s.demand.numpy() - m.need)).clip(min=0)  # (J, T)
    floored = set()
    for key, vs in _groups(m.job[el] * s.T + m.t0[el], el):
        j, t = divmod(key, s.T)
        if len(vs) > m.need[j, t]:
            model.add(cp_model.LinearExpr.sum([x[i] for i in vs]) <= int(m.need[j, t]))
        if floor[j, t] > 0:
            model.add(cp_model.LinearExpr.sum([x[i] for i in vs]) >= int(floor[j, t]))
            floored.add((j, t))
    for j, t in zip(*np.nonzero(floor)):
        if (int(j), int(t)) not in floored:  # guaranteed, with no block left to hold it
            raise GuaranteeError(f"exact: job {s.jobs[j].id!r} has no free block at t={t} for "
                                 f"its {int(floor[j, t])} guaranteed replicas (rule 4)")

    # At most one holder per (GPU, t).
    cell, var = _cells(m, s.T)
    for _, vs in _groups(cell, var):
        if len(vs) > 1:
            model.add_at_most_one(x[i] for i in vs)

    # Objective: weighted throughput of the new cells (the fixed ones are a constant).
    model.maximize(cp_model.LinearExpr.weighted_sum(x, m.value.tolist()))

    hint = None
    if cfg.hint and m.size and rivals and "greedy" in rivals:
        hint = rivals["greedy"](s).owner
        for i, v in enumerate(_hint_values(s, m, hint)):
            model.add_hint(x[i], bool(v))

    # Solve.
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = cfg.time_limit_s
    solver.parameters.random_seed = seed
    if cfg.workers > 0:
        solver.parameters.num_workers = cfg.workers
    built = time.perf_counter()
    trajectory: list[tuple[float, float]] = []  # (seconds into the solve, objective)

    class _Incumbents(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            trajectory.append((time.perf_counter() - built, m.constant + self.objective_value))

    status = solver.solve(model, _Incumbents())
    info.update(status=solver.status_name(status), build_s=built - start,
                solve_s=time.perf_counter() - built, trajectory=trajectory)
    if status == cp_model.MODEL_INVALID:
        raise RuntimeError(f"exact: CP-SAT rejected the model: {model.validate()}")
    if status == cp_model.INFEASIBLE:
        raise GuaranteeError(f"exact: no plan of {s.name!r} meets rule 4 (CP-SAT proved the "
                             f"guaranteed replicas cannot all be held)")
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        chosen = np.asarray(solver.response_proto.solution, dtype=np.int64)[
            [v.index for v in x]] > 0 if m.size else np.zeros(0, dtype=bool)
        owner = _plan(s, m, chosen)
        info.update(objective=m.constant + (solver.objective_value if m.size else 0.0),
                    best_bound=m.constant + (solver.best_objective_bound if m.size else 0.0),
                    optimal=status == cp_model.OPTIMAL, solution="cp-sat")
    else:
        # No solution within the limit: greedy's plan is still a plan (the
        # fixed cells alone where the registry handed none).
        owner = hint if hint is not None else (rivals["greedy"](s).owner if rivals and "greedy"
                                               in rivals else _fixed(s).clone())
        info.update(objective=weighted_throughput(s, owner), best_bound=None, optimal=False,
                    solution="greedy (CP-SAT found none in time)")
    if cfg.lp:
        from gpualloc.policies.bounds import lp_relaxation  # it reads this model
        lp = lp_relaxation(s, cfg, m)
        info.update(lp_bound=lp.value, lp_level=lp.level, lp_s=lp.seconds)
    return Plan(owner=owner, info=info)


def _plan(s: Scenario, m: Model, chosen: np.ndarray) -> torch.Tensor:
    owner = m.fixed.clone()
    for i in np.nonzero(chosen)[0]:
        owner[m.g[i]:m.g[i] + m.k[i], m.t0[i]:m.t1[i]] = int(m.job[i])
    return owner


def _hint_values(s: Scenario, m: Model, owner: torch.Tensor) -> np.ndarray:
    """(N,) bool: the model's variables that reproduce a plan's new cells."""
    new = owner.clone()
    new[m.fixed >= 0] = IDLE
    G, T = s.G, s.T
    # A candidate matches the plan when every cell of its rectangle is its job
    # and, for a rigid job, the rectangle starts where the job's cells start.
    own = new.numpy()
    match = np.ones(m.size, dtype=bool)
    cell, var = _cells(m, T)
    ok = own.ravel()[cell] == m.job[var]
    bad = np.zeros(m.size, dtype=bool)
    np.logical_or.at(bad, var[~ok], True)
    match &= ~bad
    # Rigid: exactly the job's start and first GPU.
    first_t = np.full(s.J, T)
    first_g = np.full(s.J, G)
    g_idx, t_idx = np.nonzero(own >= 0)
    j_idx = own[g_idx, t_idx]
    np.minimum.at(first_t, j_idx, t_idx)
    at = t_idx == first_t[j_idx]
    np.minimum.at(first_g, j_idx[at], g_idx[at])
    r = m.rigid
    match[r] &= (m.t0[r] == first_t[m.job[r]]) & (m.g[r] == first_g[m.job[r]])
    # Elastic: the replicas the plan's runs split into, from each run's start.
    el = np.nonzero(~r & match)[0]
    if len(el):
        keep = np.zeros(m.size, dtype=bool)
        gpn = np.array([p.gpus_per_node for p in s.pools])[s.gpu_pool.numpy()]
        node = s.gpu_node.numpy()
        pool = s.gpu_pool.numpy()
        for i in el:
            j, g, k, t = int(m.job[i]), int(m.g[i]), int(m.k[i]), int(m.t0[i])
            unit = node if k <= gpn[g] else pool
            lo = g
            while lo > 0 and own[lo - 1, t] == j and unit[lo - 1] == unit[g]:
                lo -= 1
            keep[i] = (g - lo) % k == 0
        match[el] = keep[el]
    return match
