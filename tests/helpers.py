"""Helpers the tests share: the command line and the composed run config."""
import subprocess
import sys

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from gpualloc.config import register_configs


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpualloc.run", *args], capture_output=True,
                          text=True, cwd=cwd)


def composed(*overrides):
    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


def plan_every_compiled_path() -> list:
    """Every policy offline and online on a cluster of two GPU types (Hall's
    path), with and without the guarantee (its footprint, reclaimed steps
    and start checks), and a light week's arrivals started at once (several
    steps' in turn): what runs each compiled loop of gpualloc. Returns the
    compiled functions (numba dispatchers) of gpualloc's modules."""
    from numba.core.registry import CPUDispatcher

    from gpualloc import api

    s = api.generate("heterogeneous", seed=0, horizon=24)
    for name in ("fifo", "backfill", "greedy", "allocator"):
        api.plan(s, name)
    for name in ("greedy", "allocator"):
        api.online(s, name, replan_every=3)
        api.plan(s, name, mode="online", online={"replan_every": 1}, min_served=1.0,
                 preemptible=["training"], restart_cost=1)
    light = api.generate("low_contention", seed=0, horizon=48)
    for forecast in ("last_day", "oracle"):
        api.online(light, "allocator", replan_every=3, forecast=forecast)
    return list({id(fn): fn for name, module in list(sys.modules.items())
                 if name.startswith("gpualloc") for fn in vars(module).values()
                 if isinstance(fn, CPUDispatcher)}.values())


def kernel_calls(workload) -> list[tuple[str, str, tuple]]:
    """(module, name, argument types) of each compiled function of gpualloc
    that `workload()` calls from Python, once each, in the order first
    called: numba's dispatcher types a call's arguments where the function
    has no code for them yet in this process, whether it then compiles or
    loads from the cache. So in a fresh process whose numba cache holds the
    workload's loops already (`warmed`): compiling a caller gives its
    callees code without a call from Python."""
    import numba
    from numba.core.dispatcher import Dispatcher

    calls = {}
    compile_for_args = Dispatcher._compile_for_args

    def record(self, *args, **kws):
        if self.py_func.__module__.startswith("gpualloc."):
            key = (self.py_func.__module__, self.py_func.__name__,
                   tuple(numba.typeof(a) for a in args))
            calls.setdefault(key, None)
        return compile_for_args(self, *args, **kws)

    Dispatcher._compile_for_args = record
    try:
        workload()
    finally:
        Dispatcher._compile_for_args = compile_for_args
    return list(calls)


def every_path_report() -> dict:
    """Over plan_every_compiled_path, in this process (a fresh one: each
    test's arrays would add their types): "calls", what it calls from
    Python (kernel_calls, as gpualloc.warm's words); "typed", every
    (module, name, words) with code after it; "twice", the functions with
    more than one set of argument types."""
    from numba.core.registry import CPUDispatcher

    from gpualloc.warm import words

    compiled = []
    calls = kernel_calls(lambda: compiled.extend(plan_every_compiled_path()))
    return {"calls": [[m, n, words(ts)] for m, n, ts in calls],
            "typed": sorted([fn.py_func.__module__, fn.py_func.__name__, words(sig)]
                            for fn in compiled if isinstance(fn, CPUDispatcher)
                            for sig in fn.signatures),
            "twice": sorted(f"{fn.py_func.__module__}.{fn.py_func.__name__}"
                            for fn in compiled if len(fn.signatures) > 1)}


def default_run() -> None:
    """The policies of a default `gpualloc.run` on a short `mixed`, offline."""
    from gpualloc import api

    s = api.generate("mixed", seed=0, horizon=48)
    for name in ("fifo", "greedy", "allocator"):
        api.plan(s, name)


def warm_list() -> str:
    """The source of gpualloc/warm_list.py: every compiled function of
    gpualloc called from Python, with its argument types; those a default
    run calls last first (they are the longest wait), then the others."""
    import textwrap

    from gpualloc.warm import words

    first = kernel_calls(default_run)
    rest = [c for c in kernel_calls(plan_every_compiled_path) if c not in first]
    rows = []
    for module, name, types in [*reversed(first), *rest]:
        lines = textwrap.wrap(words(types), 84, break_long_words=False)
        pieces = [line + " " for line in lines[:-1]] + lines[-1:]  # one string, cut into lines
        rows.append(f"    ({module!r}, {name!r},"
                    + "".join(f"\n     {piece!r}" for piece in pieces) + "),\n")
    return f'"""{WARM_LIST_DOC}"""\n\nKERNELS = [\n{"".join(rows)}]\n'


WARM_LIST_DOC = """The compiled functions gpualloc calls from Python, each with the argument
types of its calls, in the order gpualloc.warm's helpers compile them: those
a default run calls last first. Made by `python -m tests.helpers` (from the
repository's root, in a fresh process); tests/test_warm.py checks it."""


def warmed() -> None:
    """Fill numba's cache with every loop the lists above see, in a process
    of its own (kernel_calls' condition)."""
    subprocess.run([sys.executable, "-c", "from tests.helpers import default_run, "
                    "plan_every_compiled_path as every; default_run(); every()"], check=True)


if __name__ == "__main__":
    from pathlib import Path

    if sys.argv[1:] != ["--warmed"]:  # write the list from a fresh process
        warmed()
        sys.exit(subprocess.run([sys.executable, "-m", "tests.helpers", "--warmed"]).returncode)
    (Path(__file__).resolve().parents[1] / "gpualloc" / "warm_list.py").write_text(warm_list())
