"""Trace import: a real workload becomes a scenario file of PROBLEM.md.

    python -m gpualloc.trace alibaba PODS.csv --start 134d --length 96h --sample-gpus 64 -o a.json
    python -m gpualloc.trace csv jobs.csv --gpus 64 --length 7d -o jobs.json

Both importers read rows into `Record`s (times in seconds), then one converter
cuts a time window into `step`-long timesteps and applies the rules below,
counting every record under exactly one primary rule (they add up to the rows
read) plus the modifiers that touched it. The command prints the counts.

Alibaba GPU trace 2023 (`openb_pod_list_*.csv`, and `openb_node_list_gpu_node.csv`
for the cluster). The trace does not label training or inference; the
mapping of a pod's `qos` to a kind and a priority is an assumption, stated
here and changeable with `--kind QOS=KIND` and `--priority QOS=P`:

    qos         kind                priority   why
    LS          realtime_inference  9          latency-sensitive: serving
    Guaranteed  training            8          reserved, long-running
    Burstable   training            5          elastic CPU, GPU work of hours
    BE          batch_inference     2          best effort: batch work

- Serving pods (kind realtime_inference) are aggregated into services, one per
  (GPU models allowed, GPUs per pod, priority). A pod wants one replica from
  its `creation_time` to its `deletion_time` (a pod that never ran wanted
  one too: unserved demand is demand). A service's demand at a timestep is
  the peak (`--demand peak`, default) or time-mean (`--demand mean`) of the
  GPUs its pods want during the step, in replicas, rounded up. Fractional
  pods (`gpu_milli` < 1000) of 1-GPU services add their share, so two
  half-GPU pods make one replica. A service arrives at its first step with
  demand; pods cut by the window count for their part inside it.
- Rigid pods (every other kind) arrive at the step of their `creation_time`
  and run for `deletion_time - scheduled_time`, rounded up to whole steps
  (at least one). A fractional pod gets one whole GPU (the plan has no GPU
  sharing). A pod created before the window and still running at its start
  arrives at step 0 with the rest of its run; one created before and started
  inside arrives at step 0 with its whole run; one that runs past the
  window's end is kept whole and the horizon cuts it (PROBLEM.md). Failed
  pods ran and held their GPUs: they count like any other.
- Pods that never ran (no `scheduled_time`) and are rigid have no runtime:
  left out by default, or with `--never-ran keep` kept with the time they
  waited (`deletion_time - creation_time`) as their run.
- Pods asking for no GPU (`num_gpu` 0) are not GPU work: left out.
- `gpu_spec` (models allowed, `|`-separated; empty: any) becomes `gpu_types`,
  narrowed to the models the cluster has; a pod none of whose models the
  cluster has is left out (no GPU could ever hold it).
- Pods deleted at the trace's last timestamp were cut by the trace's end:
  their runtime is a lower bound (counted, kept).
- The cluster: the trace's own nodes (default), a sample of them
  (`--sample-gpus N`: at least one node of every model, so every gpu_spec can
  be honoured, the rest in proportion to each model's share of the trace's
  GPUs), or pools given with `--pool NAME:COUNT:GPUS_PER_NODE:TYPE:MEMORY_GB`.
  A pool is one (model, GPUs per node) of the node list. GPU memory is not in
  the trace (`--memory MODEL=GB`; G1-G3 are undisclosed models) and no pod
  asks for GPU memory, so it changes nothing in the plans.

Generic CSV (`csv`): one row per job with an id, a submit time, a duration
and a GPU count; optionally GPU types, priority and kind. Column names and
time units are options. Rows are rigid jobs of `--kind` unless a kind column
says otherwise; rows of kind realtime_inference are replicas wanted from
submit for their duration, aggregated into services as above. A job
submitted before the window is left out (the CSV has no start time to tell
whether it was still running). Real-time services the trace lacks can be
added with `--realtime-services N` (synthetic diurnal curves of the
generator, seeded). The cluster is given with `--pool` or `--gpus N`.
"""
from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpualloc.scenario import ELASTIC_KINDS, KINDS, Job, Pool, Scenario, ScenarioError, from_dict

QOS_KIND = {"LS": "realtime_inference", "Guaranteed": "training", "Burstable": "training",
            "BE": "batch_inference"}
QOS_PRIORITY = {"LS": 9.0, "Guaranteed": 8.0, "Burstable": 5.0, "BE": 2.0}
# GB per GPU. G1-G3 are undisclosed; no pod asks for GPU memory, so these
# values never constrain a plan: they only fill PROBLEM.md's pool field.
MODEL_MEMORY_GB = {"P100": 16.0, "T4": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0,
                   "G1": 32.0, "G2": 32.0, "G3": 32.0}
DEFAULT_MEMORY_GB = 32.0
MILLI = 1000  # gpu_milli of one whole GPU


class TraceError(ValueError):
    """A trace or an option the importer cannot use; the message names the
    file, line and field (or the option)."""


# ---- records and rules ----------------------------------------------------------

@dataclass
class Record:
    """One trace row in the project's terms; times in seconds."""

    line: int
    name: str
    kind: str
    priority: float
    milli: int
    """GPUs asked, in thousandths: 1000 per whole GPU; below 1000 a share of one."""
    gpu_types: tuple[str, ...] | None
    submit: float
    until: float
    """End of the interval it wanted (serving) or held (rigid)."""
    start: float | None = None
    """When it began to run; None: never ran, or unknown (CSV)."""
    ran: bool = True
    trace_end: bool = False


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
    """Cut `window` out of the records and apply the rules of the module docstring."""
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


def read_nodes(path: Path) -> list[tuple[str, int]]:
    """The Alibaba node list: (model, GPUs) per node, in file order; nodes
    without GPUs are skipped."""
    nodes = []
    for line, row in _rows(path, ["model", "gpu"]):
        gpus = _int_field(row, "gpu", path, line, lo=0)
        model = row["model"].strip()
        if gpus > 0:
            if not model:
                raise TraceError(f"{path} line {line}: field 'model' is empty")
            nodes.append((model, gpus))
    if not nodes:
        raise TraceError(f"{path}: no node with a GPU")
    return nodes


def trace_pools(nodes: list[tuple[str, int]], memory: dict[str, float] | None = None,
                sample_gpus: int | None = None) -> list[Pool]:
    """Pools of (model, GPUs per node), the one with most GPUs in the trace
    first; all nodes, or a sample of `sample_gpus` GPUs (module docstring)."""
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


# ---- reading CSV ------------------------------------------------------------------------

def _rows(path: Path, required: list[str]):
    try:
        f = open(path, newline="")
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    with f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}: missing column {', '.join(repr(c) for c in missing)} "
                             f"(columns: {', '.join(header) or 'none'})")
        for row in reader:
            if None in row:
                raise TraceError(f"{path} line {reader.line_num}: {len(header) + len(row[None])} "
                                 f"fields, the header has {len(header)}")
            if any(v is None for v in row.values()):
                raise TraceError(f"{path} line {reader.line_num}: fewer fields than the "
                                 f"header's {len(header)}")
            yield reader.line_num, row


def _number(row: dict, col: str, path: Path, line: int, lo: float | None = None) -> float:
    text = row[col].strip()
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{path} line {line}: field {col!r} must be a number, got {text!r}") from None
    if not math.isfinite(v) or (lo is not None and v < lo):
        raise TraceError(f"{path} line {line}: field {col!r} must be a finite number"
                         f"{f' >= {lo:g}' if lo is not None else ''}, got {text!r}")
    return v


def _int_field(row: dict, col: str, path: Path, line: int, lo: int = 0) -> int:
    text = row[col].strip()
    if not re.fullmatch(r"[+-]?\d+", text) or int(text) < lo:
        raise TraceError(f"{path} line {line}: field {col!r} must be an integer >= {lo}, "
                         f"got {text!r}")
    return int(text)


def _types(text: str, sep: str) -> tuple[str, ...] | None:
    types = tuple(dict.fromkeys(t.strip() for t in text.split(sep) if t.strip()))
    return types or None


ALIBABA_COLUMNS = ["name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time",
                   "deletion_time", "scheduled_time"]


def read_alibaba(path: Path, kinds: dict[str, str] | None = None,
                 priorities: dict[str, float] | None = None) -> list[Record]:
    """Pods of an Alibaba `openb_pod_list_*.csv` as records (module docstring)."""
    kinds = {**QOS_KIND, **(kinds or {})}
    priorities = {**QOS_PRIORITY, **(priorities or {})}
    path = Path(path)
    out = []
    try:
        rows = list(_rows(path, ALIBABA_COLUMNS))
    except TraceError as e:
        if "missing column" in str(e):
            raise TraceError(f"{e}; the Alibaba importer needs a pod list with times, such as "
                             f"openb_pod_list_default.csv or openb_pod_list_gpuspec33.csv") from None
        raise
    for line, row in rows:
        qos = row["qos"].strip()
        if qos not in kinds or qos not in priorities:
            raise TraceError(f"{path} line {line}: field 'qos' is {qos!r}, which has no kind or "
                             f"priority (known: {', '.join(sorted(set(kinds) & set(priorities)))}; "
                             f"add one with --kind {qos}=KIND --priority {qos}=P)")
        num = _int_field(row, "num_gpu", path, line)
        milli = _int_field(row, "gpu_milli", path, line)
        if num > 0 and not 0 < milli <= MILLI:
            raise TraceError(f"{path} line {line}: field 'gpu_milli' must be in 1..1000 for a "
                             f"GPU pod, got {milli}")
        created = _number(row, "creation_time", path, line, lo=0)
        deleted = _number(row, "deletion_time", path, line, lo=created)
        started = None
        if row["scheduled_time"].strip():
            started = _number(row, "scheduled_time", path, line, lo=created)
            if started > deleted:
                raise TraceError(f"{path} line {line}: field 'scheduled_time' {started:g} is "
                                 f"after 'deletion_time' {deleted:g}")
        out.append(Record(
            line=line, name=row["name"].strip() or f"line-{line}", kind=kinds[qos],
            priority=priorities[qos], milli=0 if num == 0 else (milli if num == 1 else num * MILLI),
            gpu_types=_types(row["gpu_spec"], "|"), submit=created, until=deleted,
            start=started, ran=started is not None))
    if not out:
        raise TraceError(f"{path}: no pods")
    last = max(r.until for r in out)
    for r in out:
        r.trace_end = r.until == last
    return out


@dataclass
class CsvColumns:
    id: str = "job_id"
    submit: str = "submit_time"
    duration: str = "duration"
    gpus: str = "num_gpus"
    gpu_type: str | None = None
    priority: str | None = None
    kind: str | None = None


def read_csv(path: Path, cols: CsvColumns, time_unit: float, duration_unit: float,
             kind: str = "training", priority: float = 5.0, kind_map: dict[str, str] | None = None,
             type_sep: str = "|") -> list[Record]:
    """Rows of a generic job CSV as records; units are seconds per unit."""
    path = Path(path)
    required = [cols.id, cols.submit, cols.duration, cols.gpus] + [
        c for c in (cols.gpu_type, cols.priority, cols.kind) if c]
    kind_map = kind_map or {}
    out, seen = [], {}
    for line, row in _rows(path, required):
        job_id = row[cols.id].strip()
        if not job_id:
            raise TraceError(f"{path} line {line}: field {cols.id!r} is empty")
        if job_id in seen:
            raise TraceError(f"{path} line {line}: field {cols.id!r}: job {job_id!r} already on "
                             f"line {seen[job_id]}")
        seen[job_id] = line
        submit = _number(row, cols.submit, path, line, lo=0) * time_unit
        run = _number(row, cols.duration, path, line, lo=0) * duration_unit
        gpus = _number(row, cols.gpus, path, line, lo=0)
        k = kind
        if cols.kind:
            raw = row[cols.kind].strip()
            k = kind_map.get(raw, raw) if raw else kind
            if k not in KINDS:
                raise TraceError(f"{path} line {line}: field {cols.kind!r} is {raw!r}, not a kind "
                                 f"({', '.join(KINDS)}; map it with --kind-map {raw}=KIND)")
        p = priority
        if cols.priority and row[cols.priority].strip():
            p = _number(row, cols.priority, path, line)
            if p <= 0:
                raise TraceError(f"{path} line {line}: field {cols.priority!r} must be > 0, "
                                 f"got {row[cols.priority].strip()!r}")
        types = _types(row[cols.gpu_type], type_sep) if cols.gpu_type else None
        out.append(Record(line=line, name=job_id, kind=k, priority=p,
                          milli=math.ceil(gpus * MILLI - 1e-9), gpu_types=types, submit=submit,
                          until=submit + run, start=None, ran=True))
    if not out:
        raise TraceError(f"{path}: no rows")
    return out


# ---- the command ------------------------------------------------------------------------

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str, what: str, default_unit: str = "s") -> float:
    """'134d', '96h', '60m', '90s' or a bare number (in `default_unit`) -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([a-z]*)\s*", text)
    unit = (m.group(2) or default_unit) if m else None
    if not m or unit not in _UNITS:
        raise TraceError(f"{what} {text!r}: expected a number with a unit "
                         f"({', '.join(_UNITS)}), e.g. 134d, 96h, 60m")
    return float(m.group(1)) * _UNITS[unit]


def _window(start: float, length: str, step: str) -> Window:
    step_s = seconds(step, "--step")
    length_s = seconds(length, "--length")
    if step_s <= 0 or length_s <= 0:
        raise TraceError("--step and --length must be positive")
    steps = length_s / step_s
    if abs(steps - round(steps)) > 1e-9:
        raise TraceError(f"--length {length} is not a whole number of --step {step}")
    if step_s % 60:
        raise TraceError(f"--step {step}: must be whole minutes")
    return Window(start=start, steps=int(round(steps)), step_s=step_s)


def _pairs(items: list[str], opt: str, value) -> dict:
    out = {}
    for item in items or []:
        key, sep, v = item.partition("=")
        if not sep or not key:
            raise TraceError(f"{opt} {item!r}: expected KEY=VALUE")
        try:
            out[key] = value(v)
        except ValueError as e:
            raise TraceError(f"{opt} {item!r}: {e}") from None
    return out


def _kind(v: str) -> str:
    if v not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    return v


def _priority(v: str) -> float:
    p = float(v)
    if not math.isfinite(p) or p <= 0:
        raise ValueError("priority must be a number > 0")
    return p


def alibaba_command(a: argparse.Namespace) -> Import:
    pods = Path(a.pods)
    records = read_alibaba(pods, _pairs(a.kind, "--kind", _kind),
                           _pairs(a.priority, "--priority", _priority))
    window = _window(seconds(a.start, "--start"), a.length, a.step)
    if a.pool:
        if a.sample_gpus is not None:
            raise TraceError("--pool and --sample-gpus: give one cluster, not both")
        pools = [parse_pool(p) for p in a.pool]
    else:
        nodes = Path(a.nodes) if a.nodes else pods.parent / "openb_node_list_gpu_node.csv"
        pools = trace_pools(read_nodes(nodes), _pairs(a.memory, "--memory", float),
                            a.sample_gpus)
    name = a.name or f"alibaba_{a.start}_{a.length}"
    return convert(records, window, pools, name, never_ran=a.never_ran, demand=a.demand)


def csv_command(a: argparse.Namespace) -> Import:
    cols = CsvColumns(id=a.id_col, submit=a.submit_col, duration=a.duration_col, gpus=a.gpus_col,
                      gpu_type=a.type_col, priority=a.priority_col, kind=a.kind_col)
    unit = seconds("1" + a.time_unit, "--time-unit")
    dunit = seconds("1" + (a.duration_unit or a.time_unit), "--duration-unit")
    records = read_csv(Path(a.file), cols, unit, dunit, kind=_kind_opt(a.kind),
                       priority=_priority_opt(a.default_priority),
                       kind_map=_pairs(a.kind_map, "--kind-map", _kind), type_sep=a.type_sep)
    start = (seconds(a.start, "--start", a.time_unit) if a.start is not None
             else min(r.submit for r in records))
    if a.length is None:  # up to the last end
        step_s = seconds(a.step, "--step")
        a.length = f"{math.ceil((max(r.until for r in records) - start) / step_s) * step_s:g}s"
    window = _window(start, a.length, a.step)
    if a.pool:
        if a.gpus is not None:
            raise TraceError("--pool and --gpus: give one cluster, not both")
        pools = [parse_pool(p) for p in a.pool]
    elif a.gpus is not None:
        if a.gpus < 1 or a.gpus % a.gpus_per_node:
            raise TraceError(f"--gpus {a.gpus}: must be a positive multiple of "
                             f"--gpus-per-node {a.gpus_per_node}")
        pools = [Pool(name=a.gpu_type.lower(), count=a.gpus // a.gpus_per_node,
                      gpus_per_node=a.gpus_per_node, gpu_type=a.gpu_type, memory_gb=a.memory_gb)]
    else:
        raise TraceError("the CSV has no cluster: give --gpus N or --pool NAME:COUNT:GPN:TYPE:GB")
    name = a.name or Path(a.file).stem
    result = convert(records, window, pools, name, never_ran="drop", demand=a.demand)
    if a.realtime_services:
        result = _add_services(result, a)
    return result


def _kind_opt(v: str) -> str:
    try:
        return _kind(v)
    except ValueError as e:
        raise TraceError(f"--kind {v!r}: {e}") from None


def _priority_opt(v: str) -> float:
    try:
        return _priority(v)
    except ValueError as e:
        raise TraceError(f"--priority {v!r}: {e}") from None


def _add_services(result: Import, a: argparse.Namespace) -> Import:
    from gpualloc.config import RealtimeWorkloadConfig
    from gpualloc.generate import demand_curve

    s = result.scenario
    if not 0 < a.realtime_peak:
        raise TraceError(f"--realtime-peak {a.realtime_peak}: must be >= 1")
    w = RealtimeWorkloadConfig(services=a.realtime_services, gpus=[a.realtime_gpus],
                               peak_replicas=[a.realtime_peak, a.realtime_peak],
                               priority=[9, 9])
    rng = np.random.default_rng(a.seed)
    jobs = list(s.jobs)
    for i in range(a.realtime_services):
        jobs.append(Job(id=f"rt-synthetic-{i}", kind="realtime_inference",
                        priority=_plain(_priority_opt(a.realtime_priority)), arrival=0,
                        gpus=a.realtime_gpus, demand=demand_curve(rng, w, s.T, s.step_minutes)))
    jobs.sort(key=lambda j: j.arrival)
    doc = Scenario(name=s.name, horizon=s.T, step_minutes=s.step_minutes, pools=s.pools,
                   jobs=jobs).to_dict()
    try:
        scen = from_dict(doc)
    except ScenarioError as e:
        raise TraceError(f"the converted scenario is invalid: {e}") from None
    return Import(scenario=scen, rows=result.rows, counts=result.counts,
                  services=result.services + a.realtime_services)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpualloc.trace",
                                description="Turn a workload trace into a gpualloc scenario file "
                                            "(rules: the docstring of gpualloc/trace.py).")
    sub = p.add_subparsers(dest="source", required=True)

    def common(q):
        q.add_argument("-o", "--out", required=True, help="scenario file to write (.json or .yaml)")
        q.add_argument("--name", help="scenario name (default from the file and window)")
        q.add_argument("--step", default="60m", help="timestep length, e.g. 60m (default 60m)")
        q.add_argument("--demand", choices=["peak", "mean"], default="peak",
                       help="serving demand per step: peak or time-mean of replicas wanted")
        q.add_argument("--pool", action="append", metavar="NAME:COUNT:GPN:TYPE:GB",
                       help="a node pool of the cluster (repeat for several)")

    a = sub.add_parser("alibaba", help="Alibaba GPU cluster trace 2023 (openb_pod_list_*.csv)")
    a.add_argument("pods", help="openb_pod_list_default.csv or openb_pod_list_gpuspec33.csv")
    a.add_argument("--start", required=True, help="window start in trace time, e.g. 134d")
    a.add_argument("--length", required=True, help="window length, e.g. 96h")
    a.add_argument("--nodes", help="node list (default: openb_node_list_gpu_node.csv beside PODS)")
    a.add_argument("--sample-gpus", type=int, help="cluster: a sample of the trace's nodes with "
                                                   "this many GPUs (default: all nodes)")
    a.add_argument("--memory", action="append", metavar="MODEL=GB", help="GPU memory of a model")
    a.add_argument("--kind", action="append", metavar="QOS=KIND", help="kind of a qos class")
    a.add_argument("--priority", action="append", metavar="QOS=P", help="priority of a qos class")
    a.add_argument("--never-ran", choices=["drop", "keep"], default="drop",
                   help="rigid pods without scheduled_time: left out (default) or kept")
    common(a)
    c = sub.add_parser("csv", help="a generic job CSV (id, submit, duration, GPUs)")
    c.add_argument("file")
    c.add_argument("--id-col", default="job_id")
    c.add_argument("--submit-col", default="submit_time")
    c.add_argument("--duration-col", default="duration")
    c.add_argument("--gpus-col", default="num_gpus")
    c.add_argument("--type-col", help="allowed GPU types (separated by --type-sep)")
    c.add_argument("--type-sep", default="|")
    c.add_argument("--priority-col")
    c.add_argument("--kind-col")
    c.add_argument("--kind-map", action="append", metavar="VALUE=KIND",
                   help="map a value of the kind column to a kind")
    c.add_argument("--kind", default="training", help="kind of rows without one (default training)")
    c.add_argument("--default-priority", default="5", help="priority of rows without one")
    c.add_argument("--time-unit", default="s", help="unit of the submit column (ms, s, m, h, d)")
    c.add_argument("--duration-unit", help="unit of the duration column (default: --time-unit)")
    c.add_argument("--start", help="window start, in --time-unit or with a unit "
                                   "(default: the first submit)")
    c.add_argument("--length", help="window length, e.g. 7d (default: up to the last submit)")
    c.add_argument("--gpus", type=int, help="cluster: this many GPUs of one type")
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--gpu-type", default="H100")
    c.add_argument("--memory-gb", type=float, default=80.0)
    c.add_argument("--realtime-services", type=int, default=0,
                   help="add this many synthetic real-time services (the trace has none)")
    c.add_argument("--realtime-peak", type=int, default=4, help="their day-peak replicas")
    c.add_argument("--realtime-gpus", type=int, default=1, help="GPUs per replica")
    c.add_argument("--realtime-priority", default="9")
    c.add_argument("--seed", type=int, default=0, help="seed of the synthetic services")
    common(c)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = alibaba_command(args) if args.source == "alibaba" else csv_command(args)
        out = Path(args.out)
        if out.suffix not in (".json", ".yaml", ".yml"):
            raise TraceError(f"--out {args.out}: must end in .json, .yaml or .yml")
        result.scenario.save(out)
    except (TraceError, ScenarioError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {getattr(e, 'filename', '') or ''}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(result.report())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
