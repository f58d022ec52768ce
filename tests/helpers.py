"""Helpers the tests share: the command line and the composed run config."""
import subprocess
import sys

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from gpualloc.config import register_configs


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gpualloc.run", *args], capture_output=True,
                          text=True, cwd=cwd)


def composed(*overrides):
    register_configs()
    with initialize_config_module("gpualloc.conf", version_base=None):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))
