"""Reports: the table a run prints."""
from __future__ import annotations


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
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([head, line(cols), line(["-" * w for w in widths])] + [line(r) for r in rows])
