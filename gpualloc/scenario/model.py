"""The scenario model: pools, jobs and the derived arrays every policy shares
(GPU -> node/pool/type/memory, compatibility, candidate blocks, unplaceable
jobs). The file format and its strict validation: gpualloc.scenario.io.

A block of k GPUs is always an interval of consecutive GPU indices: inside one
node, or whole consecutive nodes of one pool (the nodes of a pool are
consecutive). So a block is named by its first GPU and its size.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import yaml

from gpualloc.files import atomic_write_text
from gpualloc.lazy import LazyModule

# The derived arrays are tensors; reading, checking and writing a scenario file is not.
torch = LazyModule("torch")
np = LazyModule("numpy")

RIGID_KINDS = ("training", "batch_inference", "quantization")
ELASTIC_KINDS = ("realtime_inference",)
KINDS = RIGID_KINDS + ELASTIC_KINDS


def guaranteed_replicas(min_served, demand):
    """int64 array: the replicas rule 4 guarantees, ceil(min_served x demand),
    elementwise (numpy arrays that broadcast). The product is rounded to 9
    decimals first, so that 0.7 x 10 is 7, not the 7.000000000000001 of
    floating point."""
    return np.ceil(np.round(np.asarray(min_served, dtype=np.float64) * demand, 9)).astype(
        np.int64)


class ScenarioError(ValueError):
    """A scenario document that breaks PROBLEM.md; the message names the field and job."""


# Practical limits, beyond PROBLEM.md: past them a file is refused before any
# array is built (a horizon of 10**9 would otherwise allocate T-sized arrays
# before the memory guard, gpualloc.policies.allocator.memory, could speak). Generous on purpose:
# a year of hourly steps, a million GPUs and jobs; integers and priorities
# bounded so that every product fits int64 and every metric stays finite.
MAX_HORIZON = 100_000
MAX_GPUS = 1_000_000
MAX_JOBS = 1_000_000
MAX_INT = 10**9
MAX_PRIORITY = 1e9


def check_limits(horizon: int, gpus: int, jobs: int, where: str = "scenario") -> None:
    """Refuse sizes beyond the practical limits, with the limit in the message."""
    for what, v, hi, unit in (("horizon", horizon, MAX_HORIZON, "timesteps"),
                              ("GPU count", gpus, MAX_GPUS, "GPUs"),
                              ("job count", jobs, MAX_JOBS, "jobs")):
        if v > hi:
            raise ScenarioError(f"{where}: {what} {v:,} is above gpualloc's limit of {hi:,} "
                                f"{unit} (see docs/guide.md, Limits)")


def _show(v, width: int = 60) -> str:
    """repr of a value for an error message, cut to one short line."""
    r = repr(v)
    return r if len(r) <= width else r[: width - 5] + " ...>"


@dataclass
class Pool:
    name: str
    count: int
    gpus_per_node: int
    gpu_type: str
    memory_gb: float


@dataclass
class Job:
    id: str
    kind: str
    priority: float
    arrival: int
    gpus: int
    duration: int | None = None
    demand: list[int] | None = None
    gpu_types: list[str] | None = None
    min_memory_gb: float = 0.0
    min_served: float = 0.0
    """Elastic jobs: the share of demand guaranteed at every timestep (rule 4)."""
    preemptible: bool = False
    """Rigid jobs: may run in segments (PROBLEM.md)."""
    restart_cost: int = 0
    """Preemptible jobs: timesteps every segment after the first restores."""

    @property
    def rigid(self) -> bool:
        return self.kind in RIGID_KINDS


@dataclass
class Scenario:
    name: str
    horizon: int
    step_minutes: float
    pools: list[Pool]
    jobs: list[Job] = field(default_factory=list)
    fixed: torch.Tensor | None = None
    """(G, T) owner grid of cells decided before planning (-1: free to plan),
    e.g. history and running jobs in online mode. Not part of the file format.
    Policies that plan around it return a plan that keeps these cells as they
    are; a rigid job found there is not started again, an elastic one is
    served as usual (its replicas there count against its demand)."""
    hint: torch.Tensor | None = None
    """(G, T) owner grid of a plan to start from, e.g. the last replan's for
    the rigid jobs it knew (online mode); a policy may use it or not. Not
    part of the file format."""
    window: int | None = None
    """Steps from 0 of the plan its caller uses (online: a replan's window,
    the rest is planned again before it runs); a policy that plans step by
    step may leave later steps unplanned. None: every step. Not part of the
    file format."""
    carry: dict | None = None
    """Online: what the last full replan's plan carried (its Plan.info
    "carry"), handed to the light replans after it: a choice a policy makes
    over the whole view at a full replan and keeps until the next one. Not
    part of the file format."""

    # ---- sizes -------------------------------------------------------------
    @property
    def G(self) -> int:
        return sum(p.count * p.gpus_per_node for p in self.pools)

    @property
    def J(self) -> int:
        return len(self.jobs)

    @property
    def T(self) -> int:
        return self.horizon

    # ---- GPU arrays ------------------------------------------------------------
    @cached_property
    def gpu_pool(self) -> torch.Tensor:
        """(G,) int64: pool index of each GPU."""
        return torch.repeat_interleave(
            torch.arange(len(self.pools)),
            torch.tensor([p.count * p.gpus_per_node for p in self.pools], dtype=torch.long))

    @cached_property
    def node_first_gpu(self) -> torch.Tensor:
        """(N,) int64: first GPU index of each node."""
        sizes = torch.tensor([p.gpus_per_node for p in self.pools for _ in range(p.count)],
                             dtype=torch.long)
        return torch.cumsum(sizes, 0) - sizes

    @cached_property
    def node_pool(self) -> torch.Tensor:
        """(N,) int64: pool index of each node."""
        return torch.tensor([i for i, p in enumerate(self.pools) for _ in range(p.count)],
                            dtype=torch.long)

    @cached_property
    def gpu_node(self) -> torch.Tensor:
        """(G,) int64: node index of each GPU."""
        sizes = torch.tensor([p.gpus_per_node for p in self.pools for _ in range(p.count)],
                             dtype=torch.long)
        return torch.repeat_interleave(torch.arange(len(sizes)), sizes)

    @cached_property
    def gpu_type(self) -> list[str]:
        return [self.pools[i].gpu_type for i in self.gpu_pool.tolist()]

    @cached_property
    def gpu_memory(self) -> torch.Tensor:
        """(G,) float64: memory of each GPU in GB."""
        mem = torch.tensor([p.memory_gb for p in self.pools], dtype=torch.float64)
        return mem[self.gpu_pool]

    def share_cluster(self, other: Scenario) -> Scenario:
        """Self, given `other`'s GPU arrays where it has them (the same pools):
        the online loop builds a view of one cluster every step."""
        other.__dict__.setdefault("_block_memo", {})
        for name in ("gpu_pool", "node_first_gpu", "node_pool", "gpu_node", "gpu_type",
                     "gpu_memory", "_block_memo"):
            if name in other.__dict__:
                self.__dict__[name] = other.__dict__[name]
        self.__dict__["_cluster_of"] = other  # core.layout takes its GPU arrays
        return self

    def share_jobs(self, other: Scenario, rows: list[int]) -> Scenario:
        """Self, whose job i is a copy of other's job rows[i] (same kind,
        size, priority, needs; its own arrival, duration and demand), given
        the arrays those fix as other's rows: the online loop builds a view of
        thousands of known jobs every step (issue 28)."""
        if not rows:
            return self
        at = np.asarray(rows, dtype=np.int64)  # numpy: torch's small indexing costs more
        for name in ("priority", "gpus", "rigid", "min_served", "preemptible", "restart_cost",
                     "pool_compat", "unplaceable"):
            self.__dict__[name] = torch.from_numpy(getattr(other, name).numpy()[at])
        # Other's classes, renumbered in order of first appearance as _classes numbers them.
        kept, first, inverse = np.unique(other.job_class.numpy()[at], return_index=True,
                                         return_inverse=True)
        order = np.argsort(first)
        renumber = np.empty_like(order)
        renumber[order] = np.arange(len(order))
        classes = kept[order].tolist()
        self.__dict__["_classes"] = (torch.from_numpy(renumber[inverse].astype(np.int64)),
                                     [other.class_size[c] for c in classes],
                                     [other.class_blocks[c] for c in classes])
        self.__dict__["_classes_of"] = (other, classes)  # core.layout takes their blocks
        return self

    # ---- job arrays ----------------------------------------------------------
    @cached_property
    def priority(self) -> torch.Tensor:
        """(J,) float64"""
        return torch.tensor([j.priority for j in self.jobs], dtype=torch.float64)

    @cached_property
    def arrival(self) -> torch.Tensor:
        """(J,) int64"""
        return torch.tensor([j.arrival for j in self.jobs], dtype=torch.long)

    @cached_property
    def gpus(self) -> torch.Tensor:
        """(J,) int64"""
        return torch.tensor([j.gpus for j in self.jobs], dtype=torch.long)

    @cached_property
    def rigid(self) -> torch.Tensor:
        """(J,) bool"""
        return torch.tensor([j.rigid for j in self.jobs], dtype=torch.bool)

    @cached_property
    def duration(self) -> torch.Tensor:
        """(J,) int64; 0 for elastic jobs."""
        return torch.tensor([j.duration or 0 for j in self.jobs], dtype=torch.long)

    @cached_property
    def demand(self) -> torch.Tensor:
        """(J, T) int64 replicas wanted; zero for rigid jobs and before arrival
        (PROBLEM.md: demand before arrival counts nowhere)."""
        d = torch.zeros(self.J, self.T, dtype=torch.long)
        for i, j in enumerate(self.jobs):
            if j.demand is not None:
                d[i] = torch.tensor(j.demand, dtype=torch.long)
                d[i, : j.arrival] = 0
        return d

    @cached_property
    def min_served(self) -> torch.Tensor:
        """(J,) float64: guaranteed share of demand (0 for rigid jobs)."""
        return torch.tensor([j.min_served for j in self.jobs], dtype=torch.float64)

    @cached_property
    def preemptible(self) -> torch.Tensor:
        """(J,) bool: rigid jobs that may run in segments."""
        return torch.tensor([j.preemptible for j in self.jobs], dtype=torch.bool)

    @cached_property
    def restart_cost(self) -> torch.Tensor:
        """(J,) int64: timesteps each segment after the first restores (0 unless preemptible)."""
        return torch.tensor([j.restart_cost for j in self.jobs], dtype=torch.long)

    @cached_property
    def guaranteed(self) -> torch.Tensor:
        """(J, T) int64: replicas rule 4 guarantees (`guaranteed_replicas`)."""
        return torch.from_numpy(guaranteed_replicas(self.min_served.numpy()[:, None],
                                                    self.demand.numpy()))

    @cached_property
    def pool_compat(self) -> torch.Tensor:
        """(J, P) bool: job may use the pool's GPUs (type and memory)."""
        rows, seen = [], {}  # most jobs share their needs: one row per kind of need
        for j in self.jobs:
            need = (None if j.gpu_types is None else tuple(j.gpu_types), j.min_memory_gb)
            row = seen.get(need)
            if row is None:
                row = seen[need] = [(j.gpu_types is None or pool.gpu_type in j.gpu_types)
                                    and pool.memory_gb >= j.min_memory_gb
                                    for pool in self.pools]
            rows.append(row)
        return torch.tensor(rows, dtype=torch.bool).reshape(self.J, len(self.pools))

    @cached_property
    def compat(self) -> torch.Tensor:
        """(J, G) bool: GPU g is compatible with job j."""
        return self.pool_compat[:, self.gpu_pool]

    # ---- blocks ----------------------------------------------------------------
    @cached_property
    def _classes(self) -> tuple[torch.Tensor, list[int], list[torch.Tensor]]:
        # Jobs with the same size and pool compatibility share their candidate
        # blocks; computing them per class keeps this cheap for 10^4 jobs.
        keys: dict[tuple, int] = {}
        job_class = []
        sizes: list[int] = []
        starts: list[torch.Tensor] = []
        compat = self.pool_compat.tolist()
        for i, j in enumerate(self.jobs):
            key = (j.gpus, tuple(compat[i]))
            if key not in keys:
                keys[key] = len(sizes)
                sizes.append(j.gpus)
                starts.append(self._block_starts(j.gpus, compat[i]))
            job_class.append(keys[key])
        return torch.tensor(job_class, dtype=torch.long), sizes, starts

    def _block_starts(self, k: int, pool_ok: list[bool]) -> torch.Tensor:
        memo = self.__dict__.setdefault("_block_memo", {})  # shared by share_cluster
        key = (k, tuple(pool_ok))
        if key not in memo:
            memo[key] = self._block_starts_of(k, pool_ok)
        return memo[key]

    def _block_starts_of(self, k: int, pool_ok: list[bool]) -> torch.Tensor:
        out = []
        first = 0
        for p, pool in enumerate(self.pools):
            n = pool.gpus_per_node
            if pool_ok[p]:
                if k <= n:
                    out += [first + node * n + off for node in range(pool.count)
                            for off in range(n - k + 1)]
                elif k % n == 0 and k // n <= pool.count:
                    out += [first + node * n for node in range(pool.count - k // n + 1)]
            first += pool.count * n
        return torch.tensor(out, dtype=torch.long)

    @property
    def job_class(self) -> torch.Tensor:
        """(J,) int64: index of the job's block class."""
        return self._classes[0]

    @property
    def class_size(self) -> list[int]:
        return self._classes[1]

    @property
    def class_blocks(self) -> list[torch.Tensor]:
        """Per class, the first GPU of every candidate block, ascending."""
        return self._classes[2]

    def blocks(self, j: int) -> torch.Tensor:
        """(B,) int64: first GPU of each candidate block of job j, ascending."""
        return self.class_blocks[int(self.job_class[j])]

    @cached_property
    def unplaceable(self) -> torch.Tensor:
        """(J,) bool: no candidate block anywhere in the cluster."""
        n = torch.tensor([len(b) for b in self.class_blocks], dtype=torch.long)
        return n[self.job_class] == 0

    # ---- load ------------------------------------------------------------------
    @cached_property
    def offered_load(self) -> float:
        """(rigid gpus x duration + elastic demand x gpus) / (G x T)."""
        rigid = sum(j.gpus * j.duration for j in self.jobs if j.rigid)
        elastic = sum(sum(j.demand[j.arrival:]) * j.gpus for j in self.jobs if not j.rigid)
        return float(rigid + elastic) / (self.G * self.T)

    def peak_elastic_gpus(self) -> int:
        """max_t sum_j demand_j(t) * gpus_j over elastic jobs."""
        if self.J == 0:
            return 0
        return int((self.demand * self.gpus[:, None]).sum(0).max())

    # ---- documents ---------------------------------------------------------------
    def to_dict(self) -> dict:
        jobs = []
        for j in self.jobs:
            d = {"id": j.id, "kind": j.kind, "priority": j.priority, "arrival": j.arrival,
                 "gpus": j.gpus}
            if j.duration is not None:
                d["duration"] = j.duration
            if j.demand is not None:
                d["demand"] = list(j.demand)
            if j.gpu_types is not None:
                d["gpu_types"] = list(j.gpu_types)
            if j.min_memory_gb:
                d["min_memory_gb"] = j.min_memory_gb
            if j.min_served:
                d["min_served"] = j.min_served
            if j.preemptible:
                d["preemptible"] = True
                if j.restart_cost:
                    d["restart_cost"] = j.restart_cost
            jobs.append(d)
        return {"name": self.name, "horizon": self.horizon, "step_minutes": self.step_minutes,
                "cluster": {"pools": [vars(p).copy() for p in self.pools]}, "jobs": jobs}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        doc = self.to_dict()
        if path.suffix in (".yaml", ".yml"):
            text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
        else:
            text = json.dumps(doc)
        atomic_write_text(path, text)


# ---- validation ----------------------------------------------------------------
