"""Cut the real-trace windows of bench/traces/ from the public traces, and turn
them into scenario files with gpualloc's own importer (`python -m gpualloc.trace`).

    python bench/traces/cut.py --alibaba ../shared/traces/alibaba-gpu-v2023 \
        --dlrm /tmp/disaggregated_DLRM_trace.csv

Sources (README.md beside this file: repositories, commits, licences):
- the Alibaba GPU cluster trace 2023 ("openb", `--alibaba`: the folder holding
  its unchanged CSV files): the training and batch jobs, and in the `alibaba`
  windows its own latency-sensitive pods as serving curves;
- the Alibaba GPU-disaggregated DLRM serving trace 2025 (`--dlrm`: the
  unchanged `cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv`): the
  inference instances of a few real services, whose count over time is their
  demand curve (one replica = one instance = one GPU).

Two kinds of window (WINDOWS below):
- `alibaba`: the importer's Alibaba path on the pod list (`gpualloc trace
  alibaba ... --sample-gpus N`), exactly as the shipped `alibaba` week was made;
- `csv`: this script writes a generic job CSV (openb's rigid pods created in
  the window, kind and priority by qos as the Alibaba importer maps them, plus
  one row per DLRM instance alive in the window, kind realtime_inference), and
  the importer's CSV path turns it into the scenario (`gpualloc trace csv`).
  Both CSV and scenario are written under bench/traces/.

Standard library only besides the importer it calls; prints each command, the
importer's rule counts and the sha256 of the sources.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DAY, HOUR = 86400, 3600
POD_LIST = "openb_pod_list_gpuspec33.csv"
# The Alibaba importer's mapping of qos (gpualloc/trace/readers.py): kind, priority.
QOS = {"Guaranteed": ("training", 8), "Burstable": ("training", 5), "BE": ("batch_inference", 2)}

# name -> how it is cut. start/days: openb trace days; dlrm_start: DLRM trace
# day the services' curves start at; services: DLRM app -> priority (the CSV
# importer keys a service by (GPU types, GPUs, priority), so each app gets its
# own priority, all at or above openb's latency-sensitive 9).
WINDOWS = {
    "openb_118d_64": dict(kind="alibaba", start=118, days=7, gpus=64, role="tuning"),
    "openb_125d_64": dict(kind="alibaba", start=125, days=7, gpus=64, role="held-out"),
    "openb_141d_64": dict(kind="alibaba", start=141, days=7, gpus=64, role="held-out"),
    # DLRM days 21-28 and apps no held-out window has, beside the tuning days'
    # rigid jobs: real serving curves to tune on (added in s61).
    "openb_dlrm_118d_32": dict(kind="csv", start=118, days=7, gpus=32, dlrm_start=21,
                               services={"app_138": 9, "app_136": 10, "app_47": 11},
                               role="tuning"),
    "openb_dlrm_127d_32": dict(kind="csv", start=127, days=7, gpus=32, dlrm_start=7,
                               services={"app_89": 9, "app_114": 10, "app_27": 11},
                               role="held-out"),
    "openb_dlrm_127d_14d_128": dict(kind="csv", start=127, days=14, gpus=128, dlrm_start=7,
                                    services={"app_89": 9, "app_114": 10, "app_27": 11,
                                              "app_86": 12, "app_126": 13},
                                    role="held-out (speed)"),
}
CSV_HEADER = ["job_id", "submit_s", "duration_s", "gpus", "kind", "priority"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def openb_rows(pods: Path, start: float, end: float) -> list[list]:
    """openb's rigid pods created in [start, end) that ran and ask for a GPU,
    as CSV rows; submit relative to `start`, duration = deletion - scheduled."""
    out = []
    with open(pods, newline="") as f:
        for r in csv.DictReader(f):
            created = float(r["creation_time"])
            if not start <= created < end or r["qos"] == "LS" or not r["scheduled_time"].strip():
                continue
            num, milli = int(r["num_gpu"]), int(r["gpu_milli"])
            if num == 0:
                continue
            gpus = num if num > 1 or milli >= 1000 else milli / 1000  # a share: rounded up
            kind, priority = QOS[r["qos"]]
            run = float(r["deletion_time"]) - float(r["scheduled_time"])
            out.append([r["name"], f"{created - start:g}", f"{run:g}", f"{gpus:g}", kind, priority])
    return out


def dlrm_rows(path: Path, services: dict[str, float], start: float, end: float) -> list[list]:
    """One row per GPU instance (role HN) of `services` alive in [start, end):
    it wants one replica from max(creation, start) to min(deletion, end).
    Missing creation: it existed before the trace began; missing deletion: it
    outlived the trace (the trace's last timestamp then ends it)."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["role"] == "HN"]

    def t(v: str) -> float | None:
        return float(v) if v.strip() and v.strip().lower() != "nan" else None

    last = max(t(r["deletion_time"]) or 0.0 for r in rows)
    out = []
    for r in rows:
        if r["app_name"] not in services:
            continue
        lo = t(r["creation_time"]) or 0.0
        hi = t(r["deletion_time"]) or last
        lo, hi = max(lo, start), min(hi, end)
        if hi <= lo:
            continue
        out.append([f"dlrm-{r['instance_sn']}", f"{lo - start:g}", f"{hi - lo:g}",
                    r["gpu_request"], "realtime_inference", services[r["app_name"]]])
    return out


def importer(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "gpualloc.trace", *args]
    print("$ python -m gpualloc.trace " + " ".join(args))
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    print(done.stdout + done.stderr)
    if done.returncode:
        raise SystemExit(f"the importer failed (exit {done.returncode})")


def rel(p: Path) -> str:
    """`p` as the command is run: relative to the repository's root."""
    return os.path.relpath(p.resolve(), ROOT)


def cut(name: str, w: dict, alibaba: Path, dlrm: Path | None, out: Path) -> None:
    scenario = out / f"{name}.json"
    if w["kind"] == "alibaba":
        importer(["alibaba", rel(alibaba / POD_LIST), "--start", f"{w['start']}d",
                  "--length", f"{24 * w['days']}h", "--sample-gpus", str(w["gpus"]),
                  "--name", name, "-o", rel(scenario)])
        return
    if dlrm is None:
        raise SystemExit(f"{name}: needs --dlrm (the DLRM serving trace)")
    start, end = w["start"] * DAY, (w["start"] + w["days"]) * DAY
    rows = openb_rows(alibaba / POD_LIST, start, end)
    d0 = w["dlrm_start"] * DAY
    rows += dlrm_rows(dlrm, w["services"], d0, d0 + w["days"] * DAY)
    rows.sort(key=lambda r: (float(r[1]), r[0]))
    table = out / f"{name}.csv"
    with open(table, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(CSV_HEADER)
        writer.writerows(rows)
    importer(["csv", rel(table), "--id-col", "job_id", "--submit-col", "submit_s",
              "--duration-col", "duration_s", "--gpus-col", "gpus", "--kind-col", "kind",
              "--priority-col", "priority", "--time-unit", "s", "--start", "0",
              "--length", f"{24 * w['days']}h", "--gpus", str(w["gpus"]), "--gpus-per-node", "8",
              "--gpu-type", "GPU", "--memory-gb", "32", "--name", name, "-o", rel(scenario)])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alibaba", type=Path, default=ROOT.parent / "shared" / "traces" /
                   "alibaba-gpu-v2023", help="folder of the Alibaba GPU trace 2023's CSV files")
    p.add_argument("--dlrm", type=Path, help="cluster-trace-gpu-v2025/disaggregated_DLRM_trace.csv")
    p.add_argument("--windows", nargs="+", choices=list(WINDOWS), default=list(WINDOWS))
    p.add_argument("--out", type=Path, default=HERE)
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    print(f"sha256 {sha256(a.alibaba / POD_LIST)}  {POD_LIST}")
    if a.dlrm:
        print(f"sha256 {sha256(a.dlrm)}  {a.dlrm.name}")
    for name in a.windows:
        cut(name, WINDOWS[name], a.alibaba, a.dlrm, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
