"""One projected-gradient step on the relaxed grid x[g, j, t], fused with the
reductions the next step's penalties need.

    x <- clip(x + step * grad, 0, 1) * mask          (G, J, T)
    grad = gain[j, t] - cap[g, t] - smooth * rigid[j] * lap_t(x)
    mask = compat[j, g] & (t >= arrival[j]) & free[g, t]
    S[g, t] = sum_j x,  C[j, t] = sum_g x,  A[j] = sum_{g,t} x   (of the new x)

`gain` holds the value and the per-(job, t) and per-job penalty gradients,
`cap` the capacity penalty gradient; both are small (J x T, G x T) and are
built by the caller. lap_t is the discrete Laplacian along time (the gradient
of the squared differences between neighbouring timesteps), which pulls a
rigid job's mass into runs.

Memory traffic per step, the floor the GPU benchmark is judged against: the
grid is read once and written once, 2 * G*J*T * itemsize bytes (8 bytes per
cell in float32); the side inputs (gain J*T, cap G*T, compat J*G, free G*T,
the outputs S, C, A) add (J*T + 2*G*T + J*G + J*T + J) * 4 bytes, negligible
next to the grid when J, G >> 1. See `bytes_moved`.

`pgd_step_ref` is the plain-torch reference and the CPU fallback;
`pgd_step` dispatches to the Triton kernel on CUDA when Triton is installed.
"""
from __future__ import annotations

import torch


def bytes_moved(G: int, J: int, T: int, itemsize: int = 4) -> int:
    """Bytes one fused step must move at least: grid read + write, side arrays."""
    grid = 2 * G * J * T * itemsize
    side = (2 * J * T + 2 * G * T + J * G + J) * 4
    return grid + side


def _mask(compat, arrival, free, T):
    t = torch.arange(T, device=compat.device)
    return compat.T[:, :, None] & (t[None, None, :] >= arrival[None, :, None]) & free[:, None, :]


def pgd_step_ref(x, compat, arrival, free, gain, cap, rigid, step: float, smooth: float):
    """Torch reference. x (G, J, T) float, compat (J, G) bool, arrival (J,)
    int, free (G, T) bool, gain (J, T) float, cap (G, T) float, rigid (J,)
    bool. Returns the new x (written in place) and S (G, T), C (J, T), A (J,)."""
    G, J, T = x.shape
    upd = gain[None, :, :] - cap[:, None, :]  # (G, J, T)
    if smooth and T > 1:
        d = x[:, :, 1:] - x[:, :, :-1]  # (G, J, T-1)
        lap = torch.zeros_like(x)
        lap[:, :, :-1] -= d
        lap[:, :, 1:] += d
        upd -= (smooth * rigid.to(x.dtype))[None, :, None] * lap
    x.add_(upd, alpha=step).clamp_(0.0, 1.0)
    x.mul_(_mask(compat, arrival, free, T))
    C = x.sum(0)
    return x, x.sum(1), C, C.sum(1)


def pgd_step_triton(x, compat, arrival, free, gain, cap, rigid, step: float, smooth: float):
    import triton

    G, J, T = x.shape
    BT = triton.next_power_of_2(T)
    BJ = max(1, min(triton.next_power_of_2(J), 4096 // BT))
    BG = max(1, min(triton.next_power_of_2(G), 8192 // (BT * BJ)))
    S = torch.zeros(G, T, device=x.device, dtype=torch.float32)
    C = torch.zeros(J, T, device=x.device, dtype=torch.float32)
    A = torch.zeros(J, device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(G, BG), triton.cdiv(J, BJ))
    _kernel()[grid](x, compat.to(torch.int8).contiguous(), arrival.to(torch.int32).contiguous(),
                    free.to(torch.int8).contiguous(), gain.float().contiguous(),
                    cap.float().contiguous(), rigid.to(torch.int8).contiguous(), S, C, A,
                    G, J, T, float(step), float(smooth), BG=BG, BJ=BJ, BT=BT)
    return x, S.to(x.dtype), C.to(x.dtype), A.to(x.dtype)


_KERNEL = None


def _kernel():
    # Triton is imported lazily: the package imports without it.
    global _KERNEL
    if _KERNEL is not None:
        return _KERNEL
    import triton
    import triton.language as tl

    @triton.jit
    def pgd_step_kernel(x_ptr, compat_ptr, arrival_ptr, free_ptr, gain_ptr, cap_ptr, rigid_ptr,
                        S_ptr, C_ptr, A_ptr, G, J, T, step, smooth,
                        BG: tl.constexpr, BJ: tl.constexpr, BT: tl.constexpr):
        g = tl.program_id(0) * BG + tl.arange(0, BG)  # (BG,)
        j = tl.program_id(1) * BJ + tl.arange(0, BJ)  # (BJ,)
        t = tl.arange(0, BT)  # (BT,) one tile holds a whole time row
        gm, jm, tm = g < G, j < J, t < T
        g3, j3, t3 = g[:, None, None], j[None, :, None], t[None, None, :]
        inside = gm[:, None, None] & jm[None, :, None] & tm[None, None, :]
        off = (g3 * J + j3) * T + t3  # (BG, BJ, BT)
        x = tl.load(x_ptr + off, mask=inside, other=0.0).to(tl.float32)
        prev = tl.load(x_ptr + off - 1, mask=inside & (t3 > 0), other=0.0).to(tl.float32)
        nxt = tl.load(x_ptr + off + 1, mask=inside & (t3 < T - 1), other=0.0).to(tl.float32)
        lap = ((t3 > 0).to(tl.float32) + (t3 < T - 1).to(tl.float32)) * x - prev - nxt
        gain = tl.load(gain_ptr + j3 * T + t3, mask=jm[None, :, None] & tm[None, None, :], other=0.0)
        cap = tl.load(cap_ptr + g3 * T + t3, mask=gm[:, None, None] & tm[None, None, :], other=0.0)
        rigid = tl.load(rigid_ptr + j, mask=jm, other=0).to(tl.float32)[None, :, None]
        compat = tl.load(compat_ptr + j[None, :] * G + g[:, None],
                         mask=gm[:, None] & jm[None, :], other=0)[:, :, None]
        arrival = tl.load(arrival_ptr + j, mask=jm, other=0)[None, :, None]
        free = tl.load(free_ptr + g3 * T + t3, mask=gm[:, None, None] & tm[None, None, :], other=0)
        new = x + step * (gain - cap - smooth * rigid * lap)
        new = tl.minimum(tl.maximum(new, 0.0), 1.0)
        keep = (compat != 0) & (t3 >= arrival) & (free != 0) & inside
        new = tl.where(keep, new, 0.0)
        tl.store(x_ptr + off, new.to(x_ptr.dtype.element_ty), mask=inside)
        # Reductions of the new grid for the next step's penalties.
        s_part = tl.sum(new, axis=1)  # (BG, BT)
        tl.atomic_add(S_ptr + g[:, None] * T + t[None, :], s_part,
                      mask=gm[:, None] & tm[None, :])
        c_part = tl.sum(new, axis=0)  # (BJ, BT)
        tl.atomic_add(C_ptr + j[:, None] * T + t[None, :], c_part,
                      mask=jm[:, None] & tm[None, :])
        tl.atomic_add(A_ptr + j, tl.sum(c_part, axis=1), mask=jm)

    _KERNEL = pgd_step_kernel
    return _KERNEL


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def pgd_step(x, compat, arrival, free, gain, cap, rigid, step: float, smooth: float):
    """Dispatch: the Triton kernel on CUDA (when Triton is installed), the
    torch reference elsewhere."""
    if x.is_cuda and triton_available():
        return pgd_step_triton(x, compat, arrival, free, gain, cap, rigid, step, smooth)
    return pgd_step_ref(x, compat, arrival, free, gain, cap, rigid, step, smooth)
