"""Vectorised conversions of raw text columns (Arrow string arrays) to typed columns.

Every converter reports the first bad cell as a ``BadInput`` with its line, so a malformed file
fails with one clear line instead of a stack trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from npuprof.pipeline.errors import BadInput

# Maps a row index of the column to the line (or row key) a person can find in the source.
LineOf = Callable[[int], int]

# Leading/trailing blanks allowed: the exporter appends a TAB to Start Time (an Excel guard).
_DECIMAL = r"^\s*(?P<int>[+-]?\d+)(?:\.(?P<frac>\d*))?\s*$"

# Sanity bounds of values that enter as text. Beyond them a value is corrupt, not a measurement,
# and would overflow the int64 ns columns: no device task runs 11 days, and epoch µs of year 2096
# keep start + duration far inside int64.
MAX_DURATION_US = 1e12
MAX_TIMESTAMP_US = 4_000_000_000_000_000
MAX_EXACT_INT = 2**53  # integers beyond this are not exact in the float path


def trimmed(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Strip spaces, TABs (the Excel guard after Start Time) and CRs; empty becomes null."""
    text = pc.utf8_trim(values, characters=" \t\r\n")
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _first_bad(raw: pa.ChunkedArray | pa.Array, converted: pa.ChunkedArray | pa.Array) -> int | None:
    bad = pc.and_(pc.is_valid(raw), pc.is_null(converted))
    idx = pc.index(bad, True).as_py()
    return None if idx < 0 else idx


def _raise_bad(path: Path, column: str, raw, index: int, line_of: LineOf, what: str) -> None:
    raise BadInput(path, f"{what}: {raw[index].as_py()!r}", line=line_of(index), column=column)


def refuse_where(mask, raw, *, path: Path, column: str, line_of: LineOf, what: str) -> None:
    """BadInput at the first row where ``mask`` holds (nulls in the mask never count)."""
    index = pc.index(pc.fill_null(mask, False), True).as_py()
    if index >= 0:
        _raise_bad(path, column, raw, index, line_of, what)


def decimal_us_to_ns(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Exact µs decimal strings (``"1736408883704643.212\\t"``) → int64 ns, no float rounding.

    A time must be a non-negative decimal below ``MAX_TIMESTAMP_US``; anything else is a BadInput.
    """
    args = {"path": path, "column": column, "line_of": line_of}
    parts = pc.extract_regex(raw, _DECIMAL)
    bad = _first_bad(raw, parts)
    if bad is not None:
        _raise_bad(path, column, raw, bad, line_of, "not a decimal number")
    digits = pc.struct_field(parts, "int")
    refuse_where(
        pc.greater(pc.utf8_length(pc.utf8_ltrim(digits, characters="+-0")), 16),
        raw,
        **args,
        what=f"time out of range (at most {MAX_TIMESTAMP_US} us)",
    )
    integer = pc.cast(digits, pa.int64())
    refuse_where(pc.less(integer, 0), raw, **args, what="negative time")
    refuse_where(
        pc.greater(integer, MAX_TIMESTAMP_US), raw, **args, what=f"time out of range (at most {MAX_TIMESTAMP_US} us)"
    )
    frac = pc.struct_field(parts, "frac")
    frac3 = pc.utf8_slice_codeunits(pc.utf8_rpad(pc.fill_null(frac, ""), width=3, padding="0"), 0, 3)
    # µs → ns: the integer part times 1000 plus the first three fractional digits (sub-ns dropped)
    return pc.add(pc.multiply(integer, 1000), pc.cast(frac3, pa.int64()))


def float_us_to_ns(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Durations in µs (``"1892.920"``, ``"4975.2664"``) → int64 ns, rounded to the nearest ns.

    A duration must be finite, non-negative and below ``MAX_DURATION_US``.
    """
    args = {"path": path, "column": column, "line_of": line_of}
    values = to_float(raw, **args)
    refuse_where(pc.less(values, 0.0), raw, **args, what="negative duration")
    refuse_where(
        pc.greater(values, MAX_DURATION_US),
        raw,
        **args,
        what=f"duration out of range (at most {MAX_DURATION_US:.0e} us)",
    )
    return pc.cast(pc.round(pc.multiply(values, 1000.0)), pa.int64())


def to_float(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Text → finite float64; null stays null; anything else (``nan``, ``inf`` included) is a BadInput."""
    values = _parse_float(raw, path=path, column=column, line_of=line_of)
    refuse_where(
        pc.invert(pc.is_finite(values)), raw, path=path, column=column, line_of=line_of, what="not a finite number"
    )
    return values


def _parse_float(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    if pa.types.is_floating(raw.type):
        return raw
    try:
        return pc.cast(raw, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # blanks around the number, or a bad cell: the slow path below finds out which
    text = trimmed(raw)
    try:
        return pc.cast(text, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    numeric = pc.cast(
        pc.if_else(pc.match_substring_regex(text, r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"), text, None), pa.float64()
    )
    bad = _first_bad(text, numeric)
    if bad is not None:
        _raise_bad(path, column, text, bad, line_of, "not a number")
    return numeric


def to_int(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Text → int64 (ids, block dims); ``"1.0"``-style integral floats are accepted."""
    try:
        return pc.cast(raw, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # blanks, integral floats or a bad cell: the slow path below finds out which
    text = trimmed(raw)
    try:
        return pc.cast(text, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = to_float(raw, path=path, column=column, line_of=line_of)
    refuse_where(
        pc.greater(pc.abs(values), MAX_EXACT_INT),
        raw,
        path=path,
        column=column,
        line_of=line_of,
        what="integer out of range",
    )
    as_np = values.to_numpy(zero_copy_only=False)
    fractional = np.flatnonzero(~np.isnan(as_np) & (np.floor(as_np) != as_np))
    if fractional.size:
        _raise_bad(path, column, text, int(fractional[0]), line_of, "not an integer")
    return pc.cast(values, pa.int64())


def unquoted(raw) -> pa.ChunkedArray:
    """Shape cells decode to ``"32,3,224,224"`` with literal quotes: drop them."""
    return pc.replace_substring(raw, '"', "")
