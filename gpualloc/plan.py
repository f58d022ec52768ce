"""Plans: the owner grid [G, T] (job index or -1), its dense [G, J, T] twin, and
the plan file of PROBLEM.md. Reading a plan file (`read_plan`) needs no torch:
torch is imported when a tensor is first made."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpualloc.files import atomic_write_text, read_json
from gpualloc.lazy import LazyModule
from gpualloc.scenario import Scenario, ScenarioError

torch = LazyModule("torch")

IDLE = -1


@dataclass
class Plan:
    """What every policy returns. `info` carries policy-specific facts (a
    solver's bound, its status) that the run reports beside the metrics."""

    owner: torch.Tensor  # (G, T) int64, job index or IDLE
    info: dict = field(default_factory=dict)
    # Set where a run or the Python API hands the plan out (policies leave them):
    policy: str = ""
    mode: str = "offline"
    scenario: Scenario | None = field(default=None, repr=False, compare=False)
    """The scenario planned (under the run's options)."""
    wall_s: float | None = None


def held(scenario: Scenario, owner: torch.Tensor) -> torch.Tensor:
    """(J, T) int64: n_j(t), the GPUs job j holds at t in the (G, T) owner grid.
    One compiled pass (gpualloc.core.segments.count_held): every value of a
    plan reads it, several times a replan online."""
    from gpualloc.core.segments import count_held

    grid = np.ascontiguousarray(owner.cpu().long().numpy())
    count = np.zeros((scenario.J, scenario.T), dtype=np.int64)
    _refuse_cells(count_held(grid, count), scenario.J)
    return torch.from_numpy(count)


def _refuse_cells(bad: int, J: int) -> None:
    """The compiled readers index by the grid's cells: they count the cells
    that are no job (-1 is idle) instead, and this refuses them."""
    if bad:
        raise ValueError(f"owner grid holds {bad} cells that are not -1 (idle) or a job "
                         f"index below {J}")


@dataclass
class Segments:
    """What the cells of preemptible jobs mean (PROBLEM.md): each (J, T),
    zero or false on rows of other jobs."""

    first: torch.Tensor
    """(J, T) int64: first GPU held at t (G where none)."""
    last: torch.Tensor
    """(J, T) int64: last GPU held at t (-1 where none)."""
    count: torch.Tensor
    """(J, T) int64: GPUs held at t (n_j(t))."""
    new: torch.Tensor
    """(J, T) bool: a segment starts at t (held, and not the same GPUs as at t - 1)."""
    restoring: torch.Tensor
    """(J, T) bool: held in a segment after the first (for a job running at a view's
    step 0, in any segment not starting there), within restart_cost of its start."""
    progress: torch.Tensor
    """(J, T) bool: held, not restoring, and not yet done before t."""
    after_done: torch.Tensor
    """(J, T) bool: held after the job was done."""

    done: torch.Tensor
    """(J,) bool: progress reached duration inside the horizon."""

    @property
    def preemptions(self) -> torch.Tensor:
        """(J,) int64: segments after the first."""
        return (self.new.sum(1) - 1).clamp(min=0)


def segments(scenario: Scenario, owner: torch.Tensor) -> Segments:
    """The segments of every preemptible job in the (G, T) owner grid: where
    each starts, restores, progresses and is done. Two timesteps are in one
    segment when the job holds the same GPUs at both (same first GPU and
    count: a segment whose GPUs are no block breaks rule 2 anyway). One
    compiled pass (gpualloc.core.segments.read_segments; online, every
    replan reads them)."""
    from gpualloc.core import fixed_jobs
    from gpualloc.core.segments import read_segments

    s = scenario
    J, T, G = s.J, s.T, s.G
    grid = np.ascontiguousarray(owner.cpu().long().numpy())
    first, last = np.full((J, T), G, dtype=np.int64), np.full((J, T), -1, dtype=np.int64)
    count = np.zeros((J, T), dtype=np.int64)
    new, restoring, progress, after_done = (np.zeros((J, T), dtype=np.bool_) for _ in range(4))
    done = np.zeros(J, dtype=np.bool_)
    # A view's fixed cells hold the jobs running when it begins (from step 0): stopped
    # there and run later, such a job resumes (with_cuts plans it so).
    _refuse_cells(read_segments(grid, s.preemptible.numpy(), fixed_jobs(s),
                                s.restart_cost.numpy(), s.duration.numpy(), first, last, count,
                                new, restoring, progress, after_done, done), J)
    out = [torch.from_numpy(a) for a in (first, last, count, new, restoring, progress,
                                         after_done, done)]
    return Segments(*out)


def empty_owner(scenario: Scenario, device: torch.device | str = "cpu") -> torch.Tensor:
    return torch.full((scenario.G, scenario.T), IDLE, dtype=torch.long, device=device)


def to_dense(owner: torch.Tensor, num_jobs: int) -> torch.Tensor:
    """(G, T) owner -> (G, J, T) bool with x[g, j, t] = owner[g, t] == j."""
    jobs = torch.arange(num_jobs, device=owner.device)
    return owner[:, None, :] == jobs[None, :, None]


def from_dense(x: torch.Tensor) -> torch.Tensor:
    """(G, J, T) 0/1 -> (G, T) owner; a cell with no job is IDLE. Assumes at
    most one job per cell (that is what a plan is)."""
    held = x.bool()
    owner = held.to(torch.uint8).argmax(dim=1)
    return torch.where(held.any(dim=1), owner, torch.full_like(owner, IDLE))


def save_plan(path: str | Path, scenario: Scenario, policy: str, owner: torch.Tensor) -> None:
    doc = {"scenario": scenario.name, "policy": policy, "jobs": [j.id for j in scenario.jobs],
           "owner": owner.cpu().tolist()}
    atomic_write_text(path, json.dumps(doc, separators=(",", ":")))


def read_plan(path: str | Path, scenario: Scenario) -> tuple[str, np.ndarray]:
    """Read a plan file for `scenario`; returns (policy, owner), owner a (G, T)
    int64 array. Shape and job list must match the scenario; anything else
    raises ScenarioError."""
    path = Path(path)
    doc = read_json(path, ScenarioError)
    if not isinstance(doc, dict):
        raise ScenarioError(f"{path}: plan must be a JSON object")
    for key in ("scenario", "policy", "jobs", "owner"):
        if key not in doc:
            raise ScenarioError(f"{path}: plan is missing field '{key}'")
    if doc["jobs"] != [j.id for j in scenario.jobs]:
        raise ScenarioError(f"{path}: field 'jobs' does not list the scenario's job ids in order")
    owner = doc["owner"]
    if (not isinstance(owner, list) or len(owner) != scenario.G
            or any(not isinstance(row, list) or len(row) != scenario.T for row in owner)):
        raise ScenarioError(f"{path}: field 'owner' must be {scenario.G} lists of "
                            f"{scenario.T} integers")
    for g, row in enumerate(owner):
        for t, v in enumerate(row):
            if not isinstance(v, int) or isinstance(v, bool) or not -1 <= v < scenario.J:
                raise ScenarioError(f"{path}: field 'owner' must hold -1 (idle) or a job index "
                                    f"below {scenario.J}, got {v!r:.20} at owner[{g}][{t}]")
    return str(doc["policy"]), np.array(owner, dtype=np.int64).reshape(scenario.G, scenario.T)


def load_plan(path: str | Path, scenario: Scenario) -> tuple[str, torch.Tensor]:
    """`read_plan`, the owner as a (G, T) int64 tensor."""
    policy, owner = read_plan(path, scenario)
    return policy, torch.from_numpy(owner)
