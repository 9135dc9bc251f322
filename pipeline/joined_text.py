"""Text joined per group, by Arrow: one list per group over the sorted values, then one join.

``groupby(...).agg(";".join)`` calls Python once per group; collectives and operators of a decode
capture make groups by the hundred thousand.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def joined_per_key(group: np.ndarray, values: np.ndarray, group_count: int, separator: str = ";") -> np.ndarray:
    """The ``values`` of each group 0 … group_count-1 as text joined by ``separator`` (object array).

    ``group`` must be sorted ascending; values keep their order inside a group; a group without
    values gets ``""``."""
    offsets = np.searchsorted(group, np.arange(group_count + 1)).astype(np.int64)
    texts = pc.cast(pa.array(values), pa.large_string())
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), texts)
    return pc.binary_join(lists, pa.scalar(separator, pa.large_string())).to_numpy(zero_copy_only=False)
