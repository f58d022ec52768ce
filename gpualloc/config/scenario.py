"""The scenario's settings: a generated workload or a file."""
from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from gpualloc.config.rules import Rules


# ---- scenarios ------------------------------------------------------------------

@dataclass
class PoolConfig:
    name: str = "h100"
    count: int = 4
    """Nodes in the pool."""
    gpus_per_node: int = 8
    gpu_type: str = "H100"
    memory_gb: float = 80.0

    def validate(self, at: str) -> None:
        """`at`: its place, e.g. scenario.pools[0] (GeneratedScenarioConfig calls it)."""
        r = Rules(self, at)
        r.text("name")
        r.number("count", "[1, inf)", integer=True)
        r.number("gpus_per_node", "[1, inf)", integer=True)
        r.text("gpu_type")
        r.number("memory_gb", "(0, inf)")


@dataclass
class RigidWorkloadConfig:
    """One kind of rigid job: training, batch inference or quantization."""

    count: int = 0
    """Jobs over the horizon (used when rate_per_hour is 0)."""
    rate_per_hour: float = 0.0
    """Poisson arrival rate over the arrival window; replaces count when > 0."""
    gpus: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    """GPU counts to draw from (powers of two; above a node's size, whole nodes)."""
    gpus_weights: list[float] = field(default_factory=list)
    """Weights of `gpus`; empty for uniform."""
    duration_median_hours: float = 4.0
    duration_sigma: float = 0.7
    """Log-normal sigma of the duration."""
    duration_max_hours: float = 96.0
    priority: list[int] = field(default_factory=lambda: [1, 6])
    """Inclusive range; each job draws an integer uniformly."""
    arrival_window: list[float] = field(default_factory=lambda: [0.0, 0.9])
    """Fractions of the horizon between which jobs arrive."""
    bursts: int = 0
    """0: arrivals uniform over the window; n > 0: clustered in n bursts."""
    burst_hours: float = 3.0
    """Spread of each burst (exponential, hours)."""
    gpu_types: list[list[str]] = field(default_factory=list)
    """Allowed-type sets to draw from ([] inside = any type); empty list: any type."""
    gpu_types_weights: list[float] = field(default_factory=list)
    min_memory_gb: list[float] = field(default_factory=lambda: [0.0])
    """Memory needs to draw from."""
    min_memory_weights: list[float] = field(default_factory=list)
    preemptible: bool = False
    """Every job of this kind may run in segments (PROBLEM.md's preemptible
    rigid jobs); false: each runs once, unbroken."""
    restart_cost: int = 0
    """Timesteps every segment after a preemptible job's first spends
    restoring (PROBLEM.md); only with preemptible: true."""

    def validate(self, at: str, gpu_types: set[str] | None = None) -> None:
        """`at`: its place, e.g. scenario.training; `gpu_types`: the pools' types
        (GeneratedScenarioConfig calls it)."""
        r = Rules(self, at)
        r.number("count", "[0, inf)", integer=True)
        r.number("rate_per_hour", "[0, inf)")
        r.numbers("gpus", "[1, inf)", integer=True)
        r.weights("gpus_weights", "gpus")
        r.number("duration_median_hours", "(0, inf)")
        r.number("duration_sigma", "[0, inf)")
        r.number("duration_max_hours", "(0, inf)")
        r.pair("priority", "[1, inf)", integer=True)  # PROBLEM.md: priorities > 0
        r.pair("arrival_window", "[0, 1]")
        r.number("bursts", "[0, inf)", integer=True)
        r.number("burst_hours", "[0, inf)")
        r.gpu_types("gpu_types", gpu_types)
        r.weights("gpu_types_weights", "gpu_types")
        r.numbers("min_memory_gb", "[0, inf)")
        r.weights("min_memory_weights", "min_memory_gb")
        r.flag("preemptible")
        r.number("restart_cost", "[0, inf)", integer=True)
        if self.restart_cost and not self.preemptible:
            r.fail("restart_cost", f"needs {at}.preemptible=true (a restart cost is paid only "
                                   f"by preemptible jobs)")


@dataclass
class RealtimeWorkloadConfig:
    """Real-time inference services with a diurnal demand curve."""

    services: int = 0
    gpus: list[int] = field(default_factory=lambda: [1])
    """Replica sizes to draw from."""
    gpus_weights: list[float] = field(default_factory=list)
    peak_replicas: list[int] = field(default_factory=lambda: [4, 8])
    """Inclusive range of a service's day-peak replicas."""
    peak_to_trough: list[float] = field(default_factory=lambda: [2.0, 4.0])
    """Range of the day peak over the night trough."""
    peak_hour: list[float] = field(default_factory=lambda: [13.0, 17.0])
    noise: float = 0.08
    """Relative standard deviation of the per-step noise."""
    spikes_per_day: float = 0.3
    spike_factor: list[float] = field(default_factory=lambda: [1.3, 1.8])
    spike_hours: list[float] = field(default_factory=lambda: [1.0, 3.0])
    priority: list[int] = field(default_factory=lambda: [7, 10])
    arrival_window: list[float] = field(default_factory=lambda: [0.0, 0.0])
    gpu_types: list[list[str]] = field(default_factory=list)
    gpu_types_weights: list[float] = field(default_factory=list)
    min_memory_gb: list[float] = field(default_factory=lambda: [0.0])
    min_memory_weights: list[float] = field(default_factory=list)
    min_served: float = 0.0
    """Share of each service's demand guaranteed at every timestep (rule 4 of
    PROBLEM.md); 0: none."""

    def validate(self, at: str, gpu_types: set[str] | None = None) -> None:
        """`at`: its place, scenario.realtime_inference; `gpu_types`: the pools'
        types (GeneratedScenarioConfig calls it)."""
        r = Rules(self, at)
        r.number("services", "[0, inf)", integer=True)
        r.numbers("gpus", "[1, inf)", integer=True)
        r.weights("gpus_weights", "gpus")
        r.pair("peak_replicas", "[0, inf)", integer=True)
        r.pair("peak_to_trough", "[1, inf)")  # below 1 the trough would be above the peak
        r.pair("peak_hour", "[0, 24]")
        r.number("min_served", "[0, 1]")
        r.number("noise", "[0, inf)")
        r.number("spikes_per_day", "[0, inf)")
        r.pair("spike_factor", "[0, inf)")
        r.pair("spike_hours", "[0, inf)")
        r.pair("priority", "[1, inf)", integer=True)  # PROBLEM.md: priorities > 0
        r.pair("arrival_window", "[0, 1]")
        r.gpu_types("gpu_types", gpu_types)
        r.weights("gpu_types_weights", "gpu_types")
        r.numbers("min_memory_gb", "[0, inf)")
        r.weights("min_memory_weights", "min_memory_gb")


@dataclass
class GeneratedScenarioConfig:
    """A synthetic scenario; `seed` (top level) makes it repeatable."""

    name: str = MISSING
    horizon: int = 168
    """Timesteps."""
    step_minutes: int = 60
    pools: list[PoolConfig] = field(default_factory=lambda: [PoolConfig()])
    training: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4, 8, 16], priority=[3, 8], duration_median_hours=12.0))
    batch_inference: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4], priority=[1, 6], duration_median_hours=3.0))
    quantization: RigidWorkloadConfig = field(default_factory=lambda: RigidWorkloadConfig(
        gpus=[1, 2, 4, 8], priority=[1, 6], duration_median_hours=2.0))
    realtime_inference: RealtimeWorkloadConfig = field(default_factory=RealtimeWorkloadConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, at: str = "scenario") -> None:
        """Its own fields, its pools and workloads (their places named), and the
        GPU types the workloads ask for against the pools'. The practical size
        limits (horizon, GPUs, jobs) are gpualloc.scenario.generate's, with the scenario's."""
        r = Rules(self, at)
        r.number("horizon", "[1, inf)", integer=True)
        r.number("step_minutes", "[1, inf)", integer=True)
        if not isinstance(self.pools, (list, tuple)) or not self.pools:
            r.fail("pools", "must be a non-empty list of pools", value=[])
        for i, pool in enumerate(self.pools):
            pool.validate(f"{at}.pools[{i}]")
        names = [p.name for p in self.pools]
        for name in names:
            if names.count(name) > 1:
                r.fail("pools", f"two pools are named {name}; names must differ", show=False)
        types = {p.gpu_type for p in self.pools}
        for kind in ("training", "batch_inference", "quantization", "realtime_inference"):
            getattr(self, kind).validate(f"{at}.{kind}", types)


@dataclass
class FileScenarioConfig:
    """A scenario file of PROBLEM.md's format (JSON or YAML)."""

    path: str = ""
    """Empty: the small example that ships with gpualloc (gpualloc/examples/);
    pkg://PACKAGE/FILE: a file inside an installed package."""

    def validate(self, at: str = "scenario") -> None:
        """Any path: the loader checks the file and names what is wrong in it."""
