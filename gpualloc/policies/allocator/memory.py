"""The memory guard: estimate a run's peak bytes before anything big is
allocated, compare them with what the device has free (or a configured
budget), and stop with a clear message instead of dying by an out-of-memory
kill.

Two estimates, both honest upper bounds (tests/test_memory.py measures the
real peak on the CPU and checks it stays below them):

- `grid_bytes`: the allocator's relaxation (gpualloc.policies.allocator.relax) in the
  representation it picks: the dense grid x (G, J, T) of `SolverConfig.dtype`,
  or the packed grid (G, L) of only the cells a job can ever hold, and what
  one step needs beside it. On CUDA the fused Triton kernel updates the dense
  grid in place: the grid plus the (J, T), (G, T), (J, G) side arrays. The
  torch steps (half precision on the CPU, CUDA without Triton) also hold
  arrays of the grid's size: its mask, the time differences, the positive
  cells; the compiled CPU step (float32) only the packed grid's mask.
  `fit` turns to the packed grid when the dense one does not fit.
- `scenario_bytes`: the arrays every policy shares (demand (J, T), the
  compatibility (J, G), owner grids and prefix sums (G, T), candidate block
  lists), checked in `gpualloc.run.run` before FIFO runs.
- `search_bytes`: the allocator without its relaxation (the priority-order
  builds, greedy's plan as a start, the search): `fit` takes that path by
  itself where no grid fits, and refuses only where even it does not.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from gpualloc.config import DTYPES
from gpualloc.policies.allocator.grid import packed_columns, representation
from gpualloc.scenario import Scenario, ScenarioError

GiB = 2**30
ITEMSIZE = {name: getattr(torch, name).itemsize for name in DTYPES}
"""Bytes per cell of each grid dtype (solver.dtype's values: gpualloc.config checks them)."""
SAFETY = 0.9
"""Fraction of the device's free memory a run may plan to use (the rest is
headroom for other processes and allocator slack); a configured budget is
taken as it is."""
OVERHEAD = 128 * 2**20
"""Fixed bytes beside the arrays: allocator slack, Python objects, small
tensors, and numba's compiler the first time the placement core compiles on
a machine (measured: greedy's cold run on 32 GPUs peaked 28 MB above its
warm runs)."""
CUDA_OVERHEAD = 256 * 2**20
"""Fixed bytes on CUDA: the caching allocator's rounding and kernels' workspaces."""


class MemoryGuardError(ScenarioError):
    """A run whose estimated peak is above the memory it may use. A
    ScenarioError, so the command prints one line and exits 2."""


def fmt_bytes(n: float) -> str:
    """Binary units, as solver.memory_budget_gb counts them (1 GiB = 2**30 bytes)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.{2 if n < 10 * size else 1}f} {unit}"
    return f"{n / 2**10:.1f} KiB"


def _uses_reference(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    from gpualloc.kernels.pgd import triton_available
    return not triton_available()


def dense_bytes(G: int, J: int, T: int, dtype: str = "float32",
                device: torch.device | str = "cpu") -> int:
    """Upper bound on the relaxation's peak bytes with the dense (G, J, T) grid."""
    device = torch.device(device)
    b = ITEMSIZE[dtype]
    if device.type == "cpu" and dtype == "float32":
        per_cell = b * 5 / 4  # the compiled CPU step works in place too (kernels.pgd_cpu)
    elif _uses_reference(device):
        # The torch reference holds the grid, its mask (precomputed on the
        # CPU; two bool temporaries on CUDA without Triton) and its two work
        # buffers (the time differences and the positive cells), all in the
        # grid's dtype, and for a half-precision grid float32 copies while
        # the float32 gain is added. 25% of room above the model.
        per_cell = (4 * b + (8 if b < 4 else 0)) * 5 / 4
    else:
        per_cell = b  # the fused Triton kernel works in place
    return int(G * J * T * per_cell + _side(G, J, T) + _fixed(device))


def packed_bytes(G: int, L: int, J: int, T: int, dtype: str = "float32",
                 device: torch.device | str = "cpu") -> int:
    """Upper bound on the relaxation's peak bytes with the packed (G, L) grid:
    grid + mask + the two work buffers (time differences; the capacity price
    gathered per column, then the positive cells), all in the grid's dtype;
    a half-precision grid also gathers the float32 price and makes float32
    copies; a float32 grid on the CPU (the compiled step) only the grid and
    its mask. 25% of room above the model."""
    b = ITEMSIZE[dtype]
    per_cell = (4 * b + (4 + 8 if b < 4 else 0)) * 5 / 4
    if torch.device(device).type == "cpu" and dtype == "float32":
        per_cell = 2 * b * 5 / 4  # the compiled CPU step: the grid and its mask
    # Per column: job and timestep indices (int64), gathered gains, sums.
    return int(G * L * per_cell + 48 * L + _side(G, J, T) + _fixed(torch.device(device)))


def grid_bytes(s: Scenario, cfg, device: torch.device | str = "cpu",
               grid: str | None = None) -> int:
    """Upper bound on the allocator relaxation's peak bytes for `s` under
    `cfg` (a SolverConfig) on `device`, in the representation `grid` (default:
    the one the allocator picks, see `representation`)."""
    grid = grid or representation(s, cfg, device)
    if grid == "packed":
        return packed_bytes(s.G, packed_columns(s, cfg.window_slack), s.J, s.T, cfg.dtype,
                            device)
    return dense_bytes(s.G, s.J, s.T, cfg.dtype, device)


def _side(G: int, J: int, T: int) -> int:
    # (J, T): about 20 float32 arrays (gain, multipliers, caps, masses,
    # counts, their temporaries) and the int64 demand; (G, T): about 10;
    # (J, G): masks.
    return 96 * J * T + 48 * G * T + 8 * J * G


def _fixed(device: torch.device) -> int:
    return OVERHEAD + (CUDA_OVERHEAD if device.type == "cuda" else 0)


def scenario_bytes(s: Scenario) -> int:
    """Upper bound on the arrays the policies and the checker build beside the
    allocator's grid: demand, held and useful GPUs (J, T) int64, owner grids,
    busy masks and prefix sums (G, T) int64 (the repair caches one free-run
    grid per job size), compatibility (J, G) and candidate blocks per block
    class (greedy and the repair answer fits class by class, gpualloc.core.blocks;
    no list per (job, block) pair is kept since issue 26). Measured on the
    CPU: FIFO + check + metrics (tests/memprobe.py), and greedy at 1,024,
    4,096 and 16,384 GPUs (0.09, 0.30 and 0.78 GiB against 0.19, 0.69 and
    4.2 GiB here; bench/results/speed_cpu_26_*.md) stay below it."""
    sizes = {j.gpus for j in s.jobs if j.gpus <= s.G}
    classes = len({(j.gpus, tuple(j.gpu_types or ()), j.min_memory_gb) for j in s.jobs
                   if j.gpus <= s.G})
    GT, JT = s.G * s.T, s.J * s.T
    return int(64 * JT + (128 + 8 * len(sizes)) * GT + 4 * s.J * s.G + 48 * classes * s.G
               + OVERHEAD)


# ---- what the device has ----------------------------------------------------------------

def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_free() -> int | None:
    """Bytes left under this process's cgroup memory limit, if it has one."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":  # cgroup v2
            base = Path("/sys/fs/cgroup") / rel.lstrip("/")
            limit, used = _read_int(base / "memory.max"), _read_int(base / "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            base = Path("/sys/fs/cgroup/memory") / rel.lstrip("/")
            if not base.exists():
                base = Path("/sys/fs/cgroup/memory")
            limit = _read_int(base / "memory.limit_in_bytes")
            used = _read_int(base / "memory.usage_in_bytes")
        else:
            continue
        if limit is not None and used is not None and limit < 2**60:
            free = max(limit - used, 0)
            best = free if best is None else min(best, free)
    return best


def cpu_available() -> tuple[int | None, str]:
    """(bytes, source) of memory available on this machine: MemAvailable of
    /proc/meminfo, lowered to the cgroup limit's headroom; (None, ...) when
    neither can be read (then only a configured budget is enforced)."""
    avail, source = None, "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail, source = int(line.split()[1]) * 1024, "MemAvailable"
    except OSError:
        pass
    if avail is None and hasattr(os, "sysconf"):
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            source = "free pages"
        except (ValueError, OSError):
            pass
    cg = _cgroup_free()
    if cg is not None and (avail is None or cg < avail):
        avail, source = cg, "cgroup limit"
    return avail, source


def device_available(device: torch.device | str) -> tuple[int | None, str]:
    """(bytes, source) free on `device`: CUDA's free memory plus what torch's
    caching allocator holds unused; the CPU's available memory otherwise."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(free + cached), f"free on {torch.cuda.get_device_name(device)}"
    return cpu_available()


def budget(budget_gb: float | None, device: torch.device | str) -> tuple[int | None, str]:
    """(bytes, description) a run may use: the configured budget
    (solver.memory_budget_gb, > 0: gpualloc.config checks it), else SAFETY x
    the device's free memory."""
    if budget_gb is not None:
        return int(budget_gb * GiB), f"solver.memory_budget_gb={budget_gb:g}"
    avail, source = device_available(device)
    if avail is None:
        return None, source
    return int(SAFETY * avail), f"{SAFETY:.0%} of {fmt_bytes(avail)} {source}"


# ---- the guards ----------------------------------------------------------------------------

def check_grid_memory(s: Scenario, cfg, device: torch.device | str) -> int:
    """Estimate the allocator relaxation's peak bytes for `s` under `cfg` (a
    SolverConfig) on `device`, in the representation the allocator picks;
    raise MemoryGuardError when it is above the budget. Returns the estimate
    (0 when no grid is built: rounding=priority or no jobs). Call it before
    the grid is allocated."""
    device = torch.device(device)
    if cfg.rounding == "priority" or s.J == 0:
        return 0
    grid = representation(s, cfg, device)
    need = grid_bytes(s, cfg, device, grid)
    limit, source = budget(cfg.memory_budget_gb, device)
    if limit is None or need <= limit:
        return need
    raise MemoryGuardError(_message(s, cfg, device, grid, need, limit, source))


def search_bytes(s: Scenario) -> int:
    """Upper bound on the allocator's peak bytes without the relaxation
    (rounding=priority): the arrays every policy shares (`scenario_bytes`,
    which covers greedy's plan, built here as the search's start) and the
    schedules alive at once (gpualloc.core.schedule): up to five repaired
    plans (the two priority-order builds, FIFO's, greedy's, online the last
    replan's) and the empty one they are copied from, each a fixed grid, an owner grid (int64), a busy mask and a
    free-run grid (int32) over (T, G), 21 bytes a cell, and its demand (J, T)
    int64; the search's snapshots (busy, owner, free runs: 13 bytes a cell),
    at most four at once; three (G, T) int64 plans (FIFO's, greedy's, the
    result). Measured at 4,096 x 10,000 x 336: peaks of 0.56-0.60 GiB
    (bench/results/speed_cpu_26_alloc*.md) against about 1.1 GiB here."""
    GT, JT = s.G * s.T, s.J * s.T
    return int(scenario_bytes(s) + 6 * (21 * GT + 8 * JT) + 4 * 13 * GT + 3 * 8 * GT)


def fit(s: Scenario, cfg, device: torch.device | str):
    """(the solver config to run with, a note for Plan.info or None): `cfg`
    itself when its grid fits the budget; with grid=auto and a dense grid
    that does not fit, the same config with grid=packed when that one fits
    (the reduced representation: the same objective and penalties); with
    grid=auto and rounding=best (the defaults) and no grid that fits, the
    same config with rounding=priority, the allocator without its
    relaxation (the priority-order builds, greedy's plan as the start, the
    search), where that fits (`search_bytes`): the note says so. Else
    MemoryGuardError, naming what each path would need. An explicit grid or
    rounding=relaxed asked for the grid: it is refused, not replaced."""
    from dataclasses import replace

    try:
        check_grid_memory(s, cfg, device)
        return cfg, None
    except MemoryGuardError as e:
        refused = e
    if cfg.grid != "auto":
        raise refused
    if representation(s, cfg, device) == "dense":
        packed = replace(cfg, grid="packed")
        try:
            check_grid_memory(s, packed, device)
            return packed, None
        except MemoryGuardError as e:
            refused = e  # with the packed grid's numbers
    if cfg.rounding != "best":
        raise refused
    # rounding=best already builds the priority-order plans and starts the
    # search from greedy's: without the grid it is that part of itself.
    need = search_bytes(s)
    limit, source = budget(cfg.memory_budget_gb, "cpu")  # the builds and search run there
    if limit is not None and need > limit:
        raise MemoryGuardError(
            f"{refused}. Without the relaxation (solver.rounding=priority, which the "
            f"allocator takes by itself where no grid fits) it would still need about "
            f"{fmt_bytes(need)} on the CPU, above {fmt_bytes(limit)}: only a smaller "
            f"scenario or a larger solver.memory_budget_gb runs it")
    note = {"relaxation": "skipped by the memory guard: no grid fits, so the allocator "
                          "plans as with solver.rounding=priority",
            "grid_bytes": grid_bytes(s, cfg, device, "packed"),  # the smaller grid
            "search_bytes": need, "budget_bytes": limit, "budget": source}
    return replace(cfg, rounding="priority"), note


def _message(s: Scenario, cfg, device: torch.device, grid: str, need: int, limit: int,
             source: str) -> str:
    options = ["a smaller scenario (fewer GPUs, jobs or timesteps)"]
    if cfg.dtype == "float32":
        from dataclasses import replace
        half = grid_bytes(s, replace(cfg, dtype="bfloat16"), device, grid)
        if half < need:
            options.append(f"solver.dtype=bfloat16 (about {fmt_bytes(half)})")
    if grid == "dense":
        packed = grid_bytes(s, cfg, device, "packed")
        if packed < need:
            options.append(f"solver.grid=packed (about {fmt_bytes(packed)})")
    options.append("solver.memory_budget_gb=N if more memory is really free")
    options.append("solver.rounding=priority (skips the grid)")
    on_gpu = dense_bytes(s.G, s.J, s.T, cfg.dtype, "cuda")
    if device.type != "cuda" and on_gpu < need:
        options.append(f"device=cuda (about {fmt_bytes(on_gpu)} on a GPU with Triton)")
    cells = (f"{s.G * s.J * s.T:.3g} cells" if grid == "dense" else
             f"packed to {s.G * packed_columns(s, cfg.window_slack):.3g} cells")
    return (f"memory guard: the allocator's relaxed grid for G x J x T = {s.G} x {s.J} x {s.T} "
            f"({cells}, {cfg.dtype}) needs about {fmt_bytes(need)} on {device.type}, above "
            f"the budget of {fmt_bytes(limit)} ({source}). Options: {'; '.join(options)}")


def check_scenario_memory(s: Scenario, budget_gb: float | None,
                          device: torch.device | str) -> int:
    """Estimate the arrays every policy shares for `s`; raise MemoryGuardError
    when they are above the budget (the configured one, else the free memory
    of the CPU and of `device`). Returns the estimate."""
    need = scenario_bytes(s)
    devices = [torch.device("cpu")]
    if torch.device(device).type == "cuda":
        devices.append(torch.device(device))
    for dev in devices:
        limit, source = budget(budget_gb, dev)
        if limit is not None and need > limit:
            raise MemoryGuardError(
                f"memory guard: scenario {s.name!r} with {s.G} GPUs, {s.J} jobs and {s.T} "
                f"timesteps needs about {fmt_bytes(need)} for its plan grids on {dev.type}, "
                f"above the budget of {fmt_bytes(limit)} ({source}). Options: a smaller "
                f"scenario (fewer timesteps or GPUs); solver.memory_budget_gb=N if more "
                f"memory is really free")
    return need


# ---- measuring ------------------------------------------------------------------------------

def _status_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def measure_rss_peak(fn, *args, **kwargs):
    """Run fn(*args, **kwargs); return (its result, the peak resident bytes
    above the resident bytes before it). Linux only: the peak (VmHWM) is reset
    through /proc/self/clear_refs; elsewhere, or where that is refused, the
    peak is None. Used by the tests and bench/speed.py to check the estimates."""
    before = _status_bytes("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = before is not None
    except OSError:
        reset = False
    out = fn(*args, **kwargs)
    peak = _status_bytes("VmHWM") if reset else None
    return out, (None if peak is None else max(peak - before, 0))
