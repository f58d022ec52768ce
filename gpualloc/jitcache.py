"""Numba's on-disk cache of gpualloc's compiled loops, kept in step with the
sources.

Numba checks a cached function against its own file only: a compiled caller
keeps the code it compiled in from a function of another file after that
file is edited (measured: `core/guard.py` edited, the search's walk in
`policies/allocator/search.py` still ran the old guard, and plans compared
"before and after" were the same for that reason). So when any of
gpualloc's compiled sources differs from what the cache beside them was
built from, every cached loop there is dropped and compiles again, once
(about 50 s). An installed copy nobody edits keeps its cache. Only the
cache beside the sources (`__pycache__`, numba's default) is checked; one
under NUMBA_CACHE_DIR is left to numba.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent
STAMP = "numba-sources.sha256"
"""In ROOT/__pycache__: the hash of the compiled sources its caches were built from."""


def compiled_sources(root: Path = ROOT) -> list[Path]:
    """The files under `root` with a cached compiled function, sorted."""
    return sorted(p for p in root.rglob("*.py") if "cache=True" in p.read_text())


def sources_hash(files: list[Path], root: Path = ROOT) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def drop_stale(root: Path = ROOT) -> int:
    """Drop the cached loops beside `root`'s compiled sources when those
    sources differ from the ones the stamp names (or there is no stamp), and
    stamp them; returns how many cache files it dropped. Does nothing where
    NUMBA_CACHE_DIR moves the cache, and gives up quietly where the tree is
    read-only (numba then caches elsewhere too)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return 0
    try:
        files = compiled_sources(root)
        now = sources_hash(files, root)
        stamp = root / "__pycache__" / STAMP
        if stamp.exists() and stamp.read_text() == now:
            return 0
        dropped = 0
        for p in files:
            for cached in (p.parent / "__pycache__").glob(f"{p.stem}.*.nb[ic]"):
                cached.unlink(missing_ok=True)
                dropped += 1
        stamp.parent.mkdir(exist_ok=True)
        part = stamp.with_name(f"{STAMP}.{os.getpid()}")
        part.write_text(now)
        part.replace(stamp)
        return dropped
    except OSError:
        return 0


def cold() -> bool:
    """Whether numba's cache (wherever it is) holds none of the placement
    core's compiled loops: this machine's first run, which compiles them
    (gpualloc.progress tells; gpualloc.warm starts helpers). False where
    numba's cache layout is not what this reads (it is not public)."""
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
        return bool(cached) and not any(cached)
    except Exception:  # noqa: BLE001 - a private layout: no answer, no harm
        return False
