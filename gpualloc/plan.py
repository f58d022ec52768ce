"""Plans: the owner grid [G, T] (job index or -1), its dense [G, J, T] twin, and
the plan file of PROBLEM.md."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gpualloc.files import atomic_write_text
from gpualloc.scenario import Scenario, ScenarioError

IDLE = -1


@dataclass
class Plan:
    """What every policy returns. `info` carries policy-specific facts (a
    solver's bound, its status) that the run reports beside the metrics."""

    owner: torch.Tensor  # (G, T) int64, job index or IDLE
    info: dict = field(default_factory=dict)


def held(scenario: Scenario, owner: torch.Tensor) -> torch.Tensor:
    """(J, T) int64: n_j(t), the GPUs job j holds at t in the (G, T) owner grid."""
    owner = owner.cpu().long()
    busy = owner >= 0
    j = owner[busy]
    t = torch.arange(scenario.T).expand(scenario.G, scenario.T)[busy]
    return torch.bincount(j * scenario.T + t,
                          minlength=scenario.J * scenario.T).reshape(scenario.J, scenario.T)


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


def load_plan(path: str | Path, scenario: Scenario) -> tuple[str, torch.Tensor]:
    """Read a plan file for `scenario`; returns (policy, owner). Shape and job
    list must match the scenario; anything else raises ScenarioError."""
    path = Path(path)
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ScenarioError(f"{path}: cannot read plan ({e})") from None
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
    if any(not isinstance(v, int) or isinstance(v, bool) for row in owner for v in row):
        raise ScenarioError(f"{path}: field 'owner' must hold integers")
    return str(doc["policy"]), torch.tensor(owner, dtype=torch.long).reshape(scenario.G, scenario.T)
