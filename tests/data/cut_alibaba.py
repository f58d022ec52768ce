"""Cut the excerpt of the Alibaba GPU trace 2023 that tests/test_trace.py reads.

    python tests/data/cut_alibaba.py TRACE_DIR [--out DIR]

TRACE_DIR holds the trace's CSV files, unchanged (clusterdata's
`cluster-trace-gpu-v2023/csv`); DIR defaults to tests/data/alibaba-gpu-v2023.
Rows are copied byte for byte, in file order, after the header:

- openb_node_list_gpu_node.csv: whole (the cluster: 1,213 nodes, 6,212 GPUs);
- openb_pod_list_gpuspec33.csv, openb_pod_list_default.csv: the pods alive in
  the window the tests convert from that file, widened by MARGIN on each side
  (so some pods are outside the window), and the pods deleted at the file's
  last timestamp (so the excerpt ends where the trace ends: its `trace_end`
  rule marks the same pods);
- openb_pod_list_multigpu50.csv: the header and the first HEAD rows (the tests
  only need its columns, which lack the times).

Standard library only: it does not use the gpualloc reader it feeds.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
from pathlib import Path

HOUR, DAY = 3600, 86400
MARGIN = 6 * HOUR  # seconds kept on each side of a window
# Pod list -> the window (start, length; seconds) that tests/test_trace.py converts.
WINDOWS = {
    "openb_pod_list_gpuspec33.csv": (134 * DAY, 168 * HOUR),  # the shipped week
    "openb_pod_list_default.csv": (140 * DAY, 96 * HOUR),     # the whole-cluster test
}
WHOLE = ["openb_node_list_gpu_node.csv"]
HEAD = {"openb_pod_list_multigpu50.csv": 5}
OUT = Path(__file__).resolve().parent / "alibaba-gpu-v2023"


def alive(row: dict, lo: float, hi: float) -> bool:
    """The pod wanted or held GPUs in [lo, hi): created before hi and deleted
    after lo, or created inside (a zero-length pod); the converter's test for
    a pod inside its window."""
    created, deleted = float(row["creation_time"]), float(row["deletion_time"])
    return created < hi and (deleted > lo or created >= lo)


def cut(name: str, lines: list[str]) -> list[str]:
    """The lines of `name` to keep, header first."""
    header, body = lines[0], lines[1:]
    if name in WHOLE:
        return lines
    if name in HEAD:
        return [header] + body[:HEAD[name]]
    cols = next(csv.reader([header]))
    rows = [dict(zip(cols, next(csv.reader([line])))) for line in body]
    start, length = WINDOWS[name]
    lo, hi = start - MARGIN, start + length + MARGIN
    last = max(float(r["deletion_time"]) for r in rows)
    return [header] + [line for line, r in zip(body, rows)
                       if alive(r, lo, hi) or float(r["deletion_time"]) == last]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace", type=Path, help="folder of the trace's CSV files")
    p.add_argument("--out", type=Path, default=OUT, help=f"excerpt folder (default {OUT})")
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    for name in [*WHOLE, *WINDOWS, *HEAD]:
        data = (a.trace / name).read_bytes()
        lines = data.decode().splitlines(keepends=True)
        kept = cut(name, lines)
        text = "".join(kept).encode()
        (a.out / name).write_bytes(text)
        print(f"{name}: {len(kept) - 1} of {len(lines) - 1} rows, {len(text)} bytes "
              f"(source sha256 {hashlib.sha256(data).hexdigest()})")


if __name__ == "__main__":
    main()
