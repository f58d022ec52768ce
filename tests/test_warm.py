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

from gpualloc.warm import decode, encode, helpers
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
    with pytest.raises(ValueError, match="no word"):
        encode(types.unicode_type)


def test_the_warm_list_is_what_gpualloc_calls_from_python_with_its_types():
    # If this fails after a change to a compiled function's arguments:
    # `python -m tests.helpers` writes the list again.
    calls = _python("""
        import json
        from gpualloc.warm import encode
        from tests.helpers import kernel_calls, plan_every_compiled_path
        print(json.dumps([[m, n, " ".join(encode(t) for t in ts)]
                          for m, n, ts in kernel_calls(plan_every_compiled_path)]))
    """)
    assert sorted(map(tuple, json.loads(calls))) == sorted(KERNELS)
    assert len(set(KERNELS)) == len(KERNELS)


def test_no_helper_where_the_cache_holds_the_loops_or_none_is_wanted():
    with helpers(4, cold=False) as procs:
        assert procs == []
    with helpers(0, cold=True) as procs:
        assert procs == []


@pytest.mark.slow
def test_a_run_after_its_helper_compiles_none_of_the_loops_it_calls(tmp_path):
    """With an empty numba cache, a helper compiles FIFO's functions from
    their words (the list of FIFO's calls, made in another process); then
    FIFO's plan in the run's own process loads each from the cache."""
    fifo = _python("""
        import json
        from gpualloc import api
        from gpualloc.warm import encode
        from tests.helpers import kernel_calls
        s = api.generate("mixed", seed=0, horizon=48)
        print(json.dumps([[m, n, " ".join(encode(t) for t in ts)]
                          for m, n, ts in kernel_calls(lambda: api.plan(s, "fifo"))]))
    """)
    assert json.loads(fifo)
    out = _python(f"""
        import json, sys
        from numba.core.registry import CPUDispatcher
        from gpualloc import api, warm
        from gpualloc.jitcache import cold

        assert cold()
        kernels = [tuple(k) for k in json.loads({fifo!r})]
        with warm.helpers(1, kernels=kernels) as procs:
            assert len(procs) == 1
            procs[0].join(600)
            assert procs[0].exitcode == 0
        assert not cold()
        api.plan(api.generate("mixed", seed=0), "fifo")
        used = list({{id(fn): fn for name, m in list(sys.modules.items())
                     if name.startswith("gpualloc") for fn in vars(m).values()
                     if isinstance(fn, CPUDispatcher) and fn.signatures}}.values())
        missed = [fn.py_func.__qualname__ for fn in used if sum(fn.stats.cache_misses.values())]
        print(json.dumps([len(used), missed]))
    """, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    used, missed = json.loads(out)
    assert used >= len(json.loads(fifo)) and missed == []
