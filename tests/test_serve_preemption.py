"""serve with preemptible jobs and guaranteed services, without a Slurm: the
snapshot's reading of a requeued job, the progress serve writes as it
requeues one, the guarantee held at a step, and the simulated loop."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from gpualloc.check import check, shortfall
from gpualloc.slurm.read import SlurmJob, SlurmNode

NOW = 1_800_000_000.0
NODES = [SlurmNode("n1", "mixed", ["gpu"], 8, "h100")]


def one_node(gpus: int, horizon: int, jobs: list[dict]):
    """A scenario of one node of `gpus` GPUs (PROBLEM.md's file form)."""
    from gpualloc.slurm import bridge
    return bridge.from_dict({
        "name": "one", "horizon": horizon, "step_minutes": 1,
        "cluster": {"pools": [{"name": "p", "count": 1, "gpus_per_node": gpus, "gpu_type": "h100",
                               "memory_gb": 80}]},
        "jobs": jobs})


def job(i, state, comment, gpus=8, **kw):
    return SlurmJob(id=i, name=f"j{i}", state=state, comment=comment, gpus_per_node=gpus, **kw)


def test_a_requeued_job_is_planned_as_its_restore_and_the_rest():
    from gpualloc.slurm.snapshot import Options, build
    o = Options(step_minutes=1.0, horizon=12, finishing_s=1.5)
    jobs = [
        job(1, "PENDING", "kind=training duration=6 preemptible=1 restart_cost=1 done=4",
            reason="JobHeldUser"),
        job(2, "PENDING", "kind=training duration=6 preemptible=1 restart_cost=1",
            reason="JobHeldUser"),
        # Resumed two steps ago, after 2 steps of progress: 1 + 6 - 2 = 5 steps, 3 left.
        job(3, "RUNNING", "kind=training runtime=6m preemptible=1 restart_cost=1 done=2",
            gpus=2, nodes=["n1"], start=int(NOW) - 120, idx={"n1": [0, 1]}),
        job(4, "PENDING", "kind=training duration=6 restart_cost=2", reason="JobHeldUser"),
        job(5, "PENDING", "kind=training duration=6 preemptible=1 done=x", reason="JobHeldUser"),
    ]
    snap = build(NODES, jobs, o, NOW)
    by_id = {j.id: j for j in snap.scenario.jobs}
    assert (by_id["j1"].duration, by_id["j1"].restart_cost, by_id["j1"].preemptible) == (3, 1, True)
    assert (by_id["j2"].duration, by_id["j2"].restart_cost) == (6, 1)
    k = [j.id for j in snap.scenario.jobs].index("j3")
    assert (snap.scenario.fixed[0] == k).sum() == 3
    assert by_id["j4"].duration == 6 and not by_id["j4"].preemptible
    assert any("job 4 " in r and "restart_cost= without preemptible=1" in r for r in snap.report)
    assert "j5" not in by_id and any("job 5 " in r and "done='x'" in r for r in snap.report)


@pytest.mark.parametrize("comment, minutes, want", [
    ("kind=training preemptible=1 restart_cost=2", 5, "done=5"),  # its first run: no restore
    ("kind=training,preemptible=1;done=3 restart_cost=2", 5, "done=6"),  # 5 less 2 restoring
    ("kind=training preemptible=1 restart_cost=2 done=3", 1, "done=3"),  # cut while restoring
])
def test_serve_writes_the_progress_of_a_job_it_requeues(comment, minutes, want):
    from gpualloc.slurm.read import comment_hints
    from gpualloc.slurm.serve import progress_comment
    j = job(1, "RUNNING", comment, start=int(NOW))
    out = progress_comment(j, NOW + 60 * minutes, 60.0)
    assert out.count("done=") == 1 and out.endswith(want)
    assert {k: v for k, v in comment_hints(out).items() if k != "done"} == {
        k: v for k, v in comment_hints(comment).items() if k != "done"}


@pytest.mark.parametrize("preemptible", [True, False])
@pytest.mark.parametrize("policy", ["greedy", "allocator"])
def test_serve_takes_a_guaranteed_services_gpus_from_preemptible_work(policy, preemptible):
    # A training job holds the node; the service's guaranteed demand rises now.
    # The plan alone keeps the job (it outranks the service); the step takes
    # the GPUs the guarantee needs from it where it is preemptible (serve
    # requeues it, writing its progress), and reports the replicas short where not.
    from gpualloc.slurm import bridge
    from gpualloc.slurm.serve import decide, plan_step
    from gpualloc.slurm.snapshot import Options, build
    flag = " preemptible=1 restart_cost=1" if preemptible else ""
    train = job(1, "RUNNING", f"kind=training priority=5 duration=5{flag}", nodes=["n1"],
                start=int(NOW) - 120, idx={"n1": list(range(8))})
    for share in (1.0, 0.0):
        curve = [{"id": "chat", "kind": "realtime_inference", "priority": 1, "gpus": 2,
                  "demand": [2] * 6, "min_served": share}]
        o = Options(step_minutes=1.0, horizon=6, finishing_s=1.5, demand=curve,
                    move_replicas=True)
        snap = build(NODES, [train], o, NOW)
        s = snap.scenario
        col, (plan, _) = plan_step(snap, policy, bridge.serve_config(0))
        assert check(s, plan).ok_but_guarantee
        acts = decide(snap, col)
        chat = [j.id for j in s.jobs].index("chat")
        if share and preemptible:
            assert acts.requeue == [1] and int((col == chat).sum()) == 4
            assert acts.replicas == [("chat", "n1", 2, None)] * 2
            assert bridge.short_now(s, col) == 0
        else:
            assert acts.requeue == [] and not (col == chat).any()
            assert torch.equal(col, s.fixed[:, 0])
            assert bridge.short_now(s, col) == (2 if share else 0)  # serve's log line says so


def test_the_simulated_loop_preempts_and_resumes_feasibly_with_the_guarantee():
    # PROBLEM.md's segments: a job serve requeues resumes with its restore and
    # the rest of its progress; every plan passes the checker, none is short.
    import gpualloc as ga
    from gpualloc.plan import segments
    from gpualloc.scenario.edit import with_min_served, with_preemption
    from gpualloc.slurm.bridge import serve_config
    from gpualloc.slurm.serve import simulate
    s = with_min_served(with_preemption(ga.generate("mixed", seed=0, horizon=24),
                                        ["training"], 1), 1.0)
    resumed = 0
    for policy in ("greedy", "allocator"):
        owner = simulate(s, policy, serve_config(0))
        verdict = check(s, owner)
        assert verdict.ok_but_guarantee, (policy, str(verdict))
        assert int(shortfall(s, owner).sum()) == 0
        resumed += int((segments(s, owner).new.sum(1) > 1).sum())
    assert resumed > 0  # the path is exercised


def test_executed_holds_the_runs_serve_ended_by_requeueing(tmp_path):
    # Slurm keeps a job's last run only: serve keeps the runs it ends
    # (record_requeued), and `executed` writes each as a segment of the job.
    from gpualloc.slurm import bridge
    from gpualloc.slurm.executed import (executed, load_recorded, load_runs, record_once,
                                         record_requeued)
    s = one_node(8, 10, [{"id": "train", "kind": "training", "priority": 5, "arrival": 0, "gpus": 4,
                  "duration": 5, "preemptible": True, "restart_cost": 1}])
    since, rec = NOW, tmp_path / "gpus.jsonl"
    first = job(7, "RUNNING", "id=train kind=training preemptible=1 restart_cost=1", gpus=4,
                nodes=["n1"], start=int(since), idx={"n1": [4, 5, 6, 7]})
    seen = load_recorded(rec)
    record_once([first], rec, seen)
    record_requeued(rec, [first], since + 120, seen)  # cut after 2 steps of progress
    assert 7 not in seen and 7 not in load_recorded(rec)
    # Its last run, as Slurm lists it at the end: 1 step restoring, 3 to go.
    last = job(7, "COMPLETED", "id=train kind=training preemptible=1 restart_cost=1 done=2",
               gpus=4, nodes=["n1"], start=int(since) + 240, end=int(since) + 480,
               idx={"n1": [0, 1, 2, 3]})
    record_once([dataclasses.replace(last, state="RUNNING")], rec, seen)
    ex = executed(s, [last], ["n1"], since, 60.0, load_recorded(rec), load_runs(rec))
    held = (ex.owner == 0).sum(0).tolist()
    assert held == [4, 4, 0, 0, 4, 4, 4, 4, 0, 0], held
    assert check(s, ex.owner).ok and not any("ran" in r for r in ex.report), ex.report
    assert bridge.metrics(s, ex.owner)["weighted_throughput"] == 5 * 4 * 5  # done: 5 steps


def test_a_running_job_the_plan_moves_at_once_is_requeued_not_left_in_two_places():
    # A plan may end a preemptible job's segment and start the next one on
    # other GPUs at the same step; Slurm cannot move a running job, so the
    # step takes it out (serve requeues it) and leaves its old GPUs to the
    # plan's other work.
    from gpualloc.slurm.serve import in_place
    s = one_node(4, 4, [{"id": "t", "kind": "training", "priority": 1, "arrival": 0, "gpus": 1,
                  "duration": 4, "preemptible": True, "restart_cost": 1},
                 {"id": "q", "kind": "quantization", "priority": 5, "arrival": 0, "gpus": 2,
                  "duration": 2},
                 {"id": "u", "kind": "training", "priority": 1, "arrival": 0, "gpus": 1,
                  "duration": 4}])
    s.fixed = torch.full((4, 4), -1, dtype=torch.long)
    s.fixed[1, :] = 0  # t runs on GPU 1
    s.fixed[3, :] = 2  # u (not preemptible) on GPU 3
    moved = torch.tensor([1, 1, 0, 2])  # q takes GPUs 0-1, t moves to GPU 2
    assert in_place(s, moved).tolist() == [1, 1, -1, 2]
    kept = torch.tensor([-1, 0, -1, 2])
    assert in_place(s, kept) is kept


def test_a_demand_file_rewritten_while_serve_runs_may_start_at_a_later_step(tmp_path):
    # serve reads --demand again at every step (an autoscaler may rewrite it:
    # the step's actual demand, then its forecast); `step: K` says where the
    # curves start, and a file whose curves start after the step is refused.
    from gpualloc.slurm.__main__ import UsageError, read_demand
    path = tmp_path / "demand.json"
    chat = {"id": "chat", "kind": "realtime_inference", "priority": 1, "gpus": 1,
            "min_served": 1.0}
    path.write_text(json.dumps({"jobs": [{**chat, "demand": [3, 4]}]}))
    assert read_demand(str(path), 5)[0]["demand"] == [3, 4]
    path.write_text(json.dumps({"step": 5, "jobs": [{**chat, "demand": [3, 4]}]}))
    assert read_demand(str(path), 5)[0]["demand"] == [0, 0, 0, 0, 0, 3, 4]
    assert read_demand(str(path), 6)[0]["demand"][6] == 4
    with pytest.raises(UsageError, match="start after this step, 4"):
        read_demand(str(path), 4)
    path.write_text(json.dumps({"step": -1, "jobs": [{**chat, "demand": [3]}]}))
    with pytest.raises(UsageError, match="step -1"):
        read_demand(str(path))


def test_the_guarantee_is_held_beside_a_cut_the_plan_made_itself():
    # The plan cuts training job a for a higher-priority job c on its GPUs;
    # the guarantee then needs b's GPUs too. The step keeps c where the plan
    # put it and cuts b (a held check against the running jobs' cells once
    # refused every such step).
    from gpualloc.slurm import bridge
    s = one_node(8, 4, [{"id": "a", "kind": "training", "priority": 1, "arrival": 0, "gpus": 4,
                  "duration": 4, "preemptible": True, "restart_cost": 1},
                 {"id": "b", "kind": "training", "priority": 1, "arrival": 0, "gpus": 4,
                  "duration": 4, "preemptible": True, "restart_cost": 1},
                 {"id": "c", "kind": "quantization", "priority": 9, "arrival": 0, "gpus": 4,
                  "duration": 2},
                 {"id": "chat", "kind": "realtime_inference", "priority": 1, "arrival": 0,
                  "gpus": 2, "demand": [2] * 4, "min_served": 1.0}])
    s.fixed = torch.full((8, 4), -1, dtype=torch.long)
    s.fixed[:4] = 0
    s.fixed[4:] = 1
    col = torch.tensor([2, 2, 2, 2, 1, 1, 1, 1])
    assert bridge.short_now(s, col) == 2
    out = bridge.held_guarantee(s, col)
    assert out[:4].tolist() == [2] * 4 and out[4:].tolist() == [3] * 4
    assert bridge.short_now(s, out) == 0


def test_with_headroom_work_that_cannot_yield_starts_only_where_the_raised_curve_fits():
    # Demand file curves as a forecast: 2 replicas of 2 GPUs. Beside a 4-GPU
    # job that cannot yield they fit (8 GPUs), raised by half (3 replicas)
    # they do not: with --guarantee-headroom 0.5 the start waits; a
    # preemptible job starts either way (a step reclaims its GPUs).
    from gpualloc.slurm import bridge
    chat = {"id": "chat", "kind": "realtime_inference", "priority": 1, "arrival": 0, "gpus": 2,
            "demand": [2] * 4, "min_served": 1.0}
    for preemptible in (False, True):
        q = {"id": "q", "kind": "quantization", "priority": 5, "arrival": 0, "gpus": 4,
             "duration": 3}
        if preemptible:
            q = {**q, "kind": "training", "preemptible": True}
        s = one_node(8, 4, [q, chat])
        s.fixed = torch.full((8, 4), -1, dtype=torch.long)
        col = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
        assert bridge.guarded_starts(s, col, 0.0) is col
        kept = bridge.guarded_starts(s, col, 0.5)
        assert kept.tolist() == ([0] * 4 if preemptible else [-1] * 4) + [1] * 4
