"""Preemptible rigid jobs (PROBLEM.md): segments, restoring, done; the
checker's rule 2 for segments and the metrics that count them."""
import torch

from gpualloc.check import check
from gpualloc.metrics import metrics, weighted_throughput
from gpualloc.plan import empty_owner, segments
from gpualloc.scenario import from_dict


def _scenario(restart_cost=1, preemptible=True):
    job = {"id": "p", "kind": "training", "priority": 3, "arrival": 0, "gpus": 2, "duration": 4}
    if preemptible:
        job.update(preemptible=True, restart_cost=restart_cost)
    return from_dict({
        "name": "segments", "horizon": 10, "step_minutes": 60,
        "cluster": {"pools": [{"name": "a", "count": 2, "gpus_per_node": 4, "gpu_type": "H100",
                               "memory_gb": 80}]},
        "jobs": [job]})


def _plan(s, cells):
    """cells: (first GPU, t0, t1 inclusive, GPUs) runs owned by job 0."""
    owner = empty_owner(s)
    for g, t0, t1, k in cells:
        owner[g:g + k, t0:t1 + 1] = 0
    return owner


# Segment 1 on GPUs 0-1 for t=0..1 (2 steps of progress), segment 2 on GPUs
# 4-5 from t=4: it restores at t=4, progresses at 5 and 6, done at 6.
GOOD = [(0, 0, 1, 2), (4, 4, 6, 2)]


def test_two_segments_with_a_restore_are_feasible_and_counted_exactly():
    s = _scenario()
    owner = _plan(s, GOOD)
    assert check(s, owner).ok
    seg = segments(s, owner)
    assert seg.new[0].nonzero().flatten().tolist() == [0, 4]
    assert seg.restoring[0].nonzero().flatten().tolist() == [4]
    assert seg.progress[0].nonzero().flatten().tolist() == [0, 1, 5, 6]
    m = metrics(s, owner)
    assert m["preemptions"] == 1
    assert m["restore_gpu_steps"] == 2
    assert m["jobs_completed"] == 1
    assert m["utilization"] == 8 / (8 * 10)  # 2 GPUs x 4 steps of progress
    assert weighted_throughput(s, owner) == 3 * 8


def test_a_cell_after_done_is_rejected():
    s = _scenario()
    bad = check(s, _plan(s, [(0, 0, 1, 2), (4, 4, 7, 2)]))
    assert set(bad.violations) == {"after_done"}
    assert bad.violations["after_done"][0] == 2  # 2 GPUs at t=7


def test_restoring_is_not_progress():
    # Counting the restore at t=4 as progress would make the job done at t=5
    # and t=6 a cell after done; it is not: this plan is feasible, and the
    # same plan cut at t=5 is not done (3 steps of progress).
    s = _scenario()
    assert check(s, _plan(s, GOOD)).ok
    cut = _plan(s, [(0, 0, 1, 2), (4, 4, 5, 2)])
    assert check(s, cut).ok
    m = metrics(s, cut)
    assert m["jobs_completed"] == 0 and m["utilization"] == 6 / 80
    # With restart_cost 3, a 3-step second segment restores only.
    s3 = _scenario(restart_cost=3)
    owner = _plan(s3, [(0, 0, 1, 2), (4, 4, 6, 2)])
    assert check(s3, owner).ok
    assert weighted_throughput(s3, owner) == 3 * 2 * 2
    assert metrics(s3, owner)["restore_gpu_steps"] == 6


def test_a_segment_that_is_not_a_block_is_rejected():
    s = _scenario()
    across_nodes = _plan(s, [(0, 0, 1, 2), (3, 4, 6, 2)])  # GPUs 3 and 4: two nodes
    assert set(check(s, across_nodes).violations) == {"segment_not_block"}
    gap = _plan(s, [(0, 0, 1, 2)])
    gap[[4, 6], 4:7] = 0  # GPUs 4 and 6: not consecutive
    assert "segment_not_block" in check(s, gap).violations
    too_many = _plan(s, [(0, 0, 1, 2), (4, 4, 6, 3)])
    assert "segment_not_block" in check(s, too_many).violations


def test_a_move_without_a_stop_is_a_new_segment():
    s = _scenario()
    owner = _plan(s, [(0, 0, 1, 2), (4, 2, 4, 2)])  # moves at t=2: restores at 2
    assert check(s, owner).ok
    seg = segments(s, owner)
    assert seg.new[0].nonzero().flatten().tolist() == [0, 2]
    assert int(seg.progress[0].sum()) == 4


def test_a_stopped_run_is_feasible_for_a_preemptible_job_only():
    s = _scenario()
    owner = _plan(s, [(0, 0, 1, 2)])  # runs 2 of 4 steps, never resumes
    assert check(s, owner).ok
    assert metrics(s, owner)["jobs_completed"] == 0
    rigid = _scenario(preemptible=False)
    assert not check(rigid, owner).ok
    assert not check(rigid, _plan(rigid, GOOD)).ok
    # One uninterrupted run is a plan for both.
    whole = _plan(s, [(0, 0, 3, 2)])
    assert check(s, whole).ok and check(rigid, whole).ok
    assert weighted_throughput(s, whole) == weighted_throughput(rigid, whole)
    assert metrics(s, whole)["preemptions"] == 0


def test_random_plans_agree_with_a_plain_count():
    # Segments, restores and progress against a step-by-step count.
    gen = torch.Generator().manual_seed(0)
    for trial in range(200):
        rc = int(torch.randint(0, 3, (1,), generator=gen))
        s = _scenario(restart_cost=rc)
        owner = empty_owner(s)
        for t in range(s.T):
            if torch.rand(1, generator=gen) < 0.6:
                g = int(torch.randint(0, 2, (1,), generator=gen)) * 4
                owner[g:g + 2, t] = 0
        seg = segments(s, owner)
        progress, prev, start, index, expect = 0, None, 0, 0, []
        for t in range(s.T):
            cols = tuple(owner[:, t].eq(0).nonzero().flatten().tolist())
            if not cols:
                prev = None
                continue
            if cols != prev:
                index, start = index + 1, t
            prev = cols
            restoring = index > 1 and t - start < rc
            if not restoring and progress < 4:
                progress += 1
                expect.append(t)
        assert seg.progress[0].nonzero().flatten().tolist() == expect, trial
