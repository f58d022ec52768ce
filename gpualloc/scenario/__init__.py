"""Scenarios: the model (model.py: jobs, pools, the derived arrays every policy
shares), the file format (io.py), the run options that edit a scenario
(edit.py) and the synthetic workloads (generate.py: `from
gpualloc.scenario.generate import generate`, not imported here, as it reads
the generator's config, which reads this package)."""
from gpualloc.scenario.edit import with_cuts, with_min_served, with_preemption  # noqa: F401
from gpualloc.scenario.io import from_dict, load  # noqa: F401
from gpualloc.scenario.model import (ELASTIC_KINDS, KINDS, MAX_GPUS, MAX_HORIZON,  # noqa: F401
                                     MAX_INT, MAX_JOBS, MAX_PRIORITY, RIGID_KINDS, Job, Pool,
                                     Scenario, ScenarioError, check_limits,
                                     guaranteed_replicas)
