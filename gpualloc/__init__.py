"""gpualloc: plan how a shared GPU cluster is used."""
__version__ = "0.1.0"
