"""gpualloc.jitcache: numba's cache dropped when a compiled source changes."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from gpualloc.jitcache import STAMP, drop_stale

CALLEE = """
from numba import njit


@njit(cache=True)
def callee(x):
    return x + {add}
"""
CALLER = """
from numba import njit

from pk.a import callee


@njit(cache=True)
def caller(x):
    return callee(x) * 10
"""


def _package(root: Path, add: int, guarded: bool) -> None:
    """pk/: a compiled callee in a.py, a compiled caller of it in b.py; with
    `guarded`, importing pk checks the cache first (as gpualloc.core does)."""
    pk = root / "pk"
    pk.mkdir(exist_ok=True)
    init = ("from pathlib import Path\nfrom gpualloc.jitcache import drop_stale\n"
            "drop_stale(Path(__file__).parent)\n") if guarded else ""
    (pk / "__init__.py").write_text(init)
    (pk / "a.py").write_text(CALLEE.format(add=add))
    (pk / "b.py").write_text(CALLER)


def _call(root: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(root), *sys.path])
    out = subprocess.run([sys.executable, "-c", "from pk.b import caller; print(caller(1))"],
                         cwd=root, env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_an_edited_callee_reaches_its_cached_caller(tmp_path):
    guarded, plain = tmp_path / "guarded", tmp_path / "plain"
    for root, guard in ((guarded, True), (plain, False)):
        root.mkdir()
        _package(root, add=1, guarded=guard)
        assert _call(root) == 20  # (1 + 1) * 10, compiled and cached
        (root / "pk" / "a.py").write_text(CALLEE.format(add=2))  # the callee edited
    assert _call(guarded) == 30
    assert _call(plain) == 20  # numba alone keeps the caller's stale copy


def test_the_cache_is_dropped_only_when_a_compiled_source_changes(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("@njit(cache=True)\ndef f(): pass\n")
    (tmp_path / "sub" / "b.py").write_text("@njit(cache=True)\ndef g(): pass\n")
    (tmp_path / "c.py").write_text("def h(): pass\n")  # nothing compiled

    def cache_files() -> list[Path]:
        made = []
        for where, stem in ((tmp_path, "a"), (tmp_path / "sub", "b")):
            (where / "__pycache__").mkdir(exist_ok=True)
            for name in (f"{stem}.f-1.py311.nbi", f"{stem}.f-1.py311.1.nbc"):
                (where / "__pycache__" / name).write_text("x")
                made.append(where / "__pycache__" / name)
        return made

    made = cache_files()
    assert drop_stale(tmp_path) == 4  # no stamp yet: what is cached may be stale
    assert not any(p.exists() for p in made)
    assert (tmp_path / "__pycache__" / STAMP).exists()
    made = cache_files()
    (tmp_path / "c.py").write_text("def h(): return 1\n")  # not a compiled source
    assert drop_stale(tmp_path) == 0 and all(p.exists() for p in made)
    (tmp_path / "sub" / "b.py").write_text(textwrap.dedent("""\
        @njit(cache=True)
        def g(): return 1
        """))
    assert drop_stale(tmp_path) == 4 and not any(p.exists() for p in made)
    made = cache_files()
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "elsewhere"))
    (tmp_path / "a.py").write_text("@njit(cache=True)\ndef f(): return 2\n")
    assert drop_stale(tmp_path) == 0  # numba caches elsewhere: left to it
