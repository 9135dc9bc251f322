"""Class signatures: segments with the same ordered (kernel, input shapes) sequence share a class.

Equality is strict and order-sensitive. Each event gets a stable 64-bit token from its
normalised kernel name and input shapes (computed once per distinct pair), so a class id means the
same thing on every rank and in every root.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_HEX = re.compile(r"0x[0-9a-f]+|[0-9a-f]{16,}")
_DIGITS = re.compile(r"[0-9]+")
_NON_LETTERS = re.compile(r"[^a-z#]+")


def normalized_kernel_name(name: str) -> str:
    """Lower case, addresses and long hex runs dropped, digits → '#', other non-letters → '_', ≤ 96 chars."""
    text = _HEX.sub("", str(name).lower())
    text = _DIGITS.sub("#", text)
    return _NON_LETTERS.sub("_", text).strip("_")[:96]


def normalized_kernel_names(names: pd.Index | np.ndarray) -> np.ndarray:
    """``normalized_kernel_name`` of many names at once: Arrow's regex kernels for ASCII names (the
    same patterns, so the same text), Python's for the rest (Unicode lower-casing may differ)."""
    text = pa.array(np.asarray(names, dtype=object), pa.string())
    lowered = pc.utf8_lower(text)
    lowered = pc.replace_substring_regex(lowered, _HEX.pattern, "")
    lowered = pc.replace_substring_regex(lowered, _DIGITS.pattern, "#")
    lowered = pc.replace_substring_regex(lowered, _NON_LETTERS.pattern, "_")
    normalized = pc.utf8_slice_codeunits(pc.utf8_trim(lowered, "_"), 0, 96).to_numpy(zero_copy_only=False)
    normalized = normalized.astype(object)
    for index in np.flatnonzero(~pc.string_is_ascii(text).to_numpy(zero_copy_only=False)):
        normalized[index] = normalized_kernel_name(text[index].as_py())
    return normalized


def event_tokens(names: pd.Series, shapes: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 token per event, bool: event has shape info). One hash per distinct (normalised
    name, shapes) pair: decode captures bring a new collective name (a call counter) and a new
    shape per step, but few normalised names."""
    shapes = shapes.fillna("")
    name_codes, name_values = pd.factorize(names.fillna(""))
    normal_codes, normal_values = pd.factorize(normalized_kernel_names(name_values))
    shape_codes, shape_values = pd.factorize(shapes)
    width = max(len(shape_values), 1)
    pair = normal_codes[name_codes].astype(np.int64) * width + shape_codes
    codes, pairs = pd.factorize(pair)
    digests = np.array(
        [
            int.from_bytes(
                hashlib.blake2b(
                    f"{normal_values[p // width]}|{shape_values[p % width]}".encode(), digest_size=8
                ).digest(),
                "little",
            )
            for p in pairs.tolist()
        ]
        or [0],
        dtype=np.uint64,
    )
    return digests[codes], (shapes != "").to_numpy()


def class_ids(
    prefix: str,
    tokens: np.ndarray,
    has_shape: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    scopes: pd.Series,
    floating: np.ndarray | None = None,
) -> tuple[list[str], list[bool]]:
    """Class id of each window [start, end]: a hash of its scope label and token sequence.

    Communication ops still running when the next event starts (``floating``: issued on a stream of
    their own, e.g. gradient buckets under the backward) land among the compute wherever their stream
    lets them start, so they count as a set after the ordered rest; a window without one hashes as if
    there were none. Windows without any shape information get no shared class:
    ``<prefix>_unknown_shape_<hash>``.
    """
    ids, unknown = [], []
    shape_counts = np.concatenate(([0], np.cumsum(has_shape)))
    floating_counts = np.concatenate(([0], np.cumsum(floating))) if floating is not None else None
    # one hash per segment, not per event
    for start, end, scope in zip(starts.tolist(), ends.tolist(), scopes.tolist()):
        window = tokens[start : end + 1]
        if floating_counts is not None and floating_counts[end + 1] > floating_counts[start]:
            on_stream = floating[start : end + 1]
            window = np.concatenate([window[~on_stream], np.sort(window[on_stream])])
        digest = hashlib.blake2b(scope.encode() + window.tobytes(), digest_size=8).hexdigest()
        no_shapes = shape_counts[end + 1] - shape_counts[start] == 0
        ids.append(f"{prefix}_unknown_shape_{digest}" if no_shapes else f"{prefix}_{digest}")
        unknown.append(bool(no_shapes))
    return ids, unknown
