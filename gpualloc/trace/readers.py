"""Reading trace files into `Record`s (times in seconds): the Alibaba pod
list and node list, and a generic job CSV. Every row and field is checked as
it is read; a `TraceError` names the file, line and field. What the records
then become is `gpualloc.trace.convert`'s job (the rules: the package
docstring, gpualloc/trace/__init__.py).
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from gpualloc.files import read_text
from gpualloc.scenario import KINDS, MAX_GPUS, MAX_INT

QOS_KIND = {"LS": "realtime_inference", "Guaranteed": "training", "Burstable": "training",
            "BE": "batch_inference"}
QOS_PRIORITY = {"LS": 9.0, "Guaranteed": 8.0, "Burstable": 5.0, "BE": 2.0}
MILLI = 1000  # gpu_milli of one whole GPU


class TraceError(ValueError):
    """A trace or an option the importer cannot use; the message names the
    file, line and field (or the option)."""


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


# ---- reading CSV ------------------------------------------------------------------------

def _rows(path: Path, required: list[str]):
    # The whole file is read and decoded first (gpualloc.files: UTF-8, with or
    # without the byte-order mark a spreadsheet writes), so a bad byte is one
    # line naming the file, and no row was used before it was found.
    text = read_text(path, TraceError)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            shown = ", ".join(repr(c) for c in header[:20]) + (", ..." if len(header) > 20 else "")
            raise TraceError(f"{path}: missing column {', '.join(repr(c) for c in missing)} "
                             f"(columns: {shown or 'none'})")
        for row in reader:
            if None in row:
                raise TraceError(f"{path} line {reader.line_num}: {len(header) + len(row[None])} "
                                 f"fields, the header has {len(header)}")
            if any(v is None for v in row.values()):
                raise TraceError(f"{path} line {reader.line_num}: fewer fields than the "
                                 f"header's {len(header)}")
            yield reader.line_num, row
    except csv.Error as e:  # e.g. a field above the csv module's size limit
        raise TraceError(f"{path} line {reader.line_num}: not a CSV row ({e})") from None


def _number(row: dict, col: str, path: Path, line: int, lo: float | None = None,
            hi: float | None = None, unit: float = 1.0) -> float:
    """A number field, times `unit` (a time column's seconds per unit): finite
    once in those units, and in [lo, hi] where given."""
    text = row[col].strip()
    try:
        v = float(text)
    except ValueError:
        raise TraceError(f"{path} line {line}: field {col!r} must be a number, "
                         f"got {text!r:.40}") from None
    if math.isfinite(v) and not math.isfinite(v * unit):
        raise TraceError(f"{path} line {line}: field {col!r} is {text!r:.40}, too large a time "
                         f"(in seconds, not a finite number)")
    if not math.isfinite(v) or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = (f" in [{lo:g}, {hi:g}]" if hi is not None else
               f" >= {lo:g}" if lo is not None else "")
        raise TraceError(f"{path} line {line}: field {col!r} must be a finite number{rng}, "
                         f"got {text!r:.40}")
    return v * unit


def _int_field(row: dict, col: str, path: Path, line: int, lo: int = 0,
               hi: int = MAX_INT) -> int:
    text = row[col].strip()
    # At most 18 digits: whatever is longer is out of range, and int() of
    # thousands of digits is an error of its own.
    if not re.fullmatch(r"[+-]?\d{1,18}", text) or not lo <= int(text) <= hi:
        raise TraceError(f"{path} line {line}: field {col!r} must be an integer in "
                         f"[{lo}, {hi:,}], got {text!r:.40}")
    return int(text)


def _word(value: str, placeholder: str) -> str:
    """`value` where an option may quote it as is (a plain word), else the placeholder."""
    return value if re.fullmatch(r"[\w.+-]{1,40}", value) else placeholder


def _types(text: str, sep: str) -> tuple[str, ...] | None:
    types = tuple(dict.fromkeys(t.strip() for t in text.split(sep) if t.strip()))
    return types or None


# ---- the Alibaba trace -----------------------------------------------------------------

def read_nodes(path: Path) -> list[tuple[str, int]]:
    """The Alibaba node list: (model, GPUs) per node, in file order; nodes
    without GPUs are skipped."""
    nodes = []
    for line, row in _rows(path, ["model", "gpu"]):
        gpus = _int_field(row, "gpu", path, line, lo=0, hi=MAX_GPUS)
        model = row["model"].strip()
        if gpus > 0:
            if not model:
                raise TraceError(f"{path} line {line}: field 'model' is empty")
            nodes.append((model, gpus))
    if not nodes:
        raise TraceError(f"{path}: no node with a GPU")
    return nodes


ALIBABA_COLUMNS = ["name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "creation_time",
                   "deletion_time", "scheduled_time"]


def read_alibaba(path: Path, kinds: dict[str, str] | None = None,
                 priorities: dict[str, float] | None = None) -> list[Record]:
    """Pods of an Alibaba `openb_pod_list_*.csv` as records (the package docstring)."""
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
            known = ", ".join(sorted(set(kinds) & set(priorities)))
            raise TraceError(f"{path} line {line}: field 'qos' is {qos!r:.40}, which has no kind "
                             f"or priority (known: {known}; add one with --kind "
                             f"{_word(qos, 'QOS')}=KIND --priority {_word(qos, 'QOS')}=P)")
        num = _int_field(row, "num_gpu", path, line, hi=MAX_GPUS)
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


# ---- a generic job CSV ------------------------------------------------------------------

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
        submit = _number(row, cols.submit, path, line, lo=0, unit=time_unit)
        run = _number(row, cols.duration, path, line, lo=0, unit=duration_unit)
        gpus = _number(row, cols.gpus, path, line, lo=0, hi=MAX_GPUS)
        k = kind
        if cols.kind:
            raw = row[cols.kind].strip()
            k = kind_map.get(raw, raw) if raw else kind
            if k not in KINDS:
                raise TraceError(f"{path} line {line}: field {cols.kind!r} is {raw!r:.40}, not a "
                                 f"kind ({', '.join(KINDS)}; map it with --kind-map "
                                 f"{_word(raw, 'VALUE')}=KIND)")
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

