"""The commands the README and docs/ show, read out of their fenced blocks, for the doc tests to run.

A ``bash`` block holds commands to run; an unlabelled block's ``npuprof`` lines are synopses (``[--flag
N]``, ``…``, ``a | b``) or commands; a ``text`` block is a diagram or a listing and holds none. A
command's ``\\`` continuations are joined and its ``# comment`` dropped (shlex, as a shell reads it).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


@dataclass(frozen=True)
class DocCommand:
    """One command line of a doc: where it is, the block's language, the line as a shell reads it."""

    file: str
    line: int
    lang: str
    text: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text, comments=True)

    @property
    def synopsis(self) -> bool:
        """A usage line (optional groups, alternatives, elisions, asides), not a command to run."""
        return any(t == "|" or t.startswith(("[", "(")) or "…" in t for t in self.argv)

    @property
    def flags(self) -> list[str]:
        """Every ``--flag`` it names, outside its quoted arguments and its comment."""
        return [
            f for token in self.argv if token.startswith("--") or token.startswith("[--") for f in FLAG.findall(token)
        ]

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def fenced_blocks(path: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line of the block's first line, its lines without the fence's indent)."""
    blocks, current = [], None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fence = FENCE.match(raw)
        if fence and current is None:
            current = (fence.group(2), number + 1, len(fence.group(1)), [])
        elif fence and current is not None:
            blocks.append((current[0], current[1], current[3]))
            current = None
        elif current is not None:
            current[3].append(raw[current[2] :])
    return blocks


def doc_commands(langs: tuple[str, ...] = ("bash", "")) -> list[DocCommand]:
    """Every command line of the docs' blocks in ``langs`` (continuations joined), in file order."""
    found = []
    for path in DOC_FILES:
        for lang, first, lines in fenced_blocks(path):
            if lang not in langs:
                continue
            pending, start = "", first
            for offset, line in enumerate(lines):
                if not pending:
                    start = first + offset
                pending += line.strip()
                if pending.endswith("\\"):
                    pending = pending[:-1] + " "
                    continue
                if pending.startswith("[") and found and found[-1].file == path.relative_to(REPO).as_posix():
                    # a synopsis's next line of options: the same command
                    last = found.pop()
                    found.append(DocCommand(last.file, last.line, last.lang, f"{last.text} {pending}"))
                elif pending and not pending.startswith("#"):
                    found.append(DocCommand(path.relative_to(REPO).as_posix(), start, lang, pending))
                pending = ""
    return found


def python_blocks() -> list[tuple[str, int, str]]:
    """(file, first line, code) of every ``python`` block."""
    return [
        (path.relative_to(REPO).as_posix(), first, "\n".join(lines))
        for path in DOC_FILES
        for lang, first, lines in fenced_blocks(path)
        if lang == "python"
    ]


INLINE = re.compile(r"`(npuprof [^`\n]+)`")


def inline_commands() -> list[DocCommand]:
    """Every ```npuprof …``` span in the docs' prose (a mention: its flags are checked, it is not run)."""
    found = []
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            found.extend(
                DocCommand(path.relative_to(REPO).as_posix(), number, "inline", m) for m in INLINE.findall(line)
            )
    return found
