"""Feasibility of a plan: rules 1 to 4 of PROBLEM.md, every violation kind
listed with a count and a first example.

    python -m gpualloc.check SCENARIO PLAN    # exit 0 feasible, 1 infeasible, 2 bad input
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import torch

from gpualloc.plan import held, segments
from gpualloc.scenario import Scenario, ScenarioError


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


def _job(s: Scenario, j: int) -> str:
    return f"job {s.jobs[j].id!r} (index {j})"


def _runs(owner_tg: torch.Tensor, brk: torch.Tensor):
    """Maximal runs of equal owner along the GPU axis of (T, G), broken where
    `brk` (G,) is true (a new node or pool starts). Returns per run: its owner,
    first GPU, length and timestep."""
    T, G = owner_tg.shape
    new = torch.ones_like(owner_tg, dtype=torch.bool)
    new[:, 1:] = (owner_tg[:, 1:] != owner_tg[:, :-1]) | brk[None, 1:]
    t_idx, g_idx = new.nonzero(as_tuple=True)
    run_id = torch.cumsum(new.flatten(), 0) - 1  # (T*G,)
    length = torch.bincount(run_id, minlength=len(t_idx))
    return owner_tg[t_idx, g_idx], g_idx, length, t_idx


def check(s: Scenario, owner: torch.Tensor) -> Check:
    """Verify feasibility rules 1-4 of PROBLEM.md for the (G, T) owner grid."""
    out = Check()
    owner = owner.cpu().long()
    G, T, J = s.G, s.T, s.J
    if tuple(owner.shape) != (G, T):
        out.add("shape", 1, f"owner grid is {tuple(owner.shape)}, scenario needs ({G}, {T})")
        return out
    bad = (owner < -1) | (owner >= J)
    if bad.any():
        g, t = bad.nonzero()[0].tolist()
        out.add("owner_range", int(bad.sum()),
                f"owner[{g}][{t}] = {int(owner[g, t])} is not -1 or a job index < {J}")
        owner = torch.where(bad, torch.full_like(owner, -1), owner)
    g_idx, t_idx = (owner >= 0).nonzero(as_tuple=True)
    if len(g_idx) == 0:
        return out
    j_idx = owner[g_idx, t_idx]

    # Rule 1: a cell is held only after arrival, on a compatible GPU.
    early = t_idx < s.arrival[j_idx]
    if early.any():
        i = int(early.nonzero()[0])
        out.add("before_arrival", int(early.sum()),
                f"{_job(s, int(j_idx[i]))} holds GPU {int(g_idx[i])} at t={int(t_idx[i])}, "
                f"arrival {int(s.arrival[j_idx[i]])}")
    incompatible = ~s.compat[j_idx, g_idx]
    if incompatible.any():
        i = int(incompatible.nonzero()[0])
        out.add("incompatible", int(incompatible.sum()),
                f"{_job(s, int(j_idx[i]))} holds GPU {int(g_idx[i])} "
                f"({s.gpu_type[int(g_idx[i])]}, {float(s.gpu_memory[g_idx[i]]):g} GB)")

    _check_rigid(s, out, g_idx, t_idx, j_idx)
    _check_segments(s, out, owner)
    _check_elastic(s, out, owner)
    _check_guarantee(s, out, owner)
    return out


def shortfall(s: Scenario, owner: torch.Tensor) -> torch.Tensor:
    """(J, T) int64: replicas below rule 4's guarantee, ceil(min_served x
    demand) minus the replicas held (floor(n / gpus), as in the metrics)."""
    replicas = held(s, owner) // s.gpus[:, None]
    return torch.where(s.rigid[:, None], 0, (s.guaranteed - replicas).clamp(min=0))


def _check_guarantee(s, out, owner) -> None:
    # Rule 4: an elastic job with min_served = f holds at least ceil(f x demand)
    # replicas at every t.
    if not bool((s.min_served > 0).any()):
        return
    short = shortfall(s, owner)
    if short.any():
        j, t = (int(v) for v in short.nonzero()[0])
        out.add(GUARANTEE, int(short.sum()),
                f"{_job(s, j)} holds {int(s.guaranteed[j, t] - short[j, t])} replicas at t={t}, "
                f"min_served={s.jobs[j].min_served:g} of demand {int(s.demand[j, t])} guarantees "
                f"{int(s.guaranteed[j, t])}")


def _is_block(s, first, last, width, k) -> torch.Tensor:
    """Elementwise: GPUs first..last, `width` of them held, are one block of k
    (inside one node, or whole consecutive nodes of one pool)."""
    gpn = torch.tensor([p.gpus_per_node for p in s.pools])[s.gpu_pool]
    first_of_node = torch.zeros(s.G, dtype=torch.bool)
    first_of_node[s.node_first_gpu] = True
    lo, hi = first.clamp(max=s.G - 1), last.clamp(min=0)
    n = gpn[lo]
    in_node = (k <= n) & (s.gpu_node[lo] == s.gpu_node[hi])
    whole_nodes = (k > n) & (k % n == 0) & first_of_node[lo] & (s.gpu_pool[lo] == s.gpu_pool[hi])
    return (width == k) & (last - first + 1 == k) & (in_node | whole_nodes)


def _check_rigid(s, out, g_idx, t_idx, j_idx) -> None:
    # Rule 2: a rigid job's cells are exactly block x [start, min(start+duration, T)).
    J, T = s.J, s.T
    sel = (s.rigid & ~s.preemptible)[j_idx]
    g, t, j = g_idx[sel], t_idx[sel], j_idx[sel]
    if len(j) == 0:
        return
    start = torch.full((J,), T, dtype=torch.long).scatter_reduce(0, j, t, "amin")
    at_start = t == start[j]
    gmin = torch.full((J,), s.G, dtype=torch.long).scatter_reduce(0, j[at_start], g[at_start], "amin")
    gmax = torch.full((J,), -1, dtype=torch.long).scatter_reduce(0, j[at_start], g[at_start], "amax")
    width = torch.bincount(j[at_start], minlength=J)
    cells = torch.bincount(j, minlength=J)
    held = cells > 0
    k = s.gpus
    is_block = _is_block(s, gmin, gmax, width, k)
    bad_block = held & ~is_block
    if bad_block.any():
        i = int(bad_block.nonzero()[0])
        out.add("rigid_not_block", int(bad_block.sum()),
                f"{_job(s, i)} holds GPUs {int(gmin[i])}..{int(gmax[i])} ({int(width[i])} GPUs) "
                f"at its start t={int(start[i])}; it needs one block of {int(k[i])}")
    length = torch.minimum(s.duration, T - start.clamp(max=T))
    inside = (g >= gmin[j]) & (g <= gmax[j]) & (t < start[j] + length[j])
    outside = torch.bincount(j[~inside], minlength=J) > 0
    bad_run = held & is_block & (outside | (cells != k * length))
    if bad_run.any():
        i = int(bad_run.nonzero()[0])
        out.add("rigid_not_run", int(bad_run.sum()),
                f"{_job(s, i)} holds {int(cells[i])} cells; block {int(gmin[i])}..{int(gmax[i])} "
                f"from t={int(start[i])} for {int(length[i])} steps needs exactly "
                f"{int(k[i] * length[i])}")


def _check_segments(s, out, owner) -> None:
    # Rule 2, preemptible jobs: at every held t the GPUs are one block of
    # `gpus` (so is every segment), and nothing is held once the job is done.
    if not bool(s.preemptible.any()):
        return
    seg = segments(s, owner)
    on = seg.count > 0
    k = s.gpus[:, None].expand_as(on)
    lo, hi = seg.first.clamp(max=s.G - 1), seg.last.clamp(min=0)
    bad = on & ~_is_block(s, seg.first, seg.last, seg.count, k)
    if bad.any():
        j, t = (int(v) for v in bad.nonzero()[0])
        out.add("segment_not_block", int(bad.sum()),
                f"{_job(s, j)} holds GPUs {int(lo[j, t])}..{int(hi[j, t])} "
                f"({int(seg.count[j, t])} GPUs) at t={t}; each segment needs one block of "
                f"{int(k[j, t])}")
    late = seg.after_done
    if late.any():
        j, t = (int(v) for v in late.nonzero()[0])
        out.add("after_done", int((late * seg.count).sum()),
                f"{_job(s, j)} holds GPUs at t={t}, after its progress reached duration "
                f"{int(s.duration[j])}")


def _check_elastic(s, out, owner) -> None:
    # Rule 3: at each t an elastic job's GPUs split into blocks of `gpus`. Blocks
    # are consecutive, so every maximal run of its GPUs (inside a node, or for
    # replicas larger than a node, inside a pool from a node's first GPU) must
    # be a multiple of the replica size.
    el = torch.zeros(s.J + 1, dtype=torch.bool)
    el[:-1] = ~s.rigid
    if not el.any():
        return
    owner_tg = torch.where(el[owner], owner, torch.full_like(owner, -1)).T.contiguous()
    gpn = torch.tensor([p.gpus_per_node for p in s.pools])[s.gpu_pool]
    first_of_node = torch.zeros(s.G, dtype=torch.bool)
    first_of_node[s.node_first_gpu] = True
    first_of_pool = torch.ones(s.G, dtype=torch.bool)
    first_of_pool[1:] = s.gpu_pool[1:] != s.gpu_pool[:-1]
    bad_total, example = 0, ""
    for brk, multi_node in ((first_of_node, False), (first_of_pool, True)):
        j, g0, length, t = _runs(owner_tg, brk)
        keep = j >= 0
        j, g0, length, t = j[keep], g0[keep], length[keep], t[keep]
        k, n = s.gpus[j], gpn[g0]
        if multi_node:
            applies = k > n
            good = (k % n == 0) & first_of_node[g0] & (length % k == 0)
        else:
            applies = k <= n
            good = length % k == 0
        bad = applies & ~good
        if bad.any():
            i = int(bad.nonzero()[0])
            bad_total += int(bad.sum())
            example = example or (f"{_job(s, int(j[i]))} holds {int(length[i])} GPUs from GPU "
                                  f"{int(g0[i])} at t={int(t[i])}; replicas are blocks of "
                                  f"{int(k[i])}")
    out.add("elastic_not_blocks", bad_total, example)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from gpualloc.plan import load_plan
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
        _, owner = load_plan(args.plan, scenario)
    except ScenarioError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    result = check(scenario, owner)
    print(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
