"""Each Triton kernel against its torch reference on random inputs, on the
CPU through Triton's interpreter (TRITON_INTERPRET=1), on ragged sizes."""
import os

import pytest
import torch

if torch.cuda.is_available():
    # The interpreter is process-wide: set here, it would run the CUDA tests'
    # kernels in Python too (tests/test_gpu.py hung on an H200 that way).
    pytest.skip("CUDA present: tests/test_gpu.py compares the kernel on the device",
                allow_module_level=True)
os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from gpualloc.kernels.pgd import bytes_moved, pgd_step_ref, pgd_step_triton  # noqa: E402


def inputs(G, J, T, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(G, J, T, generator=gen)
    compat = torch.rand(J, G, generator=gen) > 0.2
    arrival = torch.randint(0, T, (J,), generator=gen)
    free = torch.rand(G, T, generator=gen) > 0.1
    gain = torch.randn(J, T, generator=gen)
    cap = torch.rand(G, T, generator=gen)
    rigid = torch.rand(J, generator=gen) > 0.5
    return x, compat, arrival, free, gain, cap, rigid


@pytest.mark.parametrize("G, J, T", [(1, 1, 1), (3, 7, 5), (5, 2, 17), (2, 3, 40)])
def test_pgd_step_matches_reference(G, J, T):
    args = inputs(G, J, T, seed=G * 100 + J * 10 + T)
    ref = pgd_step_ref(args[0].clone(), *args[1:], smooth=0.7)
    got = pgd_step_triton(args[0].clone(), *args[1:], smooth=0.7)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_masked_cells_stay_zero():
    x, compat, arrival, free, gain, cap, rigid = inputs(4, 6, 9, seed=1)
    gain = gain.abs() + 5  # everything wants to grow
    new, *_ = pgd_step_triton(x.clone(), compat, arrival, free, gain, cap, rigid, 0.0)
    t = torch.arange(9)
    mask = compat.T[:, :, None] & (t >= arrival[:, None])[None] & free[:, None, :]
    assert new[~mask].eq(0).all() and new[mask].eq(1).all()


def test_bytes_moved_counts_the_grid_twice():
    assert bytes_moved(10, 20, 30) >= 2 * 10 * 20 * 30 * 4
