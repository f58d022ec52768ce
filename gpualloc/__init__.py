"""gpualloc: plan how a shared GPU cluster is used.

    import gpualloc as ga
    s = ga.generate("mixed", seed=0)        # or ga.load("scenario.json")
    p = ga.plan(s, "allocator", seed=0)
    ga.check(s, p)
    m = ga.metrics(s, p, baseline=ga.plan(s, "fifo"))

The functions live in gpualloc.api; names are imported on first use, so
`import gpualloc` itself is light.
"""
from __future__ import annotations

import sys
import types
from importlib import import_module
from importlib.util import find_spec
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_API = ("load", "generate", "run_config", "plan", "online", "check", "metrics", "save", "load_plan",
        "plot", "policy_names", "scenarios")
_WHERE = {
    **{name: "gpualloc.api" for name in _API},
    "Scenario": "gpualloc.scenario", "Job": "gpualloc.scenario", "Pool": "gpualloc.scenario",
    "ScenarioError": "gpualloc.scenario",
    "Plan": "gpualloc.plan", "Check": "gpualloc.check",
    "RunConfig": "gpualloc.config", "SettingError": "gpualloc.config",
    "InfeasiblePlan": "gpualloc.run",
}
__all__ = sorted(_WHERE)

if TYPE_CHECKING:
    from gpualloc.api import (check, generate, load, load_plan, metrics, online, plan,  # noqa: F401
                              plot, policy_names, run_config, save, scenarios)
    from gpualloc.check import Check  # noqa: F401
    from gpualloc.config import RunConfig, SettingError  # noqa: F401
    from gpualloc.plan import Plan  # noqa: F401
    from gpualloc.run import InfeasiblePlan  # noqa: F401
    from gpualloc.scenario import Job, Pool, Scenario, ScenarioError  # noqa: F401


class _Package(types.ModuleType):
    """gpualloc's module type. Some API names are also stage modules
    (gpualloc.plan, .check, .metrics, .online): there the name gives the
    module, made callable as the API's function, so both `ga.check(s, p)` and
    `from gpualloc import check; check.main(...)` work. The others give the
    function itself."""


class _CallableModule(types.ModuleType):
    """A stage module that is also the API function of its name."""

    def __call__(self, *args, **kwargs):
        return getattr(import_module("gpualloc.api"), self.__name__.rpartition(".")[2])(
            *args, **kwargs)


def _api(name: str):
    def get(self):
        if find_spec(f"gpualloc.{name}") is None:
            return getattr(import_module("gpualloc.api"), name)
        module = import_module(f"gpualloc.{name}")
        if type(module) is types.ModuleType:
            module.__class__ = _CallableModule
        return module

    # A submodule's import binds its name on the package: the getter decides instead.
    return property(get, lambda self, value: None)


for _name in _API:
    setattr(_Package, _name, _api(_name))
sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'gpualloc' has no attribute {name!r}")
    value = getattr(import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
