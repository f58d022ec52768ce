"""Hypothesis strategies for small valid scenario documents, adversarial ones
included: jobs larger than any node, type-restricted jobs, demand spikes above
the cluster's size, everything arriving at once, no jobs at all. And the ways
a valid file gets broken: documents with a field mutated, CSV rows with a
field mutated, files as bytes (random, cut short, re-encoded, a byte changed)."""
from __future__ import annotations

import copy
import csv
import io
import math

import torch
from hypothesis import strategies as st

from gpualloc.policies.fifo import fifo
from gpualloc.scenario import KINDS, Scenario, from_dict
from scenarios import with_fixed

TYPES = ["A", "B", "C"]


@st.composite
def scenario_docs(draw, max_pools=3, max_jobs=8, max_horizon=12, max_gpus=16,
                  preemptible=False):
    """`preemptible`: rigid jobs may be preemptible, with restart costs 0-2."""
    horizon = draw(st.integers(1, max_horizon))
    n_pools = draw(st.integers(1, max_pools))
    pools = []
    for p in range(n_pools):
        pools.append({"name": f"p{p}", "count": draw(st.integers(1, 3)),
                      "gpus_per_node": draw(st.sampled_from([1, 2, 4, 8])),
                      "gpu_type": draw(st.sampled_from(TYPES[:n_pools])),
                      "memory_gb": draw(st.sampled_from([40, 80]))})
    types = sorted({p["gpu_type"] for p in pools})
    same_arrival = draw(st.booleans())
    jobs = []
    for i in range(draw(st.integers(0, max_jobs))):
        kind = draw(st.sampled_from(KINDS))
        job = {"id": f"j{i}", "kind": kind,
               "priority": draw(st.integers(1, 10)),
               "arrival": 0 if same_arrival else draw(st.integers(0, horizon - 1)),
               "gpus": draw(st.sampled_from([1, 1, 2, 2, 3, 4, 8, max_gpus]))}
        if kind == "realtime_inference":
            job["gpus"] = draw(st.sampled_from([1, 1, 2, 4, 16]))
            job["demand"] = draw(st.lists(st.integers(0, 6), min_size=horizon, max_size=horizon))
        else:
            job["duration"] = draw(st.integers(1, 3 * horizon + 2))
            if preemptible and draw(st.booleans()):
                job["preemptible"] = True
                job["restart_cost"] = draw(st.integers(0, 2))
        if draw(st.integers(0, 3)) == 0:
            job["gpu_types"] = draw(st.lists(st.sampled_from(types), min_size=1, max_size=2,
                                             unique=True))
        if draw(st.integers(0, 4)) == 0:
            job["min_memory_gb"] = 80
        jobs.append(job)
    return {"name": "hyp", "horizon": horizon, "step_minutes": 60,
            "cluster": {"pools": pools}, "jobs": jobs}


def scenarios(**kw) -> st.SearchStrategy[Scenario]:
    return scenario_docs(**kw).map(from_dict)


# ---- documents with a field mutated ----------------------------------------------------------

HUGE = [10**9 + 1, 2**31, 2**63, 10**30, -(2**63) - 1, 10**5 + 1]
SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 1e308, 5e-324, 0.5, 1.0]
junk = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10) | st.sampled_from(HUGE + SPECIAL)
    | st.text(max_size=4) | st.floats(allow_nan=True, allow_infinity=True),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=2),
    max_leaves=6)


def _slots(doc, out=None):
    """Every (container, key) of a document, the root's keys included."""
    out = [] if out is None else out
    items = (doc.items() if isinstance(doc, dict) else
             enumerate(doc) if isinstance(doc, list) else [])
    for k, v in items:
        out.append((doc, k))
        if isinstance(v, (dict, list)):
            _slots(v, out)
    return out


@st.composite
def mutated(draw, docs, max_mutations=3):
    """A document of `docs`, then one to `max_mutations` mutations anywhere in
    it: a key dropped, a value replaced by junk (wrong types, NaN/inf, huge
    numbers, strings, nested junk), a number nudged out of range, an unknown
    key, a list item duplicated, a value wrapped in a list or mapping."""
    doc = copy.deepcopy(draw(docs))
    for _ in range(draw(st.integers(1, max_mutations))):
        slots = _slots(doc)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(["drop", "junk", "nudge", "unknown", "duplicate", "wrap"]))
        value = container[key]
        if op == "drop":
            del container[key]
        elif op == "junk":
            container[key] = draw(junk)
        elif op == "nudge" and isinstance(value, (int, float)) and not isinstance(value, bool):
            container[key] = value + draw(st.sampled_from([-1, 1, -(10**6), 10**6, 10**12, 0.5]))
        elif op == "unknown" and isinstance(value, dict):
            value[draw(st.sampled_from(["extra", "", "1"]))] = draw(junk)
        elif op == "duplicate" and isinstance(value, list) and value:
            value.append(copy.deepcopy(value[0]))
        elif op == "wrap":
            container[key] = draw(st.sampled_from([[value], {"x": value}]))
    return doc


def mutated_docs(max_jobs=5, max_horizon=10):
    """Scenario documents with one to three mutations."""
    return mutated(scenario_docs(max_jobs=max_jobs, max_horizon=max_horizon))


# ---- CSV rows with a field mutated ------------------------------------------------------------

JUNK_FIELDS = ["", " ", "x", "-1", "0", "0.5", "1e308", "-1e308", "1e-320", "nan", "inf",
               "-inf", "9" * 30, "9" * 400, "1_000", "0x10", "+3", " 7 ", "é", "日本", "\"",
               "a,b", "a\nb", "\r", "true", "null", "LS", "BE", "realtime_inference",
               "training", "H100|", "|", "A10"]


def csv_text(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


@st.composite
def mutated_csv(draw, tables, max_mutations=2):
    """CSV text of a table of `tables` (a header row, then rows), after one to
    `max_mutations` mutations: a field replaced by junk (wrong types, NaN/inf,
    huge numbers, quotes, separators, newlines, other scripts), a field dropped
    or added, a row duplicated or dropped."""
    rows = [list(r) for r in draw(tables)]
    for _ in range(draw(st.integers(1, max_mutations))):
        i = draw(st.integers(0, len(rows) - 1))
        row = rows[i]
        op = draw(st.sampled_from(["junk", "junk", "junk", "drop_field", "add_field",
                                   "duplicate", "drop_row"]))
        if op == "junk" and row:
            row[draw(st.integers(0, len(row) - 1))] = draw(
                st.sampled_from(JUNK_FIELDS) | st.text(max_size=6))
        elif op == "drop_field" and row:
            del row[draw(st.integers(0, len(row) - 1))]
        elif op == "add_field":
            row.append(draw(st.sampled_from(JUNK_FIELDS)))
        elif op == "duplicate":
            rows.insert(i, list(row))
        elif op == "drop_row" and len(rows) > 1:
            del rows[i]
    return csv_text(rows)


@st.composite
def broken_csv(draw, tables):
    """The bytes of a table of `tables`, a field mutated (mutated_csv) or the
    bytes broken (broken_bytes)."""
    table = draw(tables)
    if draw(st.booleans()):
        return draw(mutated_csv(st.just(table))).encode()
    return draw(broken_bytes(csv_text(table).encode()))


# ---- files as bytes ---------------------------------------------------------------------------

BOM = "\ufeff".encode()


def broken_bytes(valid: bytes) -> st.SearchStrategy[bytes]:
    """`valid`, broken as files get broken: random bytes, cut short (with and
    without a byte-order mark), saved in another encoding, one byte changed,
    a few bytes inserted; and the file itself with a byte-order mark."""
    n = len(valid)
    text = valid.decode("utf-8")
    at = st.integers(0, n)
    return st.one_of(
        st.binary(max_size=200),
        at.map(lambda k: valid[:k]),
        at.map(lambda k: BOM + valid[:k]),
        st.sampled_from(["utf-16", "utf-16-be", "utf-32", "latin-1", "cp1252"]).map(
            lambda enc: (text[: n // 2] + "é" + text[n // 2:]).encode(enc)),
        st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, 255)).map(
            lambda p: valid[: p[0]] + bytes([p[1]]) + valid[p[0] + 1:]),
        st.tuples(at, st.binary(min_size=1, max_size=6)).map(
            lambda p: valid[: p[0]] + p[1] + valid[p[0]:]),
        st.just(BOM + valid),
    )


@st.composite
def scenario_with_fixed(draw):
    """A scenario and a fixed prefix: FIFO's plan before a cut, plus the
    rest of the runs of rigid jobs that started before it (running jobs)."""
    s = draw(scenarios())
    cut = draw(st.integers(0, s.T))
    owner = fifo(s).owner
    fixed = torch.full_like(owner, -1)
    fixed[:, :cut] = owner[:, :cut]
    for j in fixed[:, :cut].unique().tolist():
        if j >= 0 and s.jobs[j].rigid:
            fixed[owner == j] = j
    return with_fixed(s, fixed)
