"""A first run's compiling shared with helper processes.

Numba compiles each of gpualloc's loops once per machine and keeps it in its
on-disk cache, which processes share. Where that cache holds none of them yet
(a user's first run), `gpualloc.run` compiles for about a minute on two
cores, most of it the allocator's loops (its search, insertion and
relaxation), which a default run calls last. So on such a machine the run
starts helpers beside itself, one per spare core (at most MOST): they
compile the functions gpualloc calls from Python, each for the argument
types of its calls (`gpualloc.warm_list`: the ones a default run calls last
first), and what they compile goes to the cache. A function the run reaches
after a helper compiled it loads from there; one a helper is still
compiling, the run compiles itself. The run's plans never depend on the helpers (the same
code either way); they are stopped when the run ends.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from numba.core import types

MOST = 4
"""Helpers by default at most: each holds about 430 MB while it compiles
(measured, torch and numba imported), and the list's long compiles are its
first few."""


def encode(t) -> str:
    """A numba argument type as a short word: `int64`, `bool`; an array
    `int64[2C]` (dtype, dimensions, layout), `r` last when readonly."""
    if isinstance(t, types.Array):
        if not t.aligned:
            raise ValueError(f"{t!r}: an unaligned array")
        return f"{encode(t.dtype)}[{t.ndim}{t.layout}{'' if t.mutable else 'r'}]"
    if isinstance(t, (types.Integer, types.Float, types.Boolean)):
        return str(t)
    raise ValueError(f"{t!r}: no word for this type (gpualloc.warm.encode)")


def decode(word: str):
    """The numba type `encode` made `word` of."""
    if word.endswith("]"):
        dtype, shape = word[:-1].split("[")
        return types.Array(decode(dtype), int(shape[0]), shape[1],
                           readonly=shape.endswith("r"))
    return types.boolean if word == "bool" else getattr(types, word)


def words(argtypes) -> str:
    """A function's argument types as words (encode), one string."""
    return " ".join(map(encode, argtypes))


def signature(text: str) -> tuple:
    """The argument types `words` wrote."""
    return tuple(decode(w) for w in text.split())


@contextmanager
def helpers(most: int | None, cold: bool | None = None, kernels: list | None = None):
    """Helper processes for the block, at most `most` (None: one per spare
    core, at most MOST), compiling `kernels` (default gpualloc.warm_list's)
    dealt out in turn, so that each starts with one of the first: started
    where numba's cache is `cold` (default: gpualloc.jitcache.cold()),
    stopped when the block ends. A helper that cannot start is left out."""
    from gpualloc.jitcache import cold as cache_cold
    from gpualloc.warm_list import KERNELS

    kernels = KERNELS if kernels is None else kernels
    n = min(min((os.cpu_count() or 1) - 1, MOST) if most is None else most, len(kernels))
    if n <= 0 or not (cache_cold() if cold is None else cold):
        yield []
        return
    # Each imports the gpualloc this process runs: the same path, and its
    # folder last where nothing else finds it.
    main = (f"import json, sys; sys.path.append({str(Path(__file__).resolve().parents[1])!r}); "
            "from gpualloc.warm import compile_all; compile_all(json.load(sys.stdin))")
    procs = []
    try:
        for i in range(n):
            try:
                p = subprocess.Popen([sys.executable, "-c", main], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(p)
                p.stdin.write(json.dumps(kernels[i::n]).encode())
                p.stdin.close()
            except OSError:  # it did not start, or ended at once: the run compiles
                pass
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def compile_all(share: list) -> None:
    """A helper: compile each [module, function, argument words] of `share`
    into numba's cache. A function that fails to compile (or is gone) is the
    run's to report, not the helper's."""
    for module, name, text in share:
        try:
            fn = getattr(importlib.import_module(module), name)
            fn.compile(signature(text))
        except Exception:  # noqa: BLE001 - see the docstring
            pass
