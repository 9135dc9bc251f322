"""A Python function of a column, computed once per distinct value: shapes, names and types repeat
across the rows of a capture, so per-row Python would redo the same work thousands of times."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa


def map_distinct(values: pd.Series, fn: Callable[[Any], Any]) -> np.ndarray:
    """``fn(value)`` for every row of ``values`` (an object array), called once per distinct value;
    rows with equal values share the result object, so callers must not mutate it."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    results = np.empty(len(uniques), dtype=object)
    for index, value in enumerate(uniques):  # a loop over distinct values only
        results[index] = fn(value)
    return results[codes]


def first_rows(codes: np.ndarray, count: int) -> np.ndarray:
    """The first row of each group ``0 … count-1`` (``codes``: the group of each row)."""
    first = np.full(count, len(codes), dtype=np.int64)
    np.minimum.at(first, codes, np.arange(len(codes)))
    return first


def text_codes(values: pd.Series | pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """(int64 code per row, text per code) of a text column, a null read as ``""`` (one code with an
    empty text): Arrow's dictionary encoding, so no Python string is made per row."""
    column = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)  # Arrow-backed: no copy
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    chunks = column.unify_dictionaries().chunks
    texts = chunks[0].dictionary.to_pylist() if chunks else []
    empty = texts.index("") if "" in texts else len(texts)
    if empty == len(texts):
        texts.append("")
    codes = [chunk.indices.fill_null(empty).to_numpy(zero_copy_only=False).astype(np.int64) for chunk in chunks]
    return (np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)), texts


def combined_codes(columns: Sequence[pd.Series | pa.Array | pa.ChunkedArray]) -> tuple[np.ndarray, list[tuple]]:
    """Per row, a code for its combination of the columns' texts (null read as ``""``), numbered in order of
    first appearance — as ``pd.factorize`` numbers the texts joined by a separator none contains —, and
    each code's texts. Only the distinct combinations become Python strings."""
    encoded = [text_codes(column) for column in columns]
    combined = encoded[0][0]
    for codes, texts in encoded[1:]:  # a loop over a few columns, each re-numbered whole: no overflow
        combined = pd.factorize(combined * len(texts) + codes)[0].astype(np.int64)
    combined, _ = pd.factorize(combined)
    first = first_rows(combined, int(combined.max()) + 1 if len(combined) else 0)
    combinations = [tuple(texts[codes[row]] for codes, texts in encoded) for row in first.tolist()]
    return combined.astype(np.int64), combinations


def distinct_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first row of each distinct row, each row's distinct row) of a 2-D array of non-negative integer
    codes, the distinct rows in lexical order: ``np.unique(rows, axis=0, return_index=True,
    return_inverse=True)[1:]``, one column at a time on integers (NumPy's row-wise unique sorts the rows as
    opaque bytes, several times slower)."""
    rank = np.zeros(len(rows), dtype=np.int64)
    for column in rows.T:  # a loop over the few columns: each pair (rank so far, code) ranked densely
        rank = np.unique(rank * (int(column.max(initial=0)) + 1) + column, return_inverse=True)[1].reshape(-1)
    _, first, inverse = np.unique(rank, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def text_array(codes: np.ndarray, labels: Sequence[str]) -> pd.api.extensions.ExtensionArray:
    """``labels[code]`` for each row (a negative code: missing) as the pandas text column (dtype ``str``)
    that assigning those strings would give, built from Arrow dictionary codes: pandas checks no Python
    string per row (for a 250 k-row rank that check is tens of milliseconds a column)."""
    codes = np.asarray(codes)
    indices = pa.array(codes.astype(np.int32), mask=codes < 0)
    texts = pa.DictionaryArray.from_arrays(indices, pa.array(list(labels), pa.string())).cast(pa.string())
    return texts.to_pandas().array
