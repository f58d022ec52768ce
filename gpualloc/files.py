"""Atomic writes: a reader, or an interrupted run, never sees half a file."""
from __future__ import annotations

import os
import uuid
from pathlib import Path


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`."""
    _atomic_write(path, text, "w")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """atomic_write_text for bytes (images)."""
    _atomic_write(path, data, "wb")


def _atomic_write(path: str | Path, data: str | bytes, mode: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    # os.open with 0o666 lets the umask set the final mode, as a plain open()
    # would (mkstemp's 0600 would make every output private to its writer).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, mode) as f:
            # mkstemp makes the file private (0600); give it the mode a plain
            # open() would, so outputs stay readable where the umask allows.
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # BaseException: a Ctrl-C mid-write must not leave the temporary behind.
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
