"""Vectorized block operations shared by the policies.

A block is an interval of GPU indices, so "is this block free" for every
candidate at once is one gather on a prefix sum of busy GPUs, and "pack
blocks of size k lowest-first into the free GPUs" is a few scans over the GPU
axis of a (G, T) mask, all timesteps at once.
"""
from __future__ import annotations

import torch

from gpualloc.scenario import Scenario


def prefix(busy: torch.Tensor) -> torch.Tensor:
    """(G, ...) bool -> (G + 1, ...) int64 prefix sums along the GPU axis."""
    cs = torch.zeros((busy.shape[0] + 1,) + tuple(busy.shape[1:]), dtype=torch.long,
                     device=busy.device)
    cs[1:] = torch.cumsum(busy.long(), 0)
    return cs


def free_blocks(starts: torch.Tensor, k: int, busy_prefix: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the blocks [start, start + k) hold no busy GPU."""
    return busy_prefix[starts + k] - busy_prefix[starts] == 0


def cover(starts: torch.Tensor, k: int) -> torch.Tensor:
    """(G, T) bool of block starts -> (G, T) bool of the GPUs those blocks hold."""
    c = prefix(starts)
    lo = (torch.arange(starts.shape[0], device=starts.device) + 1 - k).clamp(min=0)
    return c[1:] - c.index_select(0, lo) > 0  # index_select: far cheaper than c[lo] on CPU


def _run_positions(free: torch.Tensor, first: torch.Tensor, last: torch.Tensor):
    """For (N, T) `free`, maximal runs of free entries broken at `first`/`last`
    (N,) boundaries: each entry's position in its run and the run's length."""
    n = free.shape[0]
    idx = torch.arange(n, device=free.device)[:, None]
    lo = torch.where(~free, idx + 1, torch.where(first[:, None], idx, torch.zeros_like(idx)))
    run_start = torch.cummax(lo, 0).values
    hi = torch.where(~free, idx, torch.where(last[:, None], idx + 1, torch.full_like(idx, n)))
    run_end = torch.flip(torch.cummin(torch.flip(hi, [0]), 0).values, [0])
    return idx - run_start, run_end - run_start


class Packer:
    """Lowest-first packing of k-GPU blocks into free GPUs, per timestep: what
    "take the lowest free block, then the next" gives, computed at once.
    Built once per scenario (node and pool boundaries)."""

    def __init__(self, s: Scenario, device: torch.device | str = "cpu"):
        self.G = s.G
        self.node_first_gpu = s.node_first_gpu.to(device)
        n_nodes = len(self.node_first_gpu)
        first_gpu = torch.zeros(s.G, dtype=torch.bool)
        first_gpu[s.node_first_gpu] = True
        last_gpu = torch.zeros(s.G, dtype=torch.bool)
        last_gpu[torch.cat([s.node_first_gpu[1:] - 1, torch.tensor([s.G - 1])])] = True
        self.gpu_first, self.gpu_last = first_gpu.to(device), last_gpu.to(device)
        pool_first = torch.ones(n_nodes, dtype=torch.bool)
        pool_first[1:] = s.node_pool[1:] != s.node_pool[:-1]
        pool_last = torch.ones(n_nodes, dtype=torch.bool)
        pool_last[:-1] = s.node_pool[1:] != s.node_pool[:-1]
        self.node_first, self.node_last = pool_first.to(device), pool_last.to(device)
        self.gpu_gpn = torch.tensor([p.gpus_per_node for p in s.pools])[s.gpu_pool].to(device)
        self.node_gpn = torch.tensor([p.gpus_per_node for p in s.pools])[s.node_pool].to(device)
        self.node_end = torch.cat([s.node_first_gpu[1:], torch.tensor([s.G])]).to(device)

    def starts(self, free: torch.Tensor, k: int) -> torch.Tensor:
        """(G, T) bool free GPUs -> (G, T) bool starts of the blocks of size k
        that lowest-first packing takes, in every timestep."""
        out = torch.zeros_like(free)
        small = self.gpu_gpn >= k
        if small.any():
            pos, length = _run_positions(free, self.gpu_first, self.gpu_last)
            out |= free & small[:, None] & (pos % k == 0) & (pos + k <= length)
        big = (self.node_gpn < k) & (k % self.node_gpn == 0)
        if big.any():
            cs = prefix(~free)
            node_free = cs[self.node_end] - cs[self.node_first_gpu] == 0  # (N, T)
            m = (k // self.node_gpn).clamp(min=1)[:, None]
            pos, length = _run_positions(node_free, self.node_first, self.node_last)
            take = node_free & big[:, None] & (pos % m == 0) & (pos + m <= length)
            out[self.node_first_gpu] |= take
        return out


def first_n(starts: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Keep, in each column of (G, T) `starts`, the n[t] lowest ones."""
    rank = torch.cumsum(starts.long(), 0)
    return starts & (rank <= n[None, :])
