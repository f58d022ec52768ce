"""Scenarios: the model (jobs, pools, the derived arrays every policy shares),
the file format (io), the run options that edit a scenario (edit) and the
synthetic workloads (generate: `from gpualloc.scenario.generate import
generate`, not imported here, as it reads the generator's config)."""
from gpualloc.scenario.io import (ELASTIC_KINDS, KINDS, MAX_GPUS, MAX_HORIZON, MAX_INT,  # noqa: F401
                                  MAX_JOBS, MAX_PRIORITY, RIGID_KINDS, Job, Pool, Scenario,
                                  ScenarioError, check_limits, from_dict, load)
