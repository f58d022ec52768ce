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
    from gpualloc.jitcache import cold

    if not cold():  # a run before compiled (most of) it
        return False
    print(f"compiling the placement core, once per machine, about {seconds} s ...",
          file=sys.stderr if stream is None else stream, flush=True)
    return True
