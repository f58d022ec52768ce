import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpualloc.check import check
from gpualloc.policies.fifo import fifo
from gpualloc.policies.greedy import greedy
from gpualloc.plan import from_dense, save_plan, to_dense
from gpualloc.scenario import from_dict
from strategies import scenarios

# Two pools: 2 nodes x 4 GPUs of H (GPUs 0-7), 1 node x 2 GPUs of L (GPUs 8-9).
DOC = {"name": "c", "horizon": 6, "step_minutes": 60, "cluster": {"pools": [
    {"name": "h", "count": 2, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80},
    {"name": "l", "count": 1, "gpus_per_node": 2, "gpu_type": "L", "memory_gb": 48}]},
    "jobs": [
        {"id": "big", "kind": "training", "priority": 3, "arrival": 0, "gpus": 8, "duration": 2},
        {"id": "two", "kind": "batch_inference", "priority": 2, "arrival": 1, "gpus": 2,
         "duration": 3, "gpu_types": ["H"]},
        {"id": "rt", "kind": "realtime_inference", "priority": 9, "arrival": 0, "gpus": 2,
         "demand": [1, 1, 2, 2, 1, 1]}]}
S = from_dict(DOC)


def feasible():
    o = torch.full((10, 6), -1)
    o[0:8, 0:2] = 0           # big: two whole nodes, t 0-1
    o[1:3, 2:5] = 1           # two: offset 1 inside node 0, t 2-4
    o[8:10, :] = 2            # rt: one replica on the L node
    o[4:6, 2:4] = 2           # and a second one at t 2-3
    return o


def kinds(o):
    return set(check(S, o).violations)


def test_feasible():
    assert check(S, feasible()).ok


def test_a_numpy_grid_gets_the_tensor_verdict():
    o = feasible()
    o[6, 0], o[8, 2] = 1, 1
    assert str(check(S, o.numpy())) == str(check(S, o))
    assert set(check(S, o.numpy()).violations) == {"before_arrival", "incompatible",
                                                   "rigid_not_block", "elastic_not_blocks"}


def test_dense_round_trip():
    o = feasible()
    x = to_dense(o, S.J)
    assert x.shape == (10, 3, 6) and x.sum() == (o >= 0).sum()
    assert torch.equal(from_dense(x), o)


def test_before_arrival():
    o = feasible()
    o[6, 0] = 1
    assert "before_arrival" in kinds(o)


def test_incompatible():
    o = feasible()
    o[8:10, 2:5] = 1  # two on the L node
    o[1:3, 2:5] = -1
    assert kinds(o) == {"incompatible"}


@pytest.mark.parametrize("cells", [
    [(slice(3, 5), slice(2, 5))],    # crosses the node boundary 3|4
    [(slice(0, 1), slice(2, 5)), (slice(2, 3), slice(2, 5))],  # GPUs 0 and 2: not consecutive
    [(slice(1, 4), slice(2, 5))],    # three GPUs for a two-GPU job
])
def test_rigid_not_block(cells):
    o = feasible()
    o[1:3, 2:5] = -1
    for g, t in cells:
        o[g, t] = 1
    assert "rigid_not_block" in kinds(o)


def test_multi_node_block_must_start_at_node():
    s = from_dict({**DOC, "cluster": {"pools": [
        {"name": "h", "count": 3, "gpus_per_node": 4, "gpu_type": "H", "memory_gb": 80}]},
        "jobs": [DOC["jobs"][0]]})
    o = torch.full((12, 6), -1)
    o[2:10, 0:2] = 0
    assert "rigid_not_block" in set(check(s, o).violations)
    o = torch.full((12, 6), -1)
    o[4:12, 0:2] = 0
    assert check(s, o).ok


@pytest.mark.parametrize("edit", ["gap", "short", "long", "moved"])
def test_rigid_not_run(edit):
    o = feasible()
    if edit == "gap":
        o[1:3, 3] = -1
    elif edit == "short":
        o[1:3, 4] = -1
    elif edit == "long":
        o[1:3, 5] = 1
    else:
        o[2, 4] = -1
        o[3, 4] = 1
    assert kinds(o) == {"rigid_not_run"}


def test_horizon_cut_is_fine():
    o = feasible()
    o[1:3, 2:5] = -1
    o[1:3, 4:6] = 1  # starts at 4, duration 3, cut at T=6
    assert check(S, o).ok


@pytest.mark.parametrize("cells", [[(8, 0)], [(3, 2), (4, 2)], [(4, 2), (5, 2), (6, 2)]])
def test_elastic_not_blocks(cells):
    o = feasible()
    o[8:10, 0] = -1
    o[4:6, 2] = -1
    for g, t in cells:
        o[g, t] = 2
    assert "elastic_not_blocks" in kinds(o)


def test_owner_range_and_shape():
    o = feasible()
    o[0, 5] = 7
    assert "owner_range" in kinds(o)
    assert "shape" in kinds(o[:, :5])


def test_cli_exit_codes(tmp_path):
    S.save(tmp_path / "s.json")
    save_plan(tmp_path / "ok.json", S, "hand", feasible())
    bad = feasible()
    bad[6, 0] = 1
    save_plan(tmp_path / "bad.json", S, "hand", bad)
    (tmp_path / "broken.json").write_text('{"owner": 1}')

    def rc(*args):
        return subprocess.run([sys.executable, "-m", "gpualloc.check", *args],
                              capture_output=True, text=True)
    assert rc(str(tmp_path / "s.json"), str(tmp_path / "ok.json")).returncode == 0
    r = rc(str(tmp_path / "s.json"), str(tmp_path / "bad.json"))
    assert r.returncode == 1 and "before_arrival" in r.stdout
    r = rc(str(tmp_path / "s.json"), str(tmp_path / "broken.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


MUTATIONS = ["before_arrival", "incompatible", "block_broken", "cell_moved", "replica_broken"]


@given(scenarios(max_jobs=6), st.sampled_from(MUTATIONS), st.data())
# Each mutation needs a plan with something to mutate (assume): on some
# random seeds most drawn scenarios have none, which is not a failure.
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
def test_mutated_plans_rejected(s, mutation, data):
    o = fifo(s).owner.clone()
    assert check(s, o).ok
    idle = (o == -1)
    if mutation == "before_arrival":
        jobs = [j for j in range(s.J) if s.jobs[j].arrival > 0]
        assume(jobs)
        j = data.draw(st.sampled_from(jobs))
        cells = idle[:, : s.jobs[j].arrival].nonzero().tolist()
        assume(cells)
        g, t = data.draw(st.sampled_from(cells))
        o[g, t] = j
    elif mutation == "incompatible":
        jobs = [j for j in range(s.J) if not s.compat[j].all()]
        assume(jobs)
        j = data.draw(st.sampled_from(jobs))
        cells = (idle & ~s.compat[j][:, None]).nonzero().tolist()
        cells = [(g, t) for g, t in cells if t >= s.jobs[j].arrival]
        assume(cells)
        g, t = data.draw(st.sampled_from(cells))
        o[g, t] = j
    elif mutation == "block_broken":
        jobs = [j for j in range(s.J) if s.jobs[j].rigid and s.jobs[j].gpus >= 2 and (o == j).any()]
        assume(jobs)
        j = data.draw(st.sampled_from(jobs))
        start = int((o == j).any(0).nonzero()[0])
        g = data.draw(st.sampled_from((o[:, start] == j).nonzero().flatten().tolist()))
        o[g, start] = -1
    elif mutation == "cell_moved":
        # The last cell of a run moved one step later on the same GPU (a run of
        # one step moved so is just a later start, still feasible).
        jobs = []
        for j in range(s.J):
            if s.jobs[j].rigid and s.jobs[j].duration >= 2 and (o == j).any():
                ts = (o == j).any(0).nonzero().flatten()
                end = int(ts[-1]) + 1
                g = int((o[:, end - 1] == j).nonzero()[0])
                # (a one-step run moved one step later is still a valid run)
                if end < s.T and o[g, end] == -1 and len(ts) >= 2:
                    jobs.append((j, g, end))
        assume(jobs)
        j, g, end = data.draw(st.sampled_from(jobs))
        o[g, end - 1], o[g, end] = -1, j
    else:
        cells = [(g, t) for g, t in (o >= 0).nonzero().tolist()
                 if not s.jobs[int(o[g, t])].rigid and s.jobs[int(o[g, t])].gpus >= 2]
        assume(cells)
        g, t = data.draw(st.sampled_from(cells))
        o[g, t] = -1
    assert not check(s, o).ok


# ---- policy plans and their corruptions --------------------------------------------------------

def _run(o, j):
    """(start, end, GPUs) of job j's cells in plan o."""
    ts = (o == j).any(0).nonzero().flatten()
    return int(ts[0]), int(ts[-1]) + 1, (o == j).any(1).nonzero().flatten().tolist()


@given(scenarios(max_jobs=6, preemptible=True), st.sampled_from(["fifo", "greedy"]),
       st.sampled_from(["moved", "shifted", "given"]), st.data())
@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
def test_policy_plans_are_feasible_and_corruptions_break_their_rule(s, policy, corruption, data):
    o = (fifo(s) if policy == "fifo" else greedy(s)).owner.clone()
    assert check(s, o).ok  # every policy's plan, segments of preemptible jobs included
    fixed = [j for j in range(s.J) if s.jobs[j].rigid and not s.jobs[j].preemptible
             and (o == j).any()]
    if corruption == "moved":
        # The last cell of a run of 2+ steps moved one step later on its GPU:
        # block and start unchanged, one cell outside block x [start, end).
        cases = []
        for j in fixed:
            start, end, gpus = _run(o, j)
            g = gpus[0]
            if end - start >= 2 and end < s.T and o[g, end] == -1:
                cases.append((j, g, end))
        assume(cases)
        j, g, end = data.draw(st.sampled_from(cases))
        o[g, end - 1], o[g, end] = -1, j
        assert set(check(s, o).violations) == {"rigid_not_run"}
    elif corruption == "shifted":
        # A whole run not cut by the horizon, shifted d steps on its GPUs (cells
        # past the horizon fall off): a later or earlier start, fine unless
        # before arrival.
        cases = []
        for j in fixed:
            start, end, gpus = _run(o, j)
            if end - start == s.jobs[j].duration:
                for d in (-2, -1, 1, 2):
                    lo, hi = max(start + d, 0), min(end + d, s.T)
                    target = o[gpus, lo:hi]
                    if start + d >= 0 and ((target == -1) | (target == j)).all():
                        cases.append((j, gpus, start, end, d))
        assume(cases)
        j, gpus, start, end, d = data.draw(st.sampled_from(cases))
        o[o == j] = -1
        o[gpus, max(start + d, 0):min(end + d, s.T)] = j
        expected = {"before_arrival"} if start + d < s.jobs[j].arrival else set()
        assert set(check(s, o).violations) == expected
    else:
        # A held cell given to another job: what each of the two jobs must break.
        busy = (o >= 0).nonzero().tolist()
        assume(busy and s.J >= 2)
        g, t = data.draw(st.sampled_from(busy))
        a = int(o[g, t])
        b = data.draw(st.sampled_from([j for j in range(s.J) if j != a]))
        start, _, _ = _run(o, a)
        b_held = bool((o == b).any())
        o[g, t] = b
        kinds = set(check(s, o).violations)
        expected = set()
        if t < s.jobs[b].arrival:
            expected.add("before_arrival")
        if not s.compat[b, g]:
            expected.add("incompatible")
        if a in fixed:  # a block missing a GPU at its start, or a run missing a cell
            if t > start:
                expected.add("rigid_not_run")
            elif s.jobs[a].gpus >= 2:
                expected.add("rigid_not_block")
        job_b = s.jobs[b]
        if job_b.rigid and not job_b.preemptible and not b_held and job_b.gpus >= 2:
            expected.add("rigid_not_block")  # one GPU of a gang
        assert expected <= kinds, (expected, kinds)
