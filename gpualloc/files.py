"""Files: atomic writes (a reader, or an interrupted run, never sees half a
file), and the one reading layer every input goes through."""
from __future__ import annotations

import codecs
import json
import os
import uuid
from pathlib import Path

import yaml


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it over `path`
    (UTF-8, whatever the locale)."""
    _atomic_write(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """atomic_write_text for bytes (images)."""
    _atomic_write(path, data)


def _atomic_write(path: str | Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    # os.open with 0o666 lets the umask set the final mode, as a plain open()
    # would (mkstemp's 0600 would make every output private to its writer).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
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


# ---- reading ------------------------------------------------------------------------------
# Every file gpualloc takes (scenarios, plans, trace CSVs, run folders) is read
# here: text is UTF-8, with or without a byte-order mark (spreadsheets write
# one); anything else is one line naming the file (and the line) and what was
# wrong, raised as the caller's error class so that its command ends with exit 2.

class InputError(ValueError):
    """A file gpualloc cannot read; the message names the file (and line)."""


def read_text(path: str | Path, error: type[Exception] = InputError) -> str:
    """The file's text: UTF-8, a leading byte-order mark dropped. A missing,
    unreadable or non-text file raises `error` with one line."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a file") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    except ValueError as e:  # a path with a NUL byte in it
        raise error(f"{str(path)!r}: cannot read ({e})") from None
    return decode(data, path, error)


def decode(data: bytes, where: str | Path, error: type[Exception] = InputError) -> str:
    """`data` as UTF-8 text (see read_text); `where` names it in the error."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise error(f"{where}: UTF-16 text (it starts with a UTF-16 byte-order mark); "
                    f"gpualloc reads UTF-8: save the file as UTF-8")
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        before = data[data.rfind(b"\n", 0, e.start) + 1: e.start]  # the line up to the byte
        column = len(before.decode("utf-8", errors="replace")) + 1
        raise error(f"{where} line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} at "
                    f"column {column}); save the file as UTF-8") from None
    nul = text.find("\0")
    if nul >= 0:
        raise error(f"{where} line {text.count(chr(10), 0, nul) + 1}: not a text file "
                    f"(a NUL byte)")
    return text


def read_json(path: str | Path, error: type[Exception] = InputError,
              constants: bool = False):
    """The JSON document in a file. `constants`: accept NaN and Infinity
    (Python's json writes them; the JSON standard has no such numbers)."""
    return parse_json(read_text(path, error), Path(path), error, constants)


def parse_json(text: str, where: str | Path, error: type[Exception] = InputError,
               constants: bool = False):
    """The JSON document in `text` (read_json; for text that is no file, such
    as a command's output, `where` naming it)."""
    try:
        doc = json.loads(text, parse_constant=None if constants else _reject_constant)
    except json.JSONDecodeError as e:
        raise error(f"{where} line {e.lineno}: not valid JSON: {e.msg} "
                    f"(column {e.colno})") from None
    except ValueError as e:
        raise error(f"{where}: not valid JSON: {e}") from None
    except RecursionError:
        raise error(f"{where}: nested too deeply to read") from None
    return _utf8_strings(doc, where, error)


def read_yaml(path: str | Path, error: type[Exception] = InputError):
    """The YAML document in a file (safe_load: plain data only)."""
    path = Path(path)
    text = read_text(path, error)
    try:
        doc = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" line {mark.line + 1}" if mark else ""
        column = f" (column {mark.column + 1})" if mark else ""
        raise error(f"{path}{where}: not valid YAML: {e.problem or e.context}{column}") from None
    except (yaml.YAMLError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise error(f"{path}: not valid YAML: {first}") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply to read") from None
    return _utf8_strings(doc, path, error)


def _utf8_strings(doc, path: str | Path, error: type[Exception]):
    """`doc`, once every string in it is known to be UTF-8 text: an escape
    such as \\ud800 (half a surrogate pair) parses, but no output could then
    print or write it. (Iterative, each list or mapping once: YAML's aliases
    may make a document that holds itself.)"""
    stack, seen = [doc], set()
    while stack:
        v = stack.pop()
        if isinstance(v, (dict, list)):
            if id(v) not in seen:
                seen.add(id(v))
                stack += [*v.keys(), *v.values()] if isinstance(v, dict) else v
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise error(f"{path}: a string holds {v[_bad(v)]!r} (half a surrogate pair): "
                            f"not UTF-8 text") from None
    return doc


def _bad(text: str) -> int:
    return next(i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF)


def read_document(path: str | Path, error: type[Exception] = InputError):
    """A JSON or YAML document, by the file's suffix (.yaml, .yml: YAML)."""
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        return read_yaml(path, error)
    return read_json(path, error)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a valid JSON number")
