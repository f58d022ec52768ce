"""Reports: the table a run prints, and the report of a run or multirun folder.

    python -m gpualloc.report multirun/2026-01-01/12-00-00

reads every run under the folder (its metrics.json, .hydra/overrides.yaml,
scenario.json and plans) and writes beside them:
- report.csv: per scenario, setting and policy, the mean and the sample
  standard deviation over seeds of every reported metric, and n;
- report.md: the same table, the headline line per policy (gains over FIFO
  over the scenarios), the failed runs with their error (a run whose files
  are broken is one of them, with the file and what is wrong in it; the
  other runs are reported), the pictures;
- gains.png, gantt_<scenario>.png, utilization_<scenario>.png (gpualloc.plots;
  needs matplotlib, skipped with a note without it or with --no-plots).

A *setting* is what a run's overrides change besides its scenario and seed
(e.g. `fifo.reserve=2`): runs that differ in it are never averaged together.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gpualloc import progress
from gpualloc.files import atomic_write_text, read_json, read_yaml


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def format_run_table(result: dict) -> str:
    """One run's policies side by side, gains against FIFO."""
    head = (f"scenario {result['scenario']}: {result['gpus']} GPUs, {result['jobs']} jobs, "
            f"{result['timesteps']} steps, offered load {result['offered_load']:.2f}, "
            f"seed {result['seed']}, device {result['device']}")
    cols = ["policy", "util %", "weighted thr", "alloc %", "rt SLO", "done", "mean wait",
            "util +pts", "wthr +%", "wall s"]
    rows = []
    for name, m in result["policies"].items():
        g = m["gains"]
        rows.append([name, _fmt(100 * m["utilization"], ".1f"),
                     _fmt(m["weighted_throughput"], ",.0f"), _fmt(100 * m["allocated"], ".1f"),
                     _fmt(m["realtime_slo"], ".3f"), str(m["jobs_completed"]),
                     _fmt(m["mean_wait"], ".1f"), _fmt(g["utilization_points"], "+.1f"),
                     _fmt(g["weighted_throughput_pct"], "+.1f"), _fmt(m["wall_s"], ".2f")])
    if result.get("preemptible"):
        head += f", preemptible {result['preemptible']} (restart_cost {result['restart_cost']})"
        cols[6:6] = ["preempt", "restore"]  # segments after the first; GPU-steps restoring
        for r, m in zip(rows, result["policies"].values()):
            r[6:6] = [str(m.get("preemptions", "-")), str(m.get("restore_gpu_steps", "-"))]
    guaranteed = result.get("min_served")
    if guaranteed:
        head += f", min_served {guaranteed}"
        cols.insert(5, "short")
        for r, m in zip(rows, result["policies"].values()):
            r.insert(5, str(m.get("guarantee_shortfall", "-")))
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    notes = [f"note: {name}'s plan breaks rule 4: {m['guarantee_shortfall']:,} replicas short "
             f"of the guarantee (min_served) over the horizon"
             + (" (online plans aim at it from a forecast)" if result.get("mode") == "online"
                and name != "fifo" else " (FIFO runs as defined)" if name == "fifo" else "")
             for name, m in result["policies"].items() if m.get("guarantee_shortfall")]
    return "\n".join([head, line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows]
                     + notes)


# ---- reading a folder ------------------------------------------------------------------

class ReportError(ValueError):
    """Input the report cannot use (no folder, no runs); the message says why."""


@dataclass
class Run:
    folder: Path
    overrides: list[str]
    result: dict | None
    """metrics.json of a run that finished; None for a failed run."""
    error: str | None = None


NOT_FINISHED = ("no metrics.json: the run did not finish "
                "(killed, timed out, still running, or an error outside gpualloc)")


def _natural(path: Path) -> tuple:
    """Sort key: run folders 2 before 10."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.parts)


def find_runs(root: str | Path) -> list[Run]:
    """The runs in a run folder or under a multirun folder (any depth; hidden
    folders such as .submitit are skipped). A run is a folder with a
    metrics.json or a .hydra/overrides.yaml."""
    root = Path(root)
    if not root.is_dir():
        raise ReportError(f"{root}: no such folder")
    if (root / "metrics.json").is_file():
        folders = [root]
    else:
        found = {p.parent for p in root.rglob("metrics.json")}
        found |= {p.parent.parent for p in root.rglob("overrides.yaml") if p.parent.name == ".hydra"}
        folders = sorted((f for f in found
                          if not any(part.startswith(".") for part in f.relative_to(root).parts)),
                         key=lambda f: _natural(f.relative_to(root)))
    if not folders:
        raise ReportError(f"{root}: no runs in it (no metrics.json in the folder or below); "
                          f"give a folder that `python -m gpualloc.run` or `-m` wrote")
    return [_read_run(f) for f in folders]


def _read_run(folder: Path) -> Run:
    """A run as its files tell it; a run whose files are broken is failed, with
    the reason (the file, and the line where there is one)."""
    try:
        overrides = _read_overrides(folder)
    except ReportError as e:
        return Run(folder, [], None, _named(e, folder))
    path = folder / "metrics.json"
    if not path.is_file():
        return Run(folder, overrides, None, NOT_FINISHED)
    try:
        # constants: json.dumps writes a NaN metric as NaN; the checks below
        # refuse one where the report would compute with it.
        doc = read_json(path, ReportError, constants=True)
    except ReportError as e:
        return Run(folder, overrides, None, _named(e, folder))
    if not isinstance(doc, dict) or ("error" not in doc and "policies" not in doc):
        return Run(folder, overrides, None, "metrics.json is not gpualloc's (no 'policies' and "
                                            "no 'error' in it)")
    if "error" in doc:
        recorded = doc.get("overrides")
        if isinstance(recorded, list):
            overrides = [str(o) for o in recorded]
        return Run(folder, overrides, None, str(doc["error"]) or "(an empty error)")
    problem = _broken_metrics(doc)
    if problem:
        return Run(folder, overrides, None, f"metrics.json: {problem}")
    return Run(folder, overrides, doc)


def _read_overrides(folder: Path) -> list[str]:
    """.hydra/overrides.yaml: the run's overrides ([] for a run without one,
    e.g. one that `gpualloc.run.run` wrote)."""
    path = folder / ".hydra" / "overrides.yaml"
    if not path.exists():
        return []
    doc = read_yaml(path, ReportError)
    if doc is None:
        return []
    if not isinstance(doc, list) or not all(isinstance(o, str) for o in doc):
        raise ReportError(f"{path}: not a list of overrides (strings)")
    return doc


def _named(e: ReportError, folder: Path) -> str:
    """The error with the file named inside its run folder (the report lists
    the folder beside it)."""
    return str(e).replace(f"{folder}{os.sep}", "", 1)


# The fields of a finished run's metrics.json that the report reads, and
# whether a field may be null (a wait when no rigid job started; the
# throughput gain when FIFO did no useful work). Every number must be finite
# and within MAX_METRIC, far above anything a run within gpualloc's limits
# writes (weighted throughput is at most about 1e20), so that sums and squares
# of them stay finite.
POLICY_FIELDS = {"utilization": False, "weighted_throughput": False, "realtime_slo": False,
                 "jobs_completed": False, "mean_wait": True, "p95_wait": True, "wall_s": False}
GAIN_FIELDS = {"utilization_points": False, "weighted_throughput_pct": True}
MAX_METRIC = 1e30


def _broken_metrics(doc: dict) -> str | None:
    """Why a finished run's metrics.json cannot be reported; None when it can."""
    if not isinstance(doc.get("scenario"), str) or not doc["scenario"]:
        return f"field 'scenario' must be a scenario name, got {doc.get('scenario')!r:.40}"
    if not isinstance(doc.get("seed"), int) or isinstance(doc["seed"], bool):
        return f"field 'seed' must be an integer, got {doc.get('seed')!r:.40}"
    if not isinstance(doc["policies"], dict) or not doc["policies"]:
        return "field 'policies' must map each policy to its metrics"
    for name, m in doc["policies"].items():
        if not isinstance(m, dict) or not isinstance(m.get("gains"), dict):
            return f"policy {name!r:.40}: no metrics or no 'gains' in them"
        checks = [(m, k, null) for k, null in POLICY_FIELDS.items()]
        checks += [(m["gains"], k, null) for k, null in GAIN_FIELDS.items()]
        if "guarantee_shortfall" in m:
            checks.append((m, "guarantee_shortfall", True))
        for where, key, null in checks:
            v = where.get(key, _MISSING)
            if v is None and null:
                continue
            if (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
                    or abs(v) > MAX_METRIC):
                got = "nothing" if v is _MISSING else f"{v!r:.40}"
                return (f"policy {name!r:.40}: field '{key}' must be a finite number"
                        f"{' or null' if null else ''}, got {got}")
    return None


_MISSING = object()


# ---- aggregating -----------------------------------------------------------------------

# Overrides that do not make a different experiment: the scenario (its name is
# a column), the seed (what the spread is over), which policies ran (a column)
# and output switches.
NOT_A_SETTING = ("seed", "scenario", "policies", "plot", "save_plans")


def setting(overrides: list[str]) -> str:
    return " ".join(o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in NOT_A_SETTING)


# column, label in report.md, value from one policy's metrics, format in report.md
METRICS: list[tuple[str, str, Callable[[dict], float | None], str]] = [
    ("util_pct", "util %", lambda m: 100 * m["utilization"], ".1f"),
    ("weighted_throughput", "weighted thr", lambda m: m["weighted_throughput"], ",.0f"),
    ("realtime_slo", "rt SLO", lambda m: m["realtime_slo"], ".3f"),
    ("guarantee_shortfall", "short", lambda m: m.get("guarantee_shortfall"), ".1f"),
    ("jobs_completed", "done", lambda m: m["jobs_completed"], ".1f"),
    ("mean_wait", "mean wait", lambda m: m["mean_wait"], ".1f"),
    ("p95_wait", "p95 wait", lambda m: m["p95_wait"], ".1f"),
    ("util_gain_pts", "util +pts", lambda m: m["gains"]["utilization_points"], "+.1f"),
    ("wthr_gain_pct", "wthr +%", lambda m: m["gains"]["weighted_throughput_pct"], "+.1f"),
    ("wall_s", "wall s", lambda m: m["wall_s"], ".3f"),
]


def _mean_std(values: list[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (ddof 1) of the values that exist."""
    v = [float(x) for x in values if x is not None]
    if not v:
        return None, None
    mean = sum(v) / len(v)
    std = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else None
    return mean, std


def aggregate(runs: list[Run]) -> list[dict]:
    """One row per (scenario, setting, policy): n, seeds, <metric>_mean and
    <metric>_std over the seeds. A seed that ran twice counts once (the first)."""
    groups: dict[tuple[str, str, str], dict[int, dict]] = {}
    for run in runs:
        if run.result is None:
            continue
        key = (run.result["scenario"], setting(run.overrides))
        for policy, m in run.result["policies"].items():
            groups.setdefault(key + (policy,), {}).setdefault(run.result["seed"], m)
    rows = []
    for (scenario, sett, policy), by_seed in groups.items():
        row = {"scenario": scenario, "setting": sett, "policy": policy, "n": len(by_seed),
               "seeds": " ".join(str(s) for s in sorted(by_seed))}
        for col, _, get, _ in METRICS:
            row[f"{col}_mean"], row[f"{col}_std"] = _mean_std([get(m) for m in by_seed.values()])
        rows.append(row)
    order = {p: i for i, p in enumerate(dict.fromkeys(r["policy"] for r in rows))}
    order["fifo"] = -1
    rows.sort(key=lambda r: (r["scenario"], r["setting"], order[r["policy"]]))
    return rows


def headlines(rows: list[dict]) -> list[str]:
    """Per non-FIFO policy (and setting): mean and best utilization gain in
    points and mean weighted-throughput gain in percent, over the scenarios
    (each scenario's mean over its seeds)."""
    lines = []
    for policy, sett in dict.fromkeys((r["policy"], r["setting"]) for r in rows
                                      if r["policy"] != "fifo"):
        mine = [r for r in rows if r["policy"] == policy and r["setting"] == sett]
        util = [(r["util_gain_pts_mean"], r["scenario"]) for r in mine
                if r["util_gain_pts_mean"] is not None]
        wthr = [r["wthr_gain_pct_mean"] for r in mine if r["wthr_gain_pct_mean"] is not None]
        ns = sorted({r["n"] for r in mine})
        seeds = (f"{ns[0]} seed{'s' if ns[0] > 1 else ''} each" if len(ns) == 1
                 else f"{min(ns)}-{max(ns)} seeds each")
        name = f"{policy} [{sett}]" if sett else policy
        parts = []
        if util:
            best, where = max(util)
            parts.append(f"utilization {sum(u for u, _ in util) / len(util):+.1f} points mean, "
                         f"{best:+.1f} best ({where})")
        if wthr:
            parts.append(f"weighted throughput {sum(wthr) / len(wthr):+.1f}% mean")
        lines.append(f"{name} vs FIFO over {len(mine)} scenario{'s' if len(mine) > 1 else ''} "
                     f"({seeds}): " + ("; ".join(parts) or "no gains (FIFO did no useful work)"))
    return lines


# ---- writing -----------------------------------------------------------------------------

def to_csv(rows: list[dict]) -> str:
    cols = ["scenario", "setting", "policy", "n", "seeds"]
    cols += [f"{c}_{s}" for c, *_ in METRICS for s in ("mean", "std")]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: ("" if r[c] is None else r[c]) for c in cols})
    return buf.getvalue()


def _cell(mean, std, spec: str) -> str:
    if mean is None:
        return "-"
    return format(mean, spec) + ("" if std is None else " ± " + format(std, spec.lstrip("+")))


def _md_table(cols: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    esc = lambda s: " ".join(s.splitlines()).replace("|", "\\|")  # noqa: E731
    align = ["---" if i < right_from else "---:" for i in range(len(cols))]
    return ["| " + " | ".join(map(esc, r)) + " |" for r in [cols, align] + rows]


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def to_markdown(root: Path, runs: list[Run], rows: list[dict], pictures: list[tuple[str, Path]],
                notes: list[str]) -> str:
    failed = [r for r in runs if r.result is None]
    finished = len(runs) - len(failed)
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    out = [f"# gpualloc report: {root.name or root}", "",
           f"{len(runs)} run{'s' if len(runs) != 1 else ''}: {finished} finished, "
           f"{len(failed)} failed. Scenarios: {', '.join(scenarios) or '-'}. "
           f"Policies: {', '.join(policies) or '-'}.", "", "## Headline", ""]
    lines = headlines(rows)
    out += [f"- {line}" for line in lines] or ["- only FIFO ran: no gains to report"]
    out += ["", "## Results", "",
            "Mean ± sample standard deviation over seeds (n seeds). Gains are against "
            "FIFO on the same scenario and seed: utilization in points, weighted "
            "throughput in percent. Waits in timesteps, of started rigid jobs.", ""]
    with_setting = any(r["setting"] for r in rows)
    cols = ["scenario"] + (["setting"] if with_setting else []) + ["policy", "n"]
    cols += [label for _, label, _, _ in METRICS]
    table = []
    for r in rows:
        cells = [r["scenario"]] + ([r["setting"]] if with_setting else []) + [r["policy"],
                                                                              str(r["n"])]
        cells += [_cell(r[f"{c}_mean"], r[f"{c}_std"], spec) for c, _, _, spec in METRICS]
        table.append(cells)
    out += _md_table(cols, table, right_from=cols.index("n")) if table else ["(no finished run)"]
    if failed:
        out += ["", "## Failed runs", ""]
        for r in failed:
            where = r.folder.relative_to(root) if r.folder != root else Path(".")
            last = [ln for ln in r.error.strip().splitlines() if ln.strip()] or ["?"]
            out.append(f"- {_code(str(where))} {_code(' '.join(r.overrides) or '(no overrides)')}:"
                       f" {last[-1].strip()}")
            if len(last) > 1:
                out += ["", "  ```"] + [f"  {ln}" for ln in r.error.rstrip().splitlines()]
                out += ["  ```", ""]
    if pictures or notes:
        out += ["", "## Pictures", ""]
        out += [f"- {n}" for n in notes] + ([""] if notes else [])
        out += [f"![{caption}]({path.name})\n" for caption, path in pictures]
    return "\n".join(out).rstrip() + "\n"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=+-]+", "_", text).strip("_")[:60]


def draw_pictures(root: Path, runs: list[Run], rows: list[dict]) -> tuple[list[tuple[str, Path]],
                                                                         list[str]]:
    """Gains across scenarios, and for each scenario (and setting) the Gantt
    and utilization charts of its lowest seed. Returns (caption, path) pairs
    and notes on what could not be drawn."""
    from gpualloc import plots
    from gpualloc.plan import load_plan
    from gpualloc.scenario import ScenarioError, load

    try:
        plots.require_matplotlib()
    except ScenarioError as e:
        return [], [f"no pictures: {e}"]
    pictures, notes = [], []
    gains_rows = [dict(r, policy=f"{r['policy']} [{r['setting']}]" if r["setting"] else r["policy"])
                  for r in rows if r["policy"] != "fifo"]
    first: dict[tuple[str, str], Run] = {}
    for run in runs:
        if run.result is not None:
            key = (run.result["scenario"], setting(run.overrides))
            if key not in first or run.result["seed"] < first[key].result["seed"]:
                first[key] = run
    settings_of: dict[str, int] = {}
    for scenario, _ in first:
        settings_of[scenario] = settings_of.get(scenario, 0) + 1
    work = [("gains", None)] if gains_rows else []
    work += sorted(first.items(), key=lambda kv: kv[0])
    if not gains_rows:
        notes.append("no gains chart: only FIFO ran")
    for key, run in progress.bar(work, desc="pictures", unit="scenario", leave=False):
        if key == "gains":
            path = plots.gains(root / "gains.png", gains_rows)
            pictures.append(("gains over FIFO across the scenarios", path))
            continue
        scenario, sett = key
        suffix = f"_{_slug(sett)}" if settings_of[scenario] > 1 and sett else ""
        stem = _slug(scenario) or "scenario"  # a name from a file: never a path
        title = f"{scenario}, seed {run.result['seed']}" + (f", {sett}" if sett else "")
        try:
            s = load(run.folder / "scenario.json")
            owners = {}
            for policy in run.result["policies"]:
                name, owner = load_plan(run.folder / f"plan_{policy}.json", s)
                owners[policy] = owner
        except ScenarioError as e:
            notes.append(f"no charts for {title}: {e} (run with save_plans=true)")
            continue
        pictures.append((f"plans: {title}",
                         plots.gantt(root / f"gantt_{stem}{suffix}.png", s, owners, title)))
        pictures.append((f"utilization: {title}",
                         plots.utilization(root / f"utilization_{stem}{suffix}.png", s, owners,
                                           title)))
    return pictures, notes


def write_report(root: str | Path, pictures: bool = True) -> dict:
    """Write report.md, report.csv (and the pictures) into `root`; returns what
    was found and written."""
    root = Path(root)
    runs = find_runs(root)
    rows = aggregate(runs)
    drawn, notes = draw_pictures(root, runs, rows) if pictures and rows else ([], [])
    # Both texts first: a failure leaves neither file half-way.
    table, markdown = to_csv(rows), to_markdown(root, runs, rows, drawn, notes)
    atomic_write_text(root / "report.csv", table)
    atomic_write_text(root / "report.md", markdown)
    return {"runs": runs, "rows": rows, "pictures": [p for _, p in drawn], "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpualloc.report",
        description="Aggregate a gpualloc run or multirun folder into report.md, report.csv "
                    "and pictures, written into that folder.")
    parser.add_argument("dir", help="a run folder (outputs/...) or multirun folder (multirun/...)")
    parser.add_argument("--no-plots", action="store_true", help="skip the pictures")
    args = parser.parse_args(argv)
    try:
        out = write_report(args.dir, pictures=not args.no_plots)
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # e.g. a folder it may read but not write
        print(f"error: {e.filename or args.dir}: cannot write the report ({e.strerror or e})",
              file=sys.stderr)
        return 2
    failed = [r for r in out["runs"] if r.result is None]
    for line in headlines(out["rows"]):
        print(line)
    root = Path(args.dir)
    print(f"wrote {root / 'report.md'}, {root / 'report.csv'} and "
          f"{len(out['pictures'])} picture{'s' if len(out['pictures']) != 1 else ''}")
    for note in out["notes"]:
        print(f"note: {note}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(out['runs'])} runs failed: see report.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
