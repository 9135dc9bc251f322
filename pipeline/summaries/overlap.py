"""How much of each communication op's life its rank computed beside it: the mark of an op on a
communication stream of its own (a gradient bucket's all-reduce under the backward)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def compute_beside_us(events: pd.DataFrame) -> np.ndarray:
    """Per communication event of ``events`` (is_comm, start_ns, end_ns; in their order), the µs its
    rank's compute ran beside it: an op on a communication stream of its own (a gradient bucket under
    the backward) has its rank's kernels under it, a blocking one has none."""
    is_comm = events["is_comm"].to_numpy(bool)
    compute = events.loc[~is_comm, ["start_ns", "end_ns"]].sort_values("start_ns")
    comm = events.loc[is_comm, ["start_ns", "end_ns"]]
    if not len(comm) or not len(compute):
        return np.zeros(len(comm))
    # the compute intervals merged where they overlap (a running max of ends), then busy time up to t
    starts, ends = compute["start_ns"].to_numpy(np.int64), np.maximum.accumulate(compute["end_ns"].to_numpy(np.int64))
    opens = np.concatenate([[True], starts[1:] > ends[:-1]])
    merged_start = starts[opens]
    merged_end = np.maximum.reduceat(ends, np.flatnonzero(opens))
    busy_before = np.concatenate([[0], np.cumsum(merged_end - merged_start)])

    def busy_until(t: np.ndarray) -> np.ndarray:
        at = np.searchsorted(merged_start, t, side="right") - 1  # the last interval starting by t
        inside = np.clip(t - merged_start[np.clip(at, 0, None)], 0, None)
        within = np.minimum(inside, (merged_end - merged_start)[np.clip(at, 0, None)])
        return np.where(at >= 0, busy_before[np.clip(at, 0, None)] + within, 0)

    t0, t1 = comm["start_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64)
    return (busy_until(t1) - busy_until(t0)) / 1000.0
