"""Synthetic workloads: a GeneratedScenarioConfig and a seed give a Scenario,
the same one every time."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpualloc.scenario import Job, Pool, Scenario, check_limits, from_dict

if TYPE_CHECKING:  # the generator reads a config, it does not import one (config/ reads this package)
    from gpualloc.config import (GeneratedScenarioConfig, RealtimeWorkloadConfig,
                                 RigidWorkloadConfig)

_PREFIX = {"training": "train", "batch_inference": "batch", "quantization": "quant",
           "realtime_inference": "rt"}


def _choice(rng: np.random.Generator, options: list, weights: list[float]):
    # The config has checked both: options non-empty, weights empty or one per option.
    p = np.asarray(weights, dtype=float) / np.sum(weights) if weights else None
    return options[int(rng.choice(len(options), p=p))]


def _arrivals(rng, n: int, window: list[float], bursts: int, burst_steps: float,
              horizon: int) -> np.ndarray:
    lo, hi = window[0] * horizon, max(window[1] * horizon, window[0] * horizon + 1)
    if bursts > 0:
        centers = rng.uniform(lo, hi, size=bursts)
        t = centers[rng.integers(0, bursts, size=n)] + rng.exponential(burst_steps, size=n)
    else:
        t = rng.uniform(lo, hi, size=n)
    return np.clip(np.floor(t), 0, horizon - 1).astype(int)


def _rigid_jobs(rng, kind: str, w: RigidWorkloadConfig, horizon: int, step_minutes: float):
    hours_per_step = step_minutes / 60.0
    n = (int(rng.poisson(w.rate_per_hour * horizon * hours_per_step
                         * (w.arrival_window[1] - w.arrival_window[0])))
         if w.rate_per_hour > 0 else w.count)
    arrivals = _arrivals(rng, n, w.arrival_window, w.bursts, w.burst_hours / hours_per_step,
                         horizon)
    jobs = []
    for i in range(n):
        hours = min(rng.lognormal(np.log(w.duration_median_hours), w.duration_sigma),
                    w.duration_max_hours)
        types = _choice(rng, w.gpu_types, w.gpu_types_weights) if w.gpu_types else []
        jobs.append(Job(
            id=f"{_PREFIX[kind]}-{i}", kind=kind,
            priority=int(rng.integers(w.priority[0], w.priority[1] + 1)),
            arrival=int(arrivals[i]),
            gpus=int(_choice(rng, w.gpus, w.gpus_weights)),
            duration=max(1, int(round(hours / hours_per_step))),
            gpu_types=list(types) or None,
            min_memory_gb=float(_choice(rng, w.min_memory_gb, w.min_memory_weights)),
            preemptible=bool(w.preemptible), restart_cost=int(w.restart_cost)))
    return jobs


def demand_curve(rng, w: RealtimeWorkloadConfig, horizon: int, step_minutes: float) -> list[int]:
    """Diurnal base (cosine between trough and peak), multiplicative noise and
    a few multi-hour spikes, rounded to whole replicas."""
    hours = np.arange(horizon) * step_minutes / 60.0
    peak = rng.integers(w.peak_replicas[0], w.peak_replicas[1] + 1)
    trough = peak / rng.uniform(*w.peak_to_trough)
    phase = rng.uniform(*w.peak_hour)
    base = trough + (peak - trough) * 0.5 * (1 + np.cos(2 * np.pi * (hours - phase) / 24.0))
    curve = base * (1 + w.noise * rng.standard_normal(horizon))
    n_spikes = rng.poisson(w.spikes_per_day * hours[-1] / 24.0) if horizon > 1 else 0
    for _ in range(n_spikes):
        at = rng.uniform(0, hours[-1])
        width = rng.uniform(*w.spike_hours)
        curve = np.where((hours >= at) & (hours < at + width), curve * rng.uniform(*w.spike_factor),
                         curve)
    return [int(v) for v in np.maximum(np.rint(curve), 0)]


def _services(rng, w: RealtimeWorkloadConfig, horizon: int, step_minutes: float):
    arrivals = _arrivals(rng, w.services, w.arrival_window, 0, 1.0, horizon)
    jobs = []
    for i in range(w.services):
        types = _choice(rng, w.gpu_types, w.gpu_types_weights) if w.gpu_types else []
        jobs.append(Job(
            id=f"rt-{i}", kind="realtime_inference",
            priority=int(rng.integers(w.priority[0], w.priority[1] + 1)),
            arrival=int(arrivals[i]),
            gpus=int(_choice(rng, w.gpus, w.gpus_weights)),
            demand=demand_curve(rng, w, horizon, step_minutes),
            gpu_types=list(types) or None,
            min_memory_gb=float(_choice(rng, w.min_memory_gb, w.min_memory_weights)),
            min_served=float(w.min_served)))
    return jobs


def generate(cfg: GeneratedScenarioConfig, seed: int) -> Scenario:
    """Draw a scenario. Jobs are listed in arrival order (ties: kind, then index),
    the order a scheduler would have received them."""
    # Settings were checked when cfg was built (gpualloc.config); sizes are
    # checked here, before anything T- or job-sized is drawn.
    hours = cfg.horizon * cfg.step_minutes / 60.0
    expected = sum(w.count if w.rate_per_hour <= 0 else
                   w.rate_per_hour * hours * (w.arrival_window[1] - w.arrival_window[0])
                   for w in (cfg.training, cfg.batch_inference, cfg.quantization))
    check_limits(cfg.horizon, sum(p.count * p.gpus_per_node for p in cfg.pools),
                 int(expected) + cfg.realtime_inference.services, where="generator")
    rng = np.random.default_rng(seed)
    jobs = []
    for kind in ("training", "batch_inference", "quantization"):
        jobs += _rigid_jobs(rng, kind, getattr(cfg, kind), cfg.horizon, cfg.step_minutes)
    jobs += _services(rng, cfg.realtime_inference, cfg.horizon, cfg.step_minutes)
    jobs.sort(key=lambda j: j.arrival)  # stable: kind order, then index
    s = Scenario(name=cfg.name, horizon=cfg.horizon, step_minutes=cfg.step_minutes,
                 pools=[Pool(p.name, p.count, p.gpus_per_node, p.gpu_type, p.memory_gb)
                        for p in cfg.pools], jobs=jobs)
    # The generator's output goes through the same validation as a file.
    return from_dict(s.to_dict())
