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


def decimal_us_to_ns(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Exact µs decimal strings (``"1736408883704643.212\\t"``) → int64 ns, no float rounding."""
    parts = pc.extract_regex(raw, _DECIMAL)
    bad = _first_bad(raw, parts)
    if bad is not None:
        _raise_bad(path, column, raw, bad, line_of, "not a decimal number")
    integer = pc.cast(pc.struct_field(parts, "int"), pa.int64())
    frac = pc.struct_field(parts, "frac")
    frac3 = pc.utf8_slice_codeunits(pc.utf8_rpad(pc.fill_null(frac, ""), width=3, padding="0"), 0, 3)
    frac_ns = pc.cast(frac3, pa.int64())
    # µs → ns: the integer part times 1000 plus the first three fractional digits (sub-ns dropped);
    # a negative integer part subtracts the fraction.
    signed_frac = pc.if_else(pc.less(integer, 0), pc.negate(frac_ns), frac_ns)
    return pc.add(pc.multiply(integer, 1000), signed_frac)


def float_us_to_ns(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Durations in µs (``"1892.920"``, ``"4975.2664"``) → int64 ns, rounded to the nearest ns."""
    values = to_float(raw, path=path, column=column, line_of=line_of)
    return pc.cast(pc.round(pc.multiply(values, 1000.0)), pa.int64())


def to_float(raw, *, path: Path, column: str, line_of: LineOf) -> pa.ChunkedArray:
    """Text → float64; null stays null; anything else that is not a number is a BadInput."""
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
    as_np = values.to_numpy(zero_copy_only=False)
    fractional = np.flatnonzero(~np.isnan(as_np) & (np.floor(as_np) != as_np))
    if fractional.size:
        _raise_bad(path, column, text, int(fractional[0]), line_of, "not an integer")
    return pc.cast(values, pa.int64())


def unquoted(raw) -> pa.ChunkedArray:
    """Shape cells decode to ``"32,3,224,224"`` with literal quotes: drop them."""
    return pc.replace_substring(raw, '"', "")
