"""Codes for text columns and their combinations: the numbering the detectors and compare rely on is
pd.factorize's of the texts joined (a null read as an empty text), whatever form the column arrives in; and
distinct rows of codes numbered as NumPy's row-wise unique numbers them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from npuprof.pipeline.distinct import combined_codes, distinct_rows, text_array, text_codes

SHAPES = ["8,16", None, "", "8,16", "4", None, "4", "8,16", ""]
DTYPES = ["DT_BF16", "DT_BF16", None, "FLOAT", "DT_BF16", "", "DT_BF16", "DT_BF16", None]


def joined_codes(*columns: list) -> tuple[np.ndarray, list[tuple]]:
    """The reference: each row's texts joined, then numbered in order of first appearance."""
    texts = [pd.Series(column, dtype=object).fillna("").astype(str) for column in columns]
    joined = texts[0]
    for text in texts[1:]:
        joined = joined + "\x1f" + text
    codes, distinct = pd.factorize(joined)
    return codes, [tuple(value.split("\x1f")) for value in distinct]


FORMS = {
    "pandas str": lambda values: pd.Series(values, dtype="str"),
    "pandas object": lambda values: pd.Series(values, dtype=object),
    "arrow array": lambda values: pa.array(values, pa.string()),
    "arrow chunks": lambda values: pa.chunked_array([pa.array(part, pa.string()) for part in (values[:4], values[4:])]),
    "arrow dictionary": lambda values: pa.array(values, pa.string()).dictionary_encode(),
}


@pytest.mark.parametrize("form", FORMS)
def test_combined_codes_number_rows_as_their_joined_texts_would(form: str) -> None:
    codes, distinct = combined_codes([FORMS[form](SHAPES), FORMS[form](DTYPES)])
    expected_codes, expected_distinct = joined_codes(SHAPES, DTYPES)
    assert codes.tolist() == expected_codes.tolist()
    assert distinct == expected_distinct


def test_a_null_and_an_empty_text_share_a_code() -> None:
    codes, texts = text_codes(pa.array(["a", None, "", "a"], pa.string()))
    assert codes[1] == codes[2] and texts[codes[1]] == ""
    assert codes[0] == codes[3] and texts[codes[0]] == "a"
    only_nulls, texts = text_codes(pa.array([None, None], pa.string()))
    assert only_nulls.tolist() == [0, 0] and texts == [""]


def test_many_distinct_combinations_do_not_overflow() -> None:
    """Four columns of 50,000 distinct texts each: their product passes int64, the codes must not wrap."""
    count = 50_000
    columns = [pa.array([f"{column}:{row}" for row in range(count)]) for column in "abcd"]
    reversed_last = pa.array([f"d:{row}" for row in reversed(range(count))])
    codes, distinct = combined_codes([*columns[:3], reversed_last])
    assert codes.tolist() == list(range(count))
    assert distinct[-1] == ("a:49999", "b:49999", "c:49999", "d:0")


def test_no_rows() -> None:
    codes, distinct = combined_codes([pa.array([], pa.string()), pd.Series([], dtype="str")])
    assert len(codes) == 0 and distinct == []


@pytest.mark.parametrize(
    ("rows", "width", "values"),
    [(0, 3, 5), (1, 2, 5), (12, 3, 2), (5_000, 4, 3), (20_000, 6, 40), (20_000, 2, 5_000), (300, 1, 300)],
)
def test_distinct_rows_are_numpys_row_wise_unique(rows: int, width: int, values: int) -> None:
    """The first row of each distinct row and each row's distinct row, the distinct rows in lexical order —
    few values (every row repeats), many (few repeat), one column, none."""
    codes = np.random.default_rng(rows + width).integers(0, values, size=(rows, width)).astype(np.int64)
    first, inverse = distinct_rows(codes)
    expected_first, expected_inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)[1:]
    assert first.tolist() == expected_first.tolist()
    assert inverse.tolist() == expected_inverse.reshape(-1).tolist()


def test_distinct_rows_of_wide_codes_do_not_overflow() -> None:
    """Six columns of codes up to 10^6: their product passes int64, the ranks must not wrap."""
    codes = np.random.default_rng(1).integers(0, 1_000_000, size=(40_000, 6)).astype(np.int64)
    codes[::2] = codes[1::2]  # every row once more
    first, inverse = distinct_rows(codes)
    expected_first, expected_inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)[1:]
    assert first.tolist() == expected_first.tolist() and inverse.tolist() == expected_inverse.reshape(-1).tolist()


@pytest.mark.parametrize("codes", [[0, -1, 1, 0, -1, 2], [2, 2, 0], [1], []])
def test_a_text_array_is_the_column_its_strings_would_make(codes: list[int]) -> None:
    """Assigned to a frame, the texts of the codes (a negative code: missing) give the column their strings
    give — the same values, the same missing rows, the same dtype; a label may repeat —, no rows the text
    column a NumPy text array gives (an object array of no string would stay object: the callers keep it)."""
    labels = ["tail", "internal", "tail"]
    strings = np.array([labels[c] if c >= 0 else None for c in codes], dtype=object)
    by_strings, by_codes = pd.DataFrame({"row": range(len(codes))}), pd.DataFrame({"row": range(len(codes))})
    by_strings["window"] = strings if len(codes) else np.array([], dtype=str)
    by_codes["window"] = text_array(np.array(codes, dtype=np.int64), labels)
    pd.testing.assert_frame_equal(by_codes, by_strings)
    assert by_codes["window"].dtype == by_strings["window"].dtype
