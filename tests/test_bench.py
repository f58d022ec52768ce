"""bench/speed.py works end to end on tiny sizes (the real ladder is run by
hand, its results committed under bench/results/)."""
import importlib.util
import json
from pathlib import Path

import pytest

from gpualloc.scenario.generate import generate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def speed():
    spec = importlib.util.spec_from_file_location("bench_speed", ROOT / "bench" / "speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scaled_mixed_keeps_size_and_load(speed):
    base = generate(speed.scaled_mixed(64, 244, 168), 0)
    for G, J, T in [(128, 500, 168), (32, 122, 96)]:
        s = generate(speed.scaled_mixed(G, J, T), 0)
        assert (s.G, s.J, s.T) == (G, J, T)
        assert s.offered_load == pytest.approx(base.offered_load, abs=0.2)


def test_quick_ladder_writes_results(speed, tmp_path):
    rc = speed.main(["--quick", "--sizes", "16x24x24,32x48x24", "--policies",
                     "fifo,allocator,bound,nonexistent", "--out", str(tmp_path), "--name", "t",
                     "--set", "solver.local_search_iters=10", "--set", "solver.iterations=10"])
    assert rc == 0
    report = json.loads((tmp_path / "t.json").read_text())
    rows = report["rows"]
    assert [(r["G"], r["policy"]) for r in rows] == [
        (16, "fifo"), (16, "allocator"), (16, "bound"), (32, "fifo"), (32, "allocator"),
        (32, "bound")]
    assert all(r["status"] == "ok" for r in rows)
    alloc = [r for r in rows if r["policy"] == "allocator"]
    assert all(r["vs_fifo"] >= 1 - 1e-9 and r["iters_per_s"] > 0 for r in alloc)
    # The bound is above every plan.
    assert all(0 < r["vs_bound"] <= 1 + 1e-6 for r in rows if r["policy"] != "bound")
    assert "bound" not in report["exponents"]
    assert report["exponents"]["allocator"] is not None and report["missing"] == "nonexistent"
    assert report["commit"] and report["machine"]["cores"] >= 1
    assert report["solver_overrides"] == {"local_search_iters": 10, "iterations": 10}
    assert "| 16 x 24 x 24 |" in (tmp_path / "t.md").read_text()


def test_bound_is_skipped_above_its_nonzeros(speed):
    s = generate(speed.scaled_mixed(16, 24, 24), 0)
    from gpualloc.policies.bounds import pool_lp_nonzeros

    nonzeros = pool_lp_nonzeros(s)
    row = speed.run_bound(s, {"policy": "bound"}, max_nonzeros=nonzeros - 1, time_limit_s=10)
    assert row["status"].startswith("not built") and "weighted_throughput" not in row
    row = speed.run_bound(s, {"policy": "bound"}, max_nonzeros=nonzeros, time_limit_s=10)
    assert row["status"] == "ok" and row["weighted_throughput"] > 0


def test_one_online_replan_is_timed_on_the_loops_view():
    from bench.online_replan import run_one

    rows = {kind: run_one(16, 24, 24, kind, at=6, every=3, seed=0)
            for kind in ("allocator light", "greedy")}
    for r in rows.values():
        assert r["status"] == "ok" and r["tau"] == 6 and r["hint"]
        assert r["view_T"] == 24 - 6 and r["value"] > 0
    assert rows["allocator light"]["rounding"] is not None and rows["greedy"]["rounding"] is None
    assert {r["device"] for r in rows.values()} == {"cpu"}


def test_one_online_replan_on_cuda_is_labelled():
    # bench/gpu.sh times the replans on CUDA: the report says where they ran
    # and which peak it shows (no GPU here: the table of a made-up row).
    from bench.online_replan import markdown

    row = {"G": 4096, "J": 10000, "T": 336, "kind": "allocator full", "device": "cuda",
           "tau": 48, "view_J": 1048, "view_T": 288, "status": "ok", "wall_s": 5.38,
           "peak_bytes": 4.65 * 2**30, "relax_s": 2.9, "repair_s": 0.7, "search_s": 1.4,
           "moves": 127, "rounding": "parallel/relaxed@0.3", "value": 4617675.0}
    report = {"commit": "abc", "date": "now", "command": "x", "at": 48, "every": 6,
              "device": "cuda", "load_start": "0", "load_end": "0", "rows": [row],
              "machine": {"cpu": "c", "cores": 16, "torch": "2", "gpu": "H200, 140 GiB"}}
    text = markdown(report)
    assert "the replans on `cuda`" in text and "allocated bytes on CUDA" in text
    assert "| 4096 x 10000 x 336 | 48 | 1048 x 288 | allocator full | ok | 5.38 | 4.65 |" in text


def test_fit_exponent(speed):
    rows = [{"policy": "p", "status": "ok", "cells": c, "wall_s": 2.0 * c ** 1.5}
            for c in (10, 100, 1000)]
    assert speed.fit_exponent(rows, "p") == pytest.approx(1.5)


def test_markdown_of_a_cuda_row(speed):
    # The GPU ladder's table, from a made-up row (no GPU here).
    row = {"G": 4096, "J": 10000, "T": 336, "cells": 4096 * 10000 * 336, "policy": "allocator",
           "status": "ok", "wall_s": 50.0, "peak_bytes": 60 * 2**30, "estimate_bytes": 56 * 2**30,
           "representation": "dense", "copy_bandwidth_gbs": 4000.0, "floor_step_s": 0.0276,
           "kernel_step_s": 0.05, "kernel_vs_floor": 1.81, "relax_iter_s": 0.06,
           "relax_iter_vs_floor": 2.17}
    report = {"ladder": "gpu", "commit": "abc", "date": "now", "command": "x", "note": "",
              "load_start": "0", "load_end": "0", "rows": [row], "exponents": {"allocator": None},
              "machine": {"cpu": "c", "cores": 16, "torch_threads": 16, "torch": "2",
                          "gpu": "H200, 139 GiB", "triton": True}}
    text = speed.markdown(report)
    assert "| 4096 x 10000 x 336 | 4000 | 27.60 | 50.00 | 1.81 | 60.00 | 2.17 |" in text
    assert "torch.cuda.max_memory_allocated" in text


def test_broad_family_scales_from_32_to_512_gpus():
    from bench.family import family

    sizes = {}
    for scale in (0.5, 1, 4, 8):
        sc = family(scale).scenario
        s = generate(sc, 100)
        sizes[scale] = (s.G, len(sc.pools), sc.training.count, sc.realtime_inference.services)
        assert sc.name == ("broad" if scale == 1 else f"broad_{s.G}")
    assert [sizes[k][0] for k in (0.5, 1, 4, 8)] == [32, 64, 256, 512]
    # Counts scale with the cluster: 256 GPUs is four 64-GPU clusters' worth.
    assert sizes[4][2:] == (4 * sizes[1][2], 4 * sizes[1][3])
    assert sizes[0.5][2] == round(0.5 * sizes[1][2]) and sizes[0.5][3] >= 1


def test_batched_arrivals_move_rigid_jobs_only_and_plans_stay_feasible():
    # online_window's diagnostic: the planner sees rigid jobs only from the
    # next multiple of 6; its plan must be feasible on the true scenario.
    from bench.online_window import _batched
    from gpualloc.check import check
    from gpualloc.config import OnlineConfig, RunConfig
    from gpualloc.online import online
    from gpualloc.policies import POLICIES
    from scenarios import one_node
    s = one_node(16, [
        {"id": "a", "kind": "training", "priority": 5, "arrival": 0, "gpus": 4, "duration": 4},
        {"id": "b", "kind": "batch_inference", "priority": 3, "arrival": 1, "gpus": 2,
         "duration": 3},
        {"id": "c", "kind": "quantization", "priority": 4, "arrival": 7, "gpus": 4,
         "duration": 2},
        {"id": "d", "kind": "training", "priority": 2, "arrival": 15, "gpus": 8,
         "duration": 1},
        {"id": "rt", "kind": "realtime_inference", "priority": 9, "arrival": 2, "gpus": 1,
         "demand": [0, 0, 2, 3, 3, 2, 1, 1, 2, 3, 4, 2, 1, 1, 2, 2]}])
    b = _batched(s, 6)
    assert [j.arrival for j in b.jobs] == [0, 6, 12, 15, 2]  # 18 is past the horizon
    assert b.jobs[-1].demand == s.jobs[-1].demand
    plan = online(b, POLICIES["greedy"], RunConfig(online=OnlineConfig(replan_every=1)))
    assert check(s, plan.owner).ok
    starts = [int((plan.owner == j).any(0).nonzero()[0]) for j in range(3)]
    assert starts[1] >= 6 and starts[2] >= 12


def test_online_settings_table_compares_each_setting_with_the_first():
    from bench.online_settings import markdown, parse_setting

    assert parse_setting("base=") == ("base", [])
    assert parse_setting("r30=online.relax_iterations=30,seed=2") == (
        "r30", ["online.relax_iterations=30", "seed=2"])
    rows = [{"case": "mixed", "seed": seed, "replan_every": 6, "setting": name,
             "wall_s": wall, "weighted_throughput": value}
            for name, seed, value, wall in [("base", 0, 100.0, 2.0), ("base", 1, 200.0, 2.0),
                                            ("r30", 0, 90.0, 1.0), ("r30", 1, 230.0, 1.0)]]
    md = markdown({"machine": {"cpu": "x", "cores": 2, "commit": "c"}, "command": "cmd",
                   "policy": "allocator", "rows": rows,
                   "settings": [("base", []), ("r30", ["online.relax_iterations=30"])]})
    assert "| mixed | 6 | 0-1 | 300 | 0/0 | 4.0 | 320 (x1.0667) | 1/1 | 2.0 (x0.50) |" in md
    assert "`r30` value x1.0667, below/above on 1/1 runs, wall x0.50." in md


def test_online_information_tables_divide_each_run_by_its_own_offline_plan():
    from bench.online_information import LEVELS, markdown

    rows = []
    for seed, (g, a) in enumerate([(100.0, 110.0), (100.0, 90.0)]):
        for policy, offline in (("greedy", g), ("allocator", a)):
            rows.append({"scenario": "mixed", "seed": seed, "policy": policy,
                         "offline": offline, **{k: offline / 2 for k in LEVELS}})
    md = markdown({"rows": rows, "scenarios": ["mixed"], "replan_every": 6, "commit": "c",
                   "date": "d", "machine": {"cpu": "x", "cores": 2}, "command": "cmd"})
    assert "| mixed | allocator | x0.5000 | x0.5000 | x0.5000 | x0.5000 |" in md
    # allocator / greedy online: 55 / 50 and 45 / 50, one run below
    assert "| both | 2 | x0.9950 | x0.9000 | 1 | x0.5000, x0.5000 |" in md
    assert "short of the guarantee" not in md  # free runs: no shortfall table


def test_online_information_under_the_guarantee_sums_the_replicas_short_per_level():
    from bench.online_information import GUARANTEE, LEVELS, markdown

    rows = [{"scenario": "mixed", "seed": seed, "policy": policy, "offline": 100.0,
             **{k: 90.0 for k in LEVELS},
             **{f"{k} short": (seed + 1 if policy == "greedy" and k == "forecast" else 0)
                for k in LEVELS}}
            for seed in (0, 1) for policy in ("greedy", "allocator")]
    md = markdown({"rows": rows, "scenarios": ["mixed"], "replan_every": 6, "commit": "c",
                   "date": "d", "machine": {"cpu": "x", "cores": 2}, "command": "cmd",
                   "settings": GUARANTEE})
    assert "'min_served': 1.0" in md
    assert "| greedy | 3 | 0 | 0 | 0 |" in md  # seeds 0 and 1: 1 + 2 short
    assert "| allocator | 0 | 0 | 0 | 0 |" in md


def test_online_spread_tells_a_run_below_greedy_with_every_search_seed_from_one_with_some():
    from bench.online_spread import markdown, summarize

    rows = [{"scenario": "batch_flood", "seed": 6, "greedy": 100.0, "allocator": [99.0, 101.0]},
            {"scenario": "batch_flood", "seed": 7, "greedy": 100.0, "allocator": [98.0, 99.0]},
            {"scenario": "batch_flood", "seed": 8, "greedy": 100.0, "allocator": [102.0, 104.0]}]
    r = summarize(rows)["batch_flood"]
    assert r["below_default"] == [6, 7] and r["below_some"] == [6, 7]
    assert r["below_every"] == [7]  # seed 6: one search seed reaches greedy
    assert r["lead"] == pytest.approx((0.99 + 0.98 + 1.02) / 3)
    assert r["spread_pct"] == pytest.approx((200 / 100 + 100 / 98.5 + 200 / 103) / 3)
    md = markdown({"summary": {"batch_flood": r}, "seeds": [6, 7, 8], "searches": 2,
                   "replan_every": 6, "commit": "c", "date": "d",
                   "machine": {"cpu": "x", "cores": 2}, "command": "cmd"})
    assert "| batch_flood | 3 | x0.9967 | 1.65% | [6, 7] | [6, 7] | [7] |" in md


def test_serve_loop_summary_divides_each_way_by_greedy_in_the_same_run():
    from bench.serve_loop import WAYS, markdown, summarize

    def row(seed, *values):
        return {"scenario": "mixed", "seed": seed, "value": dict(zip(WAYS, values)),
                "wall_s": dict.fromkeys(WAYS, 1.0), "moves": {"greedy": seed, "allocator": 2.0}}

    rows = [row(0, 100.0, 103.0, 99.0, 104.0, 105.0), row(1, 200.0, 198.0, 190.0, 206.0, 202.0)]
    r = summarize(rows)["mixed"]
    assert r["allocator"]["lead"] == pytest.approx((1.03 + 0.99) / 2)
    assert r["allocator"]["below"] == [1]
    assert r["greedy pinned"]["below"] == [0, 1]
    assert r["online loop"]["below"] == [] and r["wall_s"]["greedy"] == 1.0
    assert r["moves"] == {"greedy": 0.5, "allocator": 2.0}
    md = markdown({"summary": {"mixed": r}, "rows": rows, "seeds": [0, 1], "commit": "c",
                   "date": "d", "machine": {"cpu": "x", "cores": 2}, "command": "cmd"})
    assert "| mixed | 2 | x1.0100 | [1] | x0.9700 | [0, 1] | x1.0350 | [] | x1.0300 | [] " \
           "| 0.50 / 2.00 |" in md
    assert "| mixed | 1 | 200 | 198 | 190 | 206 | 202 |" in md


def test_serve_loop_summary_under_the_guarantee_counts_its_cost_and_shortfall():
    from bench.serve_loop import GUARANTEED_WAYS, markdown, summarize

    def row(seed, values, short, requeued):
        return {"scenario": "mixed", "seed": seed, "value": dict(zip(GUARANTEED_WAYS, values)),
                "wall_s": dict.fromkeys(GUARANTEED_WAYS, 1.0),
                "moves": {"greedy": 1.0, "allocator": 2.0},
                "short": dict(zip(GUARANTEED_WAYS, short)),
                "requeued": dict(zip(GUARANTEED_WAYS, requeued))}

    rows = [row(0, [90.0, 99.0, 98.0, 100.0, 110.0], [0, 0, 2, 0, 0], [4, 2, 0, 0, 0]),
            row(1, [80.0, 84.0, 85.0, 100.0, 105.0], [1, 0, 0, 0, 0], [2, 2, 0, 0, 0])]
    r = summarize(rows)["mixed"]
    assert r["kept"]["greedy"] == pytest.approx((0.9 + 0.8) / 2)
    assert r["kept"]["allocator"] == pytest.approx((0.9 + 0.8) / 2)
    assert r["short"] == {"greedy": 1, "allocator": 0, "online loop": 2, "greedy free": 0,
                          "allocator free": 0}
    assert r["requeued"]["greedy"] == 3.0 and r["allocator free"]["below"] == []
    md = markdown({"summary": {"mixed": r}, "rows": rows, "seeds": [0, 1], "commit": "c",
                   "date": "d", "machine": {"cpu": "x", "cores": 2}, "command": "cmd"})
    assert "| 1 / 0 / 2 | 3.0 / 2.0 | x0.8500 / x0.8500 |" in md


def test_replica_moves_count_a_stop_on_one_node_and_a_start_on_another():
    import torch

    from bench.serve_loop import replica_moves
    from gpualloc.slurm import bridge
    s = bridge.from_dict({
        "name": "two", "horizon": 4, "step_minutes": 60,
        "cluster": {"pools": [{"name": "p", "count": 2, "gpus_per_node": 2, "gpu_type": "h100",
                               "memory_gb": 80}]},
        "jobs": [{"id": "chat", "kind": "realtime_inference", "priority": 1, "arrival": 0,
                  "gpus": 1, "demand": [2, 2, 1, 2]}]})
    owner = torch.tensor([[0, -1, -1, 0],    # n1: 2, 1, 0, 1 replicas
                          [0, 0, -1, -1],
                          [-1, 0, 0, 0],     # n2: 0, 1, 1, 1
                          [-1, -1, -1, -1]])
    # Step 1: one stops on n1 and one starts on n2 (a move); step 2: one
    # stops (demand fell); step 3: one starts (demand rose).
    assert replica_moves(s, owner) == 1


def test_online_bound_judges_each_run_against_the_room_above_fifo():
    from bench.online_bound import cases, judge, markdown

    rows = [{"kind": "seven", "case": "mixed", "seed": 0, "role": "seven", "G": 8, "J": 3,
             "T": 4, "policy": p, "mode": mode, "replan_every": every, "guarantee": False,
             "weighted_throughput": v}
            for p, mode, every, v in [("fifo", "offline", None, 50.0),
                                      ("greedy", "offline", None, 90.0),
                                      ("greedy", "online", 6, 80.0)]]
    rows.append({**rows[1], "guarantee": True, "weighted_throughput": 10.0})  # not judged
    (case,) = cases([{"rows": rows}])
    judge(case, 100.0)
    assert case["gap"] == pytest.approx({"fifo offline": 0.5, "greedy offline": 0.1,
                                         "greedy online 6": 0.2})
    assert case["share"]["greedy online 6"] == pytest.approx(0.6)
    md = markdown({"machine": {"cpu": "x", "cores": 2}, "commit": "c", "from": ["a.json"],
                   "from_commits": ["b"], "command": "cmd", "policies": ["greedy"],
                   "replan_every": [6, 1], "forecast": "last_day",
                   "cases": [{**case, "bound_kind": "LP"}],
                   "summary": {"mixed": {"seeds": "0", "bound_s": 1.0,
                                         "gap": case["gap"]}}})
    assert "| mixed | 0 | 1.0 | 10.00% | 20.00% | - |" in md
    assert "80 (20.00%, 60.0%)" in md


def test_the_bound_is_above_every_plan_offline_and_online():
    pytest.importorskip("highspy")
    import gpualloc as ga
    from bench.quality import SMALL, bound_of
    from gpualloc.config import ExactConfig

    for seed in range(3):  # bench.quality's small scenarios: bounded in milliseconds
        s = generate(SMALL, seed)
        b = bound_of(s, ExactConfig(mip_time_limit_s=5.0))
        assert b["bound"] < float("inf")
        for policy in ("fifo", "greedy", "allocator"):
            for kw in ({}, {"mode": "online", "online": {"replan_every": 6}}):
                p = ga.plan(s, policy, seed=0, **kw)  # checked by ga.plan
                assert ga.metrics(s, p)["weighted_throughput"] <= b["bound"] + 1e-6


def test_a_checkout_edited_while_measured_is_refused(tmp_path):
    # bench.online_before_after measures this checkout in a subprocess; an
    # edit meanwhile would mix two versions of it (it happened in s64).
    from bench.common import run_in

    for part in ("gpualloc", "bench"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "x.py").write_text("X = 1\n")
    quiet = "import json, sys; print(json.dumps(json.loads(sys.argv[1])))"
    assert run_in(tmp_path, quiet, {"a": 1}) == {"a": 1}
    edits = ("from pathlib import Path; Path('gpualloc/x.py').write_text('X = 2\\n'); "
             "print('{}')")
    with pytest.raises(SystemExit, match="changed while it was measured"):
        run_in(tmp_path, edits, {})
