"""Round: from the relaxed column masses to placement orders and starts."""
from __future__ import annotations

import torch

from gpualloc.scenario import Scenario


def round_starts(s: Scenario, C: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per rigid job, the start whose window [s, s + duration) holds the most
    relaxed mass, and that mass as a fraction of the job (J,), (J,)."""
    J, T = C.shape
    cs = torch.zeros(J, T + 1, dtype=C.dtype)
    cs[:, 1:] = torch.cumsum(C, 1)
    t = torch.arange(T)
    end = torch.minimum(t[None, :] + s.duration[:, None], torch.tensor(T))  # (J, T)
    window = cs.gather(1, end) - cs[:, :T]  # (J, T)
    window[t[None, :] < s.arrival[:, None]] = -1
    start = window.argmax(1)
    length = (end.gather(1, start[:, None]).flatten() - start).clamp(min=1)
    score = window.gather(1, start[:, None]).flatten() / (s.gpus * length)
    return start, score


def relaxed_order(s: Scenario, start: torch.Tensor, score: torch.Tensor,
                  threshold: float) -> list[int]:
    """Jobs the relaxation runs (at least `threshold` of their mass in one
    window) by relaxed start; the rest after them, by priority."""
    runs = (score >= threshold).tolist()
    start = start.tolist()
    key = lambda j: (0, start[j], -s.jobs[j].priority, j) if runs[j] else (  # noqa: E731
        1, -s.jobs[j].priority, s.jobs[j].arrival, j)
    return sorted(range(s.J), key=key)
