"""A first run's compiling shared with helper processes.

Numba compiles each of gpualloc's loops once per machine and keeps it in its
on-disk cache, which processes share. Where that cache holds none of them yet
(a user's first run), `gpualloc.run` compiles for about a minute on two
cores, most of it the allocator's loops (its search, insertion and
relaxation), which a default run calls last. So on such a machine the run
starts helpers beside itself, at most one per spare core: they compile the
functions gpualloc calls from Python, each for the argument types of its
calls (`gpualloc.warm_list`: the ones a default run calls last first), and
what they compile goes to the cache. A function the run reaches after a
helper compiled it loads from there; one a helper is still compiling, the
run compiles itself. The run's plans never depend on the helpers (the same
code either way); they are stopped when the run ends.
"""
from __future__ import annotations

import importlib
import multiprocessing
import os
from contextlib import contextmanager

from numba.core import types


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


@contextmanager
def helpers(most: int | None, cold: bool | None = None, kernels: list | None = None):
    """Helper processes for the block, at most `most` (None: one per spare
    core), compiling `kernels` (default gpualloc.warm_list's) dealt out in
    turn, so that each starts with one of the first: started where numba's
    cache is `cold` (default: gpualloc.jitcache.cold()), stopped when the
    block ends."""
    from gpualloc.jitcache import cold as cache_cold
    from gpualloc.warm_list import KERNELS

    kernels = KERNELS if kernels is None else kernels
    n = min((os.cpu_count() or 1) - 1 if most is None else most, len(kernels))
    if n <= 0 or not (cache_cold() if cold is None else cold):
        yield []
        return
    # spawn: a fresh interpreter, never a fork of a process with torch's and
    # numba's threads running.
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=compile_all, args=(kernels[i::n],), daemon=True,
                             name=f"gpualloc-warm-{i}") for i in range(n)]
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)


def compile_all(share: list[tuple[str, str, str]]) -> None:
    """A helper: compile each (module, function, argument words) of `share`
    into numba's cache, nothing printed. A function that fails to compile
    (or is gone) is the run's to report, not the helper's."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    for module, name, words in share:
        try:
            fn = getattr(importlib.import_module(module), name)
            fn.compile(tuple(decode(w) for w in words.split()))
        except Exception:  # noqa: BLE001 - see the docstring
            pass
