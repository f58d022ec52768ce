"""The readers of what Slurm prints (no cluster needed): the captured
outputs of Slurm 22.05 in tests/data/slurm/, and fuzzed, truncated and
mutated versions of them (a value or SlurmReadError, never another
exception)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpualloc.slurm import read
from gpualloc.slurm.executed import find_order
from gpualloc.slurm.read import SlurmReadError

DATA = Path(__file__).parent / "data" / "slurm"
SQUEUE = (DATA / "squeue_22.05.json").read_text()
SINFO = (DATA / "sinfo_22.05.json").read_text()
SCONTROL = (DATA / "scontrol_show_job_22.05.txt").read_text()
JOBCOMP = (DATA / "jobcomp_22.05.txt").read_text()


def test_squeue_captured():
    jobs = {j.id: j for j in read.squeue(SQUEUE)}
    assert jobs[1].name == "train-0" and jobs[1].state == "RUNNING"
    assert jobs[1].gpus == 4 and jobs[1].gpu_type == "h100" and jobs[1].idx == {"n1": [0, 1, 2, 3]}
    assert jobs[1].hints == {"kind": "training", "priority": "3", "duration": "2"}
    assert jobs[2].name == "we ird;name" and jobs[2].nodes == ["n2", "n3"] and jobs[2].gpus == 16
    assert jobs[3].state == "COMPLETED" and jobs[3].idx == {}  # erased at the end
    assert jobs[6].held and not jobs[7].held and jobs[7].gpus == 64
    assert jobs[4].hints["service"] == "chat" and jobs[4].idx == {"n1": [4]}
    assert jobs[1].start < jobs[1].end and jobs[1].time_limit_min == 2


def test_sinfo_captured():
    nodes = read.sinfo(SINFO)
    assert [n.name for n in nodes] == [f"n{i}" for i in range(1, 9)]
    assert all(n.gpus == 8 and n.gpu_type == "h100" and n.usable for n in nodes)
    assert nodes[0].state == "mixed" and nodes[7].state == "idle"


def test_scontrol_captured():
    jobs = read.scontrol_jobs(SCONTROL)
    assert jobs[1]["idx"] == {"n1": [0, 1, 2, 3]} and jobs[2]["name"] == "we ird;name"
    assert jobs[2]["idx"]["n3"] == list(range(8)) and jobs[7]["nodes"] == []
    assert jobs[3]["idx"] == {}


def test_jobcomp_captured():
    recs = read.jobcomp(JOBCOMP)
    assert {r["id"] for r in recs} >= {1, 2, 3}
    two = next(r for r in recs if r["id"] == 2)
    assert two["name"] == "we ird;name" and two["nodes"] == ["n2", "n3"]


@pytest.mark.parametrize("text,names", [
    ("n1", ["n1"]), ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("gpu-a[01-02],x", ["gpu-a01", "gpu-a02", "x"]), ("a[8-10]b", ["a8b", "a9b", "a10b"])])
def test_hostlist(text, names):
    assert read.hostlist(text) == names


@pytest.mark.parametrize("text", ["n[3-1]", "n[1-", "n[a]", "n[1-99999999]", ",", "n1,,n2"])
def test_hostlist_refuses(text):
    with pytest.raises(SlurmReadError):
        read.hostlist(text)


@pytest.mark.parametrize("text,want", [
    ("gpu:h100:4(IDX:0-2,5)", ("h100", 4, [0, 1, 2, 5])), ("gres:gpu:2", (None, 2, None)),
    ("gpu:4", (None, 4, None)), ("gres/gpu=8", (None, 8, None)), ("gpu", (None, 1, None)),
    ("mps:100,gpu:a100:1(IDX:3)", ("a100", 1, [3])), ("gpu:h100:0(IDX:N/A)", ("h100", 0, []))])
def test_gres(text, want):
    g = read.gres(text)
    assert (g.type, g.count, g.idx) == want


def test_gres_without_gpu():
    assert read.gres("mps:100") is None and read.gres("") is None


def test_comment_hints():
    assert read.comment_hints("kind=training, priority=3;runtime=90m free words") == {
        "kind": "training", "priority": "3", "runtime": "90m"}
    assert read.duration_seconds("90s") == 90 and read.duration_seconds("2h") == 7200
    with pytest.raises(SlurmReadError):
        read.duration_seconds("soon")


def test_later_field_forms():
    """Slurm 23+ wraps numbers ({"set", "number"}) and lists job states."""
    doc = json.loads(SQUEUE)
    j = doc["jobs"][0]
    j["time_limit"] = {"set": True, "infinite": False, "number": 7}
    j["job_state"] = ["RUNNING"]
    j["priority"] = {"set": True, "number": 5}
    got = read.squeue(json.dumps(doc))[0]
    assert (got.time_limit_min, got.state, got.priority) == (7, "RUNNING", 5)
    j["time_limit"] = {"set": True, "infinite": True, "number": 0}
    assert read.squeue(json.dumps(doc))[0].time_limit_min is None


def _survives(reader, text):
    try:
        reader(text)
    except SlurmReadError as e:
        assert "\n" not in str(e) and str(e)


@given(st.integers(0, len(SQUEUE)))
def test_squeue_truncated(cut):
    _survives(read.squeue, SQUEUE[:cut])


@given(st.integers(0, len(SCONTROL)))
def test_scontrol_truncated(cut):
    _survives(read.scontrol_jobs, SCONTROL[:cut])


def _mutate(doc, path, value):
    """Replace the value at `path`, if an earlier mutation left it there."""
    node = doc
    try:
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=30) | st.sampled_from(["n[1-", "gpu:h100:4(IDX:0-", "gpu:x:99999999999",
                                              "n[9999999-1]", "PENDING", "RUNNING"]),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=3),
    max_leaves=6)


@pytest.mark.parametrize("name,reader", [("squeue", read.squeue), ("sinfo", read.sinfo)])
@given(data=st.data())
def test_json_mutated(name, reader, data):
    """Any field of a captured document replaced by any JSON value."""
    doc = json.loads(SQUEUE if name == "squeue" else SINFO)
    paths = list(_paths(doc))
    for _ in range(data.draw(st.integers(1, 3))):
        _mutate(doc, data.draw(st.sampled_from(paths)), data.draw(JSON_VALUES))
    _survives(reader, json.dumps(doc))


@given(st.text(max_size=200))
def test_small_readers_any_text(text):
    for reader in (read.hostlist, read.gres, read.comment_hints, read.scontrol_jobs,
                   read.jobcomp):
        _survives(reader, text)


@given(st.lists(st.sets(st.integers(0, 7), min_size=1, max_size=8), max_size=6))
def test_find_order_makes_sets_adjacent(sets):
    order = find_order(8, [frozenset(x) for x in sets])
    if order is not None:
        assert sorted(order) == list(range(8))
        pos = {g: i for i, g in enumerate(order)}
        for x in sets:
            p = sorted(pos[g] for g in x)
            assert p[-1] - p[0] + 1 == len(p)


def test_find_order_cases():
    assert find_order(8, [frozenset({0, 1, 2, 3})]) == list(range(8))  # nothing to do
    order = find_order(8, [frozenset({2, 4, 5, 6})])  # Slurm's IDX 2,4,5,6 (measured)
    pos = sorted(order.index(g) for g in (2, 4, 5, 6))
    assert pos == list(range(pos[0], pos[0] + 4))
    # Three sets pairwise overlapping on a cycle: no order makes all adjacent.
    assert find_order(4, [frozenset({0, 1}), frozenset({1, 2}), frozenset({2, 0})]) is None


def test_unreachable_controller_is_an_error():
    """Captured: squeue --json exits 0 with an empty job list and an
    `errors` entry when the controller does not answer."""
    with pytest.raises(SlurmReadError, match="slurm_load_jobs"):
        read.squeue((DATA / "squeue_unreachable_22.05.json").read_text())


def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "gpualloc.slurm", *args], capture_output=True,
                          text=True, timeout=120)


def test_snapshot_from_saved_outputs(tmp_path):
    """snapshot reads saved squeue/sinfo outputs as it reads Slurm's."""
    from gpualloc.scenario import load
    out = tmp_path / "s.json"
    p = _cli("snapshot", "--squeue-json", str(DATA / "squeue_22.05.json"), "--sinfo-json",
             str(DATA / "sinfo_22.05.json"), "--now", "1796128100", "--step-minutes", "0.5",
             "--horizon", "8", "-o", str(out))
    assert p.returncode == 0, p.stderr
    s = load(out)
    ids = {j.id: j for j in s.jobs}
    assert ids["train-0"].priority == 3 and ids["train-0"].kind == "training"
    assert ids["chat"].kind == "realtime_inference" and ids["chat"].demand == [2] * 8
    assert ids["q-1"].duration == 3 and ids["q-1"].kind == "quantization"  # 90 s, steps of 30 s
    assert "big" in ids and ids["big"].gpus == 64 and "small" not in ids  # completed: gone
    fixed = json.loads((tmp_path / "s.fixed.json").read_text())
    assert fixed["slurm_jobs"][list(ids).index("chat")] == [4, 5]


@pytest.mark.parametrize("cut", [0, 1, 500, 4000, len(SQUEUE) - 2])
def test_cli_on_truncated_output_is_one_line(tmp_path, cut):
    bad = tmp_path / "squeue.json"
    bad.write_text(SQUEUE[:cut])
    out = tmp_path / "s.json"
    p = _cli("snapshot", "--squeue-json", str(bad), "--sinfo-json",
             str(DATA / "sinfo_22.05.json"), "-o", str(out))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "squeue --json" in p.stderr
    assert "Traceback" not in p.stderr and not out.exists()


def test_pack_when_no_renumbering_fits():
    """Slurm's indices over time admit no single renumbering of the node,
    but each job can hold adjacent GPUs of its own for its run."""
    from gpualloc.slurm.executed import Run, pack
    runs = [Run(0, 1, 0, 0, 1, 2, [0, 1]), Run(1, 2, 0, 0, 1, 2, [2, 3]),
            Run(2, 3, 0, 1, 2, 2, [1, 2]), Run(3, 4, 0, 2, 3, 2, [0, 2])]
    assert find_order(4, [frozenset(r.idx) for r in runs]) is None
    first = pack(runs, 4)
    assert first is not None
    cells = {}
    for r, a in zip(runs, first):
        assert 0 <= a and a + r.count <= 4
        for g in range(a, a + r.count):
            for t in range(r.start, r.end):
                assert (g, t) not in cells
                cells[g, t] = r.job
    # Two 3-GPU jobs at once on a 4-GPU node: no layout.
    assert pack([Run(i, i, 0, 0, 1, 3, None) for i in range(2)], 4) is None


def test_snapshot_places_waiting_jobs_where_their_nodes_have_room():
    """A job released to its nodes and still pending there holds its place
    in the plan where those nodes have room; where running jobs hold the
    GPUs it waits for (a job past its expected end), it is not placed, and
    the reading is not an error. Running jobs alone overbooking a node is."""
    from gpualloc.slurm.read import SlurmJob, SlurmNode
    from gpualloc.slurm.snapshot import Options, build
    now = 1_800_000_000.0
    nodes = [SlurmNode(f"n{i}", "mixed", ["gpu"], 8, "h100") for i in (1, 2)]

    def job(i, state, gpus, comment, **kw):
        return SlurmJob(id=i, name=f"j{i}", state=state, comment=comment, gpus_per_node=gpus,
                        **kw)
    late = job(1, "RUNNING", 8, "kind=training duration=1", nodes=["n1"], start=int(now) - 400,
               idx={"n1": list(range(8))})
    replica = job(2, "PENDING", 2, "service=chat gpualloc=replica", required_nodes=["n1"])
    on_way = job(3, "PENDING", 4, "kind=training duration=2", required_nodes=["n2"])
    blocked = job(4, "PENDING", 4, "kind=training duration=2", required_nodes=["n1"])
    held = job(5, "PENDING", 4, "kind=training duration=2", required_nodes=["n2"],
               reason="JobHeldUser")
    o = Options(step_minutes=1.0, horizon=4, finishing_s=1.5)
    snap = build(nodes, [late, replica, on_way, blocked, held], o, now)
    s = snap.scenario
    ids = [j.id for j in s.jobs]
    assert "j4" not in ids and any("job 4 " in r and "not placed" in r for r in snap.report)
    assert any("job 2 " in r and "not placed" in r for r in snap.report)
    k = ids.index("j3")
    assert snap.on_way == [k] and int((s.fixed == k).sum()) == 4 * 2  # 4 GPUs, its 2 steps
    assert int((s.fixed == ids.index("j1")).sum(0)[0]) == 8
    assert not (s.fixed == ids.index("j5")).any()  # held: planned, not placed
    chat = ids.index("chat")
    assert not (s.fixed == chat).any() and snap.slurm_ids[chat] == [2]
    twice = job(6, "RUNNING", 2, "kind=training duration=3", nodes=["n1"], start=int(now),
                idx={"n1": [0, 1]})
    with pytest.raises(SlurmReadError, match="node n1: running jobs hold more GPUs"):
        build(nodes, [late, twice], o, now)


@pytest.mark.parametrize("limit", ["0", "-1", "nan"])
def test_serve_refuses_a_time_limit_that_is_no_time_in_one_line(limit):
    # Before Slurm is asked anything; as `python -m gpualloc.slurm` (where
    # the commands' UsageError once escaped as a traceback).
    p = _cli("serve", "--time-limit", limit, "--step-minutes", "60", "--horizon", "4")
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "--time-limit" in p.stderr and "Traceback" not in p.stderr


def test_serve_plans_by_moves_unless_given_a_time_limit():
    from gpualloc.slurm.bridge import serve_config
    assert serve_config(0).solver.time_limit_s is None  # one plan per seed
    assert serve_config(0, 2.5).solver.time_limit_s == 2.5


def test_serve_plans_each_step_as_the_online_loops_full_replan():
    # With the allocator's offline settings (undiscounted, the offline search
    # budget) serve's loop fell below greedy's (docs/results.md, s79).
    from gpualloc.config import RunConfig
    from gpualloc.slurm.bridge import serve_config
    cfg, online = serve_config(3), RunConfig().online
    assert cfg.seed == 3 and cfg.device == "cpu" and not cfg.solver.progress
    assert cfg.solver.discount == online.discount > 0
    assert cfg.solver.local_search_iters <= online.search_moves
    assert not cfg.solver.start_from_greedy and cfg.solver.deep_search_cells == 0


def test_serves_loop_simulated_keeps_rules_1_to_3_and_one_plan_per_seed():
    import torch

    import gpualloc as ga
    from gpualloc.check import check
    from gpualloc.slurm.bridge import serve_config
    from gpualloc.slurm.serve import simulate
    s = ga.generate("mixed", seed=0, horizon=24)
    for policy in ("greedy", "allocator"):
        for move in (False, True):  # --pin-replicas; serve's default
            owner = simulate(s, policy, serve_config(0), move_replicas=move)
            verdict = check(s, owner)
            assert verdict.ok_but_guarantee, (policy, move, str(verdict))
            assert (owner >= 0).any()
    assert torch.equal(owner, simulate(s, "allocator", serve_config(0)))


def test_a_replica_is_held_while_the_demand_curve_keeps_it():
    # serve cancels its own replicas above a step's demand, the newest first,
    # and never a user's: the plan may count on their GPUs from the step the
    # curve gives them up, in that order.
    from gpualloc.slurm.read import SlurmJob, SlurmNode
    from gpualloc.slurm.snapshot import Options, build, needed
    now = 1_800_000_000.0
    nodes = [SlurmNode("n1", "mixed", ["gpu"], 8, "h100")]

    def replica(i, comment):
        return SlurmJob(id=i, name=f"r{i}", state="RUNNING", comment=comment, gpus_per_node=2,
                        nodes=["n1"], start=int(now) - 60, time_limit_min=600,
                        idx={"n1": [2 * i - 2, 2 * i - 1]})
    ours = [replica(i, "service=chat gpualloc=replica") for i in (1, 2, 3)]
    users = replica(4, "service=chat")  # the newest, but not serve's to cancel
    curve = [{"id": "chat", "kind": "realtime_inference", "priority": 9, "gpus": 2,
              "demand": [4, 4, 3, 2, 1, 0]}]
    o = Options(step_minutes=1.0, horizon=6, finishing_s=1.5, demand=curve)
    s = build(nodes, ours + [users], o, now).scenario
    chat = [j.id for j in s.jobs].index("chat")
    assert (s.fixed == chat).sum(0).tolist() == [8, 8, 6, 4, 2, 0]  # GPUs held a step
    assert (s.fixed[6:8, :5] == chat).all() and (s.fixed[0:2, :4] == chat).all()
    assert not (s.fixed[4:6, 2:] == chat).any()  # serve's newest: the first given up
    # Without a curve the replicas counted are the demand, flat: held throughout.
    flat = build(nodes, ours + [users], Options(step_minutes=1.0, horizon=6, finishing_s=1.5),
                 now)
    assert (flat.scenario.fixed == 0).sum(0).tolist() == [8] * 6
    assert needed([3, 3, 2], 2) == 2 and needed([1, 0], 3) == 1 and needed([4, 4], 0) == 2


def test_serve_moves_its_own_replicas_where_the_plan_gives_their_gpus_other_work():
    # Two of serve's replicas on n1 and a user's on n2 keep a whole-node
    # training job from starting while they are fixed where they run;
    # movable (serve's default), the plan starts it on n1 and serve moves
    # its two replicas to n2. A user's replica is never moved.
    from gpualloc.check import check
    from gpualloc.config import RunConfig
    from gpualloc.slurm.read import SlurmJob, SlurmNode
    from gpualloc.slurm.serve import decide, plan_step
    from gpualloc.slurm.snapshot import Options, build
    now = 1_800_000_000.0
    nodes = [SlurmNode(f"n{i}", "mixed", ["gpu"], 8, "h100") for i in (1, 2)]

    def replica(i, node, idx, comment):
        return SlurmJob(id=i, name="chat", state="RUNNING", comment=comment, gpus_per_node=2,
                        nodes=[node], start=int(now) - 60, time_limit_min=600,
                        idx={node: idx})
    jobs = [replica(1, "n1", [0, 1], "service=chat gpualloc=replica"),
            replica(2, "n1", [4, 5], "service=chat gpualloc=replica"),
            replica(3, "n2", [0, 1], "service=chat"),
            SlurmJob(id=4, name="train", state="PENDING", comment="kind=training priority=10 "
                     "duration=4", gpus_per_node=8, reason="JobHeldUser")]
    curve = [{"id": "chat", "kind": "realtime_inference", "priority": 1, "gpus": 2,
              "demand": [3] * 6}]
    cfg = RunConfig(device="cpu")
    cfg.solver.progress = False
    for move in (True, False):
        o = Options(step_minutes=1.0, horizon=6, finishing_s=1.5, demand=curve,
                    move_replicas=move)
        snap = build(nodes, jobs, o, now)
        s = snap.scenario
        chat = [j.id for j in s.jobs].index("chat")
        assert int((s.fixed[:, 0] == chat).sum()) == (2 if move else 6)  # the user's stay
        assert snap.replicas == ({chat: [(1, "n1"), (2, "n1")]} if move else {})
        col, (plan, _) = plan_step(snap, "greedy", cfg)
        assert check(s, plan).ok_but_guarantee
        assert int((col == chat).sum()) == 6  # the whole demand served either way
        acts = decide(snap, col)
        if move:
            assert acts.release == [(4, ["n1"])] and sorted(acts.move) == [1, 2]
            assert acts.replicas == [("chat", "n2", 2, None)] * 2
        else:
            assert acts.release == [] and acts.move == [] and acts.replicas == []


def test_settle_keeps_replicas_on_their_nodes_where_the_column_leaves_room():
    import torch

    from gpualloc.slurm import bridge
    from gpualloc.slurm.serve import settle
    from gpualloc.slurm.snapshot import Snapshot
    s = bridge.from_dict({
        "name": "two", "horizon": 2, "step_minutes": 60,
        "cluster": {"pools": [{"name": "p", "count": 2, "gpus_per_node": 4, "gpu_type": "h100",
                               "memory_gb": 80}]},
        "jobs": [{"id": "chat", "kind": "realtime_inference", "priority": 1, "arrival": 0,
                  "gpus": 1, "demand": [2, 2]},
                 {"id": "t", "kind": "training", "priority": 1, "arrival": 0, "gpus": 2,
                  "duration": 2},
                 {"id": "u", "kind": "training", "priority": 1, "arrival": 0, "gpus": 2,
                  "duration": 2}]})
    s.fixed = torch.full((8, 2), bridge.IDLE, dtype=torch.long)
    snap = Snapshot(scenario=s, nodes=["n1", "n2"], slurm_ids=[[], [], []], report=[],
                    renumbered=[], replicas={0: [(11, "n1"), (12, "n1")]})
    col = torch.tensor([1, 1, -1, -1, 0, 0, -1, -1])  # both replicas planned on n2
    out = settle(col, snap)
    # One idle GPU pair is left on n1 after the training job: both replicas stay there.
    assert out[:4].tolist().count(0) == 2 and not (out[4:] == 0).any()
    assert out[:2].tolist() == [1, 1] and int((out == 0).sum()) == 2
    full = torch.tensor([1, 1, 2, 2, 0, 0, -1, -1])  # n1 has no room: they move
    assert torch.equal(settle(full, snap), full)


def test_the_last_plan_carried_into_the_next_steps_view():
    import torch

    from gpualloc.slurm import bridge
    from gpualloc.slurm.serve import carried
    s = bridge.from_dict({
        "name": "next", "horizon": 3, "step_minutes": 60,
        "cluster": {"pools": [{"name": "p", "count": 1, "gpus_per_node": 2, "gpu_type": "h100",
                               "memory_gb": 80}]},
        "jobs": [{"id": id_, "kind": "training", "priority": 1, "arrival": 0, "gpus": 1,
                  "duration": 2} for id_ in ("b", "c")]})
    plan = torch.tensor([[0, 0, 1, 1],    # jobs of the last view: a, b
                         [-1, 1, 1, -1]])
    out = carried((plan, ["a", "b"], 1), s)
    # One step on: a is gone (idle), b is job 0 here, the view's last step idle.
    assert out.tolist() == [[-1, 0, 0], [0, 0, -1]]
    # plan_step gives it to the policy as the view's hint (the allocator's
    # search competes with it, as at the online loop's replans).
    from gpualloc.check import check
    from gpualloc.config import RunConfig
    from gpualloc.slurm.serve import plan_step
    from gpualloc.slurm.snapshot import Snapshot
    s.fixed = torch.full((2, 3), bridge.IDLE, dtype=torch.long)
    snap = Snapshot(scenario=s, nodes=["n1"], slurm_ids=[[], []], report=[], renumbered=[])
    cfg = RunConfig(device="cpu")
    cfg.solver.progress = False
    col, (plan, ids) = plan_step(snap, "allocator", cfg, (plan, ["a", "b"], 1))
    assert check(s, plan).ok_but_guarantee
    assert torch.equal(s.hint, out) and ids == ["b", "c"] and plan.shape == (2, 3)
    assert sorted(col.tolist()) == [0, 1]  # both start now, one GPU each
