"""The policies' settings: fifo, the allocator (solver), greedy, exact."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from gpualloc.config.rules import DTYPES, GRIDS, ROUNDINGS, Rules


# ---- policies ---------------------------------------------------------------------

@dataclass
class FifoConfig:
    reserve: Optional[int] = None
    """Whole nodes reserved for real-time inference; null: PROBLEM.md's rule
    (the fewest nodes covering the peak total elastic demand)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "fifo") -> None:
        Rules(self, at).number("reserve", "[0, inf)", integer=True, null=True)


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
    local_search_work: int = 150_000_000
    """Caps each walk of the local search at this many moves x GPU-steps of
    the plan: at most local_search_work / (G x T) moves where that is below
    local_search_iters (and local_search_anneal_iters), since a move's
    earliest-fit re-insertions scan the (G, T) grid (the rule:
    gpualloc.policies.allocator.search_moves). Work, not seconds: one plan
    per seed on any machine. 150 million leaves the seven (at most 21,504
    GPU-steps) their 1,500 moves, gives 1,024 x 168 GPU-steps 871 and
    4,096 x 336 (0.12-0.37 s a move on two shared cores) 108 (0: no cap)."""
    local_search_patience: int = 300
    """Stop the local search after this many moves in a row without a strict
    improvement (0: never); a count, not a clock, so runs stay repeatable."""
    local_search_anneal_iters: int = 0
    """Moves of a second walk from the same repaired plan as the first, with
    threshold accepting (local_search_accept_worse), within what is left of
    time_limit_s; the better of the two walks' plans is kept, so it never
    lowers the first walk's (0: none)."""
    deep_search_cells: int = 1_000_000
    """Scenarios of at most this many cells (GPUs x jobs x steps) search
    with the deep budget below wherever it is larger than the settings
    above (0: never). A budget of moves, not seconds, chosen by size: on the
    broad family at 64 GPUs (0.53-0.66 million cells) it took the median gap
    to the bound from 2.8% to 1.9% (seeds 100-119) for about 5.7x the
    allocator's time; on the seven (1.2-4.4 million cells) solver=quality's
    budget raised the value by 0-2% for 2-8x the time, so they keep the
    budget above (bench/results/budget_seven.md, family_issue25_deep.md).
    Online replans and Slurm serve steps keep theirs (online.search_moves)."""
    deep_search_patience: int = 1000
    """local_search_patience under the deep budget (the larger one applies)."""
    deep_search_anneal_iters: int = 8000
    """local_search_anneal_iters under the deep budget (the larger one
    applies): the second walk, which keeps the better plan, so the deep
    budget never lowers a plan's value below the budget above."""
    deep_search_moves_per_job: int = 100
    """The deep budget shrinks on scenarios of few jobs: deep_search_patience
    and deep_search_anneal_iters both scaled by jobs x this /
    deep_search_anneal_iters where that is below 1 (80 jobs or more get
    all of it). A scenario of ten jobs needs no 8,000 moves: on 30 random
    ones of up to ten jobs they took 2.2 s a plan against 0.14 s without
    the deep budget; scaled down, 0.42 s against 0.10 s (a second run;
    loaded machine, no results file)."""
    local_search_accept_worse: float = 0.003
    """Threshold accepting in the second walk: a move may lower the objective
    by up to this share of the best value, shrinking to 0 over the first half
    of its moves or time (its patience counts only after that; 0: only moves
    that keep or raise it)."""
    local_search_max_waiting: int = 24
    """Jobs no plan has placed yet that a search move tries to insert again,
    at most (a random sample beyond that): most of a move's time where many
    wait and fit nowhere under the guard."""
    local_search_max_removed: Optional[int] = None
    """Jobs a ruin move takes out, at most: where more start inside its
    window, the ones that start first (the window ends sooner). null: no cap
    (offline; online sets online.search_max_removed)."""
    time_limit_s: Optional[float] = None
    """Opt-in wall-clock cap in seconds for the allocator's local search (null:
    none, the default). The search's budget is work: local_search_iters
    moves and local_search_patience, so a seed gives one plan on any machine
    and under any load. With a cap the search stops at whichever comes first
    and returns the best plan it saw (the clock is read between chunks of
    16 moves); where the clock ends it (info.local_search.stopped_by says),
    the plan depends on the machine's speed and load."""
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
    """Threads for the allocator's CPU work: torch's, which the compiled
    relaxation follows (0: leave torch's setting). The same plan on any
    count. One by default: on shared cores more threads make it slower
    (measured: docs/results.md); on free cores two relax 1.7x faster at
    1,024 GPUs."""
    memory_budget_gb: Optional[float] = None
    """GiB the run may use (the memory guard, gpualloc.policies.allocator.memory); null: 90% of
    the device's free memory. Above it, a run stops with a clear message."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "solver") -> None:
        r = Rules(self, at)
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
        r.number("local_search_work", "[0, inf)", integer=True)  # 0: no cap
        r.number("local_search_patience", "[0, inf)", integer=True)
        r.number("local_search_anneal_iters", "[0, inf)", integer=True)
        r.number("deep_search_cells", "[0, inf)", integer=True)
        r.number("deep_search_patience", "[0, inf)", integer=True)
        r.number("deep_search_anneal_iters", "[0, inf)", integer=True)
        r.number("deep_search_moves_per_job", "[0, inf)", integer=True)
        r.number("local_search_accept_worse", "[0, 1)")
        r.number("local_search_max_waiting", "[0, inf)", integer=True)
        r.number("local_search_max_removed", "[1, inf)", integer=True, null=True)
        r.number("discount", "[0, 1)")
        r.number("time_limit_s", "(0, inf]", null=True)
        r.pair("ruin_window", "[1, inf)", integer=True)
        # seed: any integer seeds the search (its own random stream); the run's seed is checked.
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
    type_aware: bool = False
    """The elastic footprint serves by compatibility class (Hall's condition
    decides who is served, by priority; the most restricted services are
    packed first: gpualloc.core.classes); false: by priority only, highest
    GPU first, which leaves a confined service unprotected where services
    that run anywhere took its pool in the packing (issue 25). Off by
    default: it protects more demand, so rigid jobs wait more, and greedy
    measured lower with it on the broad and broad_types tuning seeds 0-19
    (-1.1% and -1.3% of summed weighted throughput, fit_ahead on)."""
    fit_ahead: bool = True
    """The rigid fit key's first term weighs, per pool, the work that may want
    its GPUs over the job's run (gpualloc.core.PoolDemand: rigid jobs not
    yet started arriving before the run ends, gpus x duration, and the
    services' demand in it, each spread over the GPUs it can use); false:
    counts the jobs waiting now and every service (issue 25: flexible jobs
    then take the only pool of later jobs). +0.5% and +1.2% of summed
    weighted throughput on broad and broad_types seeds 0-19."""
    variants: bool = True
    """Also plan with the plain priority-order EASY backfill (one pass, no
    look-ahead; gpualloc.policies.backfill) and keep the better plan: the
    demand-aware rules above pay on most workloads and lose on some (a
    displacement priced against the wrong alternative), and greedy is never
    below the plain floor. Online, weighed at full replans only
    (online.full_every); the light ones between keep the choice."""
    preempt: bool = True
    """Priority preemption, as Kueue and KAI do it: a waiting job that cannot
    start may evict running preemptible jobs of strictly lower priority when
    that lets it start now; they requeue and restore when they resume. Only
    scenarios with preemptible jobs (PROBLEM.md) are affected."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "greedy") -> None:
        r = Rules(self, at)
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
    Use the LP bound (gpualloc.policies.bounds.lp_bound) for larger scenarios."""
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
    (gpualloc.policies.bounds.mip_bound); the bound proven by then is reported."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "exact") -> None:
        r = Rules(self, at)
        r.number("time_limit_s", "(0, inf]")  # inf: no limit (CP-SAT's own default)
        r.number("workers", "[0, inf)", integer=True)
        r.number("max_variables", "[1, inf)", integer=True)
        r.number("lp_max_nonzeros", "[0, inf)", integer=True)  # 0: always the per-pool bound
        r.number("lp_time_limit_s", "(0, inf]")  # inf: no limit (HiGHS's own default)
        r.number("mip_time_limit_s", "(0, inf]")
