"""mode=online: the rolling horizon's settings."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from gpualloc.config.rules import ARRIVAL_REPLANS, ARRIVALS, FORECASTS, Rules


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
    guarantee_headroom: float = 0.5
    """Guaranteed services (min_served > 0): work that cannot yield (rigid,
    not preemptible) starts only where their forecast, raised by this share
    (0.5: half above, rounded up), still fits on the GPUs that such work
    leaves (beside it), and where the step's guaranteed replicas still pack,
    decided at its start step from what is known then; plans use the
    forecast as it is (with forecast=oracle, the true future, no share is
    kept: the check keeps room for the demand itself, and on tuning seeds 6-11
    the value rose x1.006-x1.009, none short; docs/results.md, s63). What
    preemptible jobs hold counts as room: the step
    where actual demand rises reclaims it (gpualloc.online.loop). 0: no
    room kept and no such check, on the first day too (more value, replicas
    short). 0.5 is the smallest share of 0.25, 0.5, 0.75 and 1 that left no
    replica short on the 122 guaranteed runs of the seven's tuning seeds
    6-17 (0.25: 12 short; the rule before it, the forecast raised by 0.25
    beside all rigid work: 7 short and 2.4% less value; docs/results.md,
    s60)."""
    guarantee_headroom_first_day: float = 1.5
    """guarantee_headroom for a service with less than a period (a day) of
    observed demand, when the forecast cannot know its daily shape yet
    (last_day repeats the current level). 1.5 left no replica short on the
    306 guaranteed runs of the seven's seeds 6-35, where 0.5 left 6 and
    1.0 left 6, nearly all in the first day (docs/results.md, s60)."""
    discount: float = 0.05
    """The allocator's per-step discount in each replan (solver.discount): a
    plan of the known jobs is indifferent to postponing work the horizon does
    not cut, but online what it postpones competes with jobs not yet known,
    so a GPU-step now is worth more than one later (bench/results/online_cause.md)."""
    arrivals: str = "none"
    """none | history | oracle: with history, each replan also plans
    placeholder jobs for the rigid work it expects to arrive (rates, sizes,
    durations and priorities per kind from the jobs seen so far, by time of
    day); they hold capacity in the plan and are never run. oracle: every
    rigid job is known from the start, each starting no sooner than its
    arrival (the true future, a yardstick as forecast=oracle is for demand:
    how much predicting arrivals could gain)."""
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
    full_every: Optional[int] = 6
    """The allocator's full replans (relaxation, search_moves of search) come
    at most this many steps apart: a periodic replan sooner than that after
    the last full one is light (as at an arrival: priority builds and the
    last plan, arrival_search_moves of search), so replanning every step
    costs about what replanning every full_every steps does. Greedy plans
    only a replan's window, and weighs its backfill variant over the whole
    view at full replans only. null: every periodic replan is full."""
    relax_every: Optional[int] = 24
    """The allocator's relaxation comes at most this many steps apart: a
    full replan sooner than that after the last relaxed one builds from
    priority orders and the last plan only (with the full replan's search).
    null: every full replan relaxes. Chosen on tuning seeds 6-11 of the six
    contended scenarios and the tuning window: against relaxing at every
    full replan (6), the value x0.9997 every 6 steps and x0.9999 every step
    (below on 22 of 37 runs, above on 15) at x0.82 and x0.84 the time
    (bench/results/online_relax_every_every6.md, _every1.md); with the
    search seeded 0 instead of by the run's seed, x1.0009 at x0.75."""
    search_moves: int = 500
    """The allocator's local-search moves per replan, at most (patience a
    fifth of it; solver.local_search_iters when lower): a replan's plan is
    kept only until the next one."""
    search_max_waiting: int = 8
    """The waiting jobs each of the allocator's search moves tries to insert
    again, at most (solver.local_search_max_waiting when lower; offline 24).
    Most of a move's time online goes to insertions that fail: many small
    jobs wait and fit nowhere. Chosen on tuning seeds 6-11 of the six
    contended scenarios and the tuning window: against 24, the value x1.0009
    every 6 steps and x1.0002 every step at x0.88 and x0.84 the time
    (bench/results/online_max_waiting_every6.md, _every1.md)."""
    search_max_removed: Optional[int] = 64
    """The jobs each of the allocator's ruin moves takes out, at most
    (solver.local_search_max_removed when lower; offline no cap): those that
    start first in its window. On the seven a window of 4-48 steps holds
    3-13 starts on average (70 at most in a sample); on a week of 3,000 jobs
    on 128 GPUs, 109 (up to 621), and the move, 600 us against 60-120.
    On the report seeds 0-5 of the six contended scenarios, three windows
    and that week, against no cap: value x0.9999 (below on 7 runs, above on
    10), time x0.92, the week x0.69-x0.71 at x0.9992 the value; below greedy
    online on the same runs (bench/results/online_max_removed.md).
    null: no cap."""
    relax_iterations: int = 30
    """The allocator's relaxation steps per full replan, at most
    (solver.iterations when lower; offline it runs solver.iterations, 60).
    The relaxation is the bulk of a full replan on a large view: 30 steps
    halve it, and on tuning seeds 3-14 of the six contended scenarios gave
    x1.0002 the value of 60 replanning every 6 steps, x0.9994 every step
    (bench/results/online_relax30_every6.md, _every1.md)."""
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
        r = Rules(self, at)
        r.number("discount", "[0, 1)")
        r.number("search_moves", "[0, inf)", integer=True)
        r.number("relax_iterations", "[0, inf)", integer=True)
        r.number("search_max_waiting", "[0, inf)", integer=True)
        r.number("search_max_removed", "[1, inf)", integer=True, null=True)
        r.number("anneal_moves", "[0, inf)", integer=True)
        r.one_of("arrivals", ARRIVALS)
        r.one_of("replan_on_arrival", ARRIVAL_REPLANS)
        r.number("arrival_search_moves", "[0, inf)", integer=True)
        r.number("replan_every", "[1, inf)", integer=True)
        r.number("full_every", "[1, inf)", integer=True, null=True)
        r.number("relax_every", "[1, inf)", integer=True, null=True)
        r.one_of("forecast", FORECASTS)
        r.number("ewma_alpha", "(0, 1]")
        r.number("period_steps", "[1, inf)", integer=True, null=True)
        r.number("headroom", "(0, inf)")
        r.number("guarantee_headroom", "[0, inf)")
        r.number("guarantee_headroom_first_day", "[0, inf)")
