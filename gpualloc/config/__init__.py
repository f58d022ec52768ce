"""Typed configs, registered once with Hydra's ConfigStore.

YAML under conf/ holds values; these dataclasses are the schemas. Everything
below run.py receives these objects, never a DictConfig.

Every setting is checked where it is defined: each dataclass has a
`validate(at)` method beside its fields, one rule per field, and the ones
with a fixed place in the run config (solver, greedy, exact, fifo, online,
scenario, the run itself) call it from `__post_init__`, which
OmegaConf.to_object runs as it builds them, before any work. The parts whose
place varies (a pool, a workload) are validated by the scenario that holds
them, which knows their place. An error names the override to change and
what is allowed, on one line:

    solver.rounding=bset: must be one of relaxed, priority, best

It is a SettingError, raised from `__post_init__`; OmegaConf lets it through
unwrapped (it wraps only TypeError), and gpualloc.run prints it as
`error: ...` and exits 2, like a bad scenario file.

Settings with a fixed set of values are plain `str` fields checked here, not
Enum or Literal fields: OmegaConf refuses Literal annotations, and an Enum is
checked by OmegaConf while Hydra composes the config, before gpualloc's code
runs, so a typo would end in Hydra's multi-line message and exit code 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from gpualloc.scenario import RIGID_KINDS

# ---- what settings allow ----------------------------------------------------------

DEVICES = ("auto", "cpu", "cuda")
MODES = ("offline", "online")
FORECASTS = ("oracle", "last_day", "ewma")
ARRIVALS = ("none", "history")
ARRIVAL_REPLANS = ("none", "light", "full")
ROUNDINGS = ("relaxed", "priority", "best")
GRIDS = ("auto", "dense", "packed")
DTYPES = ("float32", "bfloat16", "float16")
"""dtypes of the allocator's relaxed grid (gpualloc.policies.allocator.memory reads their sizes from torch)."""
SEED_MAX = 2**31 - 1
"""Largest run seed: the exact policy hands it to CP-SAT, whose random_seed is 32-bit."""


class SettingError(ValueError):
    """A setting outside what it allows. The message names the override to
    change and what is allowed, on one line. gpualloc.run treats it like a
    ScenarioError: `error: MESSAGE` on stderr, exit code 2."""


def _show(v, width: int = 60) -> str:
    """A value as an override would spell it, cut to one short line."""
    if v is None:
        text = "null"
    elif isinstance(v, bool):
        text = str(v).lower()
    elif isinstance(v, (list, tuple)):
        text = "[" + ", ".join(_show(x, width) for x in v) + "]"
    else:
        text = str(v)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 4] + " ..."


def _interval(text: str) -> tuple[float, float, bool, bool, str]:
    """An interval as maths writes it, e.g. `(0, 1]`: (lo, hi, lo_open,
    hi_open, its text for a message: "in (0, 1]"). Up to inf the text is
    "> 0" or ">= 0"; open at inf means finite numbers only."""
    lo, hi = (float(x) for x in text[1:-1].split(","))
    lo_open, hi_open = text[0] == "(", text[-1] == ")"
    if hi == math.inf:
        return lo, hi, lo_open, hi_open, f"{'>' if lo_open else '>='} {lo:g}"
    return lo, hi, lo_open, hi_open, f"in {text}"


def _inside(v, lo: float, hi: float, lo_open: bool, hi_open: bool) -> bool:
    # NaN compares false everywhere: outside every interval.
    return (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)


def _is_number(v, integer: bool) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) if integer else isinstance(v, (int, float))


class _Rules:
    """The checks of one config object's fields; `at` is its place in the run
    config ("solver", "scenario.pools[0]", "" for the run itself)."""

    def __init__(self, obj, at: str):
        self.obj, self.at = obj, at

    def fail(self, name: str, rule: str, value: Any = None, show: bool = True):
        path = f"{self.at}.{name}" if self.at else name
        value = getattr(self.obj, name) if value is None else value
        raise SettingError(f"{path}={_show(value)}: {rule}" if show else f"{path}: {rule}")

    def flag(self, name: str) -> None:
        if not isinstance(getattr(self.obj, name), bool):
            self.fail(name, "must be true or false")

    def one_of(self, name: str, options: tuple[str, ...]) -> None:
        if getattr(self.obj, name) not in options:
            self.fail(name, f"must be one of {', '.join(options)}")

    def text(self, name: str) -> None:
        v = getattr(self.obj, name)
        if not isinstance(v, str) or not v:
            self.fail(name, "must be a non-empty string", value=repr(v))

    def number(self, name: str, interval: str, integer: bool = False,
               null: bool = False) -> None:
        """A number inside `interval` ("[0, inf)": >= 0 and finite; "(0, inf]":
        > 0, inf allowed); `null`: None allowed too."""
        v = getattr(self.obj, name)
        if v is None and null:
            return
        lo, hi, lo_open, hi_open, rule = _interval(interval)
        if not (_is_number(v, integer) and _inside(v, lo, hi, lo_open, hi_open)):
            kind = ("an integer " if integer else
                    "a finite number " if hi_open and _is_number(v, False)
                    and not math.isfinite(v) else "")
            self.fail(name, f"must be {kind}{rule}{' or null' if null else ''}")

    def numbers(self, name: str, interval: str, integer: bool = False) -> None:
        """A non-empty list of numbers, each inside `interval`."""
        v = getattr(self.obj, name)
        lo, hi, lo_open, hi_open, rule = _interval(interval)
        if not (isinstance(v, (list, tuple)) and v and all(
                _is_number(x, integer) and _inside(x, lo, hi, lo_open, hi_open) for x in v)):
            kind = "integers" if integer else "numbers"
            self.fail(name, f"must be a non-empty list of {kind} {rule}")

    def pair(self, name: str, interval: str, integer: bool = False) -> None:
        """A range [a, b]: two numbers inside `interval`, a <= b."""
        v = getattr(self.obj, name)
        lo, hi, lo_open, hi_open, _ = _interval(interval)
        if not (isinstance(v, (list, tuple)) and len(v) == 2
                and all(_is_number(x, integer) and _inside(x, lo, hi, lo_open, hi_open)
                        for x in v) and v[0] <= v[1]):
            kind = "integers" if integer else "numbers"
            low = f"{lo:g} {'<' if lo_open else '<='} "
            high = "" if hi == math.inf else f" {'<' if hi_open else '<='} {hi:g}"
            self.fail(name, f"must be two {kind} [a, b] with {low}a <= b{high}")

    def weights(self, name: str, of: str) -> None:
        """Empty (uniform), or one weight >= 0 per entry of the list `of`, not all 0."""
        w, n = getattr(self.obj, name), len(getattr(self.obj, of))
        ok = isinstance(w, (list, tuple)) and (not w or (
            len(w) == n and all(_is_number(x, False) and _inside(x, 0, math.inf, False, True)
                                for x in w) and sum(w) > 0))
        if not ok:
            self.fail(name, f"must be empty (uniform) or {n} weights >= 0, one per entry of "
                            f"{of}, not all 0")

    def gpu_types(self, name: str, known: set[str] | None) -> None:
        """Allowed-type sets whose names some pool has (an empty set: any type)."""
        v = getattr(self.obj, name)
        for types in v:
            if not isinstance(types, (list, tuple)) or not all(
                    isinstance(t, str) and t for t in types):
                self.fail(name, "must be a list of lists of GPU type names")
            for t in types:
                if known is not None and t not in known:
                    self.fail(name, f"names {t}, which no pool has (pools have "
                                    f"{', '.join(sorted(known))})")


# ---- scenarios ------------------------------------------------------------------

@dataclass
class PoolConfig:
    name: str = "h100"
    count: int = 4
    """Nodes in the pool."""
    gpus_per_node: int = 8
    gpu_type: str = "H100"
    memory_gb: float = 80.0

    def validate(self, at: str) -> None:
        """`at`: its place, e.g. scenario.pools[0] (GeneratedScenarioConfig calls it)."""
        r = _Rules(self, at)
        r.text("name")
        r.number("count", "[1, inf)", integer=True)
        r.number("gpus_per_node", "[1, inf)", integer=True)
        r.text("gpu_type")
        r.number("memory_gb", "(0, inf)")


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
    preemptible: bool = False
    """Every job of this kind may run in segments (PROBLEM.md's preemptible
    rigid jobs); false: each runs once, unbroken."""
    restart_cost: int = 0
    """Timesteps every segment after a preemptible job's first spends
    restoring (PROBLEM.md); only with preemptible: true."""

    def validate(self, at: str, gpu_types: set[str] | None = None) -> None:
        """`at`: its place, e.g. scenario.training; `gpu_types`: the pools' types
        (GeneratedScenarioConfig calls it)."""
        r = _Rules(self, at)
        r.number("count", "[0, inf)", integer=True)
        r.number("rate_per_hour", "[0, inf)")
        r.numbers("gpus", "[1, inf)", integer=True)
        r.weights("gpus_weights", "gpus")
        r.number("duration_median_hours", "(0, inf)")
        r.number("duration_sigma", "[0, inf)")
        r.number("duration_max_hours", "(0, inf)")
        r.pair("priority", "[1, inf)", integer=True)  # PROBLEM.md: priorities > 0
        r.pair("arrival_window", "[0, 1]")
        r.number("bursts", "[0, inf)", integer=True)
        r.number("burst_hours", "[0, inf)")
        r.gpu_types("gpu_types", gpu_types)
        r.weights("gpu_types_weights", "gpu_types")
        r.numbers("min_memory_gb", "[0, inf)")
        r.weights("min_memory_weights", "min_memory_gb")
        r.flag("preemptible")
        r.number("restart_cost", "[0, inf)", integer=True)
        if self.restart_cost and not self.preemptible:
            r.fail("restart_cost", f"needs {at}.preemptible=true (a restart cost is paid only "
                                   f"by preemptible jobs)")


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
    min_served: float = 0.0
    """Share of each service's demand guaranteed at every timestep (rule 4 of
    PROBLEM.md); 0: none."""

    def validate(self, at: str, gpu_types: set[str] | None = None) -> None:
        """`at`: its place, scenario.realtime_inference; `gpu_types`: the pools'
        types (GeneratedScenarioConfig calls it)."""
        r = _Rules(self, at)
        r.number("services", "[0, inf)", integer=True)
        r.numbers("gpus", "[1, inf)", integer=True)
        r.weights("gpus_weights", "gpus")
        r.pair("peak_replicas", "[0, inf)", integer=True)
        r.pair("peak_to_trough", "[1, inf)")  # below 1 the trough would be above the peak
        r.pair("peak_hour", "[0, 24]")
        r.number("min_served", "[0, 1]")
        r.number("noise", "[0, inf)")
        r.number("spikes_per_day", "[0, inf)")
        r.pair("spike_factor", "[0, inf)")
        r.pair("spike_hours", "[0, inf)")
        r.pair("priority", "[1, inf)", integer=True)  # PROBLEM.md: priorities > 0
        r.pair("arrival_window", "[0, 1]")
        r.gpu_types("gpu_types", gpu_types)
        r.weights("gpu_types_weights", "gpu_types")
        r.numbers("min_memory_gb", "[0, inf)")
        r.weights("min_memory_weights", "min_memory_gb")


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

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "scenario") -> None:
        """Its own fields, its pools and workloads (their places named), and the
        GPU types the workloads ask for against the pools'. The practical size
        limits (horizon, GPUs, jobs) are gpualloc.scenario.generate's, with the scenario's."""
        r = _Rules(self, at)
        r.number("horizon", "[1, inf)", integer=True)
        r.number("step_minutes", "[1, inf)", integer=True)
        if not isinstance(self.pools, (list, tuple)) or not self.pools:
            r.fail("pools", "must be a non-empty list of pools", value=[])
        for i, pool in enumerate(self.pools):
            pool.validate(f"{at}.pools[{i}]")
        names = [p.name for p in self.pools]
        for name in names:
            if names.count(name) > 1:
                r.fail("pools", f"two pools are named {name}; names must differ", show=False)
        types = {p.gpu_type for p in self.pools}
        for kind in ("training", "batch_inference", "quantization", "realtime_inference"):
            getattr(self, kind).validate(f"{at}.{kind}", types)


@dataclass
class FileScenarioConfig:
    """A scenario file of PROBLEM.md's format (JSON or YAML)."""

    path: str = ""
    """Empty: the small example that ships with gpualloc (gpualloc/examples/);
    pkg://PACKAGE/FILE: a file inside an installed package."""

    def validate(self, at: str = "scenario") -> None:
        """Any path: the loader checks the file and names what is wrong in it."""


# ---- policies ---------------------------------------------------------------------

@dataclass
class FifoConfig:
    reserve: Optional[int] = None
    """Whole nodes reserved for real-time inference; null: PROBLEM.md's rule
    (the fewest nodes covering the peak total elastic demand)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "fifo") -> None:
        _Rules(self, at).number("reserve", "[0, inf)", integer=True, null=True)


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
    local_search_iters: int = 1500
    """Local-search moves after repair, at most (0: none). A move costs well
    under a millisecond on the seven on two CPU cores (the placement core)."""
    local_search_patience: int = 300
    """Stop the local search after this many moves in a row without a strict
    improvement (0: never); a count, not a clock, so runs stay repeatable."""
    local_search_anneal_iters: int = 0
    """Moves of a second walk from the same repaired plan as the first, with
    threshold accepting (local_search_accept_worse), within what is left of
    time_limit_s; the better of the two walks' plans is kept, so it never
    lowers the first walk's (0: none)."""
    local_search_accept_worse: float = 0.003
    """Threshold accepting in the second walk: a move may lower the objective
    by up to this share of the best value, shrinking to 0 over the first half
    of its moves or time (its patience counts only after that; 0: only moves
    that keep or raise it)."""
    time_limit_s: Optional[float] = 1.0
    """Wall-clock budget in seconds for the allocator's local search (an anytime
    budget: the search stops at the limit, the iteration cap or its patience,
    whichever comes first, and returns the best plan it saw; null: no limit).
    The caps end it first on the seven on two CPU cores, so a seed gives the
    same plan; where the clock ends it (info.local_search.stopped_by says),
    the plan depends on the machine's speed. 1 s keeps each of the seven
    within 2 s whole; large scenarios give the search exactly this."""
    start_from_greedy: bool = True
    """greedy's plan competes with the repaired ones as the search's start,
    and is returned when the search ends below it: never below greedy."""
    preempt: bool = True
    """Scenarios with preemptible jobs: run their remaining work in the idle
    blocks of the plan (segments, after restore costs), and weigh greedy's
    plan with priority preemption, likewise filled; keep the best. Never
    below the plan without preemption."""
    discount: float = 0.0
    """Per-step discount of the objective the repair and the search maximize:
    a GPU-step at t is worth (1 - discount)^t of one at 0. 0: the exact
    objective (offline). Online, work a plan postpones competes with jobs not
    yet known, so online mode plans with online.discount instead."""
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
    """GiB the run may use (the memory guard, gpualloc.policies.allocator.memory); null: 90% of
    the device's free memory. Above it, a run stops with a clear message."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "solver") -> None:
        r = _Rules(self, at)
        r.number("iterations", "[0, inf)", integer=True)
        r.number("step", "(0, inf)")
        r.number("penalty_start", "(0, inf)")  # a geometric schedule: both ends > 0
        r.number("penalty_end", "(0, inf)")
        r.number("smooth", "[0, inf)")  # 0: no contiguity penalty
        r.number("damping", "(0, 1]")
        r.number("time_discount", "[0, 1)")  # 1 would make the last step worth nothing
        r.one_of("rounding", ROUNDINGS)
        r.numbers("rounding_thresholds", "[0, 1]")
        r.number("local_search_iters", "[0, inf)", integer=True)
        r.number("local_search_patience", "[0, inf)", integer=True)
        r.number("local_search_anneal_iters", "[0, inf)", integer=True)
        r.number("local_search_accept_worse", "[0, 1)")
        r.number("discount", "[0, 1)")
        r.number("time_limit_s", "(0, inf]", null=True)
        r.pair("ruin_window", "[1, inf)", integer=True)
        # seed: any integer seeds the search (random.Random); the run's seed is checked.
        r.one_of("grid", GRIDS)
        r.number("dense_max_cells", "[0, inf)", integer=True)
        r.number("window_slack", "[0, inf)", integer=True)
        r.one_of("dtype", DTYPES)
        r.number("cpu_threads", "[0, inf)", integer=True)
        r.number("memory_budget_gb", "(0, inf)", null=True)


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
    variants: bool = True
    """Also plan with the plain priority-order EASY backfill (one pass, no
    look-ahead; gpualloc.policies.backfill) and keep the better plan: the
    demand-aware rules above pay on most workloads and lose on some (a
    displacement priced against the wrong alternative), and greedy is never
    below the plain floor."""
    preempt: bool = True
    """Priority preemption, as Kueue and KAI do it: a waiting job that cannot
    start may evict running preemptible jobs of strictly lower priority when
    that lets it start now; they requeue and restore when they resume. Only
    scenarios with preemptible jobs (PROBLEM.md) are affected."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "greedy") -> None:
        r = _Rules(self, at)
        r.number("repack_jobs", "[0, inf)", integer=True)  # 0: no re-pack checks
        r.number("repack_blocks", "[1, inf)", integer=True)  # the checks need a block each


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
    mip_time_limit_s: float = 20.0
    """HiGHS wall-clock limit for the per-pool MIP bound
    (gpualloc.policies.exact.mip_bound); the bound proven by then is reported."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "exact") -> None:
        r = _Rules(self, at)
        r.number("time_limit_s", "(0, inf]")  # inf: no limit (CP-SAT's own default)
        r.number("workers", "[0, inf)", integer=True)
        r.number("max_variables", "[1, inf)", integer=True)
        r.number("lp_max_nonzeros", "[0, inf)", integer=True)  # 0: always the per-pool bound
        r.number("lp_time_limit_s", "(0, inf]")  # inf: no limit (HiGHS's own default)
        r.number("mip_time_limit_s", "(0, inf]")


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
    discount: float = 0.05
    """The allocator's per-step discount in each replan (solver.discount): a
    plan of the known jobs is indifferent to postponing work the horizon does
    not cut, but online what it postpones competes with jobs not yet known,
    so a GPU-step now is worth more than one later (bench/results/online_cause.md)."""
    arrivals: str = "none"
    """none | history: with history, each replan also plans placeholder jobs
    for the rigid work it expects to arrive (rates, sizes, durations and
    priorities per kind from the jobs seen so far, by time of day); they hold
    capacity in the plan and are never run."""
    replan_on_arrival: str = "light"
    """none | light | full: at a step between two replans where a rigid job
    arrives, the policy plans again from what is known then, and the window
    ends there (the next periodic replan stays where it was). light: the
    allocator in its cheap form (priority-order builds and the last plan,
    no relaxation, arrival_search_moves of search); a policy without one
    (greedy) plans as at any replan. full: the policy as at any replan.
    none: the arrival waits for the fill (fill_between) or the next replan.
    Chosen on tuning seeds 3-16 (replan every 6, 84 runs): the allocator's
    online gain +47.35% (none) -> +48.47% (light, 2.4 s a run against
    1.8 s), below greedy (with the same setting) on 5 runs (4 with none);
    without search at arrivals +48.22%, 12 runs below. Seeds 3-9 only:
    +49.61% (none), +50.60% (full, 7.4 s a run)."""
    arrival_search_moves: int = 100
    """replan_on_arrival=light: the allocator's search moves at an arrival
    (250 was no better than 100 on tuning seeds 3-16)."""
    search_moves: int = 500
    """The allocator's local-search moves per replan, at most (patience a
    fifth of it; solver.local_search_iters when lower): a replan's plan is
    kept only until the next one."""
    fill_between: bool = True
    """Between replans, start rigid jobs (not preemptible) that arrived since the last one at
    the first step a block is free for their whole run (in the executed plan
    and the last plan), where the forecast real-time demand still fits, as a
    scheduler's backfill pass would (no effect with replan_every=1, nor with replan_on_arrival
    light or full, where an arrival is a replan). On
    tuning seeds 3-9 (replan every 6) it raised greedy's and the allocator's
    online gains by about 1.2-1.4 points each."""
    commit_at_start: bool = True
    """A rigid job (not preemptible) that a replan starts after its decision
    step is decided at its start step, from what is known then: it starts
    on its planned block (or another free one) where the forecast real-time
    demand still fits, or where it no longer does, when the replan's
    discounted objective values starting it there now over its earliest
    start that displaces no demand; else it waits, tried again at each
    later step of the window. False: committed at the replan, as planned.
    Chosen on tuning seeds 3-9 (replan every 6): the allocator's online gain
    +49.35% -> +49.61%, below greedy (with the same setting) on 1 of 42 runs (2 before). Seeds 0-2:
    +48.2% -> +48.6% (bench/results/online.md)."""
    anneal_moves: int = 0
    """Moves of the allocator's second walk per replan (threshold accepting
    from the repaired plan, the better plan kept; what
    solver.local_search_anneal_iters is offline). 0: none. 500 raised the
    online gain on tuning seeds 3-9 (+48.15% -> +48.48%) but not on seeds
    0-2 (+47.5% -> +47.4%) and doubles the run (bench/results/online_anneal.md)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "online") -> None:
        r = _Rules(self, at)
        r.number("discount", "[0, 1)")
        r.number("search_moves", "[0, inf)", integer=True)
        r.number("anneal_moves", "[0, inf)", integer=True)
        r.one_of("arrivals", ARRIVALS)
        r.one_of("replan_on_arrival", ARRIVAL_REPLANS)
        r.number("arrival_search_moves", "[0, inf)", integer=True)
        r.number("replan_every", "[1, inf)", integer=True)
        r.one_of("forecast", FORECASTS)
        r.number("ewma_alpha", "(0, 1]")
        r.number("period_steps", "[1, inf)", integer=True, null=True)
        r.number("headroom", "(0, inf)")


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
    min_served: Optional[float] = None
    """Set min_served (the guaranteed share of demand, rule 4 of PROBLEM.md)
    for every real-time service of the scenario, over what its file or
    generator says; null: as they say."""
    preemptible: Optional[list[str]] = None
    """The rigid kinds whose jobs are preemptible (PROBLEM.md), over what the
    scenario's file or generator says: exactly the jobs of these kinds, no
    other rigid job ([]: none); null: as they say."""
    restart_cost: Optional[int] = None
    """restart_cost (timesteps a preemptible job restores after each
    preemption) of every preemptible job, over the scenario's values; null:
    each keeps its own (0 for a job made preemptible by `preemptible`)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Every setting of the run, its parts included (each part checks
        itself when it is built; this catches a part changed since)."""
        r = _Rules(self, "")
        r.one_of("device", DEVICES)
        r.number("seed", f"[0, {SEED_MAX}]", integer=True)
        r.one_of("mode", MODES)
        r.number("min_served", "[0, 1]", null=True)
        if self.preemptible is not None and not (
                isinstance(self.preemptible, (list, tuple))
                and all(k in RIGID_KINDS for k in self.preemptible)):
            r.fail("preemptible", f"must be a list of rigid kinds ({', '.join(RIGID_KINDS)}), "
                                  f"[] or null")
        r.number("restart_cost", "[0, inf)", integer=True, null=True)
        if hasattr(self.scenario, "validate"):
            self.scenario.validate()
        for part in (self.fifo, self.solver, self.greedy, self.exact, self.online):
            part.validate()
        # policies: gpualloc.run checks the names against the registry, which
        # lives with the policies (they import this module, not the reverse).


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="schema/scenario", name="generated", node=GeneratedScenarioConfig)
    cs.store(group="schema/scenario", name="file", node=FileScenarioConfig)
    cs.store(group="schema/solver", name="allocator", node=SolverConfig)
