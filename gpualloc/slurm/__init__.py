"""gpualloc beside a Slurm cluster (docs/slurm.md).

- `lab`: a lab cluster on one host (python -m gpualloc.slurm.lab up|down|status);
- `read`: readers of what Slurm prints (no command run);
- `client`: Slurm's commands, as argument lists;
- `snapshot`, `executed`, `serve`: the commands of `python -m gpualloc.slurm`
  (its `main(argv) -> int` is in `gpualloc.slurm.__main__`);
- `bridge`: the one module that imports the rest of gpualloc.

Nothing is imported here: the lab runs without torch.
"""
