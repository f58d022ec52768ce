"""Typed configs, registered once with Hydra's ConfigStore (rules.py: what
settings allow; scenario.py, policies.py, online.py: the parts; run.py: the
run's config and the registration).

YAML under conf/ holds values; these dataclasses are the schemas. Everything
below run.py receives these objects, never a DictConfig.

Every setting is checked where it is defined: each dataclass has a
`validate(at)` method beside its fields, one rule per field, and the ones
with a fixed place in the run config (solver, greedy, exact, fifo, online,
scenario, the run itself) call it from `__post_init__`, which
OmegaConf.to_object runs as it builds them, before any work. The parts whose
place varies (a pool, a workload) are validated by the scenario that holds
them, which knows their place. An error names the override to change and
what is allowed, on one line:

    solver.rounding=bset: must be one of relaxed, priority, best

It is a SettingError, raised from `__post_init__`; OmegaConf lets it through
unwrapped (it wraps only TypeError), and gpualloc.run prints it as
`error: ...` and exits 2, like a bad scenario file.

Settings with a fixed set of values are plain `str` fields checked here, not
Enum or Literal fields: OmegaConf refuses Literal annotations, and an Enum is
checked by OmegaConf while Hydra composes the config, before gpualloc's code
runs, so a typo would end in Hydra's multi-line message and exit code 1.
"""
from gpualloc.config.online import OnlineConfig  # noqa: F401
from gpualloc.config.policies import (ExactConfig, FifoConfig, GreedyConfig,  # noqa: F401
                                      SolverConfig)
from gpualloc.config.rules import (ARRIVAL_REPLANS, ARRIVALS, DEVICES, DTYPES,  # noqa: F401
                                   FORECASTS, GRIDS, MODES, ROUNDINGS, SEED_MAX, SettingError)
from gpualloc.config.run import RunConfig, register_configs  # noqa: F401
from gpualloc.config.scenario import (FileScenarioConfig, GeneratedScenarioConfig,  # noqa: F401
                                      PoolConfig, RealtimeWorkloadConfig, RigidWorkloadConfig)
