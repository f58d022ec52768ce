"""A module imported on first use, so that commands which never touch it
(`gpualloc check`'s reading, `trace`, `report`, `--help`) start without it."""
from __future__ import annotations

from importlib import import_module
from types import ModuleType


class LazyModule:
    """Stands for module `name` until an attribute is first read."""

    def __init__(self, name: str):
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str):
        if self._module is None:
            self._module = import_module(self._name)
        return getattr(self._module, attr)
