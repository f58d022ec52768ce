"""Feasibility of a plan: rules 1 to 4 of PROBLEM.md, every violation kind
listed with a count and a first example.

    python -m gpualloc.check SCENARIO PLAN    # exit 0 feasible, 1 infeasible, 2 bad input

An independent judge in plain numpy: it reads the rules from the scenario's
plain fields (pools and jobs), never from the Scenario's derived tensors, the
planner's segments or the placement core, so a check imports no torch.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from gpualloc.scenario import Scenario, ScenarioError, guaranteed_replicas


GUARANTEE = "guarantee_short"
"""The violation kind of rule 4."""


@dataclass
class Check:
    violations: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def ok_but_guarantee(self) -> bool:
        """Rules 1-3 hold (what FIFO's plan and online plans are held to:
        rule 4 is reported for them, not enforced)."""
        return not (set(self.violations) - {GUARANTEE})

    def add(self, kind: str, count: int, example: str) -> None:
        if count:
            self.violations[kind] = (count, example)

    def __str__(self) -> str:
        if self.ok:
            return "feasible"
        lines = ["infeasible:"]
        for kind, (count, example) in self.violations.items():
            lines.append(f"  {kind}: {count} (first: {example})")
        return "\n".join(lines)


def _starts(a: np.ndarray) -> np.ndarray:
    """(n,) bool: where a new value begins in `a`."""
    return np.diff(a, prepend=-1) != 0


class _Rules:
    """The scenario as the rules read it, derived here from its plain fields."""

    def __init__(self, s: Scenario):
        pools, jobs = s.pools, s.jobs
        self.G, self.T, self.J = s.G, s.T, s.J
        node_size = [p.gpus_per_node for p in pools for _ in range(p.count)]
        self.pool = np.repeat(np.arange(len(pools)), [p.count * p.gpus_per_node for p in pools])
        self.node = np.repeat(np.arange(len(node_size)), node_size)  # (G,) node of each GPU
        self.per_node = np.array([p.gpus_per_node for p in pools], dtype=np.int64)[self.pool]
        self.first_of_node, self.first_of_pool = _starts(self.node), _starts(self.pool)

        def column(f, dtype=np.int64) -> np.ndarray:  # (J,)
            return np.array([f(j) for j in jobs], dtype=dtype)

        self.arrival, self.gpus = column(lambda j: j.arrival), column(lambda j: j.gpus)
        self.duration = column(lambda j: j.duration or 0)
        self.rigid, self.pre = column(lambda j: j.rigid, bool), column(lambda j: j.preemptible, bool)
        self.restart_cost = column(lambda j: j.restart_cost)
        # An online view's fixed cells at step 0: jobs already running when it
        # begins. Stopped there and run later, such a job resumes: it restores.
        self.running = np.zeros(self.J, dtype=bool)
        if s.fixed is not None and self.T > 0:
            held = s.fixed[:, 0].cpu().numpy()
            self.running[held[held >= 0]] = True
        self.min_served = column(lambda j: j.min_served, np.float64)
        self.demand = np.zeros((self.J, self.T), dtype=np.int64)  # before arrival: counts nowhere
        for i, j in enumerate(jobs):
            if j.demand is not None:
                self.demand[i, j.arrival:] = j.demand[j.arrival:]
        self.guaranteed = guaranteed_replicas(self.min_served[:, None], self.demand)
        pool_ok = np.array([[(j.gpu_types is None or p.gpu_type in j.gpu_types)
                             and p.memory_gb >= j.min_memory_gb for p in pools] for j in jobs],
                           dtype=bool).reshape(self.J, len(pools))
        self.compat = pool_ok[:, self.pool]  # (J, G)

    def is_block(self, first, last, width, k) -> np.ndarray:
        """Elementwise: GPUs first..last, `width` of them held, are one block of k
        (inside one node, or whole consecutive nodes of one pool)."""
        lo, hi = np.minimum(first, self.G - 1), np.maximum(last, 0)
        n = self.per_node[lo]
        in_node = (k <= n) & (self.node[lo] == self.node[hi])
        whole_nodes = ((k > n) & (k % n == 0) & self.first_of_node[lo]
                       & (self.pool[lo] == self.pool[hi]))
        return (width == k) & (last - first + 1 == k) & (in_node | whole_nodes)

    def held(self, owner: np.ndarray) -> np.ndarray:
        """(J, T) int64: n_j(t), the GPUs job j holds at t."""
        g, t = np.nonzero(owner >= 0)
        return np.bincount(owner[g, t] * self.T + t,
                           minlength=self.J * self.T).reshape(self.J, self.T)


def _grid(owner) -> np.ndarray:
    """The owner grid as int64 numpy, from a torch tensor (any device) or an array."""
    torch = sys.modules.get("torch")  # a tensor means torch is imported already
    if torch is not None and isinstance(owner, torch.Tensor):
        owner = owner.detach().cpu().numpy()
    return np.array(owner, dtype=np.int64)


def _job(s: Scenario, j: int) -> str:
    return f"job {s.jobs[j].id!r} (index {j})"


def check(s: Scenario, owner) -> Check:
    """Verify feasibility rules 1-4 of PROBLEM.md for the (G, T) owner grid
    (a torch tensor or a numpy array)."""
    out = Check()
    owner = _grid(owner)
    G, T, J = s.G, s.T, s.J
    if owner.shape != (G, T):
        out.add("shape", 1, f"owner grid is {owner.shape}, scenario needs ({G}, {T})")
        return out
    bad = (owner < -1) | (owner >= J)
    if bad.any():
        g, t = (int(v[0]) for v in np.nonzero(bad))
        out.add("owner_range", int(bad.sum()),
                f"owner[{g}][{t}] = {int(owner[g, t])} is not -1 or a job index < {J}")
        owner = np.where(bad, -1, owner)
    g_idx, t_idx = np.nonzero(owner >= 0)
    if len(g_idx) == 0:
        return out
    j_idx = owner[g_idx, t_idx]
    r = _Rules(s)

    # Rule 1: a cell is held only after arrival, on a compatible GPU.
    early = t_idx < r.arrival[j_idx]
    if early.any():
        i = int(np.argmax(early))
        j, g = int(j_idx[i]), int(g_idx[i])
        out.add("before_arrival", int(early.sum()),
                f"{_job(s, j)} holds GPU {g} at t={int(t_idx[i])}, arrival {int(r.arrival[j])}")
    incompatible = ~r.compat[j_idx, g_idx]
    if incompatible.any():
        i = int(np.argmax(incompatible))
        g, pool = int(g_idx[i]), s.pools[int(r.pool[g_idx[i]])]
        out.add("incompatible", int(incompatible.sum()),
                f"{_job(s, int(j_idx[i]))} holds GPU {g} "
                f"({pool.gpu_type}, {float(pool.memory_gb):g} GB)")

    _check_rigid(s, r, out, g_idx, t_idx, j_idx)
    _check_segments(s, r, out, g_idx, t_idx, j_idx)
    _check_elastic(s, r, out, owner)
    _check_guarantee(s, r, out, owner)
    return out


def shortfall(s: Scenario, owner) -> np.ndarray:
    """(J, T) int64: replicas below rule 4's guarantee, ceil(min_served x
    demand) minus the replicas held (floor(n / gpus), as in the metrics)."""
    return _shortfall(_Rules(s), _grid(owner))


def _shortfall(r: _Rules, owner: np.ndarray) -> np.ndarray:
    replicas = r.held(owner) // np.maximum(r.gpus, 1)[:, None]
    return np.where(r.rigid[:, None], 0, np.maximum(r.guaranteed - replicas, 0))


def _check_guarantee(s, r, out, owner) -> None:
    # Rule 4: an elastic job with min_served = f holds at least ceil(f x demand)
    # replicas at every t.
    if not (r.min_served > 0).any():
        return
    short = _shortfall(r, owner)
    if short.any():
        j, t = (int(v[0]) for v in np.nonzero(short))
        out.add(GUARANTEE, int(short.sum()),
                f"{_job(s, j)} holds {int(r.guaranteed[j, t] - short[j, t])} replicas at t={t}, "
                f"min_served={s.jobs[j].min_served:g} of demand {int(r.demand[j, t])} guarantees "
                f"{int(r.guaranteed[j, t])}")


def _check_rigid(s, r, out, g_idx, t_idx, j_idx) -> None:
    # Rule 2: a rigid job's cells are exactly block x [start, min(start+duration, T)).
    J, T = r.J, r.T
    sel = (r.rigid & ~r.pre)[j_idx]
    g, t, j = g_idx[sel], t_idx[sel], j_idx[sel]
    if len(j) == 0:
        return
    start = np.full(J, T)
    np.minimum.at(start, j, t)
    at_start = t == start[j]
    gmin, gmax = np.full(J, r.G), np.full(J, -1)
    np.minimum.at(gmin, j[at_start], g[at_start])
    np.maximum.at(gmax, j[at_start], g[at_start])
    width = np.bincount(j[at_start], minlength=J)
    cells = np.bincount(j, minlength=J)
    held, k = cells > 0, r.gpus
    is_block = r.is_block(gmin, gmax, width, k)
    bad_block = held & ~is_block
    if bad_block.any():
        i = int(np.argmax(bad_block))
        out.add("rigid_not_block", int(bad_block.sum()),
                f"{_job(s, i)} holds GPUs {int(gmin[i])}..{int(gmax[i])} ({int(width[i])} GPUs) "
                f"at its start t={int(start[i])}; it needs one block of {int(k[i])}")
    length = np.minimum(r.duration, T - start)
    inside = (g >= gmin[j]) & (g <= gmax[j]) & (t < start[j] + length[j])
    outside = np.bincount(j[~inside], minlength=J) > 0
    bad_run = held & is_block & (outside | (cells != k * length))
    if bad_run.any():
        i = int(np.argmax(bad_run))
        out.add("rigid_not_run", int(bad_run.sum()),
                f"{_job(s, i)} holds {int(cells[i])} cells; block {int(gmin[i])}..{int(gmax[i])} "
                f"from t={int(start[i])} for {int(length[i])} steps needs exactly "
                f"{int(k[i] * length[i])}")


def _check_segments(s, r, out, g_idx, t_idx, j_idx) -> None:
    # Rule 2, preemptible jobs, read from PROBLEM.md: a segment is a maximal run
    # of timesteps on the same GPUs (same first GPU and count; GPUs that are no
    # block break the rule anyway), each one block of `gpus`. Every segment
    # after the first (or, for a job running when a view begins, every one that
    # does not start at step 0) restores for restart_cost steps, then progresses; once
    # progress reaches duration the job is done and holds nothing.
    J, T, G = r.J, r.T, r.G
    sel = r.pre[j_idx]
    if not sel.any():
        return
    key = j_idx[sel] * T + t_idx[sel]
    first, last = np.full(J * T, G), np.full(J * T, -1)
    np.minimum.at(first, key, g_idx[sel])
    np.maximum.at(last, key, g_idx[sel])
    count = np.bincount(key, minlength=J * T).reshape(J, T)
    first, last = first.reshape(J, T), last.reshape(J, T)
    on = count > 0
    k = np.broadcast_to(r.gpus[:, None], on.shape)
    bad = on & ~r.is_block(first, last, count, k)
    if bad.any():
        j, t = (int(v[0]) for v in np.nonzero(bad))
        out.add("segment_not_block", int(bad.sum()),
                f"{_job(s, j)} holds GPUs {min(int(first[j, t]), G - 1)}..{max(int(last[j, t]), 0)} "
                f"({int(count[j, t])} GPUs) at t={t}; each segment needs one block of {int(k[j, t])}")
    new = on.copy()
    new[:, 1:] &= ~(on[:, :-1] & (first[:, 1:] == first[:, :-1]) & (count[:, 1:] == count[:, :-1]))
    steps = np.arange(T)
    seg_start = np.maximum.accumulate(np.where(new, steps, -1), axis=1)
    later = (np.cumsum(new, 1) > 1) | (r.running[:, None] & (seg_start > 0))
    restoring = on & later & (steps - seg_start < r.restart_cost[:, None])
    working = (on & ~restoring).astype(np.int64)
    late = on & (np.cumsum(working, 1) - working >= r.duration[:, None])
    if late.any():
        j, t = (int(v[0]) for v in np.nonzero(late))
        out.add("after_done", int(count[late].sum()),
                f"{_job(s, j)} holds GPUs at t={t}, after its progress reached duration "
                f"{int(r.duration[j])}")


def _runs(owner_tg: np.ndarray, brk: np.ndarray):
    """Maximal runs of equal owner along the GPU axis of (T, G), broken where
    `brk` (G,) is true (a new node or pool starts). Returns per run: its owner,
    first GPU, length and timestep."""
    new = np.ones(owner_tg.shape, dtype=bool)
    new[:, 1:] = (owner_tg[:, 1:] != owner_tg[:, :-1]) | brk[None, 1:]
    t_idx, g_idx = np.nonzero(new)
    run_id = np.cumsum(new.ravel()) - 1  # (T*G,)
    length = np.bincount(run_id, minlength=len(t_idx))
    return owner_tg[t_idx, g_idx], g_idx, length, t_idx


def _check_elastic(s, r, out, owner) -> None:
    # Rule 3: at each t an elastic job's GPUs split into blocks of `gpus`. Blocks
    # are consecutive, so every maximal run of its GPUs (inside a node, or for
    # replicas larger than a node, inside a pool from a node's first GPU) must
    # be a multiple of the replica size.
    el = np.zeros(r.J + 1, dtype=bool)
    el[:-1] = ~r.rigid
    if not el.any():
        return
    owner_tg = np.where(el[owner], owner, -1).T  # (T, G); owner -1 reads el[-1], False
    bad_total, example = 0, ""
    for brk, multi_node in ((r.first_of_node, False), (r.first_of_pool, True)):
        j, g0, length, t = _runs(owner_tg, brk)
        keep = j >= 0
        j, g0, length, t = j[keep], g0[keep], length[keep], t[keep]
        k, n = r.gpus[j], r.per_node[g0]
        if multi_node:
            applies = k > n
            good = (k % n == 0) & r.first_of_node[g0] & (length % k == 0)
        else:
            applies = k <= n
            good = length % k == 0
        bad = applies & ~good
        if bad.any():
            i = int(np.argmax(bad))
            bad_total += int(bad.sum())
            example = example or (f"{_job(s, int(j[i]))} holds {int(length[i])} GPUs from GPU "
                                  f"{int(g0[i])} at t={int(t[i])}; replicas are blocks of "
                                  f"{int(k[i])}")
    out.add("elastic_not_blocks", bad_total, example)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from gpualloc.plan import read_plan
    from gpualloc.scenario import load

    parser = argparse.ArgumentParser(
        prog="gpualloc check",
        description="Check a plan file against its scenario (PROBLEM.md's rules). "
                    "Exit 0: feasible; 1: infeasible (the violations are printed); 2: bad input.")
    parser.add_argument("scenario", help="the scenario file (JSON or YAML)")
    parser.add_argument("plan", help="the plan file")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:  # --help: 0; a missing argument: argparse's usage line, 2
        return int(e.code or 0)
    try:
        scenario = load(args.scenario)
        _, owner = read_plan(args.plan, scenario)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = check(scenario, owner)
    print(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
