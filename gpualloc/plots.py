"""Pictures of plans and results (PNG, matplotlib's Agg canvas).

- gantt: the owner grid of each policy, GPUs down, time across; colour by job
  kind, darker for higher priority, idle cells light grey, rigid jobs outlined
  (a preemptible job: each segment, its restoring steps hatched), node
  boundaries as thin lines and pool boundaries as thick ones;
- utilization: useful GPUs over time per policy against the capacity, and the
  real-time replicas served per policy against the elastic demand curve;
- gains: each policy's gains over FIFO across the scenarios (mean over seeds,
  bars of one standard deviation).

matplotlib is an optional extra (gpualloc[plot]): it is imported when a
picture is drawn, and pyplot never (no global backend, no open figures).
"""
from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np
import torch

from gpualloc.files import atomic_write_bytes
from gpualloc.metrics import useful_of
from gpualloc.plan import segments
from gpualloc.scenario import KINDS, Scenario, ScenarioError

KIND_COLOURS = {  # matplotlib's tab10, one hue per kind
    "training": "#1f77b4",
    "batch_inference": "#ff7f0e",
    "quantization": "#2ca02c",
    "realtime_inference": "#d62728",
}
IDLE_COLOUR = "#e8e8e8"
LIGHTEST = 0.6  # the lowest priority is its kind's colour mixed this far towards white
DPI = 100


def require_matplotlib():
    """matplotlib, or a ScenarioError that says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise ScenarioError("pictures need matplotlib: pip install 'gpualloc[plot]'") from None
    return matplotlib


def _figure(width: float, height: float):
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _literal_text(draw):
    """Draw with every text taken literally: names come from files, and a `$`
    in one would otherwise be parsed as maths (and an unbalanced one fail)."""
    @functools.wraps(draw)
    def wrapped(*args, **kwargs):
        with require_matplotlib().rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)
    return wrapped


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64) / 255


def job_colours(s: Scenario) -> np.ndarray:
    """(J, 3) float RGB: the kind's hue, lighter for lower priority."""
    pri = s.priority.numpy()  # (J,)
    lo, hi = (pri.min(), pri.max()) if len(pri) else (0.0, 0.0)
    level = (pri - lo) / (hi - lo) if hi > lo else np.ones_like(pri)  # (J,) 0 lowest .. 1 highest
    base = np.stack([_rgb(KIND_COLOURS[j.kind]) for j in s.jobs]) if s.J else np.zeros((0, 3))
    white = LIGHTEST * (1 - level)[:, None]  # (J, 1)
    return base * (1 - white) + white


def _time_axis(ax, s: Scenario) -> None:
    day = round(24 * 60 / s.step_minutes) if s.step_minutes else 0
    if day and s.T > day:
        ticks = np.arange(0, s.T + 1, day)
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"day {i}" if i else "0" for i in range(len(ticks))])
        for t in ticks[1:]:
            ax.axvline(t - 0.5, color="#999999", lw=0.4, ls=":", zorder=3)
    ax.set_xlim(-0.5, s.T - 0.5)
    ax.set_xlabel(f"timestep ({s.step_minutes:g} min)")


def _rigid_boxes(s: Scenario, owner: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(R, 4) int: first GPU, last GPU, first t, last t of each rigid job that
    ran (of each segment, for a preemptible one); and (Q, 4) the same for the
    restoring steps of segments."""
    busy = owner >= 0
    j = owner[busy]  # (cells,)
    g = torch.arange(s.G)[:, None].expand(s.G, s.T)[busy]
    t = torch.arange(s.T)[None, :].expand(s.G, s.T)[busy]
    out = []
    for v in (g, t):
        lo = torch.full((s.J,), s.G + s.T).scatter_reduce(0, j, v, "amin")
        hi = torch.full((s.J,), -1).scatter_reduce(0, j, v, "amax")
        out += [lo, hi]
    ran = s.rigid & ~s.preemptible & (out[1] >= 0)
    boxes = torch.stack(out, 1)[ran].numpy()
    if not bool(s.preemptible.any()):
        return boxes, np.zeros((0, 4), dtype=np.int64)
    seg, parts, restores = segments(s, owner), [boxes], []
    for j, t0 in seg.new.nonzero().tolist():
        t1 = t0
        while t1 + 1 < s.T and seg.count[j, t1 + 1] > 0 and not seg.new[j, t1 + 1]:
            t1 += 1
        g0, g1 = int(seg.first[j, t0]), int(seg.last[j, t0])
        parts.append(np.array([[g0, g1, t0, t1]]))
        r = int(seg.restoring[j, t0:t1 + 1].sum())
        if r:
            restores.append([g0, g1, t0, t0 + r - 1])
    return np.concatenate(parts), np.array(restores, dtype=np.int64).reshape(-1, 4)


def _verts(boxes: np.ndarray) -> np.ndarray:
    """(R, 4, 2) corners of cell boxes (first GPU, last GPU, first t, last t)."""
    g0, g1, t0, t1 = (boxes[:, i] - 0.5 + (i % 2) for i in range(4))
    return np.stack([np.stack([t0, g0], 1), np.stack([t1, g0], 1),
                     np.stack([t1, g1], 1), np.stack([t0, g1], 1)], 1)


@_literal_text
def gantt(path: str | Path, s: Scenario, owners: dict[str, torch.Tensor],
          title: str = "") -> Path:
    """One panel per policy: owner[g][t] as an image, GPU 0 at the top."""
    fig_height_panel = min(7.0, max(3.0, 0.045 * s.G))
    fig = _figure(14, 1.0 + fig_height_panel * len(owners))
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    colours = np.vstack([job_colours(s), _rgb(IDLE_COLOUR)])  # (J + 1, 3); row -1 is idle
    nodes = s.node_first_gpu.tolist()
    pool_first = [0]
    for p in s.pools:
        pool_first.append(pool_first[-1] + p.count * p.gpus_per_node)
    axes = fig.subplots(len(owners), 1, squeeze=False)[:, 0]
    for ax, (name, owner) in zip(axes, owners.items()):
        owner = owner.cpu().long()
        ax.imshow(colours[owner.numpy()], aspect="auto", interpolation="nearest",
                  extent=(-0.5, s.T - 0.5, s.G - 0.5, -0.5))  # (G, T, 3)
        boxes, restores = _rigid_boxes(s, owner)
        if len(boxes):
            ax.add_collection(PolyCollection(_verts(boxes), facecolors="none",
                                             edgecolors="#333333", linewidths=0.35, zorder=2))
        if len(restores):
            ax.add_collection(PolyCollection(_verts(restores), facecolors="none",
                                             edgecolors="#333333", hatch="////",
                                             linewidths=0.0, zorder=2))
        for n in nodes[1:]:
            if n not in pool_first:
                ax.axhline(n - 0.5, color="white", lw=0.6, zorder=3)
        for b in pool_first[1:-1]:
            ax.axhline(b - 0.5, color="black", lw=1.4, zorder=3)
        step = max(1, len(nodes) // 16)
        ax.set_yticks(nodes[::step])
        ax.set_ylabel("GPU (node starts)")
        if len(s.pools) > 1:
            twin = ax.twinx()
            twin.set_ylim(ax.get_ylim())
            twin.set_yticks([(a + b - 1) / 2 for a, b in zip(pool_first, pool_first[1:])])
            twin.set_yticklabels([f"{p.name}\n{p.count}x{p.gpus_per_node} {p.gpu_type}"
                                  for p in s.pools], fontsize=8)
        _time_axis(ax, s)
        m = useful_of(s, owner).sum() / (s.G * s.T)
        ax.set_title(f"{name}: utilization {100 * float(m):.1f}%, "
                     f"idle {100 * float((owner < 0).float().mean()):.1f}% of cells",
                     loc="left", fontsize=10)
    kinds = [k for k in KINDS if any(j.kind == k for j in s.jobs)]
    handles = [Patch(color=KIND_COLOURS[k], label=k.replace("_", " ")) for k in kinds]
    handles.append(Patch(facecolor=IDLE_COLOUR, edgecolor="#999999", label="idle"))
    lo, hi = (float(s.priority.min()), float(s.priority.max())) if s.J else (0, 0)
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=9, frameon=False,
               title=f"lighter = lower priority ({lo:g} .. {hi:g}); outlines: rigid jobs "
                     f"(segments; hatched: restoring); "
                     f"lines: node and pool boundaries", title_fontsize=8)
    fig.suptitle(title or s.name, x=0.01, ha="left", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.55 / fig.get_figheight()))
    return _save(fig, Path(path))


@_literal_text
def utilization(path: str | Path, s: Scenario, owners: dict[str, torch.Tensor],
                title: str = "") -> Path:
    """Top: useful GPUs per timestep and policy. Bottom: real-time GPUs served
    per policy and the elastic demand curve (in GPUs: replicas x replica size)."""
    fig = _figure(14, 7)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    t = np.arange(s.T)
    elastic = ~s.rigid
    demand = (s.demand * s.gpus[:, None])[elastic].sum(0).numpy()  # (T,) GPUs demanded
    top.axhline(s.G, color="black", lw=1, ls="--", label=f"capacity ({s.G} GPUs)")
    bottom.fill_between(t, demand, step="mid", color="#cccccc", label="elastic demand")
    for name, owner in owners.items():
        u = useful_of(s, owner)  # (J, T) useful GPUs
        total = u.sum(0).numpy()
        top.step(t, total, where="mid", lw=1.3,
                 label=f"{name} (mean {100 * total.mean() / s.G:.1f}%)")
        bottom.step(t, u[elastic].sum(0).numpy(), where="mid", lw=1.3, label=name)
    top.set_ylabel("useful GPUs")
    top.set_ylim(0, s.G * 1.08)
    top.legend(loc="lower left", fontsize=9, ncol=min(4, len(owners) + 1))
    bottom.set_ylabel("real-time GPUs")
    bottom.set_ylim(0, max(1, demand.max()) * 1.15)
    bottom.legend(loc="upper left", fontsize=9, ncol=min(5, len(owners) + 1))
    for ax in (top, bottom):
        ax.grid(axis="y", color="#dddddd", lw=0.5)
    _time_axis(bottom, s)
    top.set_title(title or s.name, loc="left", fontsize=12)
    fig.tight_layout()
    return _save(fig, Path(path))


@_literal_text
def gains(path: str | Path, rows: list[dict], title: str = "gains over FIFO") -> Path:
    """Grouped bars: x = scenarios, one bar per policy; rows hold `scenario`,
    `policy`, `util_gain_pts_mean/_std`, `wthr_gain_pct_mean/_std`."""
    fig = _figure(max(8.0, 1.3 * len({r["scenario"] for r in rows}) + 3), 7)
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    width = 0.8 / max(1, len(policies))
    x = np.arange(len(scenarios))
    axes = fig.subplots(2, 1, sharex=True)
    for ax, key, label in zip(axes, ("util_gain_pts", "wthr_gain_pct"),
                              ("utilization gain (points)", "weighted throughput gain (%)")):
        for i, policy in enumerate(policies):
            by = {r["scenario"]: r for r in rows if r["policy"] == policy}
            mean = np.array([_num(by.get(sc, {}).get(f"{key}_mean")) for sc in scenarios])
            std = np.array([_num(by.get(sc, {}).get(f"{key}_std"), 0.0) for sc in scenarios])
            xs = x + (i - (len(policies) - 1) / 2) * width
            ax.bar(xs, np.nan_to_num(mean), width, yerr=std, capsize=3, label=policy)
            for xi, m, sd in zip(xs, mean, std):  # the value just beyond its error bar
                if not np.isnan(m):
                    up = m >= 0
                    ax.annotate(f"{m:+.1f}", (xi, m + (sd if up else -sd)), xytext=(0, 3 if up else -3),
                                textcoords="offset points", ha="center", va="bottom" if up else "top",
                                fontsize=8)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_ylabel(label)
        ax.grid(axis="y", color="#dddddd", lw=0.5)
        ax.margins(y=0.15)
    axes[0].legend(fontsize=9)
    axes[1].set_xticks(x)
    axes[1].set_xticklabels(scenarios, rotation=20, ha="right")
    axes[0].set_title(f"{title} (mean over seeds; bars: one std)", loc="left", fontsize=12)
    fig.tight_layout()
    return _save(fig, Path(path))


def _num(v, default=np.nan) -> float:
    return default if v is None or v == "" else float(v)


def plot_run(out_dir: str | Path, s: Scenario, owners: dict[str, torch.Tensor],
             title: str = "") -> list[Path]:
    """A run's pictures: gantt.png and utilization.png in `out_dir`."""
    out_dir = Path(out_dir)
    return [gantt(out_dir / "gantt.png", s, owners, title),
            utilization(out_dir / "utilization.png", s, owners, title)]
