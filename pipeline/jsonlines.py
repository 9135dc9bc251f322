"""JSON Lines from columns, without a Python loop over records.

Evidence files hold one record per idle window or collective, hundreds of thousands on a real
root; ``json.dumps`` per record costs more than the whole analysis that found them. Here each
column is turned into JSON text once (numbers by an Arrow cast, strings by encoding each distinct
value once: kernel names repeat) and records are joined element-wise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.io import json_text, rendered_in_chunks

TEXT = pa.large_string()  # large strings throughout: a file of many records may pass 2 GiB
_NEEDS_ESCAPE = r'["\\\x00-\x1f]'  # a quote, a backslash or a control character

# a record field: a column (pa.Array, numpy array, pandas Series), a constant, or a nested record
Field = Any


@dataclass(frozen=True)
class NullableRecord:
    """A nested record that is ``null`` on the rows where ``valid`` is false."""

    fields: Mapping[str, Any]
    valid: Any  # a boolean column


def _column(values: Field) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if hasattr(values, "array") and hasattr(values, "dtype"):  # a pandas Series, on any backend
        return pa.Array.from_pandas(values)
    return pa.array(values)


def _json_column(values: Field) -> pa.Array:
    """JSON text of each value of a column (null → ``null``; NaN and inf → ``null``)."""
    column = _column(values)
    kind = column.type
    if pa.types.is_dictionary(kind):
        column, kind = column.cast(kind.value_type), kind.value_type
    if pa.types.is_null(kind):
        return pa.array(["null"] * len(column), TEXT)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return pc.fill_null(_json_strings(column), "null")
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _json_lists(column)
    if pa.types.is_boolean(kind):
        return pc.fill_null(pc.if_else(column, pa.scalar("true", TEXT), pa.scalar("false", TEXT)), "null")
    if pa.types.is_floating(kind):
        finite = pc.is_finite(column)
        column = pc.if_else(finite, column, pa.scalar(None, kind))
    elif not pa.types.is_integer(kind):
        raise TypeError(f"no JSON encoding for column type {kind}")
    return pc.fill_null(pc.cast(column, TEXT), "null")


def _json_lists(column: pa.Array) -> pa.Array:
    """``[a,b,...]`` per row from a list column (elements encoded like any column); null → ``null``."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = column.cast(pa.large_list(column.type.value_type))
    elements = _json_column(column.values.slice(column.offsets[0].as_py(), len(column.flatten())))
    offsets = pc.subtract(column.offsets, column.offsets[0])
    rebuilt = pa.LargeListArray.from_arrays(offsets, elements, mask=column.is_null())
    inner = pc.binary_join(rebuilt, pa.scalar(",", TEXT))
    bracket_open, bracket_close = pa.scalar("[", TEXT), pa.scalar("]", TEXT)
    texts = pc.binary_join_element_wise(bracket_open, inner, bracket_close, pa.scalar("", TEXT))
    return pc.fill_null(texts, "null")


def _json_strings(column: pa.Array) -> pa.Array:
    """Quoted strings; only those holding a quote, a backslash or a control character go through
    the JSON encoder (Arrow strings are valid UTF-8, and non-ASCII text stays as it is)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    column = column.cast(TEXT)
    quote = pa.scalar('"', TEXT)
    quoted = pc.binary_join_element_wise(quote, column, quote, pa.scalar("", TEXT))
    needs_escape = pc.fill_null(pc.match_substring_regex(column, _NEEDS_ESCAPE), False)
    if not pc.any(needs_escape).as_py():
        return quoted
    raw = pc.filter(column, needs_escape).to_pylist()
    return pc.replace_with_mask(quoted, needs_escape, pa.array([json_text(text) for text in raw], TEXT))


def _object_texts(record: Mapping[str, Field], length: int) -> pa.Array:
    """``{"key": value, ...}`` per row, from columns, constants and nested records."""
    parts: list[Any] = []
    for position, (key, value) in enumerate(record.items()):
        parts.append(("{" if position == 0 else ",") + json_text(key) + ":")
        if isinstance(value, NullableRecord):
            valid = pc.fill_null(_column(value.valid), False)
            parts.append(pc.if_else(valid, _object_texts(value.fields, length), pa.scalar("null", TEXT)))
        elif isinstance(value, Mapping):
            parts.append(_object_texts(value, length))
        elif value is None or np.isscalar(value):
            parts.append(json_text(value))
        else:
            parts.append(_json_column(value))
    parts.append("}" if record else "{}")
    # constants broadcast: Arrow joins scalars with arrays element-wise
    columns = [pa.scalar(p, TEXT) if isinstance(p, str) else p for p in parts]
    joined = pc.binary_join_element_wise(*columns, pa.scalar("", TEXT))
    return joined if not isinstance(joined, pa.Scalar) else pa.array([joined.as_py()] * length, TEXT)


def _sliced(field: Field, lo: int, hi: int) -> Field:
    """Rows [lo, hi) of a record field (constants stay as they are)."""
    if isinstance(field, NullableRecord):
        return NullableRecord(_sliced(field.fields, lo, hi), _sliced(field.valid, lo, hi))
    if isinstance(field, Mapping):
        return {key: _sliced(value, lo, hi) for key, value in field.items()}
    if field is None or np.isscalar(field):
        return field
    if isinstance(field, (pa.Array, pa.ChunkedArray)):
        return field.slice(lo, hi - lo)
    if hasattr(field, "iloc"):
        return field.iloc[lo:hi]
    return field[lo:hi]


def _lines_bytes(record: Mapping[str, Field], length: int, separator: str) -> bytes:
    newline, empty = pa.scalar(separator, TEXT), pa.scalar("", TEXT)
    lines = pc.binary_join_element_wise(_object_texts(record, length), newline, empty)
    # the lines sit back to back in the array's data buffer: that buffer is the text
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64, count=len(lines) + 1, offset=lines.offset * 8)
    return lines.buffers()[2].to_pybytes()[offsets[0] : offsets[-1]]


def jsonl_bytes(record: Mapping[str, Field], length: int, separator: str = "\n") -> bytes:
    """UTF-8 JSON Lines of ``length`` records whose fields are given column by column (each record
    followed by ``separator``: ``",\n"`` makes the body of a JSON array). Chunks of records are
    encoded on every core (``io.rendered_in_chunks``)."""
    if length == 0:
        return b""

    def render(lo: int, hi: int) -> bytes:
        return _lines_bytes(_sliced(record, lo, hi), hi - lo, separator)

    return b"".join(rendered_in_chunks(length, render))
