"""What every benchmark records beside its numbers: the scenarios it runs, the
machine and the commit."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from gpualloc.jitcache import sources_hash

ROOT = Path(__file__).resolve().parents[1]

SEVEN = ["mixed", "training_heavy", "inference_diurnal", "batch_flood", "quantization_burst",
         "heterogeneous", "low_contention"]


def composed(*overrides: str):
    """The typed run config that `python -m gpualloc.run OVERRIDES...` composes."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from gpualloc.config import register_configs

    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    info = {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "gpu": None}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{p.name}, {p.total_memory / 2**30:.0f} GiB"
    try:
        from gpualloc.kernels.pgd import triton_available
        info["triton"] = triton_available()
    except ImportError:
        pass
    try:
        import ortools
        info["ortools"] = ortools.__version__
    except ImportError:
        pass
    try:
        info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def git_commit(short: bool = False) -> str:
    """HEAD, marked when tracked files differ from it: the numbers then belong
    to no commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    try:
        head = git("rev-parse", *(["--short"] if short else []), "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results")
    except OSError:
        return "unknown"
    return (head or "unknown") + (" (with uncommitted changes)" if dirty else "")


def provenance(module: str, argv) -> dict:
    """What a results file records beside its numbers: commit, machine, date
    and the command that made it (`argv`: main's, None for sys.argv)."""
    import sys
    from datetime import datetime, timezone

    args = sys.argv[1:] if argv is None else argv
    return {"commit": git_commit(short=True), "machine": machine(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": f"python -m {module} " + " ".join(args)}


def write_results(out: Path, stem: str, result: dict, md: str) -> None:
    """out/stem.json (everything) and out/stem.md (the table), and print it."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(md)
    print(md)


def cell(v, spec: str) -> str:
    """A table cell: `v` formatted by `spec`, or - when it is missing."""
    return "-" if v is None else format(v, spec)


def run_child(module: str, spec: dict, timeout: float, base: dict) -> dict:
    """`python -m MODULE --child SPEC` in a fresh process (its own peak memory,
    no state carried over): the last JSON line it prints, else `base` with a
    status. The child measures this checkout (its commit is recorded), not an
    installed copy of gpualloc."""
    cmd = [sys.executable, "-m", module, "--child", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**base, "status": f"timeout after {timeout:.0f} s"}
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {**base, "status": f"failed (exit {r.returncode}): {tail}"}
    return json.loads(lines[-1])


@contextmanager
def worktree(commit: str):
    """A checkout of `commit` in a temporary git worktree, removed after."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(path), commit], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT,
                           capture_output=True)


def run_in(checkout: Path, script: str, spec: dict):
    """`script` run by Python in `checkout` (its own gpualloc and bench), with
    `spec` as JSON in argv[1]; returns the JSON of its last line of output.
    Refuses a run during which the checkout's sources changed (an edit while
    this checkout is measured would mix two versions of it)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    before = sources_digest(checkout)
    r = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], cwd=checkout, env=env,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"recording in {checkout} failed:\n{r.stderr[-3000:]}")
    if sources_digest(checkout) != before:
        raise SystemExit(f"the sources in {checkout} changed while it was measured: "
                         "run it again without editing them")
    return json.loads(r.stdout.strip().splitlines()[-1])


def sources_digest(checkout: Path) -> str:
    """A hash of the Python sources of `checkout`'s gpualloc and bench."""
    files = [*(checkout / "gpualloc").rglob("*.py"), *(checkout / "bench").rglob("*.py")]
    return sources_hash(sorted(files), checkout)


# The guarantee's runs in the benches: every service kept whole, training preemptible.
GUARANTEE = dict(min_served=1.0, preemptible=["training"], restart_cost=1)


def warm_up() -> None:
    """Compile the placement core (cached on disk) before anything is timed:
    every path a timed run takes, on a short contended scenario of mixed GPU
    types. (`low_contention`, used before, left the search, the relaxation
    and the guarantee's paths to the first timed rows: from a fresh checkout
    `mixed` seed 0's allocator took 19.6 s offline instead of 0.7 s.) The
    benches that time plans call it first."""
    import gpualloc as ga

    s = ga.generate("heterogeneous", seed=0, horizon=48)
    for settings in ({}, GUARANTEE):
        for policy in ("fifo", "greedy", "allocator"):
            if policy == "fifo" and settings:
                continue  # FIFO keeps no guarantee
            ga.plan(s, policy, **settings)
            if policy != "fifo":
                ga.plan(s, policy, mode="online", online={"replan_every": 6}, **settings)
