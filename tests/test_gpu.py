"""CUDA against the CPU: the same functions on both devices agree. Run by
`pytest -m gpu` on a machine with a GPU (bench/gpu.sh); skipped elsewhere."""
from __future__ import annotations

import pytest
import torch

from gpualloc.policies.allocator import allocator
from gpualloc.check import check
from gpualloc.config import SolverConfig
from gpualloc.policies.fifo import fifo
from gpualloc.scenario.generate import generate
from gpualloc.kernels.pgd import pgd_step, pgd_step_ref
from gpualloc.policies.allocator.memory import grid_bytes
from gpualloc.metrics import weighted_throughput
from gpualloc.policies import rivals
from helpers import composed

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
CUDA = torch.device("cuda")


def inputs(G, J, T, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(G, J, T, generator=gen), torch.rand(J, G, generator=gen) > 0.2,
            torch.randint(0, T, (J,), generator=gen), torch.rand(G, T, generator=gen) > 0.1,
            torch.randn(J, T, generator=gen), torch.rand(G, T, generator=gen),
            torch.rand(J, generator=gen) > 0.5)


@pytest.mark.parametrize("G, J, T", [(1, 1, 1), (3, 7, 5), (17, 9, 168), (64, 300, 96)])
def test_kernel_step_cuda_matches_cpu_reference(G, J, T):
    # pgd_step dispatches to the Triton kernel on CUDA (when Triton is
    # installed), else to the reference on CUDA: either must match the CPU.
    args = inputs(G, J, T, seed=G + J + T)
    ref = pgd_step_ref(args[0].clone(), *args[1:], smooth=0.7)
    got = pgd_step(*(a.to(CUDA) for a in args), smooth=0.7)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["mixed", "heterogeneous", "quantization_burst"])
def test_fifo_cuda_equals_cpu(name):
    s = generate(composed(f"+scenario={name}").scenario, 1)
    a, b = fifo(s, device="cpu").owner, fifo(s, device=CUDA).owner.cpu()
    assert torch.equal(a, b)


def test_allocator_on_cuda_is_feasible_and_not_below_fifo():
    s = generate(composed("+scenario=mixed").scenario, 2)
    cfg = SolverConfig(iterations=30, local_search_iters=50, progress=False)
    plan = allocator(s, cfg, CUDA, rivals=rivals())
    assert check(s, plan.owner.cpu()).ok
    assert weighted_throughput(s, plan.owner) >= weighted_throughput(s, fifo(s).owner) - 1e-9


def test_grid_estimate_bounds_cuda_peak():
    from gpualloc.policies.allocator import relax
    s = generate(composed("+scenario=mixed").scenario, 0)
    cfg = SolverConfig(iterations=3, progress=False)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    relax(s, cfg, CUDA, torch.ones(s.J, dtype=torch.bool))
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    assert 0 < peak <= grid_bytes(s, cfg, CUDA)


@pytest.mark.slow
def test_kernel_step_beyond_2_31_cells():
    # The 2048 x 5000 x 336 and 4096 x 10000 x 336 rungs of the GPU ladder
    # hold more than 2**31 cells: the step must address them with 64-bit
    # offsets. Every cell, the last ones included, moves by the gain.
    G, J, T = 4, 2**19 + 1, 1024  # 2.15e9 cells, 4.3 GB in bfloat16
    if torch.cuda.mem_get_info()[0] < 6 * G * J * T * 2:
        pytest.skip("not enough free GPU memory")
    x = torch.zeros(G, J, T, dtype=torch.bfloat16, device=CUDA)  # (G, J, T)
    out = pgd_step(x, torch.ones(J, G, dtype=torch.bool, device=CUDA),
                   torch.zeros(J, dtype=torch.long, device=CUDA),
                   torch.ones(G, T, dtype=torch.bool, device=CUDA),
                   torch.full((J, T), 0.5, device=CUDA), torch.zeros(G, T, device=CUDA),
                   torch.zeros(J, dtype=torch.bool, device=CUDA), 0.0)
    torch.cuda.synchronize()
    new, S = out[0], out[1]
    assert new[0].eq(0.5).all() and new[-1].eq(0.5).all()
    assert float(S[-1, -1]) == 0.5 * J
