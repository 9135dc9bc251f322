"""JSON text as every npuprof document is written: UTF-8 whatever the paths hold, numpy scalars as
numbers. Apart from ``io`` (which re-exports it) so the CLI's printing needs no pandas or Arrow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_text(payload: Any, indent: int | None = None) -> str:
    """``payload`` as JSON text that always encodes as UTF-8.

    Paths from the filesystem may hold bytes that are not UTF-8 (Python keeps them as lone
    surrogates); such a document is written with ASCII escapes, which read back to the same path.
    """
    text = json.dumps(payload, indent=indent, ensure_ascii=False, default=_json_default)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(payload, indent=indent, ensure_ascii=True, default=_json_default)
    return text
