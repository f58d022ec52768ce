"""`python -m gpualloc.trace ...`: the command of `gpualloc.trace.command`."""
import sys

from gpualloc.trace.command import main

if __name__ == "__main__":
    sys.exit(main())
