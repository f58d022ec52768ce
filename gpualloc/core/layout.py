"""The cluster and the jobs as flat numpy arrays: what the compiled
placement core reads. Built once per scenario; nothing here changes.

Grids inside the core are time-major, (T, G): a column of the plan (every
GPU at one timestep) is contiguous, which is what block searches and
packing read. Plans leave the core as PROBLEM.md's (G, T) owner grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from gpualloc.scenario import Scenario


@dataclass
class Layout:
    G: int
    T: int
    # ---- GPUs, nodes, pools --------------------------------------------------------
    gpu_node: np.ndarray
    """(G,) int64: node of each GPU."""
    gpu_pool: np.ndarray
    """(G,) int64: pool of each GPU."""
    node_first: np.ndarray
    """(N,) int64: first GPU of each node."""
    node_end: np.ndarray
    """(N,) int64: one past the last GPU of each node."""
    node_pool: np.ndarray
    """(N,) int64"""
    pool_gpn: np.ndarray
    """(P,) int64: GPUs per node of each pool."""
    pool_nodes: np.ndarray
    """(P + 1,) int64: pool p holds nodes pool_nodes[p] .. pool_nodes[p + 1] - 1."""
    # ---- jobs --------------------------------------------------------------------
    gpus: np.ndarray
    """(J,) int64"""
    duration: np.ndarray
    """(J,) int64; 0 for elastic jobs."""
    arrival: np.ndarray
    """(J,) int64"""
    priority: np.ndarray
    """(J,) float64"""
    rigid: np.ndarray
    """(J,) bool"""
    preemptible: np.ndarray
    """(J,) bool: rigid jobs that may run in segments."""
    restart_cost: np.ndarray
    """(J,) int64: steps every segment after a job's first restores."""
    demand: np.ndarray
    """(J, T) int64 replicas wanted (zero before arrival)."""
    pool_ok: np.ndarray
    """(J, P) bool: the job may use the pool's GPUs (type and memory)."""
    # ---- candidate blocks ------------------------------------------------------------
    job_class: np.ndarray
    """(J,) int64: jobs of one class (size, pools) share their candidate blocks."""
    class_ptr: np.ndarray
    """(C + 1,) int64: class c's blocks are class_blocks[class_ptr[c]:class_ptr[c + 1]]."""
    class_blocks: np.ndarray
    """(sum B,) int64: first GPU of each candidate block, ascending per class."""
    block_pool: np.ndarray
    """(sum B,) int64: pool of each candidate block."""
    unplaceable: np.ndarray
    """(J,) bool"""

    @property
    def J(self) -> int:
        return len(self.gpus)

    @cached_property
    def services(self) -> np.ndarray:
        """(E,) int64: the real-time services, in scenario order."""
        return np.flatnonzero(~self.rigid)

    @cached_property
    def rigid_cells(self) -> np.ndarray:
        """(J + 1,) bool: `rigid` indexed by an owner grid (IDLE: the spare
        last entry, False)."""
        return np.append(self.rigid, False)

    @property
    def N(self) -> int:
        return len(self.node_first)

    @property
    def P(self) -> int:
        return len(self.pool_gpn)

    def blocks(self, j: int) -> np.ndarray:
        c = self.job_class[j]
        return self.class_blocks[self.class_ptr[c]:self.class_ptr[c + 1]]

    def job_block_pool(self, j: int) -> np.ndarray:
        c = self.job_class[j]
        return self.block_pool[self.class_ptr[c]:self.class_ptr[c + 1]]

    def compat(self, j: int) -> np.ndarray:
        """(G,) bool: GPUs job j may use."""
        return self.pool_ok[j][self.gpu_pool]


def layout(s: Scenario) -> Layout:
    """The Layout of `s` (cached on the scenario: it never changes)."""
    cached = s.__dict__.get("_layout")
    if cached is not None:
        return cached
    # Online, a view of the cluster is laid out at most steps: its GPU arrays
    # and its classes' blocks are the scenario's (Scenario.share_cluster,
    # share_jobs), taken from the scenario's layout.
    shared = s.__dict__.get("_classes_of")
    if shared is not None:
        of, classes = layout(shared[0]), np.asarray(shared[1], dtype=np.int64)
        ptr = np.zeros(len(classes) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(of.class_ptr[classes + 1] - of.class_ptr[classes])
        flat = (np.concatenate([of.class_blocks[of.class_ptr[c]:of.class_ptr[c + 1]]
                                for c in classes.tolist()])
                if len(classes) else np.zeros(0, dtype=np.int64))
    else:
        blocks = [_np(b, np.int64) for b in s.class_blocks]
        sizes = np.array([len(b) for b in blocks], dtype=np.int64)
        ptr = np.zeros(len(blocks) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(sizes)
        flat = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64)
    cluster = s.__dict__.get("_cluster_of")
    gpu = _gpu_arrays(s) if cluster is None else _gpu_arrays(cluster)
    out = Layout(
        G=s.G, T=s.T, **gpu,
        gpus=_np(s.gpus, np.int64), duration=_np(s.duration, np.int64),
        arrival=_np(s.arrival, np.int64),
        priority=_np(s.priority, np.float64),
        rigid=_np(s.rigid, np.bool_),
        preemptible=_np(s.preemptible, np.bool_),
        restart_cost=_np(s.restart_cost, np.int64), demand=_np(s.demand, np.int64),
        pool_ok=_np(s.pool_compat, np.bool_),
        job_class=_np(s.job_class, np.int64), class_ptr=ptr, class_blocks=flat,
        block_pool=gpu["gpu_pool"][flat] if len(flat) else np.zeros(0, dtype=np.int64),
        unplaceable=_np(s.unplaceable, np.bool_))
    s.__dict__["_layout"] = out
    return out


def _gpu_arrays(s: Scenario) -> dict[str, np.ndarray]:
    """Layout's GPU, node and pool fields of `s` (cached on it)."""
    cached = s.__dict__.get("_gpu_arrays")
    if cached is not None:
        return cached
    counts = np.array([p.count for p in s.pools], dtype=np.int64)
    pool_nodes = np.zeros(len(s.pools) + 1, dtype=np.int64)
    pool_nodes[1:] = np.cumsum(counts)
    node_first = _np(s.node_first_gpu, np.int64)
    out = dict(gpu_node=_np(s.gpu_node, np.int64), gpu_pool=_np(s.gpu_pool, np.int64),
               node_first=node_first, node_end=np.append(node_first[1:], s.G).astype(np.int64),
               node_pool=_np(s.node_pool, np.int64),
               pool_gpn=np.array([p.gpus_per_node for p in s.pools], dtype=np.int64),
               pool_nodes=pool_nodes)
    s.__dict__["_gpu_arrays"] = out
    return out


def _np(x, dtype) -> np.ndarray:
    """A tensor's array in `dtype`, without a copy where it already is one:
    online, every replan lays out a view."""
    return np.asarray(x.numpy(), dtype=dtype)
