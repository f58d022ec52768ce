"""Typed configs, registered once with Hydra's ConfigStore.

YAML under conf/ holds values; these dataclasses are the schemas. Everything
below run.py receives these objects, never a DictConfig.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING


# ---- scenarios ------------------------------------------------------------------

@dataclass
class PoolConfig:
    name: str = "h100"
    count: int = 4
    """Nodes in the pool."""
    gpus_per_node: int = 8
    gpu_type: str = "H100"
    memory_gb: float = 80.0


@dataclass
class RigidWorkloadConfig:
    """One kind of rigid job: training, batch inference or quantization."""

    count: int = 0
    """Jobs over the horizon (used when rate_per_hour is 0)."""
    rate_per_hour: float = 0.0
    """Poisson arrival rate over the arrival window; replaces count when > 0."""
    gpus: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    """GPU counts to draw from (powers of two; above a node's size, whole nodes)."""
    gpus_weights: list[float] = field(default_factory=list)
    """Weights of `gpus`; empty for uniform."""
    duration_median_hours: float = 4.0
    duration_sigma: float = 0.7
    """Log-normal sigma of the duration."""
    duration_max_hours: float = 96.0
    priority: list[int] = field(default_factory=lambda: [1, 6])
    """Inclusive range; each job draws an integer uniformly."""
    arrival_window: list[float] = field(default_factory=lambda: [0.0, 0.9])
    """Fractions of the horizon between which jobs arrive."""
    bursts: int = 0
    """0: arrivals uniform over the window; n > 0: clustered in n bursts."""
    burst_hours: float = 3.0
    """Spread of each burst (exponential, hours)."""
    gpu_types: list[list[str]] = field(default_factory=list)
    """Allowed-type sets to draw from ([] inside = any type); empty list: any type."""
    gpu_types_weights: list[float] = field(default_factory=list)
    min_memory_gb: list[float] = field(default_factory=lambda: [0.0])
    """Memory needs to draw from."""
    min_memory_weights: list[float] = field(default_factory=list)


@dataclass
class RealtimeWorkloadConfig:
    """Real-time inference services with a diurnal demand curve."""

    services: int = 0
    gpus: list[int] = field(default_factory=lambda: [1])
    """Replica sizes to draw from."""
    gpus_weights: list[float] = field(default_factory=list)
    peak_replicas: list[int] = field(default_factory=lambda: [4, 8])
    """Inclusive range of a service's day-peak replicas."""
    peak_to_trough: list[float] = field(default_factory=lambda: [2.0, 4.0])
    """Range of the day peak over the night trough."""
    peak_hour: list[float] = field(default_factory=lambda: [13.0, 17.0])
    noise: float = 0.08
    """Relative standard deviation of the per-step noise."""
    spikes_per_day: float = 0.3
    spike_factor: list[float] = field(default_factory=lambda: [1.3, 1.8])
    spike_hours: list[float] = field(default_factory=lambda: [1.0, 3.0])
    priority: list[int] = field(default_factory=lambda: [7, 10])
    arrival_window: list[float] = field(default_factory=lambda: [0.0, 0.0])
    gpu_types: list[list[str]] = field(default_factory=list)
    gpu_types_weights: list[float] = field(default_factory=list)
    min_memory_gb: list[float] = field(default_factory=lambda: [0.0])
    min_memory_weights: list[float] = field(default_factory=list)


@dataclass
class GeneratedScenarioConfig:
    """A synthetic scenario; `seed` (top level) makes it repeatable."""

    name: str = MISSING
    horizon: int = 168
    """Timesteps."""
    step_minutes: int = 60
    pools: list[PoolConfig] = field(default_factory=lambda: [PoolConfig()])
    training: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4, 8, 16], priority=[3, 8], duration_median_hours=12.0))
    batch_inference: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4], priority=[1, 6], duration_median_hours=3.0))
    quantization: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4, 8], priority=[1, 6], duration_median_hours=2.0))
    realtime_inference: RealtimeWorkloadConfig = field(default_factory=RealtimeWorkloadConfig)


@dataclass
class FileScenarioConfig:
    """A scenario file of PROBLEM.md's format (JSON or YAML)."""

    path: str = ""
    """Empty: the small example that ships with gpualloc (gpualloc/examples/);
    pkg://PACKAGE/FILE: a file inside an installed package."""


# ---- policies ---------------------------------------------------------------------

@dataclass
class FifoConfig:
    reserve: Optional[int] = None
    """Whole nodes reserved for real-time inference; null: PROBLEM.md's rule
    (the fewest nodes covering the peak total elastic demand)."""


@dataclass
class SolverConfig:
    """The allocator: projected gradient descent on the relaxed grid, rounding,
    repair, local search. Values live in conf/solver/."""

    iterations: int = 60
    """Projected-gradient steps on the relaxed [gpu, job, t] grid."""
    step: float = 0.25
    """Step size of each projected-gradient step."""
    penalty_start: float = 0.1
    """Contiguity penalty weight at the first step (capacity, gang size, elastic
    demand and job area are held by multipliers)."""
    penalty_end: float = 2.0
    """Contiguity penalty weight at the last step; geometric schedule in between."""
    smooth: float = 1.0
    """Scale of the temporal contiguity penalty on rigid jobs' mass."""
    damping: float = 0.5
    """Fraction of each multiplier's Newton step taken per step (1: full steps;
    the three families of multipliers interact, so full steps oscillate)."""
    time_discount: float = 0.05
    """Fraction of a cell's value lost from t=0 to the horizon's end, so the
    relaxation prefers earlier work and its start times order the rounding."""
    rounding: str = "best"
    """Placement order for the repair: relaxed (by relaxed start, one rounding
    per threshold, placed at the relaxed start or earliest), priority (skips
    the relaxation), or best (all of them; the best plan goes on)."""
    rounding_thresholds: list[float] = field(default_factory=lambda: [0.3, 0.5, 0.7])
    """Share of a job's mass in its best window above which the relaxation
    counts it as run; one rounding per value."""
    local_search_iters: int = 200
    """Local-search moves after repair, at most (0: none)."""
    local_search_patience: int = 40
    """Stop the local search after this many moves in a row without a strict
    improvement (0: never); a count, not a clock, so runs stay repeatable."""
    ruin_window: list[int] = field(default_factory=lambda: [4, 48])
    """Range of the time window a ruin move empties, in timesteps."""
    demand_aware: bool = True
    """Place rigid jobs only where the known elastic demand still fits."""
    seed: int = 0
    """Seeds the local search; with the same seed and device, the same plan."""
    grid: str = "auto"
    """Representation of the relaxed grid: dense (G x J x T), packed (only
    the cells a job can ever hold), or auto (packed on the CPU above
    dense_max_cells)."""
    dense_max_cells: int = 20_000_000
    """Above this many cells the CPU relaxes the packed grid (the dense one
    takes too long per step there)."""
    window_slack: int = 24
    """Packed grid: steps a rigid job may wait after arrival within the
    relaxation's view (the repair may still start it later)."""
    dtype: str = "float32"
    """dtype of the relaxed grid: float32 | bfloat16 | float16 (halves the bytes on GPU)."""
    progress: bool = True
    """Show a progress bar on a terminal (never under CI or in a pipe)."""
    cpu_threads: int = 1
    """Torch threads for the allocator's CPU work (0: leave torch's setting).
    One by default: its tensors are small, and on shared cores more threads
    make it slower, not faster."""
    memory_budget_gb: Optional[float] = None
    """GiB the run may use (the memory guard, gpualloc.memory); null: 90% of
    the device's free memory. Above it, a run stops with a clear message."""


@dataclass
class GreedyConfig:
    """Priority backfilling (gpualloc.policies.greedy): what a careful Slurm or Kueue
    operator runs today. The defaults are the strong setting; the switches
    exist for ablations and tests, never to weaken the benchmark reference."""

    demand_aware: bool = True
    """Start a rigid job only if the known elastic demand over its whole run
    still fits on the GPUs rigid jobs leave free."""
    displace: bool = True
    """A rigid job the elastic demand would keep waiting may take GPUs that
    demand wants, when its value minus the priority-weighted elastic service it
    displaces beats its value at its earliest demand-safe start (0 if none);
    when other waiting jobs could fill the free GPUs, only a job with no
    demand-safe start at all. Without it, a job as large as the cluster never
    starts beside a service that always wants one replica. false: the strict
    demand-aware rule."""
    reservation: bool = True
    """EASY backfilling: the first job that cannot start reserves the earliest
    block and time it could start at; later jobs must not overlap it. false:
    any job that fits starts (plain backfilling, starves large jobs)."""
    repack_jobs: int = 2
    """Per timestep, at most this many blocked jobs (priority order) whose only
    free blocks overlap the elastic footprint get an exact re-pack check of
    the elastic demand without that block (after a cheap lower bound on the
    loss). Bounds the cost on large scenarios; 2 measured best among 2, 8, 32."""
    repack_blocks: int = 4
    """Candidate blocks (best fit first) re-pack-checked per such job."""


@dataclass
class ExactConfig:
    """The CP-SAT optimum (gpualloc.policies.exact) and the LP upper bound."""

    time_limit_s: float = 30.0
    """CP-SAT wall-clock limit; at the limit the best plan found is returned
    with its proven bound (optimal: false)."""
    workers: int = 0
    """CP-SAT search workers; 0: CP-SAT picks from the number of cores. Only 1
    makes the search repeatable (the parallel portfolio races its workers)."""
    max_variables: int = 200_000
    """Refuse above this many Boolean candidates ((rigid job, start, block) and
    (elastic job, block, t)): CP-SAT would not prove anything in useful time.
    Use the LP bound (gpualloc.policies.exact.lp_bound) for larger scenarios."""
    hint: bool = True
    """Start CP-SAT from greedy's plan (a feasible solution from the first second)."""
    lp: bool = True
    """Also solve the LP relaxation and record it in the plan info as lp_bound."""
    lp_max_nonzeros: int = 4_000_000
    """The LP relaxation uses the same per-GPU model up to this many capacity
    nonzeros; above it, a per-pool aggregate (a weaker but still valid bound)."""
    lp_time_limit_s: float = 300.0
    """HiGHS wall-clock limit for the LP; at the limit no bound is reported."""


# ---- online (rolling-horizon) mode -----------------------------------------------------

@dataclass
class OnlineConfig:
    """mode=online: what the planner may know, and how often it replans."""

    replan_every: int = 1
    """Timesteps between replans (>= 1). A job arriving between two replans
    waits for the next one; real-time demand is served every step."""
    forecast: str = "last_day"
    """oracle | last_day | ewma: where the planner's future real-time demand
    comes from (oracle: the true future, an upper bound on forecasting)."""
    ewma_alpha: float = 0.3
    """ewma: weight of the newest observation in the level, in (0, 1]."""
    period_steps: Optional[int] = None
    """last_day: the season in timesteps; null: one day (1440 / step_minutes)."""
    headroom: float = 1.0
    """Forecasts are multiplied by this (>= 1 over-provisions), then rounded up."""


# ---- the run ------------------------------------------------------------------------

@dataclass
class RunConfig:
    scenario: Any = None
    """Chosen with +scenario=NAME; left out of the defaults on purpose."""
    policies: list[str] = field(default_factory=lambda: ["fifo", "greedy", "allocator"])
    """Policies to run, by registry name (gpualloc.policies)."""
    device: str = "auto"
    """auto | cpu | cuda"""
    seed: int = 0
    """Reseeds the generator and the solvers."""
    save_plans: bool = True
    plot: bool = False
    """Also draw the plans (gantt.png, utilization.png) into the run folder; needs matplotlib."""
    fifo: FifoConfig = field(default_factory=FifoConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    greedy: GreedyConfig = field(default_factory=GreedyConfig)
    exact: ExactConfig = field(default_factory=ExactConfig)
    mode: str = "offline"
    """offline: each policy sees the whole scenario; online: it replans as time
    passes, seeing only what has arrived (gpualloc.online; FIFO is online by
    nature and runs unchanged)."""
    online: OnlineConfig = field(default_factory=OnlineConfig)


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="schema/scenario", name="generated", node=GeneratedScenarioConfig)
    cs.store(group="schema/scenario", name="file", node=FileScenarioConfig)
    cs.store(group="schema/solver", name="allocator", node=SolverConfig)
