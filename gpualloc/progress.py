"""Progress bars for long work, quiet where nobody watches them.

Bars show only when stderr is a terminal and the environment variable `CI` is
unset (or 0/false): logs and CI output stay clean.

    from gpualloc import progress
    for it in progress.bar(range(iters), desc="allocator", unit="it"):
        ...
"""
from __future__ import annotations

import os
import sys
from typing import Iterable, TextIO, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def enabled(stream: TextIO | None = None) -> bool:
    """Whether progress shows: `stream` (default stderr) is a terminal and `CI` is not set."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def bar(iterable: Iterable[T] | None = None, **kwargs) -> tqdm:
    """A tqdm bar on stderr, disabled unless `enabled()`; kwargs go to tqdm
    (desc, total, unit, leave, ...). Iterate over it, or call .update(n)."""
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs["disable"] = kwargs.get("disable", False) or not enabled(kwargs["file"])
    return tqdm(iterable, **kwargs)



_told = False


def compile_notice(seconds: int = 50, stream: TextIO | None = None) -> bool:
    """One line on `stream` (stderr) when this process plans on a machine
    whose numba cache holds none of the placement core's compiled loops yet
    (they compile once per machine, then load from the cache). Returns
    whether it told."""
    global _told
    if _told:
        return False
    _told = True
    try:
        import importlib
        import pkgutil

        import gpualloc.core as core
        from numba.core.registry import CPUDispatcher

        cached = []
        for info in pkgutil.iter_modules(core.__path__, "gpualloc.core."):
            module = importlib.import_module(info.name)
            cached += [os.path.exists(fn._cache._cache_file._index_path)
                       for fn in vars(module).values()
                       if isinstance(fn, CPUDispatcher) and fn._cache is not None]
        if not cached or any(cached):  # a run before compiled (most of) it
            return False
    except Exception:  # noqa: BLE001 - numba's cache layout is not public: no notice, no harm
        return False
    print(f"compiling the placement core, once per machine, about {seconds} s ...",
          file=sys.stderr if stream is None else stream, flush=True)
    return True
