"""Cells a spreadsheet would run as formulas (OWASP: CSV injection): profiling data names kernels, so a
name like ``=HYPERLINK(...)`` reaches every CSV view. Each such text cell is led by an apostrophe, which a
spreadsheet shows as text, and ``read_csv_view`` gives the exact value back; Parquet and JSON keep the raw
values."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

FORMULA_LEADS = "=+-@\t\r"  # a cell starting so is a formula to a spreadsheet (OWASP: CSV injection)
_LEADS = f"[{re.escape(FORMULA_LEADS)}]"


def text_columns(frame) -> list:
    kinds = pd.api.types
    return [c for c in frame.columns if kinds.is_object_dtype(frame[c]) or kinds.is_string_dtype(frame[c])]


def formula_safe(frame):
    """``frame`` with each text cell that a spreadsheet would run as a formula (``=HYPERLINK(…)``,
    ``+cmd|…``, ``@SUM…``) led by an apostrophe, which shows it as text (a cell already led by
    apostrophes before such a character gets one more, so ``read_csv_view`` gives back the exact value).
    For CSV views only: Parquet and JSON keep the raw values."""
    risky = {c: frame[c].astype("str").str.match(f"'*{_LEADS}", na=False) for c in text_columns(frame)}
    risky = {c: mask for c, mask in risky.items() if mask.any()}
    if not risky:
        return frame
    safe = frame.copy()
    for column, mask in risky.items():
        safe[column] = safe[column].where(~mask, "'" + safe[column].astype("str"))
    return safe


_RE2_LEADS = "^'*[=+\\-@\\t\\r]"  # FORMULA_LEADS after any apostrophes, as Arrow's regex (RE2) spells it


def formula_safe_table(table: pa.Table) -> pa.Table:
    """``formula_safe`` on the Arrow table a CSV is rendered from: the same text cells led by an
    apostrophe, by Arrow's kernels (a pandas match per text column cost more than rendering a view)."""
    for index, field in enumerate(table.schema):
        text = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if not (pa.types.is_string(text) or pa.types.is_large_string(text)):
            continue
        column = table.column(index).cast(text)
        risky = pc.match_substring_regex(column, _RE2_LEADS)
        if pc.any(risky).as_py():
            apostrophe, nothing = pa.scalar("'", column.type), pa.scalar("", column.type)
            led = pc.if_else(risky, pc.binary_join_element_wise(apostrophe, column, nothing), column)
            table = table.set_column(index, field.name, led)
    return table


def read_csv_view(path: str | Path, **options):
    """A CSV npuprof wrote, with each text cell as it was before ``formula_safe`` led it by an apostrophe."""
    frame = pd.read_csv(path, **options)
    for column in text_columns(frame):
        led = frame[column].astype("str").str.match(f"'+{_LEADS}", na=False)
        if led.any():
            frame[column] = frame[column].where(~led, frame[column].astype("str").str.slice(1))
    return frame
