"""bench/speed.py works end to end on tiny sizes (the real ladder is run by
hand, its results committed under bench/results/)."""
import importlib.util
import json
from pathlib import Path

import pytest

from gpualloc.generate import generate

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
                     "fifo,allocator,nonexistent", "--out", str(tmp_path), "--name", "t",
                     "--set", "solver.local_search_iters=10", "--set", "solver.iterations=10"])
    assert rc == 0
    report = json.loads((tmp_path / "t.json").read_text())
    rows = report["rows"]
    assert [(r["G"], r["policy"]) for r in rows] == [(16, "fifo"), (16, "allocator"),
                                                     (32, "fifo"), (32, "allocator")]
    assert all(r["status"] == "ok" for r in rows)
    alloc = [r for r in rows if r["policy"] == "allocator"]
    assert all(r["vs_fifo"] >= 1 - 1e-9 and r["iters_per_s"] > 0 for r in alloc)
    assert report["exponents"]["allocator"] is not None and report["missing"] == "nonexistent"
    assert report["commit"] and report["machine"]["cores"] >= 1
    assert report["solver_overrides"] == {"local_search_iters": 10, "iterations": 10}
    assert "| 16 x 24 x 24 |" in (tmp_path / "t.md").read_text()


def test_fit_exponent(speed):
    rows = [{"policy": "p", "status": "ok", "cells": c, "wall_s": 2.0 * c ** 1.5}
            for c in (10, 100, 1000)]
    assert speed.fit_exponent(rows, "p") == pytest.approx(1.5)
