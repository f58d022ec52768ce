"""The compiled CPU steps (gpualloc.kernels.pgd_cpu) against their torch
references on random inputs, and one result whatever the thread count."""
import numba
import pytest
import torch

from gpualloc.kernels.pgd import pgd_step, pgd_step_packed, pgd_step_packed_ref, pgd_step_ref
from gpualloc.kernels.pgd_cpu import pgd_step_cpu
from gpualloc.threads import cpu_threads


def inputs(G, J, T, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(G, J, T, generator=gen)
    x[torch.rand(G, J, T, generator=gen) < 0.3] = 0  # zeros: the counts must see them
    compat = torch.rand(J, G, generator=gen) > 0.2
    arrival = torch.randint(0, T, (J,), generator=gen)
    free = torch.rand(G, T, generator=gen) > 0.1
    gain = torch.randn(J, T, generator=gen) * 0.3
    price = torch.rand(G, T, generator=gen) * 0.3
    rigid = torch.rand(J, generator=gen) > 0.5
    return x, compat, arrival, free, gain, price, rigid


def packed(G, J, T, seed):
    """A packed grid of random windows (as relax's Grid builds them)."""
    gen = torch.Generator().manual_seed(seed)
    arrival = torch.randint(0, T, (J,), generator=gen)
    end = torch.minimum(arrival + torch.randint(0, T + 1, (J,), generator=gen),
                        torch.full((J,), T))
    width = (end - arrival).clamp(min=0)
    rigid = torch.rand(J, generator=gen) > 0.4
    L = int(width.sum())
    cols_job = torch.repeat_interleave(torch.arange(J), width)
    first = torch.cumsum(width, 0) - width
    cols_t = torch.arange(L) - torch.repeat_interleave(first, width) + torch.repeat_interleave(
        arrival, width)
    smooth_cols = ((cols_job[1:] == cols_job[:-1]) & rigid[cols_job[1:]]).float()
    has = rigid & (width > 0)
    edges = torch.cat([first[has & (arrival > 0)], (first + width - 1)[has & (end < T)]])
    x = torch.rand(G, L, generator=gen)
    mask = (torch.rand(G, L, generator=gen) > 0.15).float()
    gain = torch.randn(J, T, generator=gen) * 0.3
    price = torch.rand(G, T, generator=gen) * 0.3
    return x, cols_job, cols_t, mask, gain, price, smooth_cols, edges, J


@pytest.mark.parametrize("G, J, T", [(1, 1, 1), (3, 7, 5), (5, 2, 17), (2, 3, 40), (9, 31, 12)])
def test_compiled_dense_step_matches_reference(G, J, T):
    args = inputs(G, J, T, seed=G * 100 + J * 10 + T)
    ref = pgd_step_ref(args[0].clone(), *args[1:], smooth=0.7)
    got = pgd_step_cpu(args[0].clone(), *args[1:], smooth=0.7)
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert pgd_step(args[0].clone(), *args[1:], smooth=0.7)[0].equal(got[0])  # the dispatch


@pytest.mark.parametrize("G, J, T", [(1, 1, 1), (3, 7, 5), (5, 2, 17), (4, 9, 30), (2, 40, 8)])
def test_compiled_packed_step_matches_reference(G, J, T):
    x, *rest = packed(G, J, T, seed=G * 100 + J * 10 + T)
    ref = pgd_step_packed_ref(x.clone(), *rest[:-2], rest[-2], 0.7, rest[-1])
    got = pgd_step_packed(x.clone(), *rest[:-2], rest[-2], 0.7, rest[-1])
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="one numba thread here")
def test_compiled_steps_give_one_result_whatever_the_threads():
    args = inputs(7, 23, 19, seed=3)
    x, *rest = packed(6, 40, 30, seed=4)
    out = []
    for n in (1, 2):  # one: the serial kernels; two: the threaded ones
        with cpu_threads("cpu", n):
            dense = pgd_step_cpu(args[0].clone(), *args[1:], smooth=0.7)
            pack = pgd_step_packed(x.clone(), *rest[:-2], rest[-2], 0.7, rest[-1])
        out.append(dense + pack)
    for a, b in zip(*out):
        assert torch.equal(a, b)


def _step(seed, threads=2):
    args = inputs(5, 9, 11, seed=seed)
    with cpu_threads("cpu", threads):
        return float(pgd_step_cpu(args[0].clone(), *args[1:], smooth=0.7)[1].sum())


def test_a_process_that_relaxed_can_still_fork_and_thread():
    # GNU OpenMP terminates a child forked after it started; numba's own pool
    # is used instead, and launches from several Python threads take turns.
    import multiprocessing
    from concurrent.futures import ThreadPoolExecutor

    before = _step(1)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_step, (1,)).get(timeout=120) == before
    with ThreadPoolExecutor(4) as threads:
        assert list(threads.map(_step, [1] * 8)) == [before] * 8
