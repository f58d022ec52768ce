"""From a live cluster to a scenario of PROBLEM.md (docs/slurm.md has the
whole mapping).

- Cluster: the usable nodes with GPUs, in natural name order (n2 before
  n10); consecutive nodes with the same GPU count and type form a pool.
- Jobs: every pending or running job that asks for GPUs; its id is its name
  (`name.jobid` when names repeat, or the comment's `id=`), GPUs from its
  GRES request times its node count, duration from the comment's hint
  (`duration=` steps or `runtime=90m`) or its time limit, priority from the
  comment (`priority=`), a `--priority-map` or Slurm's own priority
  (`--slurm-priority`), kind from the comment (`kind=`), a `--kind-map` or
  `--default-kind`. Running jobs are fixed where they run (`fixed`, the
  cells a plan must keep) for the rest of their expected run.
- Real-time services: jobs marked `service=NAME` in their comment are its
  replicas (one service per name; its demand is the count of its replica
  jobs, flat), or a demand file gives the curves.

What cannot be mapped is reported per job (`Snapshot.report`), never
guessed silently.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from gpualloc.slurm import bridge
from gpualloc.slurm import read
from gpualloc.slurm.read import SlurmJob, SlurmNode, SlurmReadError, duration_seconds, natural_key

REPLICA_TAG = "gpualloc=replica"
"""In the comment of the replica jobs serve submits (and may cancel)."""

MEMORY_GB = {"h100": 80, "h200": 141, "a100": 80, "l40s": 48, "a10": 24, "v100": 32}
"""GPU memory by GRES type, where `--memory-gb TYPE=N` does not say (80 otherwise)."""


@dataclass
class Options:
    step_minutes: float = 60.0
    horizon: int = 48
    kind_map: dict[str, str] = field(default_factory=dict)
    """'partition:NAME' or 'qos:NAME' -> kind."""
    priority_map: dict[str, float] = field(default_factory=dict)
    """'partition:NAME' or 'qos:NAME' -> priority."""
    default_kind: str | None = "training"
    """None: a job with no kind from its comment or the map is not mapped (reported)."""
    default_priority: float = 1.0
    slurm_priority: bool = False
    """Priorities from Slurm's own (rank among the jobs, scaled to 1..10)."""
    memory_gb: dict[str, float] = field(default_factory=dict)
    demand: list[dict] | None = None
    """Real-time services (scenario job documents of kind realtime_inference,
    demand from step 0 = now); their replica jobs are then counted, not
    turned into demand."""
    name: str = "slurm"
    finishing_s: float = 0.0
    """A running rigid job expected to end within this many seconds of now
    (either side) is taken as finished: its GPUs are free at step 0 (serve
    snapshots just before a step boundary, where jobs end)."""
    move_replicas: bool = False
    """serve's own replicas of a `demand` service (REPLICA_TAG) are not fixed
    where they run: the plan places the service's replicas where it likes
    (PROBLEM.md: they may move between timesteps) and serve moves those the
    plan puts elsewhere (`Snapshot.replicas`). False: each is held where it
    runs while the demand keeps it."""


@dataclass
class Snapshot:
    scenario: object
    """bridge.Scenario, with `fixed` set to the running jobs' cells."""
    nodes: list[str]
    """Node of the scenario's node index (GPU order)."""
    slurm_ids: list[list[int]]
    """Scenario job -> the Slurm jobs behind it (a service: its replicas)."""
    report: list[str]
    renumbered: list[str]
    on_way: list[int] = field(default_factory=list)
    """Rigid scenario jobs fixed where they wait to start (pending, pinned,
    not held): released already, they are neither released nor requeued."""
    replicas: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    """With `Options.move_replicas`: service -> its movable replicas (Slurm
    job, node), running before pending, oldest first; not fixed in the
    scenario."""


def _hint_kind(j: SlurmJob, o: Options) -> tuple[str | None, str]:
    h = j.hints
    if "service" in h:
        return "realtime_inference", "service"
    if "kind" in h:
        return h["kind"], "comment"
    for key in (f"partition:{j.partition}", f"qos:{j.qos}"):
        if key in o.kind_map:
            return o.kind_map[key], key
    return o.default_kind, "default"


def _priority(j: SlurmJob, o: Options, rank: dict[int, float]) -> float:
    h = j.hints
    if "priority" in h:
        try:
            p = float(h["priority"])
        except ValueError:
            raise SlurmReadError(f"comment priority={h['priority']!r} is not a number") from None
        if not (math.isfinite(p) and p > 0):
            raise SlurmReadError(f"comment priority={h['priority']!r} must be > 0")
        return p
    for key in (f"partition:{j.partition}", f"qos:{j.qos}"):
        if key in o.priority_map:
            return o.priority_map[key]
    if o.slurm_priority and j.id in rank:
        return rank[j.id]
    return o.default_priority


def _steps(seconds: float, step_s: float) -> int:
    return max(1, math.ceil(seconds / step_s - 1e-9))


def expected_seconds(j: SlurmJob) -> float | None:
    """The job's run length: its comment's `runtime=`, else its time limit."""
    if "runtime" in j.hints:
        return duration_seconds(j.hints["runtime"])
    if j.time_limit_min is not None:
        return j.time_limit_min * 60.0
    return None


def duration_steps(j: SlurmJob, step_s: float) -> int | None:
    """The job's run length in steps: the comment's `duration=`, else its
    run length in seconds (`expected_seconds`); a run after serve requeued
    it, as `resumed` says."""
    h = j.hints
    if "duration" in h:
        if not h["duration"].isdigit() or int(h["duration"]) < 1:
            raise SlurmReadError(f"comment duration={h['duration']!r} is not a whole number "
                                 f"of steps >= 1")
        return max(1, int(h["duration"]) + resumed(j))
    sec = expected_seconds(j)
    return None if sec is None else max(1, _steps(sec, step_s) + resumed(j))


def preemptible(j: SlurmJob) -> bool:
    return read.preemptible(j.hints)


def steps_hint(j: SlurmJob, key: str) -> int:
    return read.steps_hint(j.hints, key)


def resumed(j: SlurmJob) -> int:
    """read.resumed of the job's comment."""
    return read.resumed(j.hints)


def job_key(j: SlurmJob, names: dict[str, int]) -> str:
    """The scenario id of a Slurm job: its comment's id=, else its name
    (name.jobid when several jobs share the name)."""
    if "id" in j.hints:
        return j.hints["id"]
    if "service" in j.hints:
        return j.hints["service"]
    name = j.name or f"job{j.id}"
    return name if names.get(name, 0) <= 1 else f"{name}.{j.id}"


def pools_of(nodes: list[SlurmNode], o: Options) -> tuple[list[dict], list[str], list[str]]:
    """Pools (scenario documents), the nodes in GPU order and what was left out."""
    left = []
    use = []
    for n in sorted(nodes, key=lambda n: natural_key(n.name)):
        if n.gpus <= 0:
            continue
        if not n.usable:
            left.append(f"node {n.name}: {n.state} {'+'.join(n.flags)}: left out".rstrip())
            continue
        use.append(n)
    pools: list[dict] = []
    for n in use:
        gtype = n.gpu_type or "gpu"
        if pools and pools[-1]["gpus_per_node"] == n.gpus and pools[-1]["gpu_type"] == gtype:
            pools[-1]["count"] += 1
        else:
            mem = o.memory_gb.get(gtype, MEMORY_GB.get(gtype.lower(), 80))
            pools.append({"name": f"{gtype}-{len(pools)}", "count": 1, "gpus_per_node": n.gpus,
                          "gpu_type": gtype, "memory_gb": mem})
    return pools, [n.name for n in use], left


def pack_node(sets: list[list[int]], size: int) -> tuple[list[int], bool]:
    """First GPU (within the node) of each of these disjoint GPU sets, laid
    out one after the other in the order of their lowest index; and whether
    that differs from where Slurm put them (a renumbering)."""
    order = sorted(range(len(sets)), key=lambda i: (min(sets[i]) if sets[i] else size, i))
    first = [0] * len(sets)
    at = 0
    moved = False
    for i in order:
        first[i] = at
        moved |= bool(sets[i]) and sorted(sets[i]) != list(range(at, at + len(sets[i])))
        at += len(sets[i])
    return first, moved


def build(nodes: list[SlurmNode], jobs: list[SlurmJob], o: Options, now: float) -> Snapshot:
    """The scenario of the cluster at `now` (epoch seconds)."""
    step_s = o.step_minutes * 60.0
    T = o.horizon
    pools, order, report = pools_of(nodes, o)
    if not pools:
        raise SlurmReadError("no usable node with GPUs (sinfo lists none idle, mixed or allocated)")
    node_index = {n: i for i, n in enumerate(order)}
    per_node = [p["gpus_per_node"] for p in pools for _ in range(p["count"])]
    first_gpu = [sum(per_node[:i]) for i in range(len(per_node))]
    node_type = [p["gpu_type"] for p in pools for _ in range(p["count"])]
    live = [j for j in jobs if j.state in ("PENDING", "RUNNING")]
    # GPUs left on each node once its running jobs (mapped or not) are
    # counted: a job waiting on its node is fixed there only where it fits.
    room = {n: per_node[i] for n, i in node_index.items()}
    for j in live:
        if j.state == "RUNNING" and j.gpus > 0 and not _finishing(j, o, step_s, now):
            for n in j.nodes:
                if n in room:
                    room[n] -= len(_gpus_on(j, n, j.nodes))
    names: dict[str, int] = {}
    for j in live:
        if "id" not in j.hints and "service" not in j.hints:
            names[j.name or f"job{j.id}"] = names.get(j.name or f"job{j.id}", 0) + 1
    prio = sorted({j.priority for j in live})
    rank = {j.id: 1 + 9 * (prio.index(j.priority) / max(len(prio) - 1, 1)) for j in live}
    docs: list[dict] = []
    ids: list[list[int]] = []
    fixed_cells: list[tuple[int, str, list[int], int, str]] = []  # job, node, GPUs, steps, who
    services: dict[str, int] = {}
    on_way: list[int] = []
    replicas: list[tuple[int, SlurmJob, int, int]] = []  # service, job, its cells [a, b)
    movable: dict[int, list[SlurmJob]] = {}
    loose: set[int] = set()  # fixed_cells of movable replicas: placed in the packing only
    for svc in o.demand or []:
        d = dict(svc)
        dem = list(d.get("demand", []))[:T]
        d["demand"] = dem + [dem[-1] if dem else 0] * (T - len(dem))
        d["arrival"] = 0
        services[d["id"]] = len(docs)
        docs.append(d)
        ids.append([])
    for j in sorted(live, key=lambda j: j.id):
        tag = f"job {j.id} ({j.name!r})"
        if j.gpus <= 0:
            report.append(f"{tag}: asks for no GPU: left out")
            continue
        try:
            kind, source = _hint_kind(j, o)
            if kind is None:
                report.append(f"{tag}: no kind (comment kind=, --kind-map or --default-kind): "
                              f"left out")
                continue
            if kind not in bridge.KINDS:
                report.append(f"{tag}: kind {kind!r} from the {source} is not one of "
                              f"{', '.join(bridge.KINDS)}: left out")
                continue
            priority = _priority(j, o, rank)
            key = job_key(j, names)
            gtypes = [j.gpu_type] if j.gpu_type else None
            if gtypes and gtypes[0] not in node_type:
                report.append(f"{tag}: GPU type {j.gpu_type!r} is on no usable node: left out")
                continue
            if kind in bridge.ELASTIC_KINDS:
                k = services.get(key)
                if k is None:
                    services[key] = k = len(docs)
                    docs.append({"id": key, "kind": kind, "priority": priority, "arrival": 0,
                                 "gpus": j.gpus, "demand": [0] * T, "_count": True})
                    if gtypes:
                        docs[k]["gpu_types"] = gtypes
                    ids.append([])
                if docs[k]["gpus"] != j.gpus:
                    report.append(f"{tag}: a replica of {key!r} with {j.gpus} GPUs, not "
                                  f"{docs[k]['gpus']}: left out")
                    continue
                ids[k].append(j.id)
                if docs[k].get("_count"):
                    docs[k]["demand"] = [v + 1 for v in docs[k]["demand"]]
                if j.state == "RUNNING" or waiting(j) and _fits(j, room, report, tag):
                    a = len(fixed_cells)
                    if _fixed(j, k, remaining(j, None, step_s, now), fixed_cells, node_index,
                              report, tag, step_s, now):
                        ours = REPLICA_TAG in j.comment and not docs[k].get("_count")
                        if o.move_replicas and ours:
                            movable.setdefault(k, []).append(j)
                            loose.update(range(a, len(fixed_cells)))
                        else:
                            replicas.append((k, j, a, len(fixed_cells)))
                continue
            if j.node_count > 1 and j.gpus_per_node and any(
                    j.gpus_per_node != per_node[i] for i in range(len(per_node))
                    if node_type[i] == (j.gpu_type or node_type[i])):
                report.append(f"{tag}: {j.node_count} nodes of {j.gpus_per_node} GPUs each: "
                              f"a block larger than a node is whole nodes (PROBLEM.md): left out")
                continue
            dur = duration_steps(j, step_s)
            if dur is None:
                report.append(f"{tag}: no time limit and no runtime= or duration= hint: left out")
                continue
            doc = {"id": key, "kind": kind, "priority": priority, "arrival": 0, "gpus": j.gpus,
                   "duration": dur}
            if gtypes:
                doc["gpu_types"] = gtypes
            if preemptible(j):
                doc["preemptible"] = True
                doc["restart_cost"] = steps_hint(j, "restart_cost")
            elif "restart_cost" in j.hints:
                report.append(f"{tag}: restart_cost= without preemptible=1: ignored")
            if waiting(j):
                if not (_fits(j, room, report, tag) and _fixed(
                        j, len(docs), dur, fixed_cells, node_index, report, tag, step_s, now)):
                    continue
                on_way.append(len(docs))
            elif j.state == "RUNNING":
                if _finishing(j, o, step_s, now):
                    continue  # ends at this step's boundary
                doc["duration"] = remaining(j, dur, step_s, now)
                if not _fixed(j, len(docs), doc["duration"], fixed_cells, node_index, report,
                              tag, step_s, now):
                    continue
            docs.append(doc)
            ids.append([j.id])
        except SlurmReadError as e:
            report.append(f"{tag}: {e}: left out")
    _hold_while_needed(replicas, docs, fixed_cells)
    for d in docs:
        d.pop("_count", None)
    doc = {"name": o.name, "horizon": T, "step_minutes": o.step_minutes,
           "cluster": {"pools": pools}, "jobs": docs}
    s = bridge.from_dict(doc)
    fixed = torch.full((s.G, s.T), bridge.IDLE, dtype=torch.long)  # (G, T)
    renumbered = []
    by_node: dict[int, list[tuple[int, list[int], int, str]]] = {}
    for i, (k, node, gpus, steps, who) in enumerate(fixed_cells):
        by_node.setdefault(node_index[node], []).append((k, gpus, 0 if i in loose else steps, who))
    for n, items in by_node.items():
        first, moved = pack_node([g for _, g, _, _ in items], per_node[n])
        if sum(len(g) for _, g, _, _ in items) > per_node[n]:  # Slurm's running jobs alone
            held = "; ".join(f"{who} GPUs {g}" for _, g, _, who in items)
            raise SlurmReadError(f"node {order[n]}: running jobs hold more GPUs than its "
                                 f"{per_node[n]}: {held}")
        if moved:
            renumbered.append(f"node {order[n]}: GPUs renumbered so that each running job's "
                              f"are adjacent")
        for (k, gpus, steps, _), f in zip(items, first):
            g0 = first_gpu[n] + f
            fixed[g0:g0 + len(gpus), :min(steps, T)] = k
    s.fixed = fixed
    places = {k: [(j.id, (j.nodes if j.state == "RUNNING" else j.required_nodes)[0])
                  for j in sorted(js, key=lambda j: (j.state != "RUNNING", j.id))]
              for k, js in movable.items()}
    return Snapshot(scenario=s, nodes=order, slurm_ids=ids, report=report, renumbered=renumbered,
                    on_way=on_way, replicas=places)


def _finishing(j: SlurmJob, o: Options, step_s: float, now: float) -> bool:
    """A running rigid job taken as finished (`Options.finishing_s`)."""
    if not o.finishing_s or _hint_kind(j, o)[0] in bridge.ELASTIC_KINDS:
        return False
    try:
        dur = duration_steps(j, step_s)
    except SlurmReadError:
        return False  # reported where the job is mapped
    return abs(expected_end(j, dur, step_s, now) - now) <= o.finishing_s


def _gpus_on(j: SlurmJob, node: str, nodes: list[str]) -> list[int]:
    """The GPUs (indices inside the node) job j holds or will hold on `node`,
    one of its `nodes`: Slurm's, else its share counted from 0."""
    return j.idx.get(node) or list(range(j.gpus // max(len(nodes), 1)))


def waiting(j: SlurmJob) -> bool:
    """Pending on the nodes it is pinned to, and not held: released to them
    (by serve, or a user's `-w`), it starts there once they have room."""
    return j.state == "PENDING" and bool(j.required_nodes) and not j.held


def _fits(j: SlurmJob, room: dict[str, int], report: list, tag: str) -> bool:
    """A waiting job takes its GPUs from its nodes' room, if they have it.
    Where they do not (a job ran past its expected end, a replica of the step
    before still ends), it waits for GPUs that running jobs hold: counting it
    there too would overbook the node, so it is not placed (reported)."""
    nodes = j.required_nodes
    need = j.gpus // max(len(nodes), 1)
    if any(room.get(n, 0) < need for n in nodes):
        report.append(f"{tag}: waits on {','.join(nodes)} for GPUs that running jobs hold: "
                      f"not placed")
        return False
    for n in nodes:
        room[n] -= need
    return True


def expected_end(j: SlurmJob, dur: int | None, step_s: float, now: float) -> float:
    """When a running job is expected to end (epoch seconds)."""
    started = j.start or now
    if dur is not None and "duration" in j.hints:
        return started + dur * step_s
    sec = expected_seconds(j)
    return started + sec + resumed(j) * step_s if sec is not None else (j.end or now + step_s)


def remaining(j: SlurmJob, dur: int | None, step_s: float, now: float) -> int:
    """Steps left of a running job's expected run (at least 1)."""
    return _steps(max(expected_end(j, dur, step_s, now) - now, 1.0), step_s)


def _hold_while_needed(replicas: list, docs: list[dict], cells: list) -> None:
    """A service with a demand curve: its replicas' cells held only while
    the curve keeps them, in the order serve gives replicas up
    (serve.surplus: its own, the pending after the running, the newest
    last; never a user's job)."""
    rank: dict[int, int] = {}
    for k, j, a, b in sorted(replicas, key=lambda x: (x[0], REPLICA_TAG in x[1].comment,
                                                     x[1].state != "RUNNING", x[1].id)):
        if docs[k].get("_count"):  # the replicas counted are the demand: held throughout
            continue
        r = rank[k] = rank.get(k, -1) + 1
        for i in range(a, b):
            k_, node, gpus, steps, who = cells[i]
            cells[i] = (k_, node, gpus, min(steps, needed(docs[k]["demand"], r)), who)


def needed(demand: list[int], r: int) -> int:
    """The steps from now that a service's replica r (0: its oldest) is held
    in the plan: while the demand keeps more than r replicas (at least this
    step). serve cancels replicas above a step's demand, the newest first,
    so the plan may count on the GPUs of those the demand gives up."""
    n = 0
    while n < len(demand) and demand[n] > r:
        n += 1
    return max(n, 1)


def _fixed(j: SlurmJob, k: int, steps: int, cells: list, node_index: dict, report: list,
           tag: str, step_s: float, now: float) -> bool:
    """The running job's cells, node by node; False (reported) when it runs
    on a node the scenario does not have."""
    nodes = j.nodes if j.state == "RUNNING" else j.required_nodes
    if not nodes or any(n not in node_index for n in nodes):
        report.append(f"{tag}: runs on {','.join(nodes) or 'no node'}, not all usable GPU "
                      f"nodes: left out")
        return False
    idx = sorted(node_index[n] for n in nodes)
    if idx != list(range(idx[0], idx[0] + len(idx))):
        report.append(f"{tag}: runs on nodes that are not consecutive in the scenario's order: "
                      f"its cells are fixed node by node, not as one block")
    for n in nodes:
        cells.append((k, n, _gpus_on(j, n, nodes), steps, f"{tag} {j.state}"))
    return True


def to_dict(snap: Snapshot) -> tuple[dict, dict]:
    """(scenario document, fixed-cells plan document)."""
    s = snap.scenario
    return s.to_dict(), {"scenario": s.name, "policy": "slurm-running",
                         "jobs": [j.id for j in s.jobs], "owner": s.fixed.tolist(),
                         "nodes": snap.nodes, "slurm_jobs": snap.slurm_ids}
