"""The run's config, its parts, and their registration with Hydra."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from gpualloc.config.online import OnlineConfig
from gpualloc.config.policies import ExactConfig, FifoConfig, GreedyConfig, SolverConfig
from gpualloc.config.rules import DEVICES, MODES, SEED_MAX, Rules
from gpualloc.config.scenario import FileScenarioConfig, GeneratedScenarioConfig
from gpualloc.scenario import RIGID_KINDS


# ---- the run ------------------------------------------------------------------------

@dataclass
class RunConfig:
    scenario: Any = None
    """Chosen with +scenario=NAME; left out of the defaults on purpose."""
    policies: list[str] = field(default_factory=lambda: ["fifo", "greedy", "allocator"])
    """Policies to run, by registry name (gpualloc.policies)."""
    device: str = "auto"
    """auto | cpu | cuda"""
    seed: int = 0
    """Reseeds the generator and the solvers."""
    save_plans: bool = True
    plot: bool = False
    """Also draw the plans (gantt.png, utilization.png) into the run folder; needs matplotlib."""
    fifo: FifoConfig = field(default_factory=FifoConfig)
    solver: SolverConfig = field(default_factory=SolverConfig)
    greedy: GreedyConfig = field(default_factory=GreedyConfig)
    exact: ExactConfig = field(default_factory=ExactConfig)
    mode: str = "offline"
    """offline: each policy sees the whole scenario; online: it replans as time
    passes, seeing only what has arrived (gpualloc.online; FIFO is online by
    nature and runs unchanged)."""
    online: OnlineConfig = field(default_factory=OnlineConfig)
    min_served: Optional[float] = None
    """Set min_served (the guaranteed share of demand, rule 4 of PROBLEM.md)
    for every real-time service of the scenario, over what its file or
    generator says; null: as they say."""
    preemptible: Optional[list[str]] = None
    """The rigid kinds whose jobs are preemptible (PROBLEM.md), over what the
    scenario's file or generator says: exactly the jobs of these kinds, no
    other rigid job ([]: none); null: as they say."""
    restart_cost: Optional[int] = None
    """restart_cost (timesteps a preemptible job restores after each
    preemption) of every preemptible job, over the scenario's values; null:
    each keeps its own (0 for a job made preemptible by `preemptible`)."""
    warm_helpers: Optional[int] = None
    """On a machine whose numba cache holds none of gpualloc's compiled loops
    (its first run), helper processes that compile them beside the run, the
    ones it needs last first (gpualloc.warm): at most this many; null: one
    per spare CPU core, at most 4 (each holds about 430 MB while it
    compiles); 0: none. Never in a sweep (-m)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """The run's own settings; each part checked itself when it was built
        (its __post_init__), so that every setting is checked once, when
        OmegaConf.to_object (or the caller) builds the run config. A config
        changed after that is the changer's to check."""
        r = Rules(self, "")
        r.one_of("device", DEVICES)
        r.number("seed", f"[0, {SEED_MAX}]", integer=True)
        r.one_of("mode", MODES)
        r.number("min_served", "[0, 1]", null=True)
        if self.preemptible is not None and not (
                isinstance(self.preemptible, (list, tuple))
                and all(k in RIGID_KINDS for k in self.preemptible)):
            r.fail("preemptible", f"must be a list of rigid kinds ({', '.join(RIGID_KINDS)}), "
                                  f"[] or null")
        r.number("restart_cost", "[0, inf)", integer=True, null=True)
        r.number("warm_helpers", "[0, inf)", integer=True, null=True)
        # policies: gpualloc.run checks the names against the registry, which
        # lives with the policies (they import this module, not the reverse).


def register_configs() -> None:
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="schema/scenario", name="generated", node=GeneratedScenarioConfig)
    cs.store(group="schema/scenario", name="file", node=FileScenarioConfig)
    cs.store(group="schema/solver", name="allocator", node=SolverConfig)
