"""Auxiliary inputs: every file of a capture but its kernel source (profiler_info / metadata json,
communication.json, communication_matrix.json, step_trace_time.csv, trace_view.json).

One that cannot be read — broken or truncated JSON, a wrong JSON type, NaN / Infinity / overflowing
numbers, binary garbage, another encoding — never fails the root: what needs it is skipped or falls
back, and a note names the rank, the file, the reason and the fallback. A root with such a note
ends ``degraded`` (exit 8), never a silent ``ok``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar

from npuprof.pipeline.errors import BadInput
from npuprof.pipeline.input_files import read_input_json

T = TypeVar("T")


def read_json_object(path: str | Path) -> dict:
    """A capture's JSON file that must hold an object of finite numbers; BadInput otherwise."""
    data = read_input_json(Path(path), finite=True)
    if not isinstance(data, dict):
        raise BadInput(path, f"expected a JSON object, found {_json_type(data)}")
    return data


def _json_type(value: object) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def read_auxiliary(
    reader: Callable[[Path], T], path: str | Path, rank_id: int, fallback: str
) -> tuple[T | None, dict | None]:
    """(what ``reader`` read, None), or (None, the note) when the file is unreadable."""
    try:
        return reader(Path(path)), None
    except BadInput as exc:
        return None, unreadable_note(rank_id, path, exc, fallback)


def unreadable_note(rank_id: int, path: str | Path, error: BadInput, fallback: str) -> dict[str, Any]:
    """The note of one unreadable auxiliary file (JSON-ready, carried in stage manifests)."""
    where = f"line {error.line}: " if error.line is not None else ""
    return {
        "rank_id": int(rank_id),
        "file": Path(path).name,
        "path": str(path),
        "reason": " ".join((where + error.reason).split()),  # parsers' messages may span lines
        "fallback": fallback,
    }


def note_text(note: dict) -> str:
    """One line a person reads: which rank, which file, why, and what the analysis did instead."""
    return f"rank {note['rank_id']}: {note['file']} is unreadable ({note['reason']}); {note['fallback']}"
