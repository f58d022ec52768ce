"""The README and docs/ stay true: their links lead somewhere, every measured
result is reachable from docs/results.md, and every command in the README's
shell blocks at least parses (its entry point's `--help` exits 0).

The README's Python blocks run too, as a user would paste them.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
RESULTS = ROOT / "bench" / "results"

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
EXTERNAL = ("http://", "https://", "mailto:")


def _prose(text: str) -> str:
    """The page without its fenced code blocks (a link there is code, not a link)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def _strip_inline_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", text)


def _links(page: Path) -> list[str]:
    return LINK.findall(_strip_inline_code(_prose(page.read_text(encoding="utf-8"))))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _prose(page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_lead_to_files_and_headings(page: Path) -> None:
    broken = []
    for target in _links(page):
        if target.startswith(EXTERNAL):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
            continue
        if anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with the anchor #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(broken)


def test_every_result_file_is_in_results_md() -> None:
    """docs/results.md links every measured result (each .md and .txt of bench/results/)."""
    linked = {
        (ROOT / "docs" / t.partition("#")[0]).resolve()
        for t in _links(ROOT / "docs" / "results.md") if not t.startswith(EXTERNAL)
    }
    files = sorted(p for p in RESULTS.iterdir() if p.suffix in (".md", ".txt"))
    assert files
    missing = [p.name for p in files if p.resolve() not in linked]
    assert not missing, f"bench/results/ files docs/results.md does not link: {missing}"


# ---- the README's shell commands ------------------------------------------------------

WORD = re.compile(r"^[a-z][a-z0-9_-]*$")


def _shell_lines(text: str) -> list[str]:
    """Lines of the ```bash blocks, continuation lines joined, comments dropped."""
    lines, block, pending = [], False, ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("```"):
            block = stripped[3:].strip() in ("bash", "sh", "shell", "console") and not block
            pending = ""
            continue
        if not block:
            continue
        line = pending + stripped
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        line = line.removeprefix("$ ")
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _entry_point(command: str) -> tuple[str, ...] | None:
    """The argv, up to `--help`, that checks a command's entry point, or None when it is
    not gpualloc's (pip, pytest, ...). `python -m gpualloc.X ...` -> the module itself;
    `gpualloc X ...` -> `python -m gpualloc.cli X`; leading plain words are kept as
    subcommands (`gpualloc trace csv FILE` -> `... trace csv --help`)."""
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return None
    if argv[:2] == ["python", "-m"] and len(argv) > 2 and argv[2].startswith("gpualloc"):
        head, rest = ("-m", argv[2]), argv[3:]
    elif argv[:1] == ["gpualloc"]:
        head, rest = ("-m", "gpualloc.cli"), argv[1:]
    else:
        return None
    words = []
    for arg in rest:
        if not WORD.match(arg):
            break
        words.append(arg)
    return (*head, *words)


def _readme_commands() -> dict[tuple[str, ...], str]:
    found: dict[tuple[str, ...], str] = {}
    for line in _shell_lines(README.read_text(encoding="utf-8")):
        for part in re.split(r"&&|;|\|\|", line):
            key = _entry_point(part.strip())
            if key is not None:
                found.setdefault(key, part.strip())
    return found


COMMANDS = _readme_commands()


def test_readme_has_gpualloc_commands() -> None:
    """The parser below still finds the README's commands (the run, the command set)."""
    assert ("-m", "gpualloc.cli", "run") in COMMANDS
    assert len(COMMANDS) >= 4


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=lambda k: " ".join(k[1:]))
def test_readme_command_parses(key: tuple[str, ...]) -> None:
    """`--help` of the command's entry point exits 0 (one subprocess per entry point)."""
    env = dict(os.environ, CI="true", PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.run([sys.executable, *key, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f"README command {COMMANDS[key]!r}: `python {' '.join(key)} --help` exited "
        f"{proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")


def _python_blocks(page: Path) -> list[str]:
    blocks, current = [], None
    for line in page.read_text(encoding="utf-8").splitlines():
        if current is None and line.strip() == "```python":
            current = []
        elif current is not None and FENCE.match(line.strip()):
            blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


@pytest.mark.slow
def test_readme_python_blocks_run(tmp_path) -> None:
    """The README's Python, as a user would paste it: in a fresh process, in
    an empty folder (it writes its files there)."""
    blocks = _python_blocks(README)
    assert blocks, "the README has no Python block"
    for block in blocks:
        out = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True,
                             text=True, env={**os.environ, "CI": "true"})
        assert out.returncode == 0, f"README block failed:\n{block}\n{out.stderr[-2000:]}"
    assert (tmp_path / "plan_allocator.json").exists() and (tmp_path / "gantt.png").exists()
