"""How fast the commands that plan nothing start (issue 24, item 5): the wall
time of `python -m gpualloc.check scenario.json plan.json` on a `mixed` plan
(seed 0, FIFO's), and of `python -c "import gpualloc.check"`, for this tree
and for the code of commit --before (exported with git archive, put first on
PYTHONPATH), each in a fresh interpreter, the two trees interleaved run by run
so that both see the same load. `python -c pass` is the interpreter's floor.

    python -m bench.start --runs 15    # --before 571921c: the torch checker

With --first-run, instead: a user's first `python -m gpualloc.run
+scenario=mixed`, each run with an empty numba cache of its own
(NUMBA_CACHE_DIR), so it compiles the placement core (results stem
`first_run`); and, for this tree only, the same run without the helpers
that compile gpualloc's loops beside it (`warm_helpers=0`).

    python -m bench.start --first-run --runs 3 --before 41b8726
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

from bench.common import ROOT, provenance, write_results


def wall(argv: list[str], cwd: Path, pythonpath: str | None, cache: Path | None = None) -> float:
    """Seconds `python argv` takes in a fresh interpreter; with `cache`, numba
    caches there (made empty before, removed after: everything compiles)."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
        env["NUMBA_CACHE_DIR"] = str(cache)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True)
    elapsed = time.perf_counter() - t0
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)
    assert r.returncode in (0, 1), r.stderr.decode()[-500:]
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="571921c", help="the commit to compare with")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--first-run", action="store_true",
                        help="time a first run of mixed from an empty numba cache instead")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    import gpualloc as ga

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before = tmp / "before"
        before.mkdir()
        tar = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True,
                             check=True).stdout
        tarfile.open(fileobj=BytesIO(tar)).extractall(before)
        s = ga.generate("mixed", seed=0)
        s.save(tmp / "scenario.json")
        ga.save(ga.plan(s, "fifo"), tmp / "plan.json")
        cases = {"python -c pass": ["-c", "pass"],
                 "import gpualloc.check": ["-c", "import gpualloc.check"],
                 "python -m gpualloc.check scenario.json plan.json":
                     ["-m", "gpualloc.check", "scenario.json", "plan.json"]}
        after_only = {"python -c pass"}
        if args.first_run:
            # The second without the helpers that compile beside the run
            # (gpualloc.warm; a setting --before may lack).
            cases = {"python -m gpualloc.run +scenario=mixed (empty numba cache)":
                     ["-m", "gpualloc.run", "+scenario=mixed"],
                     "python -m gpualloc.run +scenario=mixed warm_helpers=0 (empty numba cache)":
                     ["-m", "gpualloc.run", "+scenario=mixed", "warm_helpers=0"]}
            after_only = {list(cases)[1]}
        cache = tmp / "numba" if args.first_run else None
        load = [os.getloadavg()]
        times = {(case, tree): [] for case in cases for tree in ("before", "after")}
        for _ in range(args.runs):
            for case, cmd in cases.items():
                for tree, path in (("before", str(before)), ("after", None)):
                    if case in after_only and tree == "before":
                        continue
                    times[case, tree].append(wall(cmd, tmp, path, cache))
        load.append(os.getloadavg())
    result = provenance("bench.start", argv)
    result.update(before=args.before, runs=args.runs, scenario=f"mixed seed 0: G={s.G} T={s.T} J={s.J}",
                  load_average=[[round(x, 2) for x in la] for la in load],
                  times={f"{c} [{t}]": v for (c, t), v in times.items() if v})
    rows = ["| command | before median (min) s | after median (min) s | before / after |",
            "| --- | ---: | ---: | ---: |"]
    for case in cases:
        b, a = times[case, "before"], times[case, "after"]
        med = statistics.median(a)
        if b:
            rows.append(f"| `{case}` | {statistics.median(b):.2f} ({min(b):.2f}) | {med:.2f} "
                        f"({min(a):.2f}) | {statistics.median(b) / med:.1f}x |")
        else:
            rows.append(f"| `{case}` | - | {med:.2f} ({min(a):.2f}) | - |")
    m = result["machine"]
    title = ("A user's first run, compiling the placement core" if args.first_run
             else "Start time of the commands that plan nothing")
    md = "\n".join([
        f"# {title}", "",
        f"`{result['command']}`, commit {result['commit']} against {args.before}, "
        f"{result['date']}; {m['cpu']}, {m['cores']} cores shared with other work: load average "
        f"(1, 5, 15 min) {load[0][0]:.1f}, {load[0][1]:.1f}, {load[0][2]:.1f} at the start, "
        f"{load[1][0]:.1f}, {load[1][1]:.1f}, {load[1][2]:.1f} at the end. Scenario "
        f"{result['scenario']}" + ("" if args.first_run else ", FIFO's plan")
        + f"; {args.runs} runs of each, fresh interpreters, "
        "the trees interleaved.", "", *rows, ""])
    write_results(args.out, "first_run" if args.first_run else "start", result, md)


if __name__ == "__main__":
    main()
