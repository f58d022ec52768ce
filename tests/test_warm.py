"""A first run's compiling shared with helper processes (gpualloc.warm)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import typeof
from numba.core import types

from gpualloc.warm import decode, encode, helpers, signature, words
from gpualloc.warm_list import KERNELS

ROOT = Path(__file__).resolve().parents[1]


def _python(script: str, **env) -> str:
    """The last line `script` prints, run from the repository's root in a
    fresh interpreter (each compiled function's first call is seen there)."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=ROOT,
                       env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()[-1]


def test_a_type_and_its_word_give_each_other():
    for value in (np.zeros((2, 3), np.int32), np.zeros(4, np.bool_), np.float32(1.0),
                  np.int64(3), np.bool_(True), 2.5, np.zeros((2, 2, 2), np.float32)):
        assert decode(encode(typeof(value))) == typeof(value)
    frozen = np.zeros((2, 3), np.int64)
    frozen.flags.writeable = False
    assert encode(typeof(frozen)) == "int64[2Cr]"
    assert decode("int64[2Cr]") == types.Array(types.int64, 2, "C", readonly=True)
    assert encode(typeof(np.zeros((3, 2)).T)) == "float64[2F]"
    assert signature(words((types.int64, types.boolean))) == (types.int64, types.boolean)
    with pytest.raises(ValueError, match="no word"):
        encode(types.unicode_type)


def test_the_warm_list_is_what_gpualloc_calls_from_python_with_its_types(every_path_report):
    # If this fails after a change to a compiled function's arguments:
    # `python -m tests.helpers` writes the list again. Every call seen is
    # listed, and every listed one has code after the workload. (Where the
    # cache is cold, a function first compiled as another's callee is not
    # seen called: the first half is complete on a warm cache only.)
    calls, typed = (set(map(tuple, every_path_report[k])) for k in ("calls", "typed"))
    listed = set(KERNELS)
    assert len(listed) == len(KERNELS) and calls
    assert calls <= listed, f"called, not listed: {sorted(calls - listed)}"
    assert listed <= typed, f"listed, not compiled so: {sorted(listed - typed)}"


def test_no_helper_where_the_cache_holds_the_loops_or_none_is_wanted():
    with helpers(4, cold=False) as procs:
        assert procs == []
    with helpers(0, cold=True) as procs:
        assert procs == []


def test_what_a_helper_compiled_the_run_loads_from_the_cache(tmp_path):
    """With an empty numba cache, a helper compiles one listed function from
    its words; then the run's own call with arguments of those types loads
    it from the cache, compiling nothing."""
    module, name, words = next(k for k in KERNELS if k[1] == "rigid_totals")
    out = _python(f"""
        import importlib, json
        import numpy as np
        from gpualloc import warm
        from gpualloc.jitcache import cold

        assert cold()
        with warm.helpers(1, kernels=[({module!r}, {name!r}, {words!r})]) as procs:
            assert len(procs) == 1
            assert procs[0].wait(600) == 0
        args = []
        for t in warm.signature({words!r}):
            if hasattr(t, "ndim"):  # an array of that dtype, layout and flags, zeros
                a = np.zeros((3,) * t.ndim, dtype=str(t.dtype).replace("bool", "bool_"))
                a.flags.writeable = t.mutable
                args.append(a)
            else:
                args.append(getattr(np, str(t).replace("bool", "bool_"))(0))
        fn = getattr(importlib.import_module({module!r}), {name!r})
        fn(*args)
        print(json.dumps([sum(fn.stats.cache_hits.values()),
                          sum(fn.stats.cache_misses.values())]))
    """, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    assert json.loads(out) == [1, 0]
