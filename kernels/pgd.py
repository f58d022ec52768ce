"""One projected-gradient step on the relaxed grid x[g, j, t], fused with the
reductions the next step needs.

    x <- clip(x + gain[j, t] - price[g, t] - smooth * rigid[j] * lap_t(x), 0, 1) * mask
    mask = compat[j, g] & (t >= arrival[j]) & free[g, t]

then, of the new x:

    S[g, t] = sum_j x      N[g, t] = #{j : x > 0}       (capacity: one job per cell)
    C[j, t] = sum_g x      M[j, t] = #{g : x > 0}       (gang size / elastic demand)
    A[j]    = sum_{g,t} x  K[j]    = #{g, t : x > 0}    (a rigid job's area)

`gain` carries the step along the value gradient minus the multipliers of the
per-(job, t) and per-job constraints, `price` the multiplier of the capacity
constraint: clip(y - multipliers) is the projection of y onto the box and
those constraints when the multipliers clear them, and the counts N, M, K
bound the slopes the caller's Newton step on each multiplier needs (raising a
multiplier by d lowers its sum by at most d per positive cell). lap_t is the
discrete Laplacian along time, the gradient of the contiguity penalty that
pulls a rigid job's mass into runs.

Memory traffic per step, the floor the GPU benchmark is judged against: the
grid is read once and written once, 2 * G*J*T * itemsize bytes; the side
arrays (gain and the J x T outputs, price and the G x T outputs, compat J x G,
free G x T) add a few bytes per (g, t) and (j, t), negligible next to the grid
when G and J are large. See `bytes_moved`.

`pgd_step_ref` is the plain-torch reference; `pgd_step` dispatches to the
Triton kernel on CUDA when Triton is installed, to the compiled CPU step
(gpualloc.kernels.pgd_cpu, numba) on a float32 CPU grid, and to the
reference elsewhere (half precision on the CPU). The packed grid likewise:
`pgd_step_packed_ref` and its compiled CPU step.
"""
from __future__ import annotations

import torch

from gpualloc.kernels.pgd_cpu import compiled, pgd_step_cpu, pgd_step_packed_cpu


def bytes_moved(G: int, J: int, T: int, itemsize: int = 4) -> int:
    """Bytes one fused step must move at least: the grid read and written once,
    plus its side inputs and outputs (4-byte floats, 1-byte masks)."""
    grid = 2 * G * J * T * itemsize
    side = 4 * (J * T * 3 + G * T * 3 + 2 * J) + J * G + G * T + J
    return grid + side


def _mask(compat, arrival, free, T):
    t = torch.arange(T, device=compat.device)
    return compat.T[:, :, None] & (t[None, None, :] >= arrival[None, :, None]) & free[:, None, :]


def scratch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Work buffers for the torch steps, allocated once per grid: the time
    differences (x's shape less one step) and one array of x's shape. On the
    CPU a fresh array of the grid's size costs more in page faults than the
    arithmetic on it (measured at 1.1e8 cells: 190 ms to allocate the
    differences, 20 ms to use them), so the steps reuse these."""
    d = torch.empty(x.shape[:-1] + (max(x.shape[-1] - 1, 0),), dtype=x.dtype, device=x.device)
    return d, torch.empty_like(x)


def pgd_step_ref(x, compat, arrival, free, gain, price, rigid, smooth: float, mask=None,
                 work=None):
    """Torch reference. x (G, J, T) float (updated in place), compat (J, G)
    bool, arrival (J,) int, free (G, T) bool, gain (J, T) float, price (G, T)
    float, rigid (J,) bool; `mask` may pass the (G, J, T) mask precomputed, in
    x's dtype, and `work` the buffers of `scratch(x)`. Returns x, S, N, C, M,
    A, K (see the module docstring)."""
    G, J, T = x.shape
    if mask is None:
        mask = _mask(compat, arrival, free, T).to(x.dtype)
    d, positive = work if work is not None else scratch(x)
    # In place: the time differences of the old x.
    torch.sub(x[:, :, 1:], x[:, :, :-1], out=d)  # (G, J, T-1)
    d.mul_((smooth * rigid.to(x.dtype))[None, :, None])
    x.add_(gain[None, :, :]).sub_(price[:, None, :])
    x[:, :, :-1] += d
    x[:, :, 1:] -= d
    x.clamp_(0.0, 1.0).mul_(mask)
    # x is in [0, 1] here, so its sign marks the positive cells; as floats they
    # count exactly and about four times faster than a bool mask summed to float.
    torch.sign(x, out=positive)  # (G, J, T)
    C, M = x.sum(0), positive.sum(0)
    return x, x.sum(1), positive.sum(1), C, M, C.sum(1), M.sum(1)


def pgd_step_triton(x, compat, arrival, free, gain, price, rigid, smooth: float, mask=None):
    import triton

    G, J, T = x.shape
    BT = triton.next_power_of_2(T)
    BJ = max(1, min(triton.next_power_of_2(J), 2048 // BT))
    BG = max(1, min(triton.next_power_of_2(G), 4096 // (BT * BJ)))
    f32 = dict(device=x.device, dtype=torch.float32)
    S, N = torch.zeros(G, T, **f32), torch.zeros(G, T, **f32)
    C, M = torch.zeros(J, T, **f32), torch.zeros(J, T, **f32)
    A, K = torch.zeros(J, **f32), torch.zeros(J, **f32)
    # One grid axis: CUDA caps the second and third at 65,535 blocks, which
    # 2**19 jobs in blocks of two overran ("invalid argument" on an H200).
    grid = (triton.cdiv(G, BG) * triton.cdiv(J, BJ),)
    _kernel()[grid](x, compat.to(torch.int8).contiguous(), arrival.to(torch.int32).contiguous(),
                    free.to(torch.int8).contiguous(), gain.float().contiguous(),
                    price.float().contiguous(), rigid.to(torch.int8).contiguous(),
                    S, N, C, M, A, K, G, J, T, float(smooth), BG=BG, BJ=BJ, BT=BT)
    return x, S, N, C, M, A, K


_KERNEL = None


def _kernel():
    # Triton is imported lazily: the package imports without it.
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def pgd_step_kernel(x_ptr, compat_ptr, arrival_ptr, free_ptr, gain_ptr, price_ptr, rigid_ptr,
                        S_ptr, N_ptr, C_ptr, M_ptr, A_ptr, K_ptr, G, J, T, smooth,
                        BG: tl.constexpr, BJ: tl.constexpr, BT: tl.constexpr):
        # int64 indices: grids of 2**31 cells and more (the 2048 x 5000 x 336
        # rung) overflow int32 offsets.
        blocks_j = tl.cdiv(J, BJ)
        block = tl.program_id(0).to(tl.int64)
        g = ((block // blocks_j) * BG + tl.arange(0, BG)).to(tl.int64)  # (BG,)
        j = ((block % blocks_j) * BJ + tl.arange(0, BJ)).to(tl.int64)  # (BJ,)
        t = tl.arange(0, BT)  # (BT,) one tile holds whole time rows
        gm, jm, tm = g < G, j < J, t < T
        g3, j3, t3 = g[:, None, None], j[None, :, None], t[None, None, :]
        inside = gm[:, None, None] & jm[None, :, None] & tm[None, None, :]
        off = (g3 * J + j3) * T + t3  # (BG, BJ, BT)
        x = tl.load(x_ptr + off, mask=inside, other=0.0).to(tl.float32)
        prev = tl.load(x_ptr + off - 1, mask=inside & (t3 > 0), other=0.0).to(tl.float32)
        nxt = tl.load(x_ptr + off + 1, mask=inside & (t3 < T - 1), other=0.0).to(tl.float32)
        lap = ((t3 > 0).to(tl.float32) + (t3 < T - 1).to(tl.float32)) * x - prev - nxt
        gain = tl.load(gain_ptr + j3 * T + t3, mask=jm[None, :, None] & tm[None, None, :],
                       other=0.0)
        price = tl.load(price_ptr + g3 * T + t3, mask=gm[:, None, None] & tm[None, None, :],
                        other=0.0)
        rigid = tl.load(rigid_ptr + j, mask=jm, other=0).to(tl.float32)[None, :, None]
        compat = tl.load(compat_ptr + j[None, :] * G + g[:, None],
                         mask=gm[:, None] & jm[None, :], other=0)[:, :, None]
        arrival = tl.load(arrival_ptr + j, mask=jm, other=0)[None, :, None]
        free = tl.load(free_ptr + g3 * T + t3, mask=gm[:, None, None] & tm[None, None, :],
                       other=0)
        new = x + gain - price - smooth * rigid * lap
        new = tl.minimum(tl.maximum(new, 0.0), 1.0)
        keep = (compat != 0) & (t3 >= arrival) & (free != 0) & inside
        new = tl.where(keep, new, 0.0)
        new = new.to(x_ptr.dtype.element_ty)
        tl.store(x_ptr + off, new, mask=inside)
        new = new.to(tl.float32)  # the reductions see the values as stored
        inner = (new > 0.0).to(tl.float32)
        gt = gm[:, None] & tm[None, :]
        tl.atomic_add(S_ptr + g[:, None] * T + t[None, :], tl.sum(new, axis=1), mask=gt)
        tl.atomic_add(N_ptr + g[:, None] * T + t[None, :], tl.sum(inner, axis=1), mask=gt)
        jt = jm[:, None] & tm[None, :]
        c_part = tl.sum(new, axis=0)  # (BJ, BT)
        m_part = tl.sum(inner, axis=0)
        tl.atomic_add(C_ptr + j[:, None] * T + t[None, :], c_part, mask=jt)
        tl.atomic_add(M_ptr + j[:, None] * T + t[None, :], m_part, mask=jt)
        tl.atomic_add(A_ptr + j, tl.sum(c_part, axis=1), mask=jm)
        tl.atomic_add(K_ptr + j, tl.sum(m_part, axis=1), mask=jm)

    _KERNEL = pgd_step_kernel
    return _KERNEL


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def pgd_step(x, compat, arrival, free, gain, price, rigid, smooth: float, mask=None, work=None):
    """Dispatch: the Triton kernel on CUDA (when Triton is installed), the
    compiled CPU step on a float32 CPU grid (gpualloc.kernels.pgd_cpu), the
    torch reference elsewhere."""
    if x.is_cuda and triton_available():
        return pgd_step_triton(x, compat, arrival, free, gain, price, rigid, smooth)
    if compiled(x):
        return pgd_step_cpu(x, compat, arrival, free, gain, price, rigid, smooth)
    return pgd_step_ref(x, compat, arrival, free, gain, price, rigid, smooth, mask, work)


def packed_bytes_moved(G: int, L: int, itemsize: int = 4) -> int:
    """Bytes one packed step must move at least: the (G, L) grid read and
    written, the capacity price gathered per column, the mask read."""
    return 2 * G * L * itemsize + G * L * 4 + G * L


def pgd_step_packed(x, cols_job, cols_t, mask, gain, price, smooth_cols, edges, smooth, J: int,
                    work=None):
    """Dispatch: the compiled CPU step on a float32 CPU grid
    (gpualloc.kernels.pgd_cpu), the torch reference elsewhere."""
    if compiled(x):
        return pgd_step_packed_cpu(x, cols_job, cols_t, mask, gain, price, smooth_cols, edges,
                                   smooth, J)
    return pgd_step_packed_ref(x, cols_job, cols_t, mask, gain, price, smooth_cols, edges, smooth,
                               J, work)


def pgd_step_packed_ref(x, cols_job, cols_t, mask, gain, price, smooth_cols, edges, smooth, J: int,
                        work=None):
    """The same step on the packed grid: only the cells a job can ever hold,
    x (G, L) with column c standing for (job cols_job[c], timestep cols_t[c]),
    each job's columns consecutive in time. `mask` (G, L) in x's dtype,
    `smooth_cols` (L - 1,) the contiguity weight between neighbouring columns
    (zero across jobs and for elastic jobs), times `smooth`; `edges` the
    columns whose outer neighbour in time is a cell outside the window (zero,
    as in the dense grid); `work` the buffers of `scratch(x)`. Returns x, S,
    N, C, M, A, K as the dense step does. The torch reference: this form
    serves grids the dense one cannot hold or sweep fast enough."""
    G, L = x.shape
    T = price.shape[1]
    d, buf = work if work is not None else scratch(x)
    torch.sub(x[:, 1:], x[:, :-1], out=d)  # (G, L-1)
    d.mul_(smooth * smooth_cols[None, :])
    outer = x[:, edges] * -smooth  # (G, E): pulled toward the zero outside
    x.add_(gain[cols_job, cols_t][None, :])
    if price.dtype == x.dtype:  # the capacity price per column
        x.sub_(torch.index_select(price, 1, cols_t, out=buf))
    else:  # a half-precision grid: subtract the float32 price as it is
        x.sub_(price[:, cols_t])
    x[:, :-1] += d
    x[:, 1:] -= d
    x.index_add_(1, edges, outer)
    x.clamp_(0.0, 1.0).mul_(mask)
    positive = torch.sign(x, out=buf)  # (G, L): x in [0, 1], so 1 on positive cells
    S = torch.zeros(G, T, dtype=x.dtype, device=x.device).index_add_(1, cols_t, x)
    N = torch.zeros(G, T, dtype=x.dtype, device=x.device).index_add_(1, cols_t, positive)
    flat = cols_job * T + cols_t
    C = torch.zeros(J * T, dtype=x.dtype, device=x.device).index_add_(0, flat, x.sum(0))
    M = torch.zeros(J * T, dtype=x.dtype, device=x.device).index_add_(0, flat, positive.sum(0))
    C, M = C.view(J, T), M.view(J, T)
    return x, S, N, C, M, C.sum(1), M.sum(1)
