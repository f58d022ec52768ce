"""Records -> scenario: cut a time window into timesteps, apply the rules of
the package docstring (gpualloc/trace/__init__.py), aggregate serving pods
into real-time services' demand curves, and build the cluster's pools (the
trace's nodes, a sample of them, or `--pool` specs). Every record is counted
under exactly one primary rule plus the modifiers that touched it (`Import`).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from gpualloc.scenario import ELASTIC_KINDS, Job, Pool, Scenario, ScenarioError, from_dict
from gpualloc.trace.readers import MILLI, Record, TraceError

# GB per GPU. G1-G3 are undisclosed; no pod asks for GPU memory, so these
# values never constrain a plan: they only fill PROBLEM.md's pool field.
MODEL_MEMORY_GB = {"P100": 16.0, "T4": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0,
                   "G1": 32.0, "G2": 32.0, "G3": 32.0}
DEFAULT_MEMORY_GB = 32.0


# ---- rules ---------------------------------------------------------------------------

# Primary rules: every record is counted under exactly one.
PRIMARY = {
    "outside": "outside the window: not in the scenario",
    "no_gpu": "ask for no GPU: not GPU work, left out",
    "never_ran_dropped": "rigid, never ran (no start time): runtime unknown, left out",
    "no_model": "allow only GPU models the cluster lacks: left out",
    "service": "serving: replicas of real-time services' demand",
    "rigid": "rigid jobs",
}
# Modifiers: a record may be touched by several.
MODIFIERS = {
    "fractional_service": "fractional GPU, serving: shares summed per service, rounded up",
    "fractional_rigid": "fractional GPU, rigid: rounded up to one whole GPU",
    "never_ran_service": "serving, never ran: its wanted interval counts as demand",
    "never_ran_kept": "rigid, never ran, kept (--never-ran keep): waited time as run",
    "cut_service": "serving, cut by a window edge: only the part inside counts",
    "running_at_start": "rigid, running at the window's start: the rest arrives at step 0",
    "waiting_at_start": "rigid, submitted before the window, started inside: arrives at step 0",
    "past_end": "rigid, runs past the window's end: kept whole, the horizon cuts it",
    "short": "rigid, runs less than one step: lengthened to one step",
    "trace_end": "deleted at the trace's end: runtime is a lower bound",
    "narrowed": "GPU models narrowed to those the cluster has",
}


@dataclass
class Import:
    """What a conversion gives: the scenario and the rule counts."""

    scenario: Scenario
    rows: int
    counts: Counter = field(default_factory=Counter)
    services: int = 0

    def report(self) -> str:
        s = self.scenario
        lines = [f"{self.rows} rows -> scenario {s.name!r}: {s.G} GPUs, {s.J} jobs "
                 f"(services: {self.services}), {s.T} steps of {s.step_minutes:g} min, "
                 f"offered load {s.offered_load:.2f}",
                 "  rows  rule"]
        for key, text in PRIMARY.items():
            lines.append(f"{self.counts[key]:6d}  {text}")
        lines.append(f"{sum(self.counts[k] for k in PRIMARY):6d}  (total)")
        for key, text in MODIFIERS.items():
            if self.counts[key]:
                lines.append(f"{self.counts[key]:6d}    of which {text}")
        return "\n".join(lines)


# ---- the converter -------------------------------------------------------------------

@dataclass
class Window:
    start: float
    """Seconds: the trace time of step 0."""
    steps: int
    step_s: float

    @property
    def end(self) -> float:
        return self.start + self.steps * self.step_s


def convert(records: list[Record], window: Window, pools: list[Pool], name: str,
            never_ran: str = "drop", demand: str = "peak") -> Import:
    """Cut `window` out of the records and apply the rules of the package docstring."""
    counts: Counter = Counter()
    models = {p.gpu_type for p in pools}
    rigid: list[Job] = []
    serving: dict[tuple, list[tuple[float, float, int]]] = {}
    for r in records:
        elastic = r.kind in ELASTIC_KINDS
        # Rigid: what it runs (or, never ran, how long it waited).
        run = r.until - (r.start if r.start is not None else r.submit)
        if elastic:
            # Wanted during the window (a zero-length want inside it counts, as nothing).
            inside = r.submit < window.end and (r.until > window.start or r.submit >= window.start)
        elif r.submit >= window.end:
            inside = False
        elif r.submit >= window.start:
            inside = True
        elif r.start is not None:  # submitted before: running or waiting at the start?
            inside = r.start + run > window.start
        else:  # never ran (waiting until deleted), or a CSV row without a start time
            inside = not r.ran and r.until > window.start
        if not inside:
            counts["outside"] += 1
            continue
        if r.milli <= 0:
            counts["no_gpu"] += 1
            continue
        if not elastic and not r.ran and never_ran == "drop":
            counts["never_ran_dropped"] += 1
            continue
        types = r.gpu_types
        if types is not None:
            kept = tuple(t for t in types if t in models)
            if not kept:
                counts["no_model"] += 1
                continue
            if len(kept) < len(types):
                counts["narrowed"] += 1
            types = kept
        if r.trace_end:
            counts["trace_end"] += 1
        fractional = r.milli % MILLI != 0
        gpus = math.ceil(r.milli / MILLI)
        if elastic:
            counts["service"] += 1
            counts["fractional_service"] += fractional
            counts["never_ran_service"] += not r.ran
            counts["cut_service"] += r.submit < window.start or r.until > window.end
            # Weight in thousandths of one replica: shares of one GPU add up.
            weight = r.milli if r.milli < MILLI else MILLI
            serving.setdefault((types, gpus, r.priority), []).append((r.submit, r.until, weight))
            continue
        counts["rigid"] += 1
        counts["fractional_rigid"] += fractional
        counts["never_ran_kept"] += not r.ran
        if r.submit < window.start:
            if r.start is not None and r.start < window.start:
                counts["running_at_start"] += 1
                run = r.start + run - window.start
            else:
                counts["waiting_at_start"] += 1
            arrival = 0
        else:
            arrival = int((r.submit - window.start) // window.step_s)
        counts["short"] += run < window.step_s
        duration = max(1, math.ceil(run / window.step_s - 1e-9))
        counts["past_end"] += arrival + duration > window.steps
        rigid.append(Job(id=r.name, kind=r.kind, priority=_plain(r.priority), arrival=arrival,
                         gpus=gpus, duration=duration,
                         gpu_types=list(types) if types is not None else None))
    services = _services(serving, window, demand)
    jobs = sorted(rigid + services, key=lambda j: j.arrival)  # stable: trace order
    s = Scenario(name=name, horizon=window.steps, step_minutes=_plain(window.step_s / 60.0),
                 pools=pools, jobs=jobs)
    try:
        s = from_dict(s.to_dict())  # the same validation as a file
    except ScenarioError as e:
        raise TraceError(f"the converted scenario is invalid: {e}") from None
    return Import(scenario=s, rows=len(records), counts=counts, services=len(services))


def _plain(v: float) -> int | float:
    """9.0 -> 9: whole numbers stay integers in the file."""
    return int(v) if float(v).is_integer() else v


def _services(serving: dict, window: Window, how: str) -> list[Job]:
    jobs = []
    for n, ((types, gpus, priority), pods) in enumerate(sorted(
            serving.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0] or ()))):
        lo = np.array([p[0] for p in pods])
        hi = np.array([p[1] for p in pods])
        w = np.array([p[2] for p in pods], dtype=np.int64)
        level = step_profile(lo, hi, w, window, how)  # (T,) thousandths of a replica
        demand = [int(v) for v in np.ceil(level / MILLI - 1e-9).astype(np.int64)]
        active = np.flatnonzero(np.asarray(demand) > 0)
        if len(active) == 0:  # pods wanted only instants that round to nothing
            continue
        tag = "+".join(types) if types else "any"
        jobs.append(Job(id=f"svc-{n}-{tag}-{gpus}gpu", kind="realtime_inference",
                        priority=_plain(priority), arrival=int(active[0]), gpus=gpus, demand=demand,
                        gpu_types=list(types) if types is not None else None))
    return jobs


def step_profile(lo: np.ndarray, hi: np.ndarray, w: np.ndarray, window: Window,
                 how: str = "peak") -> np.ndarray:
    """(T,) float: per step, the peak (or time-mean) of sum of w over the
    intervals [lo, hi) alive during the step."""
    times = np.concatenate([lo, hi])
    delta = np.concatenate([w, -w])
    order = np.lexsort((delta, times))  # at equal times, ends before starts
    times, delta = times[order], delta[order]
    level = np.cumsum(delta)  # level just after each event
    edges = window.start + window.step_s * np.arange(window.steps + 1)
    out = np.zeros(window.steps)
    at = np.searchsorted(times, edges, side="right")  # events at or before each edge
    for i in range(window.steps):
        a, b = at[i], np.searchsorted(times, edges[i + 1], side="left")
        start_level = level[a - 1] if a > 0 else 0
        if how == "peak":
            out[i] = max(start_level, level[a:b].max()) if b > a else start_level
        else:
            ts = np.concatenate([[edges[i]], times[a:b], [edges[i + 1]]])
            vals = np.concatenate([[start_level], level[a:b]])
            out[i] = float((np.diff(ts) * vals).sum()) / window.step_s
    return out


# ---- clusters -----------------------------------------------------------------------

def parse_pool(text: str) -> Pool:
    parts = text.split(":")
    if len(parts) != 5:
        raise TraceError(f"--pool {text!r}: expected NAME:COUNT:GPUS_PER_NODE:TYPE:MEMORY_GB")
    name, count, gpn, gtype, mem = parts
    try:
        pool = Pool(name=name, count=int(count), gpus_per_node=int(gpn), gpu_type=gtype,
                    memory_gb=float(mem))
    except ValueError:
        raise TraceError(f"--pool {text!r}: COUNT and GPUS_PER_NODE must be integers, "
                         f"MEMORY_GB a number") from None
    if not name or not gtype or pool.count < 1 or pool.gpus_per_node < 1 or pool.memory_gb <= 0:
        raise TraceError(f"--pool {text!r}: needs a name and a type, COUNT and GPUS_PER_NODE "
                         f">= 1, MEMORY_GB > 0")
    return pool


def trace_pools(nodes: list[tuple[str, int]], memory: dict[str, float] | None = None,
                sample_gpus: int | None = None) -> list[Pool]:
    """Pools of (model, GPUs per node), the one with most GPUs in the trace
    first; all nodes, or a sample of `sample_gpus` GPUs (package docstring)."""
    memory = {**MODEL_MEMORY_GB, **(memory or {})}
    count: Counter = Counter(nodes)
    kinds = sorted(count, key=lambda k: (-k[1] * count[k], k))
    if sample_gpus is not None:
        count = _sample(count, kinds, sample_gpus)
    return [Pool(name=f"{m.lower()}x{g}", count=count[(m, g)], gpus_per_node=g, gpu_type=m,
                 memory_gb=memory.get(m, DEFAULT_MEMORY_GB))
            for m, g in kinds if count[(m, g)] > 0]


def _sample(count: Counter, kinds: list, budget: int) -> Counter:
    # One node of every model (its most common node size) first, then whole
    # nodes by largest remainder of each (model, size)'s share of the GPUs.
    total = sum(g * c for (_, g), c in count.items())
    out: Counter = Counter()
    for model in dict.fromkeys(m for m, _ in kinds):
        size = max((k for k in kinds if k[0] == model), key=lambda k: (count[k] * k[1], k[1]))
        out[size] += 1
    used = sum(g * c for (_, g), c in out.items())
    if used > budget:
        raise TraceError(f"--sample-gpus {budget}: one node of each of the trace's "
                         f"{len(out)} models already needs {used} GPUs")
    want = {k: budget * k[1] * count[k] / total for k in kinds}
    while True:
        fits = [k for k in kinds if out[k] < count[k] and used + k[1] <= budget]
        if not fits:
            return out
        k = max(fits, key=lambda k: (want[k] - out[k] * k[1], k[1]))
        out[k] += 1
        used += k[1]
