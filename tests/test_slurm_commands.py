"""snapshot, record, executed and serve against the lab cluster, on jobs
submitted with plain `sbatch` (not through gpualloc). Marked `slurm`."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time

import pytest

from gpualloc.check import check
from gpualloc.metrics import metrics
from gpualloc.plan import load_plan
from gpualloc.scenario import from_dict, load
from gpualloc.slurm.executed import load_runs, record_once
from gpualloc.slurm.workload import submit
from slurm_lab import cancel, need_lab, own_lab, run_cli, tag, wait_done

pytestmark = pytest.mark.slurm


def sbatch(slurm, *args):
    return slurm.sbatch([*args, "-o", "/dev/null", "-e", "/dev/null"])


def test_snapshot_of_plain_sbatch_jobs(tmp_path):
    slurm = need_lab()
    t = tag()
    evil = tmp_path / "pwned"
    ids = [
        sbatch(slurm, "--hold", "-J", f"{t}-train", "--gres=gpu:4", "-t", "3",
               "--comment", "kind=training priority=4", "--wrap", "sleep 1"),
        sbatch(slurm, "--hold", "-J", f"{t}-q", "--gres=gpu:h100:2", "-t", "10",
               "--comment", "kind=quantization priority=2 runtime=90s", "--wrap", "sleep 1"),
        sbatch(slurm, "--hold", "-J", f"{t}-big", "-N", "2", "--gres=gpu:8", "-t", "2",
               "--wrap", "sleep 1"),
        sbatch(slurm, "--hold", "-J", f"{t}-cpu", "-t", "2", "--wrap", "sleep 1"),
        # A name and comment made to break a shell, if one ever saw them.
        sbatch(slurm, "--hold", "-J", f"{t}-$(touch {evil});x", "--gres=gpu:1", "-t", "1",
               "--comment", f"kind=batch_inference `touch {evil}`", "--wrap", "sleep 1"),
        sbatch(slurm, "-J", f"{t}-run", "--gres=gpu:3", "-t", "5", "--comment",
               "kind=training runtime=120s", "--wrap", "sleep 60"),
    ]
    try:
        end = time.time() + 30
        while next(j for j in slurm.jobs() if j.id == ids[-1]).state != "RUNNING":
            assert time.time() < end, "the running job did not start"
            time.sleep(0.3)
        out = tmp_path / "snap.json"
        p = run_cli("snapshot", "-o", str(out), "--step-minutes", "1", "--horizon", "12",
                    "--kind-map", "partition:gpu=batch_inference", slurm=slurm)
        assert p.returncode == 0, p.stderr
        s = load(out)
        jobs = {j.id: j for j in s.jobs if j.id.startswith(t)}
        assert jobs[f"{t}-train"].kind == "training" and jobs[f"{t}-train"].duration == 3
        assert jobs[f"{t}-train"].priority == 4 and jobs[f"{t}-train"].gpus == 4
        q = jobs[f"{t}-q"]
        assert (q.kind, q.duration, q.gpu_types, q.priority) == ("quantization", 2, ["h100"], 2)
        big = jobs[f"{t}-big"]
        assert big.gpus == 16 and big.kind == "batch_inference"  # from the partition map
        assert f"{t}-cpu" not in jobs and f"job {ids[3]} " in p.stdout  # reported, left out
        weird = next(j for j in jobs.values() if "touch" in j.id)
        assert weird.kind == "batch_inference" and not evil.exists()
        fixed = json.loads((tmp_path / "snap.fixed.json").read_text())
        assert fixed["nodes"][:8] == [f"n{i}" for i in range(1, 9)]
        run = list(fixed["jobs"]).index(f"{t}-run")
        cells = [(g, row) for g, row in enumerate(fixed["owner"]) if row[0] == run]
        assert len(cells) == 3 and jobs[f"{t}-run"].duration == 2  # 120 s, started just now
        assert all(row[:2] == [run, run] and row[2] != run for _, row in cells)
        assert not any(row[0] == list(fixed["jobs"]).index(f"{t}-train")
                       for row in fixed["owner"])  # held: nothing fixed
    finally:
        cancel(slurm, ids)


def executed_plan(slurm, tmp_path, s, since, step, rec):
    """`executed` (the command) on what ran since `since`: the plan it writes."""
    scen = tmp_path / "scenario.json"
    s.save(scen)
    out = tmp_path / "plan.json"
    p = run_cli("executed", "--scenario", str(scen), "--since", f"{since:.3f}",
                "--step-seconds", str(step), "--nodes", "n[1-8]", "--recorded", str(rec),
                "-o", str(out), slurm=slurm)
    assert p.returncode == 0, p.stdout + p.stderr
    return load_plan(out, s)[1]


def _scenario(t, T=6):
    jobs = [("a", 4, 2), ("b", 8, 1), ("c", 16, 2), ("d", 2, 1), ("e", 6, 3)]
    return from_dict({
        "name": f"{t}-exec", "horizon": T, "step_minutes": 0.05,
        "cluster": {"pools": [{"name": "lab", "count": 8, "gpus_per_node": 8,
                               "gpu_type": "h100", "memory_gb": 80}]},
        "jobs": [{"id": f"{t}-{n}", "kind": "training", "priority": 1 + i, "arrival": 0,
                  "gpus": g, "duration": d} for i, (n, g, d) in enumerate(jobs)]})


def test_executed_of_plain_sbatch_jobs(tmp_path):
    """Jobs a user submitted with sbatch run; `executed` turns what ran into
    a plan the checker accepts, each job where and when Slurm ran it."""
    slurm = need_lab()
    t = tag()
    s = _scenario(t)
    step = 3.0
    since = float(math.ceil(time.time() + 1.5))  # whole seconds, as Slurm records times
    ids = [submit(slurm, j, 8, since, step, held=True) for j in s.jobs]
    seen = {}
    rec = tmp_path / "gpus.jsonl"
    try:
        time.sleep(max(0.0, since - 0.5 - time.time()))
        slurm.release(ids)
        end = time.time() + 60
        while True:
            jobs = [j for j in slurm.jobs() if j.id in ids]
            record_once(jobs, rec, seen)
            if all(j.state not in ("PENDING", "RUNNING") for j in jobs) or time.time() > end:
                break
            time.sleep(0.3)
        done = wait_done(slurm, ids)
        assert all(j.state == "COMPLETED" for j in done), [(j.id, j.state) for j in done]
        assert set(seen) == set(ids)  # every job's GPU indices recorded while it ran
        owner = executed_plan(slurm, tmp_path, s, since, step, rec)
        assert check(s, owner).ok
        m = metrics(s, owner)
        assert m["jobs_completed"] == 5
        starts = {j.id: int((owner == k).any(0).nonzero()[0]) for k, j in enumerate(s.jobs)}
        assert all(v == 0 for v in starts.values()), starts  # 46 of 64 GPUs: all start at once
        by_id = {j.id: j for j in done}
        for k, job in enumerate(s.jobs):  # on the nodes Slurm ran it on
            gpus = (owner == k).any(1).nonzero().flatten()
            nodes = sorted({f"n{int(g) // 8 + 1}" for g in gpus})
            assert nodes == sorted(by_id[ids[k]].nodes)
            assert len(gpus) == job.gpus
    finally:
        cancel(slurm, ids)


def _contended(t, T=10):
    rigid = [(f"{t}-big{i}", 16, 2, 2 + i % 3) for i in range(5)] + \
            [(f"{t}-mid{i}", 8, 1, 1 + i) for i in range(4)] + [(f"{t}-one", 2, 3, 1)]
    return from_dict({
        "name": f"{t}-serve", "horizon": T, "step_minutes": 0.05,
        "cluster": {"pools": [{"name": "lab", "count": 8, "gpus_per_node": 8,
                               "gpu_type": "h100", "memory_gb": 80}]},
        "jobs": [{"id": n, "kind": "training", "priority": p, "arrival": 0, "gpus": g,
                  "duration": d} for n, g, d, p in rigid]
        + [{"id": f"{t}-chat", "kind": "realtime_inference", "priority": 5, "arrival": 0,
            "gpus": 2, "demand": [4, 4, 6, 6, 2, 2, 4, 4, 4, 4][:T]}]})


@pytest.mark.slow
def test_serve_dry_run_then_killed_and_restarted(tmp_path):
    """serve on held jobs submitted with plain sbatch: a dry run releases
    nothing; a run killed after two steps and restarted with the same
    --since goes on from Slurm's state: every job runs exactly once, the
    real-time service gets its replicas, and what ran passes the checker."""
    slurm = need_lab()
    t = tag()
    s = _contended(t)
    step = 3.0
    since = float(math.ceil(time.time() + 15))  # after the first plan compiles the core
    ids = [submit(slurm, j, 8, since, step, held=True) for j in s.jobs if j.rigid]
    chat = s.jobs[-1]
    demand = tmp_path / "demand.json"
    demand.write_text(json.dumps({"jobs": [{
        "id": chat.id, "kind": chat.kind, "priority": chat.priority, "gpus": chat.gpus,
        "demand": chat.demand}]}))
    common = ["--policy", "greedy", "--step-seconds", str(step), "--horizon", "10",
              "--demand", str(demand), "--since", f"{since:.3f}"]
    rec = tmp_path / "gpus.jsonl"
    try:
        p = run_cli("serve", "--dry-run", *common, slurm=slurm)
        assert p.returncode == 0, p.stderr
        assert "release job" in p.stdout and f"replica of {chat.id}" in p.stdout
        assert all(j.held for j in slurm.jobs() if j.id in ids)  # nothing done
        p = run_cli("serve", "--dry-run", *common, "--policy", "allocator", "--time-limit", "5",
                    slurm=slurm)  # the allocator, its search on a clock too
        assert p.returncode == 0 and "release job" in p.stdout, p.stderr
        assert all(j.held for j in slurm.jobs() if j.id in ids)
        # Killed (SIGKILL) once it has acted on a step after the first (on a
        # loaded machine it may start at step 2 or later), then restarted.
        first = subprocess.Popen([sys.executable, "-m", "gpualloc.slurm", "serve", *common,
                                  "--steps", "10", "--recorded", str(rec)],
                                 env={**os.environ, "SLURM_CONF": slurm.conf},
                                 stdout=subprocess.PIPE, text=True)
        log = ""
        for line in first.stdout:
            log += line
            if re.match(r"step [1-9]\d*:", line):
                break
        first.kill()
        first.wait(timeout=30)
        log += first.stdout.read()
        assert first.returncode == -9 and re.search(r"^step [1-9]", log, re.M), log
        p = run_cli("serve", *common, "--steps", "10", "--recorded", str(rec), slurm=slurm)
        assert p.returncode == 0, p.stderr
        log += p.stdout
        assert "not done" not in log, log
        done = wait_done(slurm, ids, timeout=60)
        assert all(j.state == "COMPLETED" for j in done), [(j.id, j.state, j.reason) for j in done]
        replicas = [j.id for j in slurm.jobs() if j.name == chat.id]
        cancel(slurm, replicas)  # a service's replicas run until the demand falls
        wait_done(slurm, replicas)
        owner = executed_plan(slurm, tmp_path, s, since, step, rec)
        assert check(s, owner).ok_but_guarantee
        m = metrics(s, owner)
        # Each rigid job ran once (one Slurm job each, none requeued) and to its end.
        assert m["jobs_started"] == len(ids) and m["jobs_completed"] >= len(ids) - 2
        assert m["replicas_served"] > 0
    finally:
        cancel(slurm, ids + [j.id for j in slurm.jobs() if j.name == chat.id])


def test_serve_moves_its_replicas_off_the_only_node_a_job_fits(tmp_path):
    """On a lab of its own (two nodes, nothing else on them): two of serve's
    replicas on n1, six GPUs of n2 busy, a held 8-GPU job that fits only on
    n1. One step of serve moves the replicas to n2 and starts the job on
    n1; with --pin-replicas it starts nothing."""
    with own_lab(tmp_path, nodes=2, port=17947) as slurm:
        t = tag()
        fill = sbatch(slurm, "-J", f"{t}-fill", "-w", "n2", "--gres=gpu:6", "-t", "10",
                      "--wrap", "sleep 600")
        ours = [sbatch(slurm, "-J", f"{t}-chat", "-w", "n1", "--gres=gpu:1", "-t", "10",
                       "--comment", f"service={t}-chat gpualloc=replica", "--wrap", "sleep 600")
                for _ in range(2)]
        train = sbatch(slurm, "--hold", "-J", f"{t}-train", "--gres=gpu:8", "-t", "10",
                       "--comment", "kind=training priority=10 duration=4", "--wrap", "sleep 1")
        end = time.time() + 60
        while any(j.state != "RUNNING" for j in slurm.jobs() if j.id in [fill] + ours):
            assert time.time() < end, "the lab's jobs did not start"
            time.sleep(0.3)
        demand = tmp_path / "demand.json"
        demand.write_text(json.dumps({"jobs": [{
            "id": f"{t}-chat", "kind": "realtime_inference", "priority": 1, "gpus": 1,
            "demand": [2] * 6}]}))
        common = ["--policy", "greedy", "--step-seconds", "60", "--horizon", "6",
                  "--demand", str(demand)]
        p = run_cli("serve", "--dry-run", "--pin-replicas", *common, slurm=slurm)
        assert p.returncode == 0, p.stderr
        assert "0 released, 0 replicas started, 0 cancelled above demand, 0 cancelled for " \
               "other work" in p.stdout, p.stdout
        p = run_cli("serve", "--steps", "1", *common, slurm=slurm)
        assert p.returncode == 0 and "not done" not in p.stdout, p.stdout + p.stderr
        assert "0 cancelled above demand, 2 cancelled for other work" in p.stdout, p.stdout
        end = time.time() + 30
        while True:
            jobs = {j.id: j for j in slurm.jobs()}
            new = [j for j in jobs.values() if j.name == f"{t}-chat" and j.id not in ours]
            if jobs[train].state in ("RUNNING", "COMPLETED") and len(new) == 2 and all(
                    j.state == "RUNNING" for j in new):
                break
            assert time.time() < end, [(j.id, j.state, j.reason) for j in jobs.values()]
            time.sleep(0.3)
        assert jobs[train].nodes == ["n1"] or jobs[train].state == "COMPLETED"
        assert all(j.nodes == ["n2"] for j in new)
        assert all(jobs[i].state not in ("PENDING", "RUNNING") for i in ours)


def test_serve_requeues_preemptible_work_for_a_guaranteed_service(tmp_path):
    """On a one-node lab of its own: a preemptible training job holds the
    node when a guaranteed service's demand rises. One step of serve
    requeues it held, its progress in its comment, and starts the replicas;
    released again, the job comes back planned as its restore and the rest."""
    from gpualloc.slurm.serve import decide, plan_step
    from gpualloc.slurm.snapshot import Options, build
    from gpualloc.slurm.bridge import serve_config
    with own_lab(tmp_path, nodes=1, port=17949) as slurm:
        t = tag()
        train = sbatch(slurm, "-J", f"{t}-train", "--gres=gpu:8", "-t", "10", "--comment",
                       "kind=training priority=5 duration=5 preemptible=1 restart_cost=1",
                       "--wrap", "sleep 600")
        end = time.time() + 60
        while next(j for j in slurm.jobs() if j.id == train).state != "RUNNING":
            assert time.time() < end, "the lab's job did not start"
            time.sleep(0.3)
        demand = tmp_path / "demand.json"
        curve = {"id": f"{t}-chat", "kind": "realtime_inference", "priority": 1, "gpus": 2,
                 "demand": [2] * 6, "min_served": 1.0}
        demand.write_text(json.dumps({"jobs": [curve]}))
        rec = tmp_path / "gpus.jsonl"
        p = run_cli("serve", "--steps", "1", "--policy", "greedy", "--step-seconds", "60",
                    "--horizon", "6", "--demand", str(demand), "--recorded", str(rec),
                    slurm=slurm)
        assert p.returncode == 0 and "not done" not in p.stdout, p.stdout + p.stderr
        assert "2 replicas started" in p.stdout and "1 requeued" in p.stdout, p.stdout
        # Slurm keeps only the last run: serve kept this one (its GPUs, start, end).
        (run,) = load_runs(rec)
        assert run.id == train and run.nodes == ["n1"] and sorted(run.idx["n1"]) == list(range(8))
        assert run.start <= run.end
        end = time.time() + 30
        while True:
            jobs = {j.id: j for j in slurm.jobs()}
            chat = [j for j in jobs.values() if j.name == f"{t}-chat"]
            if jobs[train].held and len(chat) == 2 and all(j.state == "RUNNING" for j in chat):
                break
            assert time.time() < end, [(j.id, j.state, j.reason) for j in jobs.values()]
            time.sleep(0.3)
        assert "done=0" in jobs[train].comment and all(j.nodes == ["n1"] for j in chat)
        # Planned again as a resumed job: 1 step restoring, 5 to go.
        o = Options(step_minutes=1.0, horizon=12, finishing_s=1.5,
                    demand=[{**curve, "demand": [0] * 12}])
        snap = build(slurm.nodes(), [j for j in jobs.values() if j.id == train], o, time.time())
        k = [j.id for j in snap.scenario.jobs].index(f"{t}-train")
        assert snap.scenario.jobs[k].duration == 6 and snap.scenario.jobs[k].restart_cost == 1
        col, _ = plan_step(snap, "greedy", serve_config(0))
        assert decide(snap, col).release == [(train, ["n1"])]
        slurm.cancel([j.id for j in chat])  # the demand gone
        end = time.time() + 30
        while any(j.state == "RUNNING" for j in slurm.jobs() if j.name == f"{t}-chat"):
            assert time.time() < end, "the replicas did not end"
            time.sleep(0.3)
        slurm.pin(train, ["n1"])  # as serve releases it: at once, not Slurm's requeue delay
        slurm.release([train])
        end = time.time() + 30
        while next(j for j in slurm.jobs() if j.id == train).state != "RUNNING":
            assert time.time() < end, "the requeued job did not start again at once"
            time.sleep(0.3)
