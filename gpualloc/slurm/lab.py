"""A lab Slurm cluster on one host, for the tests and the benchmarks.

    python -m gpualloc.slurm.lab up [--nodes 8 --gpus-per-node 8 --gpu-type h100]
    python -m gpualloc.slurm.lab status
    python -m gpualloc.slurm.lab down

`up` installs what is missing (Debian's `munge slurmctld slurmd
slurm-client`), writes every file under one folder of its own (`--dir`, or
`$GPUALLOC_SLURM_LAB`, default /tmp/gpualloc-slurm-lab): a munge key and
socket, slurm.conf, gres.conf, fake GPU devices (`mknod c 1 3`: slurmd
refuses a file-less GPU count), state, logs and pid files. It starts munged,
slurmctld and one `slurmd -N nK` per node (one host, a Port range), and waits
until every node is idle. `down` stops exactly the processes whose pid files
it wrote, checking that each pid still runs this lab's program (never by
name). Both are idempotent: a second `up` finds the lab up and does nothing.
`status` prints the nodes and the environment a client needs
(`SLURM_CONF=...`); exit 1 when the lab is not up.

Runs as root (the daemons and the jobs run as root; CI does). Ports:
`--port` for slurmctld, the nodes on the next ones.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DIR = "/tmp/gpualloc-slurm-lab"
PACKAGES = ["munge", "slurmctld", "slurmd", "slurm-client"]
PROGRAMS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client"}


class LabError(RuntimeError):
    """The lab cannot come up or go down; the message says why."""


@dataclass
class Shape:
    nodes: int = 8
    gpus_per_node: int = 8
    gpu_type: str = "h100"
    cpus_per_node: int = 32
    """Configured, not real (SlurmdParameters=config_overrides): enough for a
    job per GPU."""
    partitions: list[str] = field(default_factory=lambda: ["gpu"])
    """`NAME` (every node) or `NAME:FIRST-LAST` (node numbers, 1-based); the first is the default."""
    port: int = 16817
    scheduler: str = "sched/backfill"
    priority: str = "priority/basic"


def lab_dir(path: str | None = None) -> Path:
    return Path(path or os.environ.get("GPUALLOC_SLURM_LAB") or DEFAULT_DIR).resolve()


def node_names(shape: Shape) -> list[str]:
    return [f"n{i}" for i in range(1, shape.nodes + 1)]


def _partition_nodes(spec: str, shape: Shape) -> tuple[str, str]:
    name, _, rng = spec.partition(":")
    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise LabError(f"--partition {spec!r}: a partition is NAME or NAME:FIRST-LAST")
    if not rng:
        return name, f"n[1-{shape.nodes}]"
    try:
        a, b = (int(x) for x in rng.split("-"))
    except ValueError:
        raise LabError(f"--partition {spec!r}: the node range is FIRST-LAST, e.g. 1-4") from None
    if not 1 <= a <= b <= shape.nodes:
        raise LabError(f"--partition {spec!r}: nodes {a}-{b} are not within 1-{shape.nodes}")
    return name, f"n[{a}-{b}]"


def slurm_conf(d: Path, shape: Shape) -> str:
    host = socket.gethostname().split(".")[0]
    n = shape.nodes
    parts = [_partition_nodes(p, shape) for p in shape.partitions]
    lines = [
        "# Written by gpualloc.slurm.lab: a lab cluster on one host.",
        "ClusterName=gpualloc-lab",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={shape.port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d}/munge/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state/ctld",
        f"SlurmdSpoolDir={d}/state/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid",
        f"SlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log",
        f"SlurmdLogFile={d}/log/slurmd-%n.log",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=86400",  # finished jobs stay in squeue for a day (no accounting database)
        "MaxJobCount=100000",
        f"SchedulerType={shape.scheduler}",
        # Measured at steps of ~3 s: without these, starts lag by seconds.
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1,"
        "sched_min_interval=0",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        f"PriorityType={shape.priority}",
        "GresTypes=gpu",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={d}/log/jobcomp.txt",
        f"NodeName=n[1-{n}] NodeHostname={host} NodeAddr=127.0.0.1 "
        f"Port={shape.port + 1}-{shape.port + n} CPUs={shape.cpus_per_node} "
        f"RealMemory=64000 Gres=gpu:{shape.gpu_type}:{shape.gpus_per_node} State=UNKNOWN",
    ]
    for i, (name, nodes) in enumerate(parts):
        lines.append(f"PartitionName={name} Nodes={nodes} Default={'YES' if i == 0 else 'NO'} "
                     f"MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(d: Path, shape: Shape) -> str:
    last = shape.gpus_per_node - 1
    files = f"{d}/dev/gpu[0-{last}]" if last else f"{d}/dev/gpu0"
    return (f"NodeName=n[1-{shape.nodes}] Name=gpu Type={shape.gpu_type} File={files}\n")


# ---- processes --------------------------------------------------------------------------

def _pid_files(d: Path) -> list[Path]:
    run = d / "run"
    if not run.is_dir():
        return []
    # Nodes first, munge last: slurmctld and slurmd talk through munge.
    files = sorted(run.glob("slurmd-*.pid")) + [run / "slurmctld.pid", run / "munged.pid"]
    return [f for f in files if f.exists()]


def _ours(pid: int, d: Path) -> bool:
    """The process `pid` runs and is this lab's (its command line or its
    environment names the lab folder): a recycled pid is left alone."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        env = Path(f"/proc/{pid}/environ").read_bytes()
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if st.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    key = str(d).encode()
    return key in cmd or key in env


def _read_pid(f: Path) -> int | None:
    try:
        return int(f.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def running(d: Path) -> dict[str, int]:
    """pid file name -> pid, for this lab's processes that run."""
    out = {}
    for f in _pid_files(d):
        pid = _read_pid(f)
        if pid is not None and _ours(pid, d):
            out[f.stem] = pid
    return out


def env(d: Path) -> dict[str, str]:
    """The environment a Slurm client needs to talk to the lab."""
    return {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}


def _run(args: list[str], d: Path, what: str, timeout: float = 60) -> str:
    try:
        p = subprocess.run(args, env=env(d), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LabError(f"{what}: {e}") from None
    if p.returncode != 0:
        last = (p.stderr or p.stdout).strip().splitlines()
        raise LabError(f"{what} failed (exit {p.returncode}): {last[-1] if last else ''}")
    return p.stdout


def install() -> None:
    """apt-get the packages whose programs are missing (root, Debian)."""
    missing = sorted({pkg for prog, pkg in PROGRAMS.items() if not _which(prog)})
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise LabError(f"missing {', '.join(missing)}: install them "
                       f"(apt-get install --no-install-recommends {' '.join(PACKAGES)})")
    print(f"installing {' '.join(missing)} ...", file=sys.stderr)
    e = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for args in (["apt-get", "update", "-q"],
                 ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        p = subprocess.run(args, env=e, capture_output=True, text=True)
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()
            raise LabError(f"{' '.join(args[:2])} failed: {tail[-1] if tail else p.returncode}")


def _which(prog: str) -> str | None:
    return shutil.which(prog, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def write_config(d: Path, shape: Shape) -> None:
    for sub in ("run", "log", "state/ctld", "dev", "munge"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for name in node_names(shape):
        (d / "state" / name).mkdir(exist_ok=True)
    os.chmod(d / "munge", 0o755)  # the socket must be reachable; the key stays 0600
    key = d / "munge" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    for g in range(shape.gpus_per_node):
        dev = d / "dev" / f"gpu{g}"
        if not dev.exists():
            os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    _write(d / "slurm.conf", slurm_conf(d, shape))
    _write(d / "gres.conf", gres_conf(d, shape))


def _wait(cond, timeout: float, what: str, d: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise LabError(f"{what} within {timeout:.0f} s (logs: {d}/log)")


def node_states(d: Path) -> dict[str, str]:
    """node -> state (idle, mixed, alloc, down*, ...), from sinfo."""
    out = _run(["sinfo", "-h", "-N", "-o", "%N %t"], d, "sinfo", timeout=20)
    states = {}
    for line in out.splitlines():
        if line.split():
            name, state = line.split()[:2]
            states[name] = state
    return states


def up(d: Path, shape: Shape, timeout: float = 90) -> bool:
    """Bring the lab up; False when it already was (nothing done)."""
    if os.geteuid() != 0:
        raise LabError("the lab runs its daemons as root: run it as root")
    have = running(d)
    names = node_names(shape)
    if "slurmctld" in have and all(f"slurmd-{n}" in have for n in names):
        return False
    if have:  # half up (a crash, a killed run): start clean
        down(d)
    install()
    write_config(d, shape)
    e = env(d)

    def start(args: list[str], what: str) -> None:
        p = subprocess.run(args, env=e, capture_output=True, text=True, cwd=d, timeout=60)
        if p.returncode != 0:
            tail = (p.stderr or p.stdout).strip().splitlines()
            raise LabError(f"{what} did not start (exit {p.returncode}): "
                           f"{tail[-1] if tail else ''} (logs: {d}/log)")

    start([_which("munged"), "--force", f"--socket={d}/munge/munge.socket",
           f"--key-file={d}/munge/munge.key", f"--pid-file={d}/run/munged.pid",
           f"--log-file={d}/log/munged.log", f"--seed-file={d}/munge/munged.seed"], "munged")
    _wait(lambda: (d / "munge" / "munge.socket").exists(), 15, "munged made no socket", d)
    start([_which("slurmctld"), "-f", str(d / "slurm.conf"), "-i"], "slurmctld")
    _wait(lambda: "slurmctld" in running(d) and _pings(d), 30, "slurmctld did not answer", d)
    for n in names:
        start([_which("slurmd"), "-f", str(d / "slurm.conf"), "-N", n], f"slurmd -N {n}")
    _wait(lambda: _all_idle(d, names), timeout, "the nodes were not all idle", d)
    return True


def _pings(d: Path) -> bool:
    p = subprocess.run(["scontrol", "ping"], env=env(d), capture_output=True, text=True)
    return p.returncode == 0 and "UP" in p.stdout


def _all_idle(d: Path, names: list[str]) -> bool:
    try:
        states = node_states(d)
    except LabError:
        return False
    return all(states.get(n) == "idle" for n in names)


def down(d: Path, timeout: float = 30) -> list[str]:
    """Stop this lab's processes (by pid file); returns what it stopped."""
    stopped = []
    for f in _pid_files(d):
        pid = _read_pid(f)
        if pid is None or not _ours(pid, d):
            f.unlink(missing_ok=True)
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        end = time.monotonic() + timeout
        while _ours(pid, d) and time.monotonic() < end:
            time.sleep(0.1)
        if _ours(pid, d):
            os.kill(pid, signal.SIGKILL)
        f.unlink(missing_ok=True)
        stopped.append(f"{f.stem} ({pid})")
    return stopped


def status(d: Path) -> tuple[bool, str]:
    have = running(d)
    if "slurmctld" not in have:
        return False, f"lab at {d}: down"
    lines = [f"lab at {d}: up ({len(have)} processes)"]
    try:
        lines.append(_run(["sinfo", "-N", "-o", "%N %P %t %G"], d, "sinfo").rstrip())
    except LabError as e:
        lines.append(str(e))
    lines.append(f"SLURM_CONF={d / 'slurm.conf'}")
    return True, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpualloc.slurm.lab",
                                 description="A lab Slurm cluster on this host (root).")
    ap.add_argument("action", choices=["up", "down", "status"])
    ap.add_argument("--dir", help=f"the lab's folder (default $GPUALLOC_SLURM_LAB or {DEFAULT_DIR})")
    dflt = Shape()
    ap.add_argument("--nodes", type=int, default=dflt.nodes)
    ap.add_argument("--gpus-per-node", type=int, default=dflt.gpus_per_node)
    ap.add_argument("--gpu-type", default=dflt.gpu_type)
    ap.add_argument("--partition", action="append", dest="partitions",
                    help="NAME or NAME:FIRST-LAST (node numbers); repeat for more; the first is "
                         "the default (default: gpu, every node)")
    ap.add_argument("--port", type=int, default=dflt.port,
                    help="slurmctld's port; the nodes take the next ones")
    ap.add_argument("--scheduler", default=dflt.scheduler, choices=["sched/backfill", "sched/builtin"])
    ap.add_argument("--priority", default=dflt.priority,
                    choices=["priority/basic", "priority/multifactor"])
    ap.add_argument("--timeout", type=float, default=90, help="seconds to wait for idle nodes")
    a = ap.parse_args(argv)
    d = lab_dir(a.dir)
    try:
        if a.action == "up":
            for what, v, lo, hi in (("--nodes", a.nodes, 1, 512),
                                    ("--gpus-per-node", a.gpus_per_node, 1, 64),
                                    ("--port", a.port, 1024, 65000 - a.nodes)):
                if not lo <= v <= hi:
                    raise LabError(f"{what} {v}: must be in [{lo}, {hi}]")
            if not a.gpu_type.isalnum():
                raise LabError(f"--gpu-type {a.gpu_type!r}: letters and digits only")
            shape = Shape(nodes=a.nodes, gpus_per_node=a.gpus_per_node, gpu_type=a.gpu_type,
                          partitions=a.partitions or ["gpu"], port=a.port,
                          scheduler=a.scheduler, priority=a.priority)
            t0 = time.monotonic()
            started = up(d, shape, a.timeout)
            print(f"lab at {d}: {'up' if started else 'already up'}"
                  + (f" in {time.monotonic() - t0:.1f} s" if started else ""))
            print(f"SLURM_CONF={d / 'slurm.conf'}")
            return 0
        if a.action == "down":
            stopped = down(d)
            print(f"lab at {d}: down" + (f" (stopped {', '.join(stopped)})" if stopped
                                         else " (nothing ran)"))
            return 0
        ok, text = status(d)
        print(text)
        return 0 if ok else 1
    except (LabError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
