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

_HEX = re.compile(r"0x[0-9a-f]+|[0-9a-f]{16,}")
_DIGITS = re.compile(r"[0-9]+")
_NON_LETTERS = re.compile(r"[^a-z#]+")


def normalized_kernel_name(name: str) -> str:
    """Lower case, addresses and long hex runs dropped, digits → '#', other non-letters → '_', ≤ 96 chars."""
    text = _HEX.sub("", str(name).lower())
    text = _DIGITS.sub("#", text)
    return _NON_LETTERS.sub("_", text).strip("_")[:96]


def event_tokens(names: pd.Series, shapes: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 token per event, bool: event has shape info). One hash per distinct (name, shapes) pair."""
    shapes = shapes.fillna("")
    keys = names.fillna("").astype(str) + "\x1f" + shapes.astype(str)
    codes, uniques = pd.factorize(keys)
    digests = np.array(
        [
            int.from_bytes(
                hashlib.blake2b(
                    f"{normalized_kernel_name(k.split(chr(31))[0])}|{k.split(chr(31), 1)[1]}".encode(), digest_size=8
                ).digest(),
                "little",
            )
            for k in uniques
        ]
        or [0],
        dtype=np.uint64,
    )
    return digests[codes], (shapes != "").to_numpy()


def class_ids(
    prefix: str, tokens: np.ndarray, has_shape: np.ndarray, starts: np.ndarray, ends: np.ndarray, scopes: pd.Series
) -> tuple[list[str], list[bool]]:
    """Class id of each window [start, end]: a hash of its scope label and token sequence.

    Windows without any shape information get no shared class: ``<prefix>_unknown_shape_<hash>``.
    """
    ids, unknown = [], []
    shape_counts = np.concatenate(([0], np.cumsum(has_shape)))
    # one hash per segment, not per event
    for start, end, scope in zip(starts.tolist(), ends.tolist(), scopes.tolist()):
        digest = hashlib.blake2b(scope.encode() + tokens[start : end + 1].tobytes(), digest_size=8).hexdigest()
        no_shapes = shape_counts[end + 1] - shape_counts[start] == 0
        ids.append(f"{prefix}_unknown_shape_{digest}" if no_shapes else f"{prefix}_{digest}")
        unknown.append(bool(no_shapes))
    return ids, unknown
