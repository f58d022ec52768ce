import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI runs on two slow cores: no deadline, a modest number of examples.
settings.register_profile("ci", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def every_path_report():
    """tests/helpers.every_path_report from a fresh interpreter, made once
    for the tests that read it (the compiled-once test, the warm list's)."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", "import json; from tests.helpers import "
                          "every_path_report as r; print(json.dumps(r()))"],
                         cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def pytest_collection_modifyitems(config, items):
    # Under pytest-xdist (--dist loadgroup) a group runs on one worker: the
    # `slurm` tests, which share the lab's one controller, in turn; and the
    # readers of every_path_report, so that it is made once, not per worker.
    for item in items:
        group = ("slurm" if item.get_closest_marker("slurm") else "every_path_report"
                 if "every_path_report" in getattr(item, "fixturenames", ()) else None)
        if group is None:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if config.getvalue("loadgroup") and hasattr(item, "_id") and "@" not in item.nodeid:
            # xdist (3.8) names the group in the node id through `_nodeid`,
            # which pytest 9 no longer reads (its node ids live in `_id`), and
            # may do so before this hook: the group named here, as xdist would.
            from _pytest.nodeid import coerce_node_id
            item._id = coerce_node_id(f"{item.nodeid}@{group}")
