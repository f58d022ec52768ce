"""Hydra glue for sweeps: the launchers' schemas and a sweep's progress.

Like run.py this module talks to Hydra; nothing below it does.

Launchers. conf/hydra/launcher/{joblib,submitit_local,submitit_slurm}.yaml hold
gpualloc's values. They carry the names the plugins give their own configs,
so `hydra/launcher=submitit_slurm` picks ours (the primary config folder comes
before the ConfigStore in Hydra's search path), and each one extends the
plugin's dataclass, stored again here as `schema/launcher/<name>`, so a typo
or a wrong type fails at composition. Hydra 1.3 also matches a YAML against a
ConfigStore entry of the same name by itself, with a deprecation warning; our
YAML already extends that very schema, so the warning says nothing and is
silenced for these three names only.
"""
from __future__ import annotations

import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from gpualloc import progress
from gpualloc.files import InputError, read_json

LAUNCHERS = ("joblib", "submitit_local", "submitit_slurm")


def _missing_plugin(name: str) -> str:
    """Resolver behind the stand-in of a launcher whose plugin is missing."""
    raise ImportError(f"hydra/launcher={name} needs its Hydra plugin: "
                      f"pip install 'gpualloc[sweep]'")


def register_launchers() -> None:
    """Store each launcher plugin's schema again as schema/launcher/<name>, or
    a stand-in that says what to install where the plugin is missing."""
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins
    from hydra.plugins.config_source import ConfigLoadError

    Plugins.instance()  # discovers the plugins, which store their schemas
    OmegaConf.register_new_resolver("gpualloc_missing_plugin", _missing_plugin, replace=True)
    cs = ConfigStore.instance()
    for name in LAUNCHERS:
        try:
            # The plugin's own node: its dataclass is the class the plugin
            # scan created, the one Hydra matches our YAML against.
            node = cs.load(f"hydra/launcher/{name}.yaml").node
        except ConfigLoadError:
            node = OmegaConf.create({"_target_": f"${{gpualloc_missing_plugin:{name}}}"})
        cs.store(group="schema/launcher", name=name, node=node)
    quiet_schema_matching()


def quiet_schema_matching() -> None:
    """Silence Hydra's automatic-schema-matching warning for our launchers."""
    for name in LAUNCHERS:
        warnings.filterwarnings(
            "ignore", category=UserWarning,
            message=rf"\s*'hydra/launcher/{name}' is validated against ConfigStore schema")


# Also at import: submitit workers compose their run's config again, and they
# import this module (for SweepProgress) but not run.py.
quiet_schema_matching()


# ---- progress ---------------------------------------------------------------------------

def count_jobs(config: DictConfig) -> int | None:
    """How many runs the basic sweeper will launch (None if unknown): the
    product of the sizes of the sweep overrides, globs expanded."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        if not str(config.hydra.sweeper.get("_target_", "")).endswith(".BasicSweeper"):
            return None
        params = config.hydra.sweeper.get("params") or {}
        args = [f"{k}={v}" for k, v in params.items()]
        args += list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
        parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
        batches = BasicSweeper.split_arguments(parser.parse_overrides(args), None)
        return sum(len(b) for b in batches)
    except Exception:  # noqa: BLE001 - progress must never break a sweep
        return None


class SweepProgress(Callback):
    """One status line on stderr each time a run of the sweep finishes (its
    metrics.json appears), whatever the launcher: runs in worker processes or
    on cluster nodes write into the same sweep folder. Full lines, not a
    redrawn bar, so they never tangle with the runs' own output. Quiet under
    CI or when stderr is not a terminal (gpualloc.progress.enabled)."""

    def __init__(self, poll_s: float = 1.0) -> None:
        self.poll_s = poll_s
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks along with each job: leave the
        # thread, which only the process that started the sweep has, behind.
        return {"poll_s": self.poll_s}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not progress.enabled():
            return
        self._dir = Path(str(config.hydra.sweep.dir))
        self._total = count_jobs(config)
        self._start = time.time()
        self._seen: dict[Path, bool] = {}  # finished run -> failed
        # What an earlier sweep into the same folder left (not by clock: on a
        # cluster, the nodes' clocks and this one's differ).
        self._before = {p: self._mtime(p) for p in self._dir.rglob("metrics.json")}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="sweep-progress")
        self._thread.start()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._poll()

    @staticmethod
    def _mtime(path: Path) -> float | None:
        try:
            return path.stat().st_mtime
        except OSError:
            return None

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._poll()

    def _poll(self) -> None:
        new = False
        for path in self._dir.rglob("metrics.json"):
            if path in self._seen or ".submitit" in path.parts:
                continue
            if path in self._before and self._mtime(path) == self._before[path]:
                continue
            try:
                doc = read_json(path, constants=True)
            except InputError:  # not written whole yet, or not a run's
                continue
            failed = isinstance(doc, dict) and "error" in doc
            self._seen[path] = failed
            new = True
        if new:
            done, failed = len(self._seen), sum(self._seen.values())
            meter = tqdm.format_meter(done, self._total, time.time() - self._start,
                                      prefix="sweep", unit="run")
            tqdm.write(meter + (f", {failed} failed" if failed else ""), file=sys.stderr)
