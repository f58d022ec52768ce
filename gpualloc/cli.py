"""The `gpualloc` command: one entry point, a subcommand per tool.

    gpualloc run +scenario=mixed          (Hydra overrides, as python -m gpualloc.run)
    gpualloc check SCENARIO PLAN
    gpualloc trace csv|alibaba ...
    gpualloc report FOLDER
    gpualloc slurm lab|snapshot|serve|executed ...

Each subcommand is its module's own command (`python -m gpualloc.<module>`
keeps working); a module is imported only when its subcommand runs, so
`gpualloc --help` and the light commands start fast.
"""
from __future__ import annotations

import sys
from importlib import import_module
from importlib.util import find_spec

COMMANDS = {
    # name: (module with main(), one line of help)
    "run": ("gpualloc.run", "plan a scenario with the policies, check and measure every plan"),
    "check": ("gpualloc.check", "check a plan file against a scenario (exit 0 feasible, 1 not, 2 bad input)"),
    "trace": ("gpualloc.trace", "turn a real job trace (CSV, Alibaba) into a scenario file"),
    "report": ("gpualloc.report", "summarize a folder of runs or sweeps (tables, CSV, pictures)"),
    "slurm": ("gpualloc.slurm", "a Slurm cluster: lab, snapshot, serve plans, read back what ran"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {name: entry for name, entry in COMMANDS.items() if find_spec(entry[0]) is not None}


def usage() -> str:
    lines = ["usage: gpualloc COMMAND [ARGS...]", "", "commands:"]
    commands = _available()
    width = max(len(n) for n in commands)
    lines += [f"  {name.ljust(width)}  {text}" for name, (_, text) in commands.items()]
    lines += ["", "`gpualloc COMMAND --help` for a command's options; "
              "`gpualloc run` takes Hydra overrides (+scenario=mixed seed=1 ...)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from gpualloc import __version__
        print(f"gpualloc {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    commands = _available()
    if name not in commands:
        print(f"error: unknown command {name!r} (known: {', '.join(commands)})", file=sys.stderr)
        return 2
    module = import_module(commands[name][0])
    if name == "run":
        # Hydra reads sys.argv itself; `gpualloc run ARGS` is `python -m gpualloc.run ARGS`.
        sys.argv = [f"{sys.argv[0]} run", *rest]
        module.cli()
        return 0
    main_of = getattr(module, "main", None)
    if main_of is None:  # a package: its __main__ holds main()
        main_of = import_module(f"{commands[name][0]}.__main__").main
    code = main_of(rest)
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
