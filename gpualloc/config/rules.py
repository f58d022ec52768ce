"""What settings allow, and the rules that check them (one line naming the
override on a bad value: SettingError)."""
from __future__ import annotations

import math
from typing import Any

# ---- what settings allow ----------------------------------------------------------

DEVICES = ("auto", "cpu", "cuda")
MODES = ("offline", "online")
FORECASTS = ("oracle", "last_day", "ewma")
ARRIVALS = ("none", "history", "oracle")
ARRIVAL_REPLANS = ("none", "light", "full")
ROUNDINGS = ("relaxed", "priority", "best")
GRIDS = ("auto", "dense", "packed")
DTYPES = ("float32", "bfloat16", "float16")
"""dtypes of the allocator's relaxed grid (gpualloc.policies.allocator.memory reads
their sizes from torch)."""
SEED_MAX = 2**31 - 1
"""Largest run seed: the exact policy hands it to CP-SAT, whose random_seed is 32-bit."""


class SettingError(ValueError):
    """A setting outside what it allows. The message names the override to
    change and what is allowed, on one line. gpualloc.run treats it like a
    ScenarioError: `error: MESSAGE` on stderr, exit code 2."""


def _show(v, width: int = 60) -> str:
    """A value as an override would spell it, cut to one short line."""
    if v is None:
        text = "null"
    elif isinstance(v, bool):
        text = str(v).lower()
    elif isinstance(v, (list, tuple)):
        text = "[" + ", ".join(_show(x, width) for x in v) + "]"
    else:
        text = str(v)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 4] + " ..."


def _interval(text: str) -> tuple[float, float, bool, bool, str]:
    """An interval as maths writes it, e.g. `(0, 1]`: (lo, hi, lo_open,
    hi_open, its text for a message: "in (0, 1]"). Up to inf the text is
    "> 0" or ">= 0"; open at inf means finite numbers only."""
    lo, hi = (float(x) for x in text[1:-1].split(","))
    lo_open, hi_open = text[0] == "(", text[-1] == ")"
    if hi == math.inf:
        return lo, hi, lo_open, hi_open, f"{'>' if lo_open else '>='} {lo:g}"
    return lo, hi, lo_open, hi_open, f"in {text}"


def _inside(v, lo: float, hi: float, lo_open: bool, hi_open: bool) -> bool:
    # NaN compares false everywhere: outside every interval.
    return (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)


def _is_number(v, integer: bool) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) if integer else isinstance(v, (int, float))


class Rules:
    """The checks of one config object's fields; `at` is its place in the run
    config ("solver", "scenario.pools[0]", "" for the run itself)."""

    def __init__(self, obj, at: str):
        self.obj, self.at = obj, at

    def fail(self, name: str, rule: str, value: Any = None, show: bool = True):
        path = f"{self.at}.{name}" if self.at else name
        value = getattr(self.obj, name) if value is None else value
        raise SettingError(f"{path}={_show(value)}: {rule}" if show else f"{path}: {rule}")

    def flag(self, name: str) -> None:
        if not isinstance(getattr(self.obj, name), bool):
            self.fail(name, "must be true or false")

    def one_of(self, name: str, options: tuple[str, ...]) -> None:
        if getattr(self.obj, name) not in options:
            self.fail(name, f"must be one of {', '.join(options)}")

    def text(self, name: str) -> None:
        v = getattr(self.obj, name)
        if not isinstance(v, str) or not v:
            self.fail(name, "must be a non-empty string", value=repr(v))

    def number(self, name: str, interval: str, integer: bool = False,
               null: bool = False) -> None:
        """A number inside `interval` ("[0, inf)": >= 0 and finite; "(0, inf]":
        > 0, inf allowed); `null`: None allowed too."""
        v = getattr(self.obj, name)
        if v is None and null:
            return
        lo, hi, lo_open, hi_open, rule = _interval(interval)
        if not (_is_number(v, integer) and _inside(v, lo, hi, lo_open, hi_open)):
            kind = ("an integer " if integer else
                    "a finite number " if hi_open and _is_number(v, False)
                    and not math.isfinite(v) else "")
            self.fail(name, f"must be {kind}{rule}{' or null' if null else ''}")

    def numbers(self, name: str, interval: str, integer: bool = False) -> None:
        """A non-empty list of numbers, each inside `interval`."""
        v = getattr(self.obj, name)
        lo, hi, lo_open, hi_open, rule = _interval(interval)
        if not (isinstance(v, (list, tuple)) and v and all(
                _is_number(x, integer) and _inside(x, lo, hi, lo_open, hi_open) for x in v)):
            kind = "integers" if integer else "numbers"
            self.fail(name, f"must be a non-empty list of {kind} {rule}")

    def pair(self, name: str, interval: str, integer: bool = False) -> None:
        """A range [a, b]: two numbers inside `interval`, a <= b."""
        v = getattr(self.obj, name)
        lo, hi, lo_open, hi_open, _ = _interval(interval)
        if not (isinstance(v, (list, tuple)) and len(v) == 2
                and all(_is_number(x, integer) and _inside(x, lo, hi, lo_open, hi_open)
                        for x in v) and v[0] <= v[1]):
            kind = "integers" if integer else "numbers"
            low = f"{lo:g} {'<' if lo_open else '<='} "
            high = "" if hi == math.inf else f" {'<' if hi_open else '<='} {hi:g}"
            self.fail(name, f"must be two {kind} [a, b] with {low}a <= b{high}")

    def weights(self, name: str, of: str) -> None:
        """Empty (uniform), or one weight >= 0 per entry of the list `of`, not all 0."""
        w, n = getattr(self.obj, name), len(getattr(self.obj, of))
        ok = isinstance(w, (list, tuple)) and (not w or (
            len(w) == n and all(_is_number(x, False) and _inside(x, 0, math.inf, False, True)
                                for x in w) and sum(w) > 0))
        if not ok:
            self.fail(name, f"must be empty (uniform) or {n} weights >= 0, one per entry of "
                            f"{of}, not all 0")

    def gpu_types(self, name: str, known: set[str] | None) -> None:
        """Allowed-type sets whose names some pool has (an empty set: any type)."""
        v = getattr(self.obj, name)
        for types in v:
            if not isinstance(types, (list, tuple)) or not all(
                    isinstance(t, str) and t for t in types):
                self.fail(name, "must be a list of lists of GPU type names")
            for t in types:
                if known is not None and t not in known:
                    self.fail(name, f"names {t}, which no pool has (pools have "
                                    f"{', '.join(sorted(known))})")
