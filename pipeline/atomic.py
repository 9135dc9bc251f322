"""Atomic writes: every artifact is written to a temp path beside its target, then renamed.

A reader therefore sees either the old complete file or the new complete file, never a half one.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq


def _tmp_path(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def write_with(target: Path, writer: Callable[[Path], None]) -> Path:
    """Run ``writer(tmp)`` and rename tmp onto ``target``; the temp file is removed on failure."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(target)
    try:
        writer(tmp)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def write_json(target: Path, payload: Any) -> Path:
    """Write ``payload`` as indented UTF-8 JSON, atomically."""
    text = json.dumps(payload, indent=2, ensure_ascii=False, default=_json_default)

    def _write(tmp: Path) -> None:
        tmp.write_text(text + "\n", encoding="utf-8")

    return write_with(target, _write)


def write_parquet(target: Path, table: pa.Table) -> Path:
    """Write an Arrow table as one Parquet file, atomically.

    Dictionary-encode the text columns (kernel names, types, shapes repeat a lot) and keep
    min/max statistics only on integer columns (times, rows, steps: what filters push down on);
    statistics on text columns cost a third of the write time and serve no query of ours.
    """
    text = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_list(f.type)]
    integers = [f.name for f in table.schema if pa.types.is_integer(f.type)]

    def _write(tmp: Path) -> None:
        pq.write_table(table, tmp, compression="lz4", use_dictionary=text, write_statistics=integers)

    return write_with(target, _write)


def write_csv(target: Path, frame) -> Path:
    """Write a DataFrame as CSV (Arrow's multi-threaded writer), atomically; the header is always written."""
    import pyarrow.csv as pacsv

    table = pa.Table.from_pandas(frame, preserve_index=False)
    return write_with(target, lambda tmp: pacsv.write_csv(table, tmp))


def move_dir_into_place(work: Path, final: Path) -> None:
    """Replace ``final`` by the finished directory ``work`` (a rename; an older ``final`` is removed first)."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(work, final)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
