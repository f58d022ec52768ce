"""CPU threads (torch's and the compiled kernels') for a block of work."""
from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def cpu_threads(device: torch.device | str, n: int):
    """Run the block on `n` threads (device CPU and n > 0; else as is): torch's,
    which the compiled CPU kernels follow (gpualloc.kernels.pgd_cpu)."""
    # Small (G x T) tensors gain little from more threads, and where a core is
    # busy with anything else torch's thread pool spins and runs ~10x slower
    # (measured: a relaxation 1.4 s on one thread, 13.8 s on two, beside one
    # busy process; an online run of greedy 15.6 s -> 4.6 s).
    if torch.device(device).type != "cpu" or n <= 0:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
